"""The host path's readers: Publisher.publish and
PacketPublisher.publish read any buffer-protocol or __array_interface__ object, in C order,
whatever its strides, and refuse interfaces that lie; key / closed / repr / signatures.

Every reader is run twice: through PyObject_GetBuffer (CPython >= 3.11) and through
memoryview.tobytes() (what CPython 3.9 and 3.10 use)."""

import array
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

import cuframes
from conftest import leaked_shm, needs_class_signatures
from cuframes import _cuframes

W, H = 64, 36


@pytest.fixture(params=["get_buffer", "memoryview"])
def buffer_api(request):
    # (getattr: so that this file also runs, and fails for its own reasons, on a build
    # without the switch.)
    switch = getattr(_cuframes.Publisher, "_use_get_buffer", lambda on: None)
    switch(request.param == "get_buffer")
    yield request.param
    switch(True)


def frame_planes(fmt):
    """Dense planes of a W x H frame of `fmt`, with a pattern where every byte differs from
    its neighbours (a wrong stride or order shows)."""
    rng = np.random.default_rng(hash(fmt) & 0xFFFF)
    if fmt == "nv12":
        return [rng.integers(0, 256, (H, W), np.uint8), rng.integers(0, 256, (H // 2, W), np.uint8)]
    if fmt == "p010":
        return [
            rng.integers(0, 1024, (H, W), np.uint16) << 6,
            rng.integers(0, 1024, (H // 2, W), np.uint16) << 6,
        ]
    raise AssertionError(fmt)


def published(runtime_dir, key, fmt, planes, **kw):
    """What a subscriber reads of one frame published from `planes`."""
    with cuframes.Publisher(key, format=fmt, width=W, height=H) as pub:
        with cuframes.Subscriber(key) as sub:
            pub.publish(planes, **kw)
            f = sub.next(timeout=5)
            assert f is not None
            out = [np.asarray(f.plane(i)).copy() for i in range(len(planes))]
            f.release()
            return out


def views(a):
    """The same C-order content as `a`, through different memory layouts and objects."""
    wide = np.zeros(a.shape[:-1] + (a.shape[-1] * 3,), a.dtype)
    wide[..., ::3] = a
    padded = np.zeros((a.shape[0] + 5,) + a.shape[1:], a.dtype)
    padded[2 : 2 + a.shape[0]] = a
    flipped = np.ascontiguousarray(a[::-1, ::-1])
    yield "contiguous", a
    yield "flat", a.reshape(-1)
    yield "element stride 3", wide[..., ::3]
    yield "rows of a taller array", padded[2 : 2 + a.shape[0]]
    yield "negative strides", flipped[::-1, ::-1]
    yield "every other row", np.repeat(a, 2, axis=0)[::2]
    yield "fortran order", np.asfortranarray(a)
    yield "memoryview of a strided view", memoryview(wide[..., ::3])
    yield "bytearray", bytearray(a.tobytes())
    yield "bytes", a.tobytes()
    if a.dtype == np.uint8:
        yield "array.array", array.array("B", a.tobytes())
        yield "3-d chroma pairs", a.reshape(a.shape[0], -1, 2) if a.shape[1] % 2 == 0 else a


@pytest.mark.parametrize("fmt", ["nv12", "p010"])
def test_every_layout_reads_as_c_order(runtime_dir, key, buffer_api, fmt):
    planes = frame_planes(fmt)
    for n, (name, src) in enumerate(views(planes[1])):
        got = published(runtime_dir, f"{key}-{n}", fmt, [planes[0], src])
        np.testing.assert_array_equal(got[0], planes[0], err_msg=name)
        np.testing.assert_array_equal(got[1].reshape(planes[1].shape), planes[1], err_msg=name)


class Interface:
    """An object with only __array_interface__ (no buffer protocol), as given."""

    def __init__(self, interface, keep=None):
        self._interface = interface
        self._keep = keep

    @property
    def __array_interface__(self):
        if isinstance(self._interface, Exception):
            raise self._interface
        return self._interface


def interface_of(a, **changes):
    d = dict(a.__array_interface__)
    d.update(changes)
    return Interface(d, keep=a)


def test_array_interface_objects_are_read(runtime_dir, key, buffer_api):
    y, uv = frame_planes("nv12")
    # A raw pointer with strides (a flipped view, negative strides), the memory kept alive
    # by the object only.
    flipped = np.ascontiguousarray(uv[::-1])[::-1]
    got = published(runtime_dir, key + "-a", "nv12", [interface_of(y), interface_of(flipped)])
    np.testing.assert_array_equal(got[0], y)
    np.testing.assert_array_equal(got[1].reshape(uv.shape), uv)
    # `data` as a buffer object, with an offset: the array lies in its bytes.
    blob = b"\xee" * 7 + uv.tobytes() + b"\xee" * 3
    iface = {"shape": uv.shape, "typestr": "|u1", "data": blob, "offset": 7, "version": 3}
    got = published(runtime_dir, key + "-b", "nv12", [y, Interface(iface)])
    np.testing.assert_array_equal(got[1].reshape(uv.shape), uv)
    # A cuframes host Tensor / plane is __array_interface__-only: it can be published back.
    with cuframes.Publisher(key + "-c", format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key + "-c") as sub:
            pub.publish([y, uv])
            f = sub.next(timeout=5)
            got = published(runtime_dir, key + "-d", "nv12", [f.plane(0), f.plane(1)])
            f.release()
    np.testing.assert_array_equal(got[0], y)
    np.testing.assert_array_equal(got[1].reshape(uv.shape), uv)


def lying_interfaces(y):
    good = dict(y.__array_interface__)
    small = b"\x00" * 100
    yield "null pointer", dict(good, data=(0, False)), ValueError, "null pointer"
    yield "shape past the data buffer", dict(good, data=small, strides=None), ValueError, "data buffer of 100"
    yield "offset past the data buffer", dict(good, shape=(10, 10), data=small, offset=1), ValueError, "data buffer"
    yield "negative offset", dict(good, shape=(10, 10), data=small, offset=-1), ValueError, "data buffer"
    yield "strides overflow", dict(good, strides=(2**62, 2**62)), ValueError, "overflow"
    yield "shape overflows", dict(good, shape=(2**62, 2**62), strides=None), ValueError, "overflow"
    yield "wraps the address space", dict(good, strides=(-(2**50), 1)), ValueError, "address space"
    yield "strides of the wrong length", dict(good, strides=(W,)), ValueError, "strides for 2 axes"
    yield "negative shape", dict(good, shape=(-1, W)), ValueError, "shape"
    yield "float elements", dict(good, typestr="<f4", shape=(H, W // 4)), TypeError, "format"
    yield "unknown typestr", dict(good, typestr="xyz"), ValueError, "typestr"
    yield "a mask", dict(good, mask=np.zeros((H, W), bool)), ValueError, "mask"
    yield "no data", {k: v for k, v in good.items() if k != "data"}, ValueError, '"data"'
    yield "data None", dict(good, data=None), ValueError, "data is None"
    yield "data neither pointer nor buffer", dict(good, data=3.5), ValueError, "data must be"
    yield "not a dict", [1, 2, 3], TypeError, "must be a dict"
    yield "raising", RuntimeError("interface broke"), RuntimeError, "interface broke"


def test_lying_interfaces_are_refused(runtime_dir, key, buffer_api):
    y, uv = frame_planes("nv12")
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        for name, iface, exc, text in lying_interfaces(y):
            with pytest.raises(exc, match=text):
                pub.publish([Interface(iface, keep=y), uv])
            # The publisher is unharmed: the next frame goes out.
        with cuframes.Subscriber(key) as sub:
            pub.publish([y, uv])
            f = sub.next(timeout=5)
            np.testing.assert_array_equal(np.asarray(f.plane(0)), y)
            f.release()


def test_wrong_element_types_and_sizes_are_refused(runtime_dir, key, buffer_api):
    y, uv = frame_planes("nv12")
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with pytest.raises(TypeError, match="16-bit"):
            pub.publish([y.astype(np.float32), uv])
        with pytest.raises(TypeError, match="16-bit"):
            pub.publish([y.view(np.uint16).byteswap().view(">u2"), uv])
        with pytest.raises(ValueError, match="need"):
            pub.publish([y[:-1], uv])
        with pytest.raises(TypeError, match="plane 1"):
            pub.publish([y, 12345])
    with cuframes.Publisher(key + "-p", format="p010", width=W, height=H) as pub:
        y16, uv16 = frame_planes("p010")
        with pytest.raises(TypeError, match="16-bit"):
            pub.publish([y16.astype(">u2"), uv16])


@pytest.mark.parametrize(
    "make",
    [
        lambda b: b,
        bytearray,
        memoryview,
        lambda b: np.frombuffer(b, np.uint8),
        lambda b: np.frombuffer(b, np.int16),  # any element type: its bytes
        lambda b: np.repeat(np.frombuffer(b, np.uint8), 2)[::2],  # non-contiguous
        lambda b: np.frombuffer(b, np.uint8)[::-1].copy()[::-1],  # negative stride
        lambda b: Interface(dict(np.frombuffer(b, np.uint8).__array_interface__), keep=b),
    ],
    ids=["bytes", "bytearray", "memoryview", "ndarray", "int16", "strided", "reversed", "interface"],
)
def test_packet_publish_takes_any_buffer(runtime_dir, key, buffer_api, make):
    payload = bytes(range(256)) * 40
    with cuframes.PacketPublisher(key, codec="h264", extradata=bytearray(b"\x00\x00\x01\x67")) as pub:
        with cuframes.PacketSubscriber(key) as sub:
            assert sub.extradata == b"\x00\x00\x01\x67"
            pub.publish(make(payload), pts_ns=5, keyframe=True)
            p = sub.next(timeout=5)
            assert p.data == payload


def test_publishers_key_closed_repr_and_docs(runtime_dir, key):
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        assert pub.key == key and pub.closed is False
        assert repr(pub) == f"<cuframes.Publisher key='{key}' nv12 {W}x{H} host subscribers=0>"
        pub.close()
        assert pub.closed is True
        assert repr(pub) == f"<cuframes.Publisher key='{key}' closed>"
    with cuframes.PacketPublisher(key + "-p", codec="hevc") as pp:
        assert pp.key == key + "-p" and pp.closed is False
        assert repr(pp) == f"<cuframes.PacketPublisher key='{key}-p' hevc subscribers=0>"
        pp.close()
        pp.close()
        assert pp.closed is True and "closed" in repr(pp)
    for cls in (_cuframes.Publisher, _cuframes.PacketPublisher):
        assert "Parameters:" in cls.__doc__ and "Arc" not in cls.__doc__
    assert "planes:" in _cuframes.Publisher.publish.__doc__
    assert "data:" in _cuframes.PacketPublisher.publish.__doc__


@needs_class_signatures
def test_publisher_constructor_signatures():
    sig = inspect.signature(_cuframes.Publisher)
    assert list(sig.parameters)[:4] == ["key", "format", "width", "height"]
    assert sig.parameters["device"].default == 0
    assert sig.parameters["ring_size"].default == 4
    psig = inspect.signature(_cuframes.PacketPublisher)
    assert psig.parameters["extradata"].default == b""
    assert psig.parameters["data_size"].default == 8 << 20
    assert "Ellipsis" not in str(sig) + str(psig)


# --- Sources larger than their destination (red team F1) -------------------------------------
#
# A source's size comes from its shape alone: a broadcast array (stride 0) describes any number
# of bytes over one. It is checked against what the destination takes (a plane's rows at its
# stride, the packet ring's data_size, the 4096 bytes of extradata) before a byte is allocated
# or gathered. Each case runs in a child whose address space is capped a little above what it
# uses: a reader that allocates the source's size aborts the child (Rust's "memory allocation
# failed") or raises MemoryError, and the test sees that instead of the expected ValueError.

HUGE_CHILD = r"""
import os, resource, sys, time
import numpy as np
import cuframes
from cuframes import _cuframes

case, key = sys.argv[1], sys.argv[2]
W, H = 64, 36
TIB = np.broadcast_to(np.zeros(1, np.uint8), (1 << 20, 1 << 20))  # 1 TiB over one byte
GIB2 = np.broadcast_to(np.zeros(1, np.uint8), (1 << 15, 1 << 16))  # 2 GiB over one byte
MIB256 = np.broadcast_to(np.zeros(1, np.uint8), (1 << 14, 1 << 14))  # fits under the cap
uv = bytes(W * H // 2)


class Interface:
    def __init__(self, d, keep):
        self.d, self.keep = d, keep

    @property
    def __array_interface__(self):
        return self.d


class ArrayOnly:  # as a torch CPU tensor: __array__() only
    def __init__(self, a):
        self.a = a

    def __array__(self, *args, **kwargs):
        return self.a


def address_space_cap():
    # What the process maps now plus 512 MiB: the ring, threads and NumPy are in place.
    with open("/proc/self/status") as f:
        vm = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), resource.RLIM_INFINITY))


def attempt(publish):
    address_space_cap()
    t0 = time.monotonic()
    try:
        publish()
        print("ACCEPTED")
    except Exception as e:
        print("RAISED", type(e).__name__, str(e))
    print("SECONDS", time.monotonic() - t0)


if case.startswith("packet") or case == "extradata":
    with cuframes.PacketPublisher(key, codec="h264") as p:
        if case == "packet":
            attempt(lambda: p.publish(TIB))
        elif case == "packet-memoryview":
            _cuframes.Publisher._use_get_buffer(False)
            attempt(lambda: p.publish(GIB2))
        else:
            attempt(lambda: p.set_extradata(GIB2))
    sys.exit(0)

with cuframes.Publisher(key, format="nv12", width=W, height=H) as p:
    if case == "frame":
        attempt(lambda: p.publish([TIB, uv]))
    elif case == "frame-2gib":
        attempt(lambda: p.publish([GIB2, uv]))
    elif case == "frame-memoryview":
        _cuframes.Publisher._use_get_buffer(False)
        attempt(lambda: p.publish([GIB2, uv]))
    elif case == "interface-pointer":
        a = np.zeros(1, np.uint8)
        d = {"version": 3, "shape": (1 << 31, 1 << 31), "typestr": "|u1", "strides": (0, 0),
             "data": (a.ctypes.data, True)}
        attempt(lambda: p.publish([Interface(d, a), uv]))
    elif case == "interface-buffer":
        d = {"version": 3, "shape": (1 << 31, 1 << 31), "typestr": "|u1", "strides": (0, 0),
             "data": bytearray(16)}
        attempt(lambda: p.publish([Interface(d, None), uv]))
    elif case == "interface-buffer-memoryview":
        # A broadcast data buffer: on CPython < 3.11 memoryview.tobytes() would gather it
        # (256 MiB, under the cap: gathered, then the plane accepted) where PyBUF_SIMPLE
        # refuses it on >= 3.11.
        _cuframes.Publisher._use_get_buffer(False)
        d = {"version": 3, "shape": (H, W), "typestr": "|u1", "data": MIB256}
        attempt(lambda: p.publish([Interface(d, None), uv]))
    elif case == "array":
        attempt(lambda: p.publish([ArrayOnly(GIB2), uv]))
    elif case == "huge-stride":
        # Within bounds (rows x stride) but 35 TiB to gather: a MemoryError, not an abort.
        stride = 1 << 40
        src = np.broadcast_to(np.zeros(1, np.uint8), (H, stride))
        attempt(lambda: p.publish([src, uv], strides=[stride, W]))
"""


@pytest.mark.parametrize(
    "case, error, text",
    [
        ("frame", "ValueError", "plane 0: the source holds 1099511627776 bytes"),
        ("frame-2gib", "ValueError", "plane 0: the source holds 2147483648 bytes"),
        ("frame-memoryview", "ValueError", "plane 0: the source holds 2147483648 bytes"),
        ("interface-pointer", "ValueError", "plane 0: the source holds 4611686018427387904"),
        ("interface-buffer", "ValueError", "plane 0: the source holds 4611686018427387904"),
        ("interface-buffer-memoryview", "ValueError", "plane 0: __array_interface__ data must be"),
        ("array", "ValueError", "plane 0: the source holds 2147483648 bytes"),
        ("packet", "ValueError", "data: the source holds 1099511627776 bytes; a packet holds at most"),
        ("packet-memoryview", "ValueError", "data: the source holds 2147483648 bytes"),
        ("extradata", "ValueError", "extradata: the source holds 2147483648 bytes; codec extradata"),
        ("huge-stride", "MemoryError", "plane 0: cannot allocate"),
    ],
)
def test_huge_sources_are_refused_before_they_are_read(runtime_dir, key, case, error, text):
    try:
        r = subprocess.run(
            [sys.executable, "-c", HUGE_CHILD, case, key],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        # A child that aborted left its objects: ours to remove (the fixture then passes
        # judgement on the test's assertions, not on the leak).
        for name in leaked_shm(key):
            os.unlink(f"/dev/shm/{name}")
    out = r.stdout + r.stderr
    if case == "huge-stride" and sys.version_info < (3, 11):
        # Before 3.11 the source is read through memoryview.tobytes(), whose own
        # MemoryError carries no message.
        text = ""
    assert r.returncode == 0, f"the child died (rc {r.returncode}): {out[-2000:]}"
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines.get("RAISED", "").startswith(f"{error} {text}"), out[-2000:]
    # Refused from the shape alone: no gathering of gigabytes first (that took 2-4 s for the
    # 2 GiB source here); generous for a loaded machine.
    assert float(lines["SECONDS"]) < 5.0, out


def test_sources_larger_than_the_plane_at_its_stride_are_refused(runtime_dir, key):
    y, uv = frame_planes("nv12")
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        # One row too many, or rows twice as wide without strides=: shaped unlike the plane.
        with pytest.raises(ValueError, match=r"plane 0: the source holds 2368 bytes; .*at most 2304"):
            pub.publish([np.zeros((H + 1, W), np.uint8), uv])
        with pytest.raises(ValueError, match="plane 1: the source holds 2304 bytes"):
            pub.publish([y, np.zeros((H // 2, 2 * W), np.uint8)])
        with pytest.raises(ValueError, match="at most"):
            pub.publish([np.broadcast_to(np.uint8(3), (H + 1, W)), uv])
    with cuframes.PacketPublisher(key + "-p", codec="h264", data_size=4096) as pp:
        with pytest.raises(ValueError, match="data_size, 4096 bytes"):
            pp.publish(bytes(4097))
        with pytest.raises(ValueError, match="extradata: the source holds 4097 bytes"):
            pp.set_extradata(bytes(4097))
    with pytest.raises(ValueError, match="extradata: the source holds 4097 bytes"):
        cuframes.PacketPublisher(key + "-q", codec="h264", extradata=bytes(4097))


@pytest.mark.parametrize("fmt", ["nv12", "p010"])
def test_only_the_planes_span_is_gathered_from_a_padded_source(runtime_dir, key, buffer_api, fmt):
    """A strided source of rows x stride bytes (each row padded to the stride, the last one
    too) for strides=[stride]: only the plane's span is gathered, the last row's padding is
    not, and the frame holds the rows."""
    planes = frame_planes(fmt)
    item = planes[0].itemsize
    stride = W * item + 24
    rows = []
    for p in planes:
        padded = np.full((p.shape[0], stride // item), 0xAB, p.dtype)
        padded[:, : p.shape[1]] = p
        # Reversed and reversed back: the same content through negative strides (gathered).
        rows.append(np.ascontiguousarray(padded[::-1, ::-1])[::-1, ::-1])
    got = published(runtime_dir, key, fmt, rows, strides=[stride, stride])
    for g, p in zip(got, planes):
        np.testing.assert_array_equal(g.reshape(p.shape), p)
