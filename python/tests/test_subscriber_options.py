"""Issue 30, items 5, 7, 10 and 11 for the subscribers: mode="auto" and the warning of a
refused zero copy; the FFmpeg inputs' option vocabulary (wait_publisher, handshake_timeout,
read_timeout, reconnect, spin); key/closed/repr; real signatures."""

import inspect
import threading
import time
import warnings

import numpy as np
import pytest

import cuframes
from conftest import needs_class_signatures

W, H = 16, 8


def plane(v):
    return np.full((H, W * 4), v % 256, dtype=np.uint8)


def rgba_publisher(key, **kw):
    return cuframes.Publisher(key, format="rgba", width=W, height=H, **kw)


def warnings_of(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        result = fn()
    return result, [x for x in w]


# --- item 5: mode="auto", and a refused zero copy says so ------------------------------------


@pytest.mark.parametrize("policy", ["strict_wait", "drop_oldest"])
def test_auto_mode_follows_the_policy(runtime_dir, key, policy):
    with rgba_publisher(key, policy=policy) as pub:
        sub, w = warnings_of(lambda: cuframes.Subscriber(key))
        with sub:
            assert sub.mode == "auto"
            assert sub.zero_copy == (policy == "strict_wait")
            assert w == [], "auto never warns"
            pub.publish([plane(7)])
            with sub.next(timeout=5) as f:
                assert f.zero_copy == (policy == "strict_wait")
                assert np.asarray(f.plane(0))[0, 0, 0] == 7


def test_auto_mode_with_accept_overwrite_is_zero_copy(runtime_dir, key):
    with rgba_publisher(key, policy="drop_oldest"):
        with cuframes.Subscriber(key, accept_zero_copy_overwrite=True) as sub:
            assert sub.zero_copy


def test_refused_zero_copy_warns(runtime_dir, key):
    with rgba_publisher(key, policy="drop_oldest"):
        sub, w = warnings_of(lambda: cuframes.Subscriber(key, mode="zero_copy"))
        with sub:
            assert not sub.zero_copy
        assert [x.category for x in w] == [cuframes.ZeroCopyRefusedWarning]
        assert issubclass(w[0].category, UserWarning)
        text = str(w[0].message)
        assert "drop_oldest" in text and "accept_zero_copy_overwrite=True" in text, text
        assert w[0].filename == __file__, "the warning points at the caller"
        # Granted: no warning.
        sub, w = warnings_of(
            lambda: cuframes.Subscriber(
                key, mode="zero_copy", accept_zero_copy_overwrite=True
            )
        )
        with sub:
            assert sub.zero_copy and w == []
        sub, w = warnings_of(lambda: cuframes.Subscriber(key, mode="copy"))
        with sub:
            assert not sub.zero_copy and sub.mode == "copy" and w == []
    with rgba_publisher(key + "-s", policy="strict_wait"):
        sub, w = warnings_of(lambda: cuframes.Subscriber(key + "-s", mode="zero_copy"))
        with sub:
            assert sub.zero_copy and w == []
    with pytest.raises(ValueError, match="auto"):
        cuframes.Subscriber(key, mode="fast")


# --- item 7: wait_publisher ------------------------------------------------------------------


def start_later(delay, make, box):
    def run():
        time.sleep(delay)
        box.append(make())

    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_missing_publisher_fails_at_once_by_default(runtime_dir, key, kind):
    make = cuframes.Subscriber if kind == "frames" else cuframes.PacketSubscriber
    t = time.monotonic()
    with pytest.raises(cuframes.Error) as e:
        make(key)
    assert e.value.name == "CUFRAMES_ERR_NOT_FOUND"
    assert time.monotonic() - t < 2
    # Bounded: the same error after the wait.
    t = time.monotonic()
    with pytest.raises(cuframes.Error) as e:
        make(key, wait_publisher=0.5)
    took = time.monotonic() - t
    assert e.value.name == "CUFRAMES_ERR_NOT_FOUND"
    assert 0.45 <= took < 5, took


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_wait_publisher_waits_for_a_late_publisher(runtime_dir, key, kind):
    box = []
    if kind == "frames":
        t = start_later(0.5, lambda: rgba_publisher(key), box)
        make = cuframes.Subscriber
    else:
        t = start_later(0.5, lambda: cuframes.PacketPublisher(key), box)
        make = cuframes.PacketSubscriber
    try:
        start = time.monotonic()
        sub = make(key, wait_publisher=20)
        assert time.monotonic() - start >= 0.4
        t.join(10)
        with sub:
            if kind == "frames":
                box[0].publish([plane(1)])
            else:
                box[0].publish(b"\x00\x00\x00\x01\x65", keyframe=True)
            assert sub.next(timeout=5).seq == 1
    finally:
        t.join(10)
        for p in box:
            p.close()


def test_wait_publisher_releases_the_gil(runtime_dir, key):
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=tick)
    t.start()
    try:
        with pytest.raises(cuframes.Error):
            cuframes.Subscriber(key, wait_publisher=0.5)
    finally:
        stop.set()
        t.join()
    assert len(ticks) >= 10, len(ticks)


def test_wait_publisher_is_interruptible(runtime_dir, key):
    import _thread

    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    t = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            cuframes.PacketSubscriber(key, wait_publisher=30)
    finally:
        timer.cancel()
    assert time.monotonic() - t < 5


# --- item 7: read_timeout --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_read_timeout(runtime_dir, key, kind):
    if kind == "frames":
        pub = rgba_publisher(key)
        make = cuframes.Subscriber
    else:
        pub = cuframes.PacketPublisher(key)
        make = cuframes.PacketSubscriber
    with pub, make(key, read_timeout=0.3) as sub:
        for read in (lambda: next(iter(sub)), lambda: sub.next()):
            t = time.monotonic()
            with pytest.raises(cuframes.Error) as e:
                read()
            took = time.monotonic() - t
            assert e.value.name == "CUFRAMES_ERR_TIMEOUT"
            assert "read_timeout" in str(e.value)
            assert 0.25 <= took < 5, took
        # An explicit timeout still returns None.
        assert sub.next(timeout=0.05) is None
        assert sub.end_reason is None, "a timeout is no end"


def test_read_timeout_zero_is_forever(runtime_dir, key):
    with rgba_publisher(key) as pub, cuframes.Subscriber(key, read_timeout=0) as sub:
        timer = threading.Timer(0.5, lambda: pub.publish([plane(3)]))
        timer.start()
        f = sub.next()
        timer.join()
        assert f.seq == 1
        f.release()


# --- item 7: handshake_timeout and its deprecated name, reconnect, spin -----------------------


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_connect_timeout_is_a_deprecated_alias(runtime_dir, key, kind):
    pub = rgba_publisher(key) if kind == "frames" else cuframes.PacketPublisher(key)
    make = cuframes.Subscriber if kind == "frames" else cuframes.PacketSubscriber
    with pub:
        sub, w = warnings_of(lambda: make(key, connect_timeout=2.0))
        sub.close()
        assert [x.category for x in w] == [DeprecationWarning]
        assert "handshake_timeout" in str(w[0].message)
        assert w[0].filename == __file__, "the warning points at the caller"
        sub, w = warnings_of(lambda: make(key, handshake_timeout=2.0))
        sub.close()
        assert w == []
        with pytest.raises(TypeError, match="handshake_timeout"):
            make(key, handshake_timeout=2.0, connect_timeout=3.0)
        for bad in ("wait_publisher", "handshake_timeout", "read_timeout", "spin", "reconnect"):
            with pytest.raises(ValueError, match=bad):
                make(key, **{bad: -1.0})


def test_packet_subscriber_reconnects(runtime_dir, key):
    """PacketSubscriber(reconnect=): a restarted publisher of the key is followed."""
    pub = cuframes.PacketPublisher(key)
    with cuframes.PacketSubscriber(key, reconnect=20, spin=0.001) as sub:
        pub.publish(b"\x00\x00\x00\x01\x65\x01", keyframe=True)
        assert sub.next(timeout=5).seq == 1
        pub.close()
        pub = cuframes.PacketPublisher(key)
        try:
            got = None
            t = time.monotonic()
            while got is None and time.monotonic() - t < 20:
                pub.publish(b"\x00\x00\x00\x01\x65\x02", keyframe=True)
                got = sub.next(timeout=0.2)
            assert got is not None, "the restarted publisher was not followed"
            assert got.data.endswith(b"\x02") and got.discontinuity
            assert sub.end_reason is None
        finally:
            pub.close()


def test_packet_subscriber_spin_reads(runtime_dir, key):
    with cuframes.PacketPublisher(key) as pub:
        with cuframes.PacketSubscriber(key, spin=0.002) as sub:
            pub.publish(b"\x00\x00\x00\x01\x65", keyframe=True)
            assert sub.next(timeout=5).seq == 1


# --- items 10 and 11: key, closed, repr, signatures ------------------------------------------


def test_key_closed_and_repr(runtime_dir, key):
    with rgba_publisher(key, policy="strict_wait"), cuframes.PacketPublisher(key + "-p"):
        sub = cuframes.Subscriber(key)
        psub = cuframes.PacketSubscriber(key + "-p")
        assert sub.key == key and psub.key == key + "-p"
        r = repr(sub)
        assert r.startswith("<cuframes.Subscriber") and repr(key) in r, r
        assert "mode='auto'" in r and "zero_copy=True" in r and "live" in r, r
        r = repr(psub)
        assert r.startswith("<cuframes.PacketSubscriber") and repr(key + "-p") in r, r
        assert "codec='h264'" in r and "live" in r, r
        for s in (sub, psub):
            assert not s.closed
            s.close()
            assert s.closed and "closed" in repr(s)


def test_method_signatures_and_docs():
    for cls in (cuframes.Subscriber, cuframes.PacketSubscriber):
        for p in (
            "wait_publisher",
            "handshake_timeout",
            "read_timeout",
            "reconnect",
            "spin",
            "publisher_uid",
            "connect_timeout",
        ):
            assert p in cls.__doc__, f"{p} is not documented in {cls.__name__}.__doc__"
        assert list(inspect.signature(cls.next).parameters) == ["self", "timeout"]
        assert list(inspect.signature(cls.anext).parameters) == ["self", "timeout"]


@needs_class_signatures
def test_constructor_signatures():
    for cls, first in (
        (cuframes.Subscriber, ["key", "name", "mode", "runtime_dir"]),
        (cuframes.PacketSubscriber, ["key", "name", "runtime_dir"]),
    ):
        sig = inspect.signature(cls)
        names = list(sig.parameters)
        assert names[: len(first)] == first, names
        for p in (
            "wait_publisher",
            "handshake_timeout",
            "read_timeout",
            "reconnect",
            "spin",
            "publisher_uid",
            "connect_timeout",
        ):
            assert sig.parameters[p].kind is inspect.Parameter.KEYWORD_ONLY, p
            assert p in cls.__doc__, f"{p} is not documented in {cls.__name__}.__doc__"
        assert sig.parameters["wait_publisher"].default == 0.0
        assert sig.parameters["handshake_timeout"].default == 5.0
        assert sig.parameters["read_timeout"].default is None
        assert "Ellipsis" not in str(sig) and "..." not in str(sig), str(sig)
        assert list(inspect.signature(cls.next).parameters) == ["self", "timeout"]
        assert list(inspect.signature(cls.anext).parameters) == ["self", "timeout"]
    assert inspect.signature(cuframes.Subscriber).parameters["mode"].default == "auto"


# --- Ctrl-C during the handshake -------------------------------------------------------------

HANDSHAKE_SCRIPT = r"""
import os, socket, sys, threading, time
import cuframes

runtime_dir, key, kind = sys.argv[1], sys.argv[2], sys.argv[3]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(os.path.join(runtime_dir, key + ".sock"))
srv.listen(8)
accepted = []


def accept():
    # Accepts, and never answers.
    while True:
        accepted.append(srv.accept()[0])


threading.Thread(target=accept, daemon=True).start()
make = cuframes.Subscriber if kind == "frames" else cuframes.PacketSubscriber
print("CONNECTING", flush=True)
t = time.monotonic()
try:
    make(key, handshake_timeout=10)
    print("CONNECTED", flush=True)
except KeyboardInterrupt:
    print(f"INTERRUPTED after {time.monotonic() - t:.2f} s accepted={len(accepted)}", flush=True)
except cuframes.Error as e:
    print(f"ERROR after {time.monotonic() - t:.2f} s: {e}", flush=True)
"""


@pytest.mark.parametrize("kind", ["frames", "packets"])
def test_handshake_is_interruptible(runtime_dir, key, kind):
    """A planted socket that accepts and never answers: Ctrl-C during the handshake raises
    KeyboardInterrupt at once, not when handshake_timeout (10 s) runs out."""
    import signal
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", HANDSHAKE_SCRIPT, runtime_dir, key, kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "CONNECTING"
        time.sleep(1.0)  # well into the handshake
        t = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "INTERRUPTED" in out, f"stdout: {out!r} stderr: {err!r}"
    assert "accepted=0" not in out, "the subscriber never reached the planted socket"
    assert took < 2.5, f"Ctrl-C took {took:.2f} s to end the handshake: {out!r}"
