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
