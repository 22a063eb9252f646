"""The asyncio side of the subscribers under load:
concurrent and abandoned ``anext()`` waits lose no item, idle subscribers do not starve the
event loop's default executor, and a wait left pending by a closed loop does not keep the
process from exiting."""

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import cuframes

W, H = 16, 8


def plane(v):
    return np.full((H, W * 4), v % 256, dtype=np.uint8)


def rgba_publisher(key, **kw):
    return cuframes.Publisher(key, format="rgba", width=W, height=H, **kw)


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_concurrent_wait_for_loops_lose_nothing(runtime_dir, key, kind):
    """`await asyncio.wait_for(sub.anext(), t)` in loops of several tasks: the waits of timed-out
    tasks run on while new ones start, all of them reading into the one pending slot. Under
    strict_wait nothing is dropped by the publisher, so every seq must arrive exactly once."""
    n = 600
    if kind == "frames":
        pub = rgba_publisher(key, policy="strict_wait", ack_timeout=5.0)
        sub = cuframes.Subscriber(key, mode="copy")
        publish = lambda i: pub.publish([plane(i)])  # noqa: E731
    else:
        pub = cuframes.PacketPublisher(key)
        sub = cuframes.PacketSubscriber(key)
        publish = lambda i: pub.publish(b"\x00\x00\x00\x01\x65", keyframe=True)  # noqa: E731
    done = threading.Event()
    seqs = []

    def producer():
        for i in range(n):
            # At most a few items ahead of the readers (a packet ring has no strict_wait, and
            # items it overwrote would count as lost), unless they lost some.
            wait_until = time.monotonic() + 0.2
            while i - len(seqs) > 8 and time.monotonic() < wait_until:
                time.sleep(0.0005)
            publish(i)
            # Now and then a pause, so that waits time out while items keep coming.
            if i % 3 == 0:
                time.sleep(0.001)
        done.set()

    give_up = time.monotonic() + 30

    async def main():
        last = [time.monotonic()]

        async def reader():
            while len(seqs) < n and time.monotonic() < give_up:
                # The producer is done and nothing came for a while: what is missing is lost.
                if done.is_set() and time.monotonic() - last[0] > 2.0:
                    return
                try:
                    item = await asyncio.wait_for(sub.anext(), 0.002)
                except asyncio.TimeoutError:
                    continue
                if item is not None:
                    seqs.append(item.seq)
                    last[0] = time.monotonic()
                    if kind == "frames":
                        item.release()

        readers = [asyncio.create_task(reader()) for _ in range(4)]
        # The readers wait before the first item comes (a packet ring keeps only so many).
        await asyncio.sleep(0.2)
        t.start()
        await asyncio.gather(*readers)
        return seqs

    t = threading.Thread(target=producer)
    try:
        seqs = asyncio.run(main())
    finally:
        if t.is_alive():
            t.join(60)
        sub.close()
        pub.close()
    missing = sorted(set(range(1, n + 1)) - set(seqs))
    assert missing == [], f"{len(missing)} of {n} lost: {missing[:20]}"
    assert len(seqs) == n, "an item was delivered twice"


def test_idle_subscribers_leave_the_default_executor_alone(runtime_dir, key):
    """More idle subscribers awaiting anext() than the default executor has threads: a busy
    stream still gets its frames, and asyncio.to_thread still runs."""
    workers = 4
    idle_pubs = [rgba_publisher(f"{key}-idle{i}") for i in range(workers + 4)]
    busy_pub = rgba_publisher(key)
    subs = [cuframes.Subscriber(p.key) for p in idle_pubs]
    busy = cuframes.Subscriber(key)
    stop = threading.Event()

    def producer():
        v = 0
        while not stop.is_set():
            v += 1
            busy_pub.publish([plane(v)])
            time.sleep(0.01)

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=workers))

        async def idle(s):
            async for f in s:
                f.release()

        tasks = [asyncio.create_task(idle(s)) for s in subs]
        try:
            await asyncio.sleep(0.3)  # every idle wait has started
            t = time.monotonic()
            got = 0
            while got < 20:
                f = await asyncio.wait_for(busy.anext(), 10)
                f.release()
                got += 1
            busy_s = time.monotonic() - t
            t = time.monotonic()
            assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 10) == 42
            to_thread_s = time.monotonic() - t
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return busy_s, to_thread_s

    th = threading.Thread(target=producer)
    th.start()
    try:
        busy_s, to_thread_s = asyncio.run(main())
    finally:
        stop.set()
        th.join()
        for s in subs + [busy]:
            s.close()
        for p in idle_pubs + [busy_pub]:
            p.close()
    # 20 frames at 100 fps take 0.2 s; starved, each waits behind the idle waits.
    assert busy_s < 3.0, f"20 frames of a 100 fps stream took {busy_s:.2f} s"
    assert to_thread_s < 1.0, f"asyncio.to_thread took {to_thread_s:.2f} s"


EXIT_SCRIPT = textwrap.dedent(
    r"""
    import asyncio, sys, time
    import cuframes

    key, cls = sys.argv[1], sys.argv[2]
    if cls == "Subscriber":
        pub = cuframes.Publisher(key, format="rgba", width=16, height=8)
        sub = cuframes.Subscriber(key)
    else:
        pub = cuframes.PacketPublisher(key)
        sub = cuframes.PacketSubscriber(key)
    loop = asyncio.new_event_loop()
    # A wait without a timeout that nothing will ever end: the task is abandoned, the loop
    # closed (no cancellation reaches the wait).
    task = loop.create_task(sub.anext())
    loop.run_until_complete(asyncio.sleep(0.3))
    loop.close()
    # The publisher stays, so the wait goes on (the exit closes the publisher only after it
    # joined the threads that keep the process alive).
    print("EXITING", flush=True)
    """
)


@pytest.mark.parametrize("cls", ["Subscriber", "PacketSubscriber"])
def test_closed_loop_with_a_pending_anext_lets_the_process_exit(runtime_dir, key, cls):
    t = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT, key, cls],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        # The killed script could not remove its objects.
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"cuframes-{key}"):
                os.unlink(os.path.join("/dev/shm", name))
        pytest.fail("the process did not exit within 20 s (a pending anext() kept it alive)")
    assert "EXITING" in run.stdout, run.stderr
    assert run.returncode == 0, f"rc {run.returncode}\nstderr:\n{run.stderr}"
    assert time.monotonic() - t < 15
