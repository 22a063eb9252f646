"""What Python users expect of Frame, Plane, Packet and Tensor:
dense NumPy copies, NumPy's array protocol, times, colour names, reprs, signatures and docs."""

import fractions
import inspect
import pydoc
import re

import numpy as np
import pytest

import cuframes

W, H = 64, 48


def planes_of(fmt, n=0):
    """Distinct per-plane patterns, as dense arrays of each plane's shape."""
    rng = np.random.default_rng(n)
    if fmt in ("nv12", "p010", "p016"):
        dt = np.uint8 if fmt == "nv12" else np.uint16
        hi = 256 if fmt == "nv12" else 65536
        return [
            rng.integers(0, hi, (H, W), dtype=dt),
            rng.integers(0, hi, (H // 2, W), dtype=dt),
        ]
    if fmt == "yuv420p":
        return [
            rng.integers(0, 256, (H, W), dtype=np.uint8),
            rng.integers(0, 256, (H // 2, W // 2), dtype=np.uint8),
            rng.integers(0, 256, (H // 2, W // 2), dtype=np.uint8),
        ]
    if fmt == "yuv444p":
        return [rng.integers(0, 256, (H, W), dtype=np.uint8) for _ in range(3)]
    return [rng.integers(0, 256, (H, W * 4), dtype=np.uint8)]


def pyav_layout(fmt, planes):
    """PyAV's VideoFrame.to_ndarray layout, from the published planes."""
    if fmt in ("nv12", "p010", "p016", "yuv420p"):
        return np.concatenate([p.reshape(-1) for p in planes]).reshape(-1, W)
    if fmt == "yuv444p":
        return np.stack(planes)
    return planes[0].reshape(H, W, 4)


def one_frame(key, fmt, mode, planes, **pub_kwargs):
    pub = cuframes.Publisher(key, format=fmt, width=W, height=H, policy="strict_wait", **pub_kwargs)
    sub = cuframes.Subscriber(key, mode=mode)
    assert pub.wait_for_subscribers(1, timeout=5)
    pub.publish(planes, pts_ns=2_500_000_000)
    f = sub.next(timeout=5)
    assert f is not None
    return pub, sub, f


FORMATS = [
    ("nv12", (H * 3 // 2, W), np.uint8),
    ("p010", (H * 3 // 2, W), np.uint16),
    ("p016", (H * 3 // 2, W), np.uint16),
    ("yuv420p", (H * 3 // 2, W), np.uint8),
    ("yuv444p", (3, H, W), np.uint8),
    ("rgba", (H, W, 4), np.uint8),
    ("bgra", (H, W, 4), np.uint8),
]


@pytest.mark.parametrize("mode", ["copy", "zero_copy"])
@pytest.mark.parametrize("fmt,shape,dtype", FORMATS)
def test_to_ndarray_is_a_dense_copy_in_pyav_layout(runtime_dir, key, fmt, shape, dtype, mode):
    planes = planes_of(fmt, 3)
    if fmt == "p010":
        planes = [p & 0xFFC0 for p in planes]
    pub, sub, f = one_frame(key, fmt, mode, planes)
    with pub, sub, f:
        assert f.zero_copy == (mode == "zero_copy")
        a = f.to_ndarray()
        assert isinstance(a, np.ndarray)
        assert a.shape == shape and a.dtype == dtype
        np.testing.assert_array_equal(a, pyav_layout(fmt, planes))
        # A copy of its own: writable, and writing it changes nothing the frame exports.
        assert a.flags.writeable and a.flags.c_contiguous
        a[...] = 0
        np.testing.assert_array_equal(f.to_ndarray(), pyav_layout(fmt, planes))
        np.testing.assert_array_equal(np.asarray(f.plane(0)).reshape(planes[0].shape), planes[0])
        # NumPy's array protocol: np.asarray(frame) was a 0-d object array.
        b = np.asarray(f)
        assert b.shape == shape and b.dtype == dtype
        np.testing.assert_array_equal(b, pyav_layout(fmt, planes))
        c = np.array(f, dtype=np.float32)
        assert c.dtype == np.float32 and c.shape == shape
        np.testing.assert_array_equal(c, pyav_layout(fmt, planes).astype(np.float32))


def test_array_protocol_arguments(runtime_dir, key):
    planes = planes_of("nv12", 4)
    pub, sub, f = one_frame(key, "nv12", "copy", planes)
    with pub, sub, f:
        want = pyav_layout("nv12", planes)
        # As NumPy 1.x calls it (positional dtype), and as NumPy 2 does (keywords).
        np.testing.assert_array_equal(f.__array__(), want)
        assert f.__array__(np.dtype(np.uint16)).dtype == np.uint16
        assert f.__array__(dtype=None, copy=True).shape == want.shape
        with pytest.raises(ValueError, match="copy"):
            f.__array__(copy=False)
        if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
            with pytest.raises(ValueError):
                np.asarray(f, copy=False)
            np.testing.assert_array_equal(np.asarray(f, copy=True), want)
    # Released: no more exports, the copy included.
    with pytest.raises(cuframes.Error):
        f.to_ndarray()
    with pytest.raises(cuframes.Error):
        np.asarray(f)


def test_to_ndarray_of_an_odd_420_frame_says_what_to_use(runtime_dir, key):
    with cuframes.Publisher(key, format="yuv420p", width=W - 1, height=H, policy="strict_wait") as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            pub.publish([bytes(pub.pitches[0] * H), bytes(pub.pitches[1] * H // 2), bytes(pub.pitches[2] * H // 2)], strides=list(pub.pitches))
            with sub.next(timeout=5) as f:
                with pytest.raises(ValueError, match="plane"):
                    f.to_ndarray()


def test_time_and_time_base(runtime_dir, key):
    planes = planes_of("nv12")
    pub, sub, f = one_frame(key, "nv12", "copy", planes)
    with pub, sub, f:
        assert f.time_base == fractions.Fraction(1, 1_000_000_000)
        assert isinstance(f.time_base, fractions.Fraction)
        assert f.pts_ns == 2_500_000_000
        assert isinstance(f.time, float) and f.time == 2.5
        assert f.time == float(f.pts_ns * f.time_base)


def test_packet_time_and_repr(runtime_dir, key):
    with cuframes.PacketPublisher(key, codec="h264") as pub:
        with cuframes.PacketSubscriber(key) as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            pub.publish(b"\x00\x00\x00\x01\x65" + bytes(20), pts_ns=1_250_000_000, keyframe=True)
            pub.publish(b"\x00\x00\x00\x01\x41" + bytes(7))
            p = sub.next(timeout=5)
            assert p.time == 1.25 and p.time_base == fractions.Fraction(1, 10**9)
            assert repr(p) == f"<cuframes.Packet seq={p.seq} 25 bytes time=1.250000 dts=None key>"
            q = sub.next(timeout=5)
            assert q.keyframe is False
            assert repr(q).startswith(f"<cuframes.Packet seq={q.seq} 12 bytes time=")
            assert " key" not in repr(q)


DESCRIBED = {
    "range": "full",
    "primaries": "bt709",
    "transfer": "smpte2084",
    "matrix": "smpte170m",
    "chroma_location": "left",
    "sar": (4, 3),
}


def test_colour_by_ffmpegs_names(runtime_dir, key):
    planes = planes_of("nv12")
    pub, sub, f = one_frame(key, "nv12", "copy", planes, colour=DESCRIBED)
    with pub, sub, f:
        assert f.colour == DESCRIBED
        # The same description, as FFmpeg's code points: the same names back.
        codes = {"range": 2, "primaries": 1, "transfer": 16, "matrix": 6, "chroma_location": 1, "sar": (4, 3)}
        p2 = cuframes.Publisher(key + "-ints", format="nv12", width=W, height=H, colour=codes)
        s2 = cuframes.Subscriber(key + "-ints", mode="copy")
        with p2, s2:
            assert p2.wait_for_subscribers(1, timeout=5)
            p2.publish(planes)
            with s2.next(timeout=5) as g:
                assert g.colour == DESCRIBED
        # And it round-trips: publishing a frame's colour describes the same stream.
        p3 = cuframes.Publisher(key + "-again", format="nv12", width=W, height=H, colour=f.colour)
        s3 = cuframes.Subscriber(key + "-again", mode="copy")
        with p3, s3:
            assert p3.wait_for_subscribers(1, timeout=5)
            p3.publish(planes)
            with s3.next(timeout=5) as g:
                assert g.colour == f.colour


@pytest.mark.parametrize(
    "given,seen",
    [
        # Unspecified fields are None; aliases (FFmpeg's option names, to_rgb's matrix names)
        # read back as FFmpeg's canonical names; unnamed code points stay ints.
        ({}, {"range": None, "primaries": None, "transfer": None, "matrix": None, "chroma_location": None, "sar": None}),
        ({"range": "tv", "matrix": "bt601"}, {"range": "limited", "matrix": "smpte170m"}),
        ({"range": "PC", "matrix": "bt2020", "primaries": "bt2020"}, {"range": "full", "matrix": "bt2020nc", "primaries": "bt2020"}),
        ({"range": "unknown", "transfer": "ARIB_STD_B67"}, {"range": None, "transfer": "arib-std-b67"}),
        ({"matrix": 0, "primaries": 3, "transfer": 200, "chroma_location": 6}, {"matrix": "gbr", "primaries": 3, "transfer": 200, "chroma_location": "bottom"}),
        ({"matrix": None, "sar": None, "chroma_location": "unspecified"}, {"matrix": None, "sar": None, "chroma_location": None}),
    ],
)
def test_colour_names_aliases_and_unspecified(runtime_dir, key, given, seen):
    with cuframes.Publisher(key, format="nv12", width=W, height=H, colour=given) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            pub.publish(planes_of("nv12"))
            with sub.next(timeout=5) as f:
                c = f.colour
                assert set(c) == {"range", "primaries", "transfer", "matrix", "chroma_location", "sar"}
                for k, v in seen.items():
                    assert c[k] == v, (k, c)


def test_bad_colour_names_are_refused(runtime_dir, key):
    with pytest.raises(ValueError, match="bt709"):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"matrix": "bt999"})
    with pytest.raises(ValueError, match="limited"):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"range": "studio"})
    with pytest.raises(TypeError):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"range": 1.5})
    with pytest.raises(ValueError, match="no key"):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"gamma": 1})


@pytest.mark.parametrize("code", [256, -1, 1 << 70, np.int64(300)])
@pytest.mark.parametrize("field", ["range", "primaries", "transfer", "matrix", "chroma_location"])
def test_colour_code_points_out_of_range_are_value_errors(runtime_dir, key, field, code):
    # An int of the wrong value (code points are one byte), not the conversion's
    # OverflowError nor a TypeError.
    with pytest.raises(ValueError, match=rf'colour\["{field}"\]: code point -?\d+ is out of range 0..=255'):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={field: code})


@pytest.mark.parametrize("flag", [True, False])
def test_colour_code_points_are_not_bools(runtime_dir, key, flag):
    with pytest.raises(TypeError, match="not a bool"):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"matrix": flag})
    # np.uint8 and 255 are code points.
    with cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"matrix": np.uint8(5), "transfer": 255}):
        pass


def test_reprs(runtime_dir, key):
    planes = planes_of("nv12")
    pub, sub, f = one_frame(key, "nv12", "zero_copy", planes)
    with pub, sub:
        assert repr(f) == "<cuframes.Frame seq=1 nv12 64x48 host zero_copy time=2.500000>"
        p = f.plane(1)
        assert repr(p) == f"<cuframes.Plane 1 of frame 1: (24, 32, 2) uint8 pitch={f.pitches[1]} host>"
        t = f.to_rgb(layout="hwc", dtype="float32")
        assert repr(t) == "<cuframes.Tensor (48, 64, 3) float32 host>"
        f.release()
        assert repr(f).endswith(" released>")
        del p


# Every public method of these classes, with the parameters `inspect.signature` must show.
SIGNATURES = {
    cuframes.Frame: {
        "plane": ["self", "i"],
        "release": ["self", "stream"],
        "to_rgb": ["self", "dtype", "layout", "matrix", "range", "stream"],
        "to_ndarray": ["self"],
        "__array__": ["self", "dtype", "copy"],
    },
    cuframes.Plane: {
        "tobytes": ["self"],
        "__dlpack__": ["self", "stream", "max_version", "dl_device", "copy"],
        "__dlpack_device__": ["self"],
    },
    cuframes.Tensor: {
        "__dlpack__": ["self", "stream", "max_version", "dl_device", "copy"],
        "__dlpack_device__": ["self"],
    },
    cuframes.Packet: {},
}


@pytest.mark.parametrize("cls", list(SIGNATURES), ids=lambda c: c.__name__)
def test_signatures_and_docs(cls):
    assert cls.__doc__ and "internal" not in cls.__doc__.lower()
    for name, params in SIGNATURES[cls].items():
        method = getattr(cls, name)
        sig = inspect.signature(method)
        assert list(sig.parameters) == params, (cls.__name__, name, str(sig))
        doc = inspect.getdoc(method)
        assert doc, f"{cls.__name__}.{name} has no docstring"
        # Every parameter is described in the docstring.
        for p in params[1:]:
            assert f"`{p}`" in doc or f"{p}=" in doc, (cls.__name__, name, p, doc)
    # Every public attribute has a docstring of its own (help() shows it).
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        assert inspect.getdoc(attr), f"{cls.__name__}.{name} has no docstring"
    # help() renders (it reads the same signatures).
    # (CPython 3.13's pydoc wraps a long signature, one parameter a line: joined here.)
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    text = re.sub(r"([(,])\n[ |]*", r"\1 ", text).replace("( ", "(")
    for name in SIGNATURES[cls]:
        assert f"{name}(self, /" in text, (name, text)
