import gc
import itertools
import os
import re
import signal
import sys
import uuid

import pytest

# A suite started in the background by a non-interactive shell (a CI runner, `cmd &`) inherits
# SIGINT ignored, and an ignored SIGINT is inherited by every child process: Python then
# neither raises KeyboardInterrupt nor lets `_thread.interrupt_main()` do anything. The Ctrl-C
# tests need it handled here, and in their children (a handled signal is reset to the
# default on exec, where an ignored one stays ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)

_counter = itertools.count()

# PyO3's abi3 classes carry their constructor's signature from CPython 3.10 on (methods' work
# everywhere); on 3.9 help() shows no constructor parameters, which these tests cannot check.
needs_class_signatures = pytest.mark.skipif(
    sys.version_info < (3, 10),
    reason="abi3 extension classes have no constructor signature before CPython 3.10 (PyO3)",
)

# An SHM object's name: cuframes-<key>, cuframes-<key>-packets, and either of them with a
# generation (.<16 hex digits>), as core/src/paths.rs names them.
_SHM_NAME = re.compile(r"^cuframes-(?P<key>[A-Za-z0-9_-]+?)(?:-packets)?(?:\.[0-9a-f]{16})?$")


def owned_by(name, key):
    """Whether the SHM object `name` is one of `key`'s or of a key made from it (`<key>-...`).

    Only these are the test's to judge: objects of other keys belong to whoever else runs on
    the machine (a parallel test run, a real publisher), and come and go as they please.
    """
    m = _SHM_NAME.match(name)
    if m is None:
        return False
    k = m.group("key")
    return k == key or k.startswith(key + "-")


def leaked_shm(key):
    """The /dev/shm objects of `key` (and of keys made from it) that exist now, sorted."""
    return sorted(n for n in os.listdir("/dev/shm") if owned_by(n, key))


@pytest.fixture
def key():
    """A key no other test or process uses; derive further keys as `key + "-<suffix>"`."""
    return f"py-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def runtime_dir(tmp_path, monkeypatch, key):
    """A private CUFRAMES_RUNTIME_DIR; checks that the test left none of its SHM objects behind.

    The test's objects are those of its `key` fixture and of keys made from it: the key is
    unique, so a leak of ours is always caught, and nobody else's object fails the test.
    """
    d = tmp_path / "run"
    d.mkdir()
    monkeypatch.setenv("CUFRAMES_RUNTIME_DIR", str(d))
    yield str(d)
    # Endpoints the test dropped unlink their objects when they are collected.
    gc.collect()
    left = leaked_shm(key)
    assert left == [], f"SHM objects of this test left behind: {left}"
