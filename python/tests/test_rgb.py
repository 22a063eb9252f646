"""Frame.to_rgb on host rings, against the NumPy reference (rgb_reference.py)."""

import numpy as np
import pytest

import cuframes
import rgb_reference
from rgb_reference import max_abs_diff, quantise, to_rgb

W, H = 38, 22  # not multiples of 4: odd chroma edges, pitches larger than rows

# The largest difference from the float64 reference, reference rounded to the same dtype.
# Measured over every format x matrix x range here: uint8 1 step (1 value of 2508, where the
# float32 arithmetic lands on the other side of a rounding boundary), float32 1.2e-7 (one ulp
# near 1), float16 4.9e-4 (one float16 ulp below 1: both sides round).
TOLERANCE = {"uint8": 1.0, "float32": 2.5e-7, "float16": 5e-4}


def random_planes(fmt, seed):
    return rgb_reference.random_planes(fmt, W, H, seed)


def plane_arrays(frame):
    return [np.asarray(frame.plane(i)) for i in range(frame.num_planes)]


@pytest.mark.parametrize("fmt", ["nv12", "p010", "p016", "yuv420p", "yuv444p", "rgba", "bgra"])
@pytest.mark.parametrize("mode", ["copy", "zero_copy"])
def test_every_format_matches_the_reference(runtime_dir, key, fmt, mode):
    planes = random_planes(fmt, seed=len(fmt))
    with cuframes.Publisher(key, format=fmt, width=W, height=H, policy="strict_wait") as pub:
        with cuframes.Subscriber(key, mode=mode) as sub:
            assert pub.wait_for_subscribers(1)
            pub.publish(planes)
            frame = sub.next(timeout=5)
            assert frame is not None
            with frame:
                src = plane_arrays(frame)
                for matrix in ("bt709", "bt601", "bt2020"):
                    for rng in ("limited", "full"):
                        want = to_rgb(fmt, src, W, H, matrix, rng)
                        for dtype in ("uint8", "float32", "float16"):
                            t = frame.to_rgb(dtype=dtype, matrix=matrix, range=rng)
                            assert t.shape == (3, H, W) and t.dtype == dtype
                            got = np.asarray(t)
                            assert got.dtype == np.dtype(dtype)
                            diff = max_abs_diff(got, quantise(want, dtype))
                            assert diff <= TOLERANCE[dtype], (matrix, rng, dtype, diff)
                            if fmt in ("rgba", "bgra"):
                                break  # no matrix: one combination is enough
                # HWC is the transpose of CHW, element for element.
                chw = np.asarray(frame.to_rgb())
                hwc = np.asarray(frame.to_rgb(layout="hwc"))
                assert hwc.shape == (H, W, 3)
                np.testing.assert_array_equal(hwc, chw.transpose(1, 2, 0))


def test_uint8_reference_agreement_is_nearly_exact(runtime_dir, key):
    """Most pixels equal the reference exactly; a 1-step difference is rare."""
    planes = random_planes("nv12", seed=7)
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1)
            pub.publish(planes)
            with sub.next(timeout=5) as frame:
                got = np.asarray(frame.to_rgb())
                want = quantise(to_rgb("nv12", plane_arrays(frame), W, H), "uint8")
    off = np.count_nonzero(got != want)
    assert off <= got.size // 100, f"{off} of {got.size} values differ from the reference"


def test_dlpack_and_ownership(runtime_dir, key):
    planes = random_planes("nv12", seed=3)
    with cuframes.Publisher(key, format="nv12", width=W, height=H, policy="strict_wait") as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            assert pub.wait_for_subscribers(1)
            pub.publish(planes)
            frame = sub.next(timeout=5)
            t = frame.to_rgb(dtype="float32", layout="hwc")
            frame.release()  # the tensor owns its bytes: it outlives the frame
            assert t.__dlpack_device__() == (1, 0)
            a = np.from_dlpack(t)
            assert a.shape == (H, W, 3) and a.dtype == np.float32
            np.testing.assert_array_equal(a, np.asarray(t))
            assert t.nbytes == H * W * 3 * 4
            assert t.stream is None
            with pytest.raises(AttributeError):
                t.__cuda_array_interface__
            with pytest.raises(cuframes.Error) as e:
                frame.to_rgb()
            assert e.value.name == "CUFRAMES_ERR_INVALID_ARG"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dtype": "int8"}, "dtype must be"),
        ({"layout": "whc"}, "layout must be"),
        ({"matrix": "bt2100"}, "matrix must be"),
        ({"range": "studio"}, "range must be"),
    ],
)
def test_bad_arguments_are_clear(runtime_dir, key, kwargs, match):
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1)
            pub.publish(random_planes("nv12", 1))
            with sub.next(timeout=5) as frame:
                with pytest.raises(ValueError, match=match):
                    frame.to_rgb(**kwargs)


def test_to_rgb_defaults_to_the_rings_colour_description(runtime_dir, key):
    """A ring described as BT.601 full range converts as BT.601 full by default (FFmpeg's
    numbering: matrix 6 = SMPTE 170M, range 2 = full); arguments still override it."""
    planes = random_planes("nv12", seed=5)
    described = {"range": 2, "primaries": 6, "transfer": 6, "matrix": 6, "chroma_location": 1, "sar": (4, 3)}
    with cuframes.Publisher(key, format="nv12", width=W, height=H, colour=described) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1)
            pub.publish(planes)
            with sub.next(timeout=5) as frame:
                assert frame.colour == {
                    "range": "full",
                    "primaries": "smpte170m",
                    "transfer": "smpte170m",
                    "matrix": "smpte170m",
                    "chroma_location": "left",
                    "sar": (4, 3),
                }
                src = plane_arrays(frame)
                got = np.asarray(frame.to_rgb(dtype="float32"))
                want = to_rgb("nv12", src, W, H, "bt601", "full")
                assert max_abs_diff(got, quantise(want, "float32")) <= TOLERANCE["float32"]
                other = to_rgb("nv12", src, W, H, "bt709", "limited")
                assert max_abs_diff(got, quantise(other, "float32")) > 0.01
                forced = np.asarray(frame.to_rgb(dtype="float32", matrix="bt709", range="limited"))
                assert max_abs_diff(forced, quantise(other, "float32")) <= TOLERANCE["float32"]
    with pytest.raises(ValueError, match="no key"):
        cuframes.Publisher(key, format="nv12", width=W, height=H, colour={"gamma": 1})


def test_a_ring_without_a_description_has_no_colour(runtime_dir, key):
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1)
            pub.publish(random_planes("nv12", 2))
            with sub.next(timeout=5) as frame:
                assert frame.colour is None
