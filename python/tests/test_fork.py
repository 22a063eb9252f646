"""Children forked from a process that publishes and reads (os.fork(), multiprocessing's
"fork" start method) inherit its cuframes objects. When such a child ends normally (the
interpreter's exit: atexit, where cuframes closes the publishers it knows, then the teardown
that frees what is left; or a worker that closes what it inherited), the parent's stream must
go on: no shutdown of its rings, no UNSUBSCRIBE on its connections, no ACK of a frame it holds.

Each case runs in a fresh interpreter (a script), so that forking never copies pytest itself.
"""

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import multiprocessing
import os
import sys

import cuframes

key, how = sys.argv[1], sys.argv[2]
W, H = 16, 8


def pattern(n):
    return bytes((n * 7 + i) % 251 for i in range(W * H * 4))


# 16 slots: the frame the parent holds while a child comes and goes is not due for reuse
# before the parent releases it (STRICT_WAIT would wait for the parent's ACK).
pub = cuframes.Publisher(key, format="rgba", width=W, height=H, policy="strict_wait",
                         ring_size=16, ack_timeout=5.0)
pkt = cuframes.PacketPublisher(key + "-pkt", codec="h264")
sub = cuframes.Subscriber(key, name="parent", mode="zero_copy")
psub = cuframes.PacketSubscriber(key + "-pkt", name="parent")
assert sub.zero_copy
seq = 0


def publish():
    global seq
    seq += 1
    assert pub.publish([pattern(seq)]) == seq
    assert pkt.publish(b"\x00\x00\x01\x65" + bytes([seq % 256]), keyframe=True) == seq


def step():
    # One frame and one packet through: every seq arrives, in order, intact.
    publish()
    f = sub.next(timeout=5)
    assert f is not None and f.seq == seq, (f, seq)
    assert f.plane(0).tobytes() == pattern(seq), seq
    f.release()
    p = psub.next(timeout=5)
    assert p is not None and p.seq == seq, (p, seq)


def worker(go_r, go_w):
    # A multiprocessing worker that closes what it inherited and does not need.
    os.close(go_w)
    os.read(go_r, 1)
    held.release()
    sub.close()
    psub.close()
    pub.close()
    pkt.close()


for child in range(3):
    for _ in range(3):
        step()
    # A frame the parent holds while the child comes and goes.
    publish()
    held = sub.next(timeout=5)
    assert held.seq == seq
    psub.next(timeout=5)
    go_r, go_w = os.pipe()
    if how == "fork":
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.read(go_r, 1)
            # A normal exit: atexit, then the interpreter's teardown, drop what it inherited.
            sys.exit(0)
    else:
        proc = multiprocessing.get_context("fork").Process(target=worker, args=(go_r, go_w))
        proc.start()
    os.close(go_r)
    held_seq = held.seq
    for _ in range(2):
        step()
    # The child leaves while the parent goes on publishing and reading.
    os.write(go_w, b"x")
    os.close(go_w)
    for _ in range(5):
        step()
    if how == "fork":
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    else:
        proc.join(30)
        code = proc.exitcode
    assert code == 0, f"child {child} ended with {code}"
    assert held.plane(0).tobytes() == pattern(held_seq), "the held frame was overwritten"
    held.release()
    for _ in range(3):
        step()
    assert pub.subscriber_count == 1, "the parent's frame subscriber was dropped"
    assert pkt.subscriber_count == 1, "the parent's packet subscriber was dropped"
    # Idle, not ended: an ended stream raises DISCONNECTED instead of returning None.
    assert sub.next(timeout=0.3) is None
    assert psub.next(timeout=0.3) is None
print(f"RESULT frames={seq}", flush=True)
"""


@pytest.mark.parametrize("how", ["fork", "multiprocessing"])
def test_children_leave_the_parents_stream_alone(runtime_dir, key, how):
    try:
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT, key, how],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        # The killed script could not remove its objects.
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"cuframes-{key}"):
                os.unlink(os.path.join("/dev/shm", name))
        raise
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "RESULT frames=" in run.stdout, run.stdout
    # 3 children, each with 3 + 1 + 2 + 5 + 3 frames around it.
    assert f"RESULT frames={3 * 14}" in run.stdout, run.stdout


PENDING_SCRIPT = r"""
import asyncio
import os
import signal
import sys
import threading
import time

import cuframes

key, kind, how = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "frames":
    pub = cuframes.Publisher(key, format="rgba", width=16, height=8)
    sub = cuframes.Subscriber(key)
    publish = lambda: pub.publish([bytes(16 * 8 * 4)])
else:
    pub = cuframes.PacketPublisher(key)
    sub = cuframes.PacketSubscriber(key)
    publish = lambda: pub.publish(b"\x00\x00\x00\x01\x65", keyframe=True)
got = []
stop = threading.Event()


def reader():
    # Waits in next() (in 0.1 s slices that hold the subscriber) for as long as the test runs.
    while not stop.is_set():
        item = sub.next(timeout=30)
        if item is not None:
            got.append(item.seq)


def aio_reader():
    async def main():
        while not stop.is_set():
            item = await sub.anext(timeout=30)
            if item is not None:
                got.append(item.seq)

    asyncio.run(main())


t = threading.Thread(target=reader if how == "thread" else aio_reader, daemon=True)
t.start()
time.sleep(0.3)
for child in range(3):
    pid = os.fork()
    if pid == 0:
        # A hang becomes a death by SIGALRM.
        signal.alarm(10)
        start = time.monotonic()
        try:
            sub.next(timeout=0.1)
            print("child: next() read the parent's stream", flush=True)
            os._exit(2)
        except cuframes.Error as e:
            if "fork" not in str(e):
                print(f"child: unclear error {e}", flush=True)
                os._exit(3)
        sub.close()
        sub.close()
        took = time.monotonic() - start
        if took > 1.0:
            print(f"child: next() and close() took {took:.2f} s", flush=True)
            os._exit(4)
        os._exit(0)
    status = os.waitpid(pid, 0)[1]
    if os.WIFSIGNALED(status):
        print(f"child {child} hung (killed by signal {os.WTERMSIG(status)})", flush=True)
        sys.exit(1)
    assert os.waitstatus_to_exitcode(status) == 0, f"child {child}: {status}"
    time.sleep(0.2)
# The parent's reader goes on.
for _ in range(3):
    publish()
deadline = time.monotonic() + 10
while len(got) < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
assert got == [1, 2, 3], got
assert pub.subscriber_count == 1
stop.set()
publish()
t.join(10)
sub.close()
pub.close()
print("RESULT ok", flush=True)
"""


@pytest.mark.parametrize("how", ["thread", "aio"])
@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_child_never_blocks_on_a_read_of_the_parent(runtime_dir, key, kind, how):
    """A parent thread waits in next() (or anext()) while the parent forks: the child's next()
    raises a clear cuframes.Error and its close() returns, both at once, although the
    subscriber's lock was held at the fork by a thread the child does not have."""
    try:
        run = subprocess.run(
            [sys.executable, "-c", PENDING_SCRIPT, key, kind, how],
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired:
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"cuframes-{key}"):
                os.unlink(os.path.join("/dev/shm", name))
        raise
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "RESULT ok" in run.stdout, run.stdout
