import threading

import numpy as np
import pytest

import cuframes

W, H = 64, 48


def nv12_planes(n):
    """Frame n's planes: luma and interleaved chroma with a per-frame pattern."""
    y = (np.arange(H * W, dtype=np.uint32).reshape(H, W) * 7 + n * 13) % 251
    uv = (np.arange((H // 2) * W, dtype=np.uint32).reshape(H // 2, W) * 3 + n * 29) % 253
    return [y.astype(np.uint8), uv.astype(np.uint8)]


def subscribe_all(key, mode, results, errors, ready, accept=False):
    try:
        with cuframes.Subscriber(key, mode=mode, accept_zero_copy_overwrite=accept) as sub:
            ready.set()
            for frame in sub:
                with frame:
                    y, uv = frame.plane(0), frame.plane(1)
                    results.append(
                        (
                            frame.seq,
                            frame.pts_ns,
                            frame.zero_copy,
                            np.asarray(y).copy(),
                            np.from_dlpack(uv).copy(),
                        )
                    )
    except Exception as e:  # pragma: no cover - reported by the test
        errors.append(e)
        ready.set()


@pytest.mark.parametrize("policy", ["drop_oldest", "strict_wait"])
@pytest.mark.parametrize("mode", ["copy", "zero_copy"])
def test_round_trip(runtime_dir, key, policy, mode):
    n_frames = 20
    results, errors, ready = [], [], threading.Event()
    with cuframes.Publisher(key, format="nv12", width=W, height=H, policy=policy) as pub:
        t = threading.Thread(
            target=subscribe_all, args=(key, mode, results, errors, ready, True)
        )
        t.start()
        assert ready.wait(5)
        assert pub.wait_for_subscribers(1, timeout=5)
        for n in range(n_frames):
            seq = pub.publish(nv12_planes(n), pts_ns=1000 * n)
            assert seq == n + 1
            if policy == "drop_oldest":
                # Give the reader time: drop_oldest may otherwise overwrite unread frames.
                deadline = threading.Event()
                for _ in range(200):
                    if len(results) > n:
                        break
                    deadline.wait(0.005)
    t.join(10)
    assert not t.is_alive()
    assert errors == []
    if policy == "strict_wait":
        assert len(results) == n_frames
    assert len(results) >= n_frames // 2
    for seq, pts, zero_copy, y, uv in results:
        n = seq - 1
        assert pts == 1000 * n
        assert zero_copy == (mode == "zero_copy")
        ey, euv = nv12_planes(n)
        assert y.shape == (H, W) and y.dtype == np.uint8
        assert uv.shape == (H // 2, W // 2, 2)
        np.testing.assert_array_equal(y, ey)
        np.testing.assert_array_equal(uv.reshape(H // 2, W), euv)


def test_geometry_and_views(runtime_dir, key):
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="zero_copy", accept_zero_copy_overwrite=True) as sub:
            pub.publish(nv12_planes(3), pts_ns=None)
            f = sub.next(timeout=5)
            assert f is not None
            assert (f.format, f.width, f.height, f.memory) == ("nv12", W, H, "host")
            assert isinstance(f.pts_ns, int)  # None: the publisher stamps its clock
            assert f.pitches == pub.pitches
            assert f.num_planes == 2
            y = f.plane(0)
            assert y.__dlpack_device__() == (1, 0)
            a = np.asarray(y)
            assert a.shape == (H, W) and a.strides == (f.pitches[0], 1)
            assert not a.flags.writeable
            with pytest.raises(ValueError):
                a[0, 0] = 1
            # The view is the ring's memory, not a copy.
            assert a.__array_interface__["data"][0] == y.__array_interface__["data"][0]
            np.testing.assert_array_equal(a, nv12_planes(3)[0])
            assert y.tobytes() == nv12_planes(3)[0].tobytes()
            # Versioned DLPack marks zero-copy host planes read-only.
            v = np.from_dlpack(f.plane(1))
            assert not v.flags.writeable
            with pytest.raises(IndexError):
                f.plane(2)
            f.release()


def test_timeout_returns_none(runtime_dir, key):
    with cuframes.Publisher(key, format="nv12", width=W, height=H):
        with cuframes.Subscriber(key) as sub:
            assert sub.next(timeout=0.05) is None


def test_export_keeps_frame_until_dropped(runtime_dir, key):
    """Released frames refuse new exports; an array made before keeps the slot (strict_wait)."""
    with cuframes.Publisher(
        key, format="nv12", width=W, height=H, policy="strict_wait", ring_size=1, ack_timeout=0.3
    ) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            assert sub.zero_copy
            pub.publish(nv12_planes(1))
            f = sub.next(timeout=5)
            plane = f.plane(0)
            arr = np.from_dlpack(plane)
            f.release()
            assert f.released
            with pytest.raises(cuframes.Error) as e:
                plane.__dlpack__()
            assert e.value.name == "CUFRAMES_ERR_INVALID_ARG"
            with pytest.raises(cuframes.Error):
                f.plane(1)
            with pytest.raises(cuframes.Error):
                np.asarray(plane)
            # Still mapped and still frame 1: its slot was not ACKed yet.
            np.testing.assert_array_equal(arr, nv12_planes(1)[0])
            del arr
            import gc

            gc.collect()
            # Now ACKed: the single slot is free again, so this publish does not time out.
            pub.publish(nv12_planes(2))
            f2 = sub.next(timeout=5)
            np.testing.assert_array_equal(np.asarray(f2.plane(0)), nv12_planes(2)[0])
            f2.release()
            f2.release()  # idempotent


def test_frame_after_subscriber_closed(runtime_dir, key):
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        sub = cuframes.Subscriber(key, mode="copy")
        pub.publish(nv12_planes(0))
        f = sub.next(timeout=5)
        sub.close()
        with pytest.raises(cuframes.Error) as e:
            f.plane(0)
        assert e.value.code == cuframes.ERROR_CODES["CUFRAMES_ERR_DISCONNECTED"]
        with pytest.raises(cuframes.Error):
            sub.next(timeout=0.1)
        f.release()


def test_iteration_ends_at_shutdown(runtime_dir, key):
    pub = cuframes.Publisher(key, format="yuv420p", width=W, height=H, policy="strict_wait")
    sub = cuframes.Subscriber(key)
    planes = [
        np.full((H, W), 1, np.uint8),
        np.full((H // 2, W // 2), 2, np.uint8),
        np.full((H // 2, W // 2), 3, np.uint8),
    ]
    for _ in range(3):
        pub.publish(planes)
    pub.close()
    got = [np.asarray(fr.plane(2)).copy() for fr in sub]
    assert len(got) == 3
    assert all((g == 3).all() for g in got)
    sub.close()


def test_p010_uint16_and_strided_sources(runtime_dir, key):
    with cuframes.Publisher(key, format="p010", width=W, height=H) as pub:
        with cuframes.Subscriber(key) as sub:
            y = (np.arange(H * W, dtype=np.uint16).reshape(H, W) * 64) & 0xFFC0
            padded = np.zeros((H // 2, W + 8), np.uint16)
            padded[:, :W] = 0x1230
            pub.publish([y, padded[:, :W]])  # a strided view, read in C order
            f = sub.next(timeout=5)
            a = np.asarray(f.plane(0))
            assert a.dtype == np.uint16 and a.shape == (H, W)
            np.testing.assert_array_equal(a, y)
            uv = np.from_dlpack(f.plane(1))
            assert uv.dtype == np.uint16 and uv.shape == (H // 2, W // 2, 2)
            assert (uv == 0x1230).all()
            f.release()


def test_bytes_with_explicit_strides(runtime_dir, key):
    with cuframes.Publisher(key, format="rgba", width=4, height=2) as pub:
        with cuframes.Subscriber(key) as sub:
            stride = 20
            buf = bytearray(stride * 2)
            for r in range(2):
                buf[r * stride : r * stride + 16] = bytes(range(r * 16, r * 16 + 16))
            pub.publish([bytes(buf)], strides=[stride])
            f = sub.next(timeout=5)
            a = np.asarray(f.plane(0))
            assert a.shape == (2, 4, 4)
            assert a.reshape(-1).tolist() == list(range(32))
            f.release()


def test_bad_inputs(runtime_dir, key):
    with pytest.raises(cuframes.Error) as e:
        cuframes.Subscriber(key + "-missing", handshake_timeout=0.2)
    assert e.value.code == cuframes.ERROR_CODES["CUFRAMES_ERR_NOT_FOUND"]
    assert e.value.name == "CUFRAMES_ERR_NOT_FOUND"
    with pytest.raises(ValueError):
        cuframes.Subscriber(key, mode="sometimes")
    with pytest.raises(ValueError):
        cuframes.Publisher(key, format="nv21", width=W, height=H)
    with pytest.raises(TypeError):
        cuframes.Publisher(key, format="nv12")
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        y, uv = nv12_planes(0)
        with pytest.raises(TypeError):
            pub.publish([object(), uv])
        with pytest.raises(TypeError):
            pub.publish([y.astype(np.float32), uv])
        with pytest.raises(ValueError):
            pub.publish([y[:10], uv])
        with pytest.raises(ValueError):
            pub.publish([y])
        with pytest.raises(TypeError):
            pub.publish(5)

        class FakeCuda:
            __cuda_array_interface__ = {"data": (0, False), "shape": (H, W), "typestr": "|u1"}

        class FakeDlpackCuda:
            def __dlpack_device__(self):
                return (2, 0)

            def __dlpack__(self, stream=None):
                raise AssertionError("a host ring must refuse before asking for the capsule")

        # Device sources into a host ring: refused before any pointer is used, saying why.
        for fake in (FakeCuda(), FakeDlpackCuda()):
            with pytest.raises(TypeError, match="host memory"):
                pub.publish([fake, fake])
        with pytest.raises(TypeError, match="not a mix"):
            pub.publish([FakeCuda(), uv])
        with pytest.raises(cuframes.Error) as e:
            cuframes.Publisher(key, format="nv12", width=W, height=H)
        assert e.value.name == "CUFRAMES_ERR_ALREADY_EXISTS"
        with cuframes.Subscriber(key) as sub:
            pub.publish([y, uv])
            f = sub.next(timeout=5)
            with pytest.raises(TypeError):
                f.release(stream="not a stream")
            with pytest.raises(BufferError):
                f.plane(0).__dlpack__(copy=True)
            with pytest.raises(AttributeError):
                f.plane(0).__cuda_array_interface__
            f.release()
    with pytest.raises(cuframes.Error):
        pub.publish([y, uv])


class LegacyOnly:
    """Hands out the legacy "dltensor" capsule whatever the consumer asks for."""

    def __init__(self, plane):
        self.plane = plane

    def __dlpack__(self, **kwargs):
        return self.plane.__dlpack__()

    def __dlpack_device__(self):
        return self.plane.__dlpack_device__()


def test_legacy_capsules_of_copies(runtime_dir, key):
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            pub.publish(nv12_planes(3))
            with sub.next(timeout=5) as f:
                a = np.from_dlpack(LegacyOnly(f.plane(1)))
                np.testing.assert_array_equal(a.reshape(H // 2, W), nv12_planes(3)[1])
                del a


def test_legacy_and_unconsumed_capsules(runtime_dir, key):
    import gc

    with cuframes.Publisher(
        key, format="nv12", width=W, height=H, policy="strict_wait", ring_size=1, ack_timeout=0.3
    ) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            pub.publish(nv12_planes(5))
            f = sub.next(timeout=5)
            # The legacy capsule (no read-only flag) points into a private copy-on-write view
            # of the slot (test_numpy_versions.py); the versioned one is flagged read-only.
            old = np.from_dlpack(LegacyOnly(f.plane(1)))
            np.testing.assert_array_equal(old.reshape(H // 2, W), nv12_planes(5)[1])
            del old
            legacy = np.from_dlpack(f.plane(1))
            assert not legacy.flags.writeable
            with pytest.raises(ValueError):
                legacy[0, 0, 0] = 1
            assert legacy.shape == (H // 2, W // 2, 2)
            np.testing.assert_array_equal(legacy.reshape(H // 2, W), nv12_planes(5)[1])
            unused = f.plane(0).__dlpack__(max_version=(1, 0))
            assert "dltensor_versioned" in repr(unused)
            f.release()
            del legacy
            gc.collect()
            # The unconsumed capsule still holds the slot: the next publish waits the whole
            # ack_timeout, then gives up on this subscriber.
            import time

            t0 = time.monotonic()
            pub.publish(nv12_planes(6))
            assert time.monotonic() - t0 >= 0.25
            # Whether frame 2 still arrives before the publisher's ERROR is a race; either way
            # the subscriber ends up dropped.
            try:
                late = sub.next(timeout=1)
                if late is not None:
                    late.release()
            except cuframes.Error as e:
                assert e.name == "CUFRAMES_ERR_DISCONNECTED"
            # The subscriber was dropped by the timeout; the capsule's destructor must still
            # free its export without touching freed memory.
            del unused
            gc.collect()


def test_publish_wait_does_not_block_other_threads(runtime_dir, key):
    """A strict_wait publish waiting for an ACK leaves the GIL and the publisher's lock free."""
    with cuframes.Publisher(
        key, format="nv12", width=W, height=H, policy="strict_wait", ring_size=1, ack_timeout=2.0
    ) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            pub.publish(nv12_planes(0))
            f = sub.next(timeout=5)
            done = threading.Event()

            def second():
                pub.publish(nv12_planes(1))  # waits for f's ACK
                done.set()

            t = threading.Thread(target=second)
            t.start()
            assert not done.wait(0.2)
            assert pub.subscriber_count == 1  # neither deadlocks nor waits for the publish
            f.release()
            assert done.wait(5)
            t.join(5)
            g = sub.next(timeout=5)
            assert g.seq == 2
            g.release()


def test_unclosed_publishers_are_closed_at_exit(runtime_dir, key):
    import os
    import subprocess
    import sys

    code = (
        "import cuframes, sys\n"
        f"p = cuframes.Publisher({key!r}, width=64, height=48)\n"
        f"q = cuframes.PacketPublisher({key!r} + '-p')\n"
        "p.publish([bytes(64 * 48), bytes(64 * 24)])\n"
        "sys.exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert [n for n in os.listdir("/dev/shm") if key in n] == []
    assert os.listdir(runtime_dir) == []


def test_host_copy_count_counts_only_device_host_copies(runtime_dir, key):
    # Host rings copy host memory only: the counter of host<->device copies stays 0.
    before = cuframes.host_copy_count()
    with cuframes.Publisher(key, format="nv12", width=W, height=H) as pub:
        with cuframes.Subscriber(key, mode="copy") as sub:
            assert pub.wait_for_subscribers(1, timeout=5)
            pub.publish(nv12_planes(4))
            with sub.next(timeout=5) as f:
                np.testing.assert_array_equal(np.asarray(f.plane(0)), nv12_planes(4)[0])
    assert isinstance(before, int) and cuframes.host_copy_count() == before == 0
