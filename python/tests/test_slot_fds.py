"""Descriptors a subscription keeps.

The slot memfds of a host ring are needed after the handshake only by a zero-copy
subscription (its planes are exported through private views of them). Every other one closes
them once mapped (protocol §3.7 step 4): one kept per slot cost each subscriber `ring_size`
descriptors, and a process of ~53 subscribers of a 16-slot ring ran out of them.
"""

import os
import time

import cuframes

RING = 16


def _slot_fds():
    """This process's open descriptors of frame slot memfds (the publisher's included)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:cuframes-slot-"):
                n += 1
        except OSError:
            pass  # closed meanwhile (listdir's own descriptor)
    return n


def _settled(expected, timeout=10.0):
    """The slot descriptors once they equal `expected`, or after `timeout`: the publisher's
    handshake thread closes its copies of the ones it sent a little after the subscriber
    has them."""
    deadline = time.monotonic() + timeout
    while True:
        n = _slot_fds()
        if n == expected or time.monotonic() > deadline:
            return n
        time.sleep(0.02)


def test_only_zero_copy_subscriptions_keep_the_slot_descriptors(runtime_dir, key):
    with cuframes.Publisher(
        key, width=64, height=36, ring_size=RING, policy="strict_wait"
    ) as pub:
        own = _slot_fds()
        assert own >= RING  # the publisher's
        copies = [cuframes.Subscriber(key, mode="copy") for _ in range(3)]
        try:
            assert not any(s.zero_copy for s in copies)
            assert _settled(own) == own, "COPY subscriptions kept slot descriptors"
            zero = cuframes.Subscriber(key, mode="zero_copy")
            try:
                assert zero.zero_copy
                assert _settled(own + RING) == own + RING
                # Both kinds read frames (the copies through their mappings alone).
                pub.publish([bytes(64 * 36), bytes(64 * 18)])
                for s in copies + [zero]:
                    with s.next(timeout=5) as f:
                        assert f.plane(0).tobytes() == bytes(64 * 36)
            finally:
                zero.close()
            assert _settled(own) == own
        finally:
            for s in copies:
                s.close()
