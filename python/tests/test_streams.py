"""The one rule of every ``stream=`` argument (python/src/stream.rs), checked without a GPU:
None = not given, 0 = the legacy default stream (torch's and CuPy's default stream is handle
0), 1 (legacy) and 2 (per-thread) as they are, anything else a CUstream handle. The GPU side
(the release and the publish really ordered after torch's default stream) is
python/tests/gpu_streams.py."""

import threading

import numpy as np
import pytest

import cuframes
from cuframes import _cuframes

W, H = 64, 48
CU_STREAM_LEGACY, CU_STREAM_PER_THREAD = 1, 2


class TorchLike:
    """``torch.cuda.Stream``'s spelling: ``.cuda_stream``."""

    def __init__(self, handle):
        self.cuda_stream = handle


class CupyLike:
    """``cupy.cuda.Stream``'s spelling: ``.ptr``."""

    def __init__(self, handle):
        self.ptr = handle


class CudaStreamProtocol:
    """The ``__cuda_stream__`` protocol: (version, handle)."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.parametrize("spelling", [int, TorchLike, CupyLike, CudaStreamProtocol])
def test_zero_is_the_legacy_default_stream(spelling):
    # torch.cuda.current_stream().cuda_stream == 0 on torch's default stream: it must reach
    # the core as CU_STREAM_LEGACY, never as the null "no stream" (which ACKs at once, or
    # copies on the ring's own stream, unordered with the caller's work).
    assert _cuframes._stream_handle(spelling(0)) == CU_STREAM_LEGACY


@pytest.mark.parametrize("spelling", [int, TorchLike, CupyLike, CudaStreamProtocol])
def test_special_and_created_handles_pass_as_they_are(spelling):
    assert _cuframes._stream_handle(spelling(1)) == CU_STREAM_LEGACY
    assert _cuframes._stream_handle(spelling(2)) == CU_STREAM_PER_THREAD
    assert _cuframes._stream_handle(spelling(0x7F12_3456_7000)) == 0x7F12_3456_7000


def test_none_is_no_stream():
    assert _cuframes._stream_handle(None) is None


@pytest.mark.parametrize("bad", [object(), "0", 1.5, np.float32(1)])
def test_what_is_not_a_stream_is_a_type_error(bad):
    with pytest.raises(TypeError, match="legacy default stream"):
        _cuframes._stream_handle(bad)


class Index:
    """An integer by ``__index__`` only."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


@pytest.mark.parametrize("handle", [-1, 1 << 64, -(1 << 70), np.int64(-3), Index(-5)])
@pytest.mark.parametrize("spelling", [lambda h: h, TorchLike, CupyLike, CudaStreamProtocol])
def test_an_int_out_of_range_is_a_value_error_naming_the_rule(handle, spelling):
    # Not the conversion's OverflowError: an int of the wrong value, said as such.
    with pytest.raises(ValueError, match=r"is not a CUstream handle: an int from 0 to 2\*\*64 - 1"):
        _cuframes._stream_handle(spelling(handle))


def test_ints_by_index_and_the_largest_handle_are_taken():
    assert _cuframes._stream_handle(np.uint64(5)) == 5
    assert _cuframes._stream_handle(Index(7)) == 7
    assert _cuframes._stream_handle(2**64 - 1) == 2**64 - 1


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("spelling", [lambda h: h, TorchLike, CupyLike, CudaStreamProtocol])
def test_a_bool_is_not_a_stream(flag, spelling):
    # True is an int 1 to Python, but never meant as the legacy stream.
    with pytest.raises(TypeError, match="a bool is not a stream"):
        _cuframes._stream_handle(spelling(flag))


@pytest.mark.parametrize("returned", ["x", None, (1, 2, 3), (0, "x"), (0, 1.5)])
def test_a_malformed_cuda_stream_protocol_is_a_type_error(returned):
    class Odd:
        def __cuda_stream__(self):
            return returned

    with pytest.raises(TypeError, match="__cuda_stream__"):
        _cuframes._stream_handle(Odd())


def test_bad_streams_are_refused_by_every_call(runtime_dir, key):
    """release, to_rgb and publish (host planes too) read stream= by the one rule."""
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            for bad, error in [(True, TypeError), (False, TypeError), (-1, ValueError), (1 << 64, ValueError)]:
                with pytest.raises(error):
                    pub.publish(nv12(1), stream=bad)
            pub.publish(nv12(2))
            f = sub.next(timeout=5)
            assert f is not None
            for bad, error in [(True, TypeError), (-1, ValueError), (CudaStreamProtocol(-1), ValueError)]:
                with pytest.raises(error):
                    f.to_rgb(stream=bad)
                with pytest.raises(error):
                    f.release(stream=bad)
                assert not f.released
            f.release()
            # Nothing was published by the refused calls: the next frame is the good one's.
            assert sub.next(timeout=0.2) is None


def nv12(n):
    y = np.full((H, W), n % 251, np.uint8)
    uv = np.full((H // 2, W), (n * 7) % 253, np.uint8)
    return [y, uv]


@pytest.mark.parametrize("mode", ["copy", "zero_copy"])
def test_host_frames_take_every_stream_spelling(runtime_dir, key, mode):
    """release(stream=...) and to_rgb(stream=...) on host frames: every spelling accepted
    (the stream is for CUDA frames), a wrong type refused before anything is released, and a
    strict_wait publisher of a 2-slot ring goes on publishing (every frame was released)."""
    spellings = [0, 1, 2, TorchLike(0), CupyLike(0), CudaStreamProtocol(0), None]
    with cuframes.Publisher(
        key, format="nv12", width=W, height=H, policy="strict_wait", ring_size=2, ack_timeout=5.0
    ) as pub:
        with cuframes.Subscriber(key, mode=mode) as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            for n, s in enumerate(spellings):
                # strict_wait with 2 slots: the third publish waits for an ACK, so a frame
                # that was not released would stop this loop (the publish times out).
                pub.publish(nv12(n))
                f = sub.next(timeout=5)
                assert f is not None, f"frame {n} did not come"
                t = f.to_rgb(stream=s)
                assert t.shape == (3, H, W)
                assert np.asarray(t).dtype == np.uint8
                with pytest.raises(TypeError):
                    f.to_rgb(stream=object())
                with pytest.raises(TypeError):
                    f.release(stream=object())
                assert not f.released, "a refused stream released the frame"
                f.release(stream=s)
                assert f.released
            # Frames released with every spelling: a publisher of 2 slots still gets slots.
            done = threading.Event()

            def publish_more():
                for n in range(4):
                    pub.publish(nv12(100 + n))
                    f = sub.next(timeout=5)
                    assert f is not None
                    f.release(stream=0)
                done.set()

            t = threading.Thread(target=publish_more, daemon=True)
            t.start()
            t.join(30)
            assert done.is_set(), "the publisher stalled: a frame released with a stream was not ACKed"


def test_publish_host_planes_ignores_the_stream(runtime_dir, key):
    """A host ring's publish takes stream= (0 included) and copies host planes."""
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            pub.publish(nv12(5), stream=0)
            f = sub.next(timeout=5)
            assert f is not None
            with f:
                assert (np.asarray(f.plane(0)) == 5).all()
