"""cuframes.Batch on host rings: the tensor, the per-camera lists, the policies, cameras that
are missing or killed, the letterbox placements and box mapping, and the pooled buffers."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import cuframes

W, H = 64, 48  # 4:3, letterboxed into 32x32: content 32x24 from row 4
GREY = 114  # the default pad, 114/255, in uint8


def nv12(y, u=128, v=128, w=W, h=H):
    """A flat NV12 frame: luma `y`, chroma (u, v)."""
    uv = np.empty((h // 2, w), np.uint8)
    uv[:, 0::2], uv[:, 1::2] = u, v
    return [np.full((h, w), y, np.uint8), uv]


def publisher(key, **kw):
    kw.setdefault("format", "nv12")
    kw.setdefault("width", W)
    kw.setdefault("height", H)
    return cuframes.Publisher(key, **kw)


def batch(keys, **kw):
    kw.setdefault("width", 32)
    kw.setdefault("height", 32)
    kw.setdefault("dtype", "uint8")
    kw.setdefault("wait_publisher", 2.0)
    kw.setdefault("retry_interval", 0.05)
    return cuframes.Batch(keys, **kw)


def test_latest_gives_a_numpy_batch_with_the_cameras_lists(runtime_dir, key):
    keys = [key + "-a", key + "-b"]
    with publisher(keys[0]) as pa, publisher(keys[1], width=32, height=64) as pb:
        with batch(keys) as b:
            assert b.keys == keys and b.policy == "latest" and b.shape == (2, 3, 32, 32)
            first = b.next()
            assert first.valid == [False, False] and first.seq == [None, None]
            # No frame yet: the pad colour everywhere.
            assert (first.tensor == GREY).all()
            sa = pa.publish(nv12(235), pts_ns=1000)
            pb.publish(nv12(16, w=32, h=64), pts_ns=2000)
            sb = pb.publish(nv12(235, w=32, h=64), pts_ns=3000)
            r = b.next()
            assert isinstance(r.tensor, np.ndarray)
            assert r.tensor.shape == (2, 3, 32, 32) and r.tensor.dtype == np.uint8
            assert r.valid == [True, True] and r.seq == [sa, sb] and r.pts == [1000, 3000]
            assert r.key == keys and len(r) == 2
            t = r.tensor
            # Camera a: 64x48 fills the width, rows 4..28 white, the rest the pad.
            assert (t[0, :, 4:28, :] == 255).all()
            assert (t[0, :, :4, :] == GREY).all() and (t[0, :, 28:, :] == GREY).all()
            # Camera b: 32x64 fills the height, columns 8..24 white (its newest frame).
            assert (t[1, :, :, 8:24] == 255).all()
            assert (t[1, :, :, :8] == GREY).all() and (t[1, :, :, 24:] == GREY).all()
            pl = r.placement
            assert pl[0] == {
                "scale_x": 0.5, "scale_y": 0.5, "offset_x": 0.0, "offset_y": 4.0,
                "content_width": 32, "content_height": 24,
                "source_width": 64, "source_height": 48,
            }
            assert (pl[1]["offset_x"], pl[1]["content_width"]) == (8.0, 16)
            # A detection in the batch image back in source pixels (clipped to the frame).
            assert r.to_source(0, [(0, 4, 32, 28)]) == [(0.0, 0.0, 64.0, 48.0)]
            assert r.to_source(0, [(8, 8, 16, 20)]) == [(16.0, 8.0, 32.0, 32.0)]
            assert r.to_source(-1, [(0, 0, 32, 32)]) == [(0.0, 0.0, 32.0, 64.0)]
            assert r.to_source(1, [(0, 0, 32, 32)], clip=False) == [(-16.0, 0.0, 48.0, 64.0)]
            with pytest.raises(IndexError):
                r.to_source(2, [])
            with pytest.raises(ValueError):
                r.to_source(0, [(1, 2, 3)])
            # Nothing new on a: its newest frame again; b moved on.
            sb2 = pb.publish(nv12(16, w=32, h=64))
            r2 = b.next()
            assert r2.seq == [sa, sb2] and r2.index == r.index + 1
            assert (r2.tensor[1, :, :, 8:24] == 0).all()
            assert b.kernel_launches == 0


def test_hwc_float_normalised(runtime_dir, key):
    with publisher(key) as p:
        with batch([key], dtype="float32", layout="nhwc", mean=0.5, std=(0.25, 0.5, 1.0),
                   pad=0.0) as b:
            p.publish(nv12(235))
            r = b.next()
            t = r.tensor
            assert t.shape == (1, 32, 32, 3) and t.dtype == np.float32
            np.testing.assert_allclose(t[0, 10, 10], [2.0, 1.0, 0.5], atol=1e-5)
            np.testing.assert_allclose(t[0, 0, 0], [-2.0, -1.0, -0.5], atol=1e-5)


def test_bad_arguments(runtime_dir, key):
    with pytest.raises(ValueError):
        cuframes.Batch([key], policy="newest")
    with pytest.raises(ValueError):
        cuframes.Batch([key], policy="aligned")
    with pytest.raises(ValueError):
        cuframes.Batch([key], mean=0.5)
    with pytest.raises(ValueError):
        cuframes.Batch([key], layout="nchw3")
    with pytest.raises(cuframes.Error):
        cuframes.Batch([key], dtype="uint8", mean=0.5, std=0.5)
    with pytest.raises(cuframes.Error):
        cuframes.Batch([])
    with pytest.raises(cuframes.Error):
        cuframes.Batch(["bad/key"])


def test_pool_reuses_a_buffer_only_after_its_last_reference(runtime_dir, key):
    with publisher(key) as p:
        p.publish(nv12(100))
        with batch([key]) as b:
            def address(r):
                return r.tensor.__array_interface__["data"][0]

            r1 = b.next()
            a1 = address(r1)
            view = r1.tensor[0]  # an import that outlives the result
            del r1
            r2 = b.next()
            assert address(r2) != a1, "reused while a view of it was alive"
            del view
            assert b.pooled_buffers == 1
            r3 = b.next()
            assert address(r3) == a1
            assert b.pooled_buffers == 0
            del r2, r3


def test_all_marks_a_silent_camera_invalid_after_the_timeout(runtime_dir, key):
    keys = [key + "-a", key + "-b"]
    with publisher(keys[0]) as pa, publisher(keys[1]):
        with batch(keys, policy="all", timeout=0.3) as b:
            pa.publish(nv12(235))
            t = time.monotonic()
            r = b.next()
            took = time.monotonic() - t
            assert 0.3 <= took < 1.0, took
            assert r.valid == [True, False]
            assert (r.tensor[1] == GREY).all()


def test_aligned_policy(runtime_dir, key):
    keys = [key + "-a", key + "-b"]
    ms = 1_000_000
    with publisher(keys[0]) as pa, publisher(keys[1]) as pb:
        with batch(keys, policy="aligned", window=0.010, timeout=0.3) as b:
            pa.publish(nv12(1), pts_ns=100 * ms)
            pb.publish(nv12(1), pts_ns=20 * ms)
            r = b.next()
            assert r.valid == [True, False]
            pa.publish(nv12(1), pts_ns=200 * ms)
            pb.publish(nv12(1), pts_ns=195 * ms)
            r = b.next()
            assert r.valid == [True, True] and r.pts == [200 * ms, 195 * ms]


PUBLISHER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import cuframes
    p = cuframes.Publisher(sys.argv[1], format="nv12", width=64, height=48)
    print("READY", flush=True)
    while True:
        p.publish([np.full((48, 64), 200, np.uint8), np.full((24, 64), 128, np.uint8)])
        time.sleep(0.005)
    """
)


def start_publisher(k):
    child = subprocess.Popen([sys.executable, "-c", PUBLISHER, k], stdout=subprocess.PIPE,
                             env=dict(os.environ))
    line = child.stdout.readline()
    if b"READY" not in line:
        child.kill()
        child.wait(5)
        pytest.fail("the publisher did not start")
    return child


def test_a_killed_camera_is_invalid_and_keeps_its_index_when_it_returns(runtime_dir, key):
    keys = [key + "-a", key + "-b"]
    children = []
    try:
        with publisher(keys[0]) as pa:
            children.append(start_publisher(keys[1]))
            with batch(keys, policy="all", timeout=0.3) as b:
                pa.publish(nv12(235))
                r = b.next()
                assert r.valid == [True, True]
                children[0].send_signal(signal.SIGKILL)
                children[0].wait(5)
                deadline = time.monotonic() + 5
                while b.connected[1]:
                    pa.publish(nv12(235))
                    t = time.monotonic()
                    b.next()
                    assert time.monotonic() - t < 0.7
                    assert time.monotonic() < deadline, "the killed camera looks connected"
                pa.publish(nv12(235))
                r = b.next()
                assert r.valid == [True, False] and b.errors[1] is not None
                children.append(start_publisher(keys[1]))
                deadline = time.monotonic() + 5
                while True:
                    pa.publish(nv12(235))
                    r = b.next()
                    if r.valid[1]:
                        break
                    assert time.monotonic() < deadline, "the restarted camera never joined"
                assert r.key == keys and b.reconnections == [0, 1]
                assert (r.tensor[1, :, 4:28] > GREY).all()
    finally:
        for c in children:
            c.kill()
            c.wait(5)
        # A killed publisher cannot remove its SHM objects.
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"cuframes-{keys[1]}"):
                os.unlink(os.path.join("/dev/shm", name))


def test_closed_reader(runtime_dir, key):
    b = batch([key], wait_publisher=0.0)
    r = b.next()
    assert r.valid == [False] and r.placement == [None]
    with pytest.raises(ValueError):
        r.to_source(0, [(0, 0, 1, 1)])
    b.close()
    assert b.closed
    with pytest.raises(cuframes.Error):
        b.next()
    assert list(b) == []


@pytest.mark.parametrize("fmt", ["nv12", "yuv420p", "p010"])
@pytest.mark.parametrize("dtype,tolerance", [("uint8", 1.0), ("float32", 1e-5), ("float16", 1e-3)])
def test_batch_agrees_with_the_float64_reference(runtime_dir, key, fmt, dtype, tolerance):
    """Random frames (not flat: the bilinear taps matter) of two sizes, letterboxed and
    stretched, against batch_reference.fit of rgb_reference.to_rgb; the tolerance is the
    store's rounding plus f32 arithmetic."""
    import batch_reference
    import rgb_reference

    sizes = [(38, 22), (20, 30)]
    keys = [f"{key}-{i}" for i in range(len(sizes))]
    pubs = [cuframes.Publisher(k, format=fmt, width=w, height=h) for k, (w, h) in zip(keys, sizes)]
    try:
        for resize in ("letterbox", "stretch"):
            with batch(keys, width=24, height=16, dtype=dtype, resize=resize, pad=(0.1, 0.2, 0.3),
                       mode="copy") as b:
                planes = []
                for i, (p, (w, h)) in enumerate(zip(pubs, sizes)):
                    planes.append(rgb_reference.random_planes(fmt, w, h, seed=i + len(fmt)))
                    p.publish(planes[-1])
                r = b.next()
                assert r.valid == [True, True]
                for i, (w, h) in enumerate(sizes):
                    sub_planes = planes[i]
                    if fmt in ("nv12", "p010"):
                        sub_planes = [sub_planes[0], sub_planes[1].reshape(sub_planes[1].shape[0], -1, 2)]
                    rgb = rgb_reference.to_rgb(fmt, sub_planes, w, h)
                    want = batch_reference.fit(rgb, 24, 16, resize, pad=(0.1, 0.2, 0.3))
                    got = r.tensor[i].astype(np.float64)
                    if dtype == "uint8":
                        got = got / 255.0
                        tol = tolerance / 255.0 + 1e-9
                    else:
                        tol = tolerance
                    err = float(np.max(np.abs(got - want)))
                    assert err <= tol, (fmt, dtype, resize, i, err)
    finally:
        for p in pubs:
            p.close()


def test_a_forked_child_cannot_read_the_parents_batch(runtime_dir, key):
    with publisher(key) as p:
        with batch([key]) as b:
            p.publish(nv12(235))
            assert b.next().valid == [True]
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    b.next()
                except cuframes.Error as e:
                    code = 0 if "forked" in str(e) else 2
                except BaseException:
                    code = 3
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            # The parent reads on, its subscription untouched.
            s = p.publish(nv12(16))
            r = b.next()
            assert r.valid == [True] and r.seq == [s]


THREADS = textwrap.dedent(
    """
    import sys, threading, time
    import cuframes
    b = cuframes.Batch([sys.argv[1]], 16, 16, "uint8", policy="all", timeout=1.0)
    done = []
    t = threading.Thread(target=lambda: done.append(b.next()))
    t.start()
    time.sleep(0.2)
    # While the other thread waits in next() (holding the reader, without the GIL): these
    # take the reader's lock without the GIL, so that thread gets the GIL back at its end.
    while t.is_alive():
        b.connected, b.errors, b.kernel_launches, repr(b)
    t.join()
    b.close()
    print("OK", done[0].valid)
    """
)


def test_attributes_read_during_a_waiting_next_do_not_deadlock(runtime_dir, key):
    with publisher(key):
        out = subprocess.run([sys.executable, "-c", THREADS, key], capture_output=True, timeout=30,
                             env=dict(os.environ))
    assert out.returncode == 0 and b"OK [False]" in out.stdout, out


INTERRUPTED = textwrap.dedent(
    """
    import sys
    import cuframes
    print("WAITING", flush=True)
    try:
        cuframes.Batch([sys.argv[1]], 16, 16, wait_publisher=60)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
    """
)


def test_ctrl_c_interrupts_the_wait_for_missing_publishers(runtime_dir, key):
    child = subprocess.Popen([sys.executable, "-c", INTERRUPTED, key], stdout=subprocess.PIPE,
                             env=dict(os.environ))
    try:
        assert child.stdout.readline() == b"WAITING\n"
        time.sleep(0.5)
        t = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=10)
        assert b"INTERRUPTED" in out and time.monotonic() - t < 3
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


INTERRUPTED_NEXT = textwrap.dedent(
    """
    import sys
    import cuframes
    b = cuframes.Batch([sys.argv[1]], 16, 16, policy="all", timeout=60, wait_publisher=5)
    assert b.connected == [True], b.errors
    print("WAITING", flush=True)
    try:
        b.next()
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
    """
)


def test_ctrl_c_interrupts_a_next_waiting_for_its_cameras(runtime_dir, key):
    # A connected camera that publishes nothing, under a 60 s "all": Ctrl-C ends the wait.
    with publisher(key):
        child = subprocess.Popen([sys.executable, "-c", INTERRUPTED_NEXT, key],
                                 stdout=subprocess.PIPE, env=dict(os.environ))
        try:
            assert child.stdout.readline() == b"WAITING\n"
            time.sleep(0.5)
            t = time.monotonic()
            child.send_signal(signal.SIGINT)
            out, _ = child.communicate(timeout=10)
            assert b"INTERRUPTED" in out and time.monotonic() - t < 3, out
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(5)


def test_close_from_another_thread_ends_a_waiting_next(runtime_dir, key):
    with publisher(key):
        b = batch([key], policy="all", timeout=30)
        assert b.connected == [True], b.errors
        got = []

        def reader():
            t = time.monotonic()
            try:
                got.append(b.next())
            except cuframes.Error as e:
                got.append(e)
            got.append(time.monotonic() - t)

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.3)
        b.close()
        t.join(10)
        assert not t.is_alive(), "next() still waiting 10 s after close()"
        assert isinstance(got[0], cuframes.Error) and "closed" in str(got[0]), got
        assert got[1] < 2, got
        assert b.closed
