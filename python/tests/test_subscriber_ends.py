"""Issue 30, items 4 and 10: how a subscriber's stream ends (``end_reason``, a clean end ends
iteration, an abnormal one raises), and the asyncio side (``async for``, ``await anext()``,
cancellation)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import cuframes

W, H = 16, 8


def plane(v):
    return np.full((H, W * 4), v % 256, dtype=np.uint8)


def rgba_publisher(key, **kw):
    return cuframes.Publisher(key, format="rgba", width=W, height=H, **kw)


# --- clean end -------------------------------------------------------------------------------


def test_shutdown_ends_iteration_with_reason_shutdown(runtime_dir, key):
    pub = rgba_publisher(key, policy="strict_wait")
    with cuframes.Subscriber(key) as sub:
        assert sub.end_reason is None
        for v in range(3):
            pub.publish([plane(v)])
        pub.close()
        seqs = [f.seq for f in sub]
        assert seqs == [1, 2, 3]
        assert sub.end_reason == "shutdown"
        # next() keeps raising DISCONNECTED at the end, as it always did.
        with pytest.raises(cuframes.Error) as e:
            sub.next(timeout=1)
        assert e.value.name == "CUFRAMES_ERR_DISCONNECTED"
    assert sub.end_reason == "shutdown", "close() after the end keeps the reason"


def test_packet_shutdown_ends_iteration_with_reason_shutdown(runtime_dir, key):
    pub = cuframes.PacketPublisher(key, codec="h264")
    with cuframes.PacketSubscriber(key) as sub:
        assert sub.end_reason is None
        for n in range(3):
            pub.publish(b"\x00\x00\x00\x01\x65" + bytes([n]), keyframe=True)
        pub.close()
        assert [p.seq for p in sub] == [1, 2, 3]
        assert sub.end_reason == "shutdown"


def test_close_is_end_reason_closed(runtime_dir, key):
    with rgba_publisher(key):
        sub = cuframes.Subscriber(key)
        psub_pub = cuframes.PacketPublisher(key + "-p")
        psub = cuframes.PacketSubscriber(key + "-p")
        try:
            for s in (sub, psub):
                assert s.end_reason is None and not s.closed
                s.close()
                assert s.closed and s.end_reason == "closed"
                assert list(s) == [], "a closed subscriber's iteration ends"
                assert "closed" in repr(s)
        finally:
            psub_pub.close()


# --- kicked ----------------------------------------------------------------------------------


def test_kicked_subscriber_iteration_raises(runtime_dir, key):
    """A zero-copy reader holding all 4 slots of a strict_wait ring: the 5th publish waits
    ack_timeout, then the publisher drops the reader. Iteration must raise, not end."""
    with rgba_publisher(key, policy="strict_wait", ring_size=4, ack_timeout=0.2) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            assert sub.zero_copy
            held = []
            for v in range(4):
                pub.publish([plane(v)])
                held.append(sub.next(timeout=5))
            pub.publish([plane(4)])  # waits 0.2 s, then drops the reader
            with pytest.raises(cuframes.Error) as e:
                for f in sub:
                    held.append(f)
            assert "kicked" in str(e.value), str(e.value)
            assert "dropped this subscriber" in str(e.value), str(e.value)
            assert e.value.name == "CUFRAMES_ERR_DISCONNECTED"
            assert sub.end_reason == "kicked"
            assert "ended: kicked" in repr(sub)
            for f in held:
                f.release()


# --- publisher crash -------------------------------------------------------------------------

CRASHING_PUBLISHER = textwrap.dedent(
    """
    import sys, time
    import cuframes
    key, kind = sys.argv[1], sys.argv[2]
    if kind == "frames":
        p = cuframes.Publisher(key, format="rgba", width=16, height=8)
    else:
        p = cuframes.PacketPublisher(key)
    print("ready", flush=True)
    sys.stdin.readline()
    if kind == "frames":
        p.publish([bytes(16 * 8 * 4)])
    else:
        p.publish(b"\\x00\\x00\\x00\\x01\\x65", keyframe=True)
    print("published", flush=True)
    time.sleep(120)
    """
)


def remove_objects_of(key):
    """A killed publisher cannot remove its SHM objects."""
    for name in os.listdir("/dev/shm"):
        if name.startswith(f"cuframes-{key}"):
            os.unlink(os.path.join("/dev/shm", name))


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_publisher_crash_raises_publisher_lost(runtime_dir, key, kind):
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING_PUBLISHER, key, kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        make = cuframes.Subscriber if kind == "frames" else cuframes.PacketSubscriber
        with make(key, wait_publisher=10) as sub:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "published"
            first = sub.next(timeout=10)
            assert first is not None and first.seq == 1
            if kind == "frames":
                first.release()
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            t = time.monotonic()
            with pytest.raises(cuframes.Error) as e:
                for _ in sub:
                    pass
            assert time.monotonic() - t < 10, "the crash is noticed within a few slices"
            assert "publisher_lost" in str(e.value), str(e.value)
            assert "without a SHUTDOWN" in str(e.value), str(e.value)
            assert sub.end_reason == "publisher_lost"
            # The end stays: every later read raises it again.
            with pytest.raises(cuframes.Error):
                sub.next(timeout=1)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        remove_objects_of(key)


# --- asyncio ---------------------------------------------------------------------------------


def test_async_for_and_anext(runtime_dir, key):
    async def main(sub, pub):
        assert await sub.anext(timeout=0.2) is None
        pub.publish([plane(1)])
        f = await sub.anext(timeout=5)
        assert f.seq == 1
        f.release()
        for v in range(2, 5):
            pub.publish([plane(v)])
        pub.close()
        seqs = []
        async for f in sub:
            seqs.append(f.seq)
            f.release()
        return seqs

    pub = rgba_publisher(key, policy="strict_wait")
    with cuframes.Subscriber(key) as sub:
        assert asyncio.run(main(sub, pub)) == [2, 3, 4]
        assert sub.end_reason == "shutdown"


def test_async_for_packets(runtime_dir, key):
    async def main(sub, pub):
        for n in range(3):
            pub.publish(b"\x00\x00\x00\x01\x65" + bytes([n]), keyframe=True)
        pub.close()
        return [p.seq async for p in sub]

    pub = cuframes.PacketPublisher(key)
    with cuframes.PacketSubscriber(key) as sub:
        assert asyncio.run(main(sub, pub)) == [1, 2, 3]


def test_async_for_raises_at_an_abnormal_end(runtime_dir, key):
    async def main(sub, pub):
        held = []
        for v in range(4):
            pub.publish([plane(v)])
            held.append(await sub.anext(timeout=5))
        await asyncio.get_running_loop().run_in_executor(None, pub.publish, [plane(4)])
        try:
            async for f in sub:
                held.append(f)
        finally:
            for f in held:
                f.release()

    with rgba_publisher(key, policy="strict_wait", ring_size=4, ack_timeout=0.2) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            with pytest.raises(cuframes.Error, match="kicked"):
                asyncio.run(main(sub, pub))
            assert sub.end_reason == "kicked"


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_cancelled_anext_loses_nothing(runtime_dir, key, kind):
    """A task awaiting anext() is cancelled, and an item is published at once, while the
    executor's wait still runs: the item is delivered by the next read, not lost."""

    async def main(sub, publish):
        got = []
        for n in range(1, 6):
            task = asyncio.ensure_future(sub.anext())
            await asyncio.sleep(0.05)
            task.cancel()
            publish(n)  # before the cancellation reaches the executor's wait
            with pytest.raises(asyncio.CancelledError):
                await task
            item = await sub.anext(timeout=5)
            assert item is not None, f"item {n} lost"
            got.append(item.seq)
            if kind == "frames":
                item.release()
        # Nothing more is pending, and the cancelled waits have stopped.
        assert await sub.anext(timeout=0.3) is None
        return got

    if kind == "frames":
        pub = rgba_publisher(key, policy="strict_wait")
        sub = cuframes.Subscriber(key)
        publish = lambda n: pub.publish([plane(n)])  # noqa: E731
    else:
        pub = cuframes.PacketPublisher(key)
        sub = cuframes.PacketSubscriber(key)
        publish = lambda n: pub.publish(b"\x00\x00\x00\x01\x65", keyframe=True)  # noqa: E731
    try:
        assert asyncio.run(main(sub, publish)) == [1, 2, 3, 4, 5]
    finally:
        sub.close()
        pub.close()



# --- close() while other threads wait ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_close_returns_promptly_while_readers_wait(runtime_dir, key, kind):
    """close() from another thread while four threads sit in next(timeout=30): the readers
    must not keep taking the subscriber from close() slice after slice."""
    import threading

    if kind == "frames":
        pub = rgba_publisher(key)
        make = cuframes.Subscriber
    else:
        pub = cuframes.PacketPublisher(key)
        make = cuframes.PacketSubscriber
    latencies = []
    try:
        for _ in range(5):
            sub = make(key)
            ended = []

            def read():
                try:
                    sub.next(timeout=30)
                except cuframes.Error:
                    pass
                ended.append(1)

            readers = [threading.Thread(target=read) for _ in range(4)]
            for r in readers:
                r.start()
            time.sleep(0.3)  # all of them waiting
            t = time.monotonic()
            sub.close()
            latencies.append(time.monotonic() - t)
            for r in readers:
                r.join(10)
            assert len(ended) == 4, "a reader still waits after close()"
    finally:
        pub.close()
    latencies.sort()
    # A reader's slice is 0.1 s; queued behind the readers' turns, close() took 0.7-2.4 s.
    assert latencies[2] < 0.5, f"close() took {[round(x, 2) for x in latencies]} s"
