import itertools
import os
import uuid

import pytest

_counter = itertools.count()


@pytest.fixture
def runtime_dir(tmp_path, monkeypatch):
    """A private CUFRAMES_RUNTIME_DIR; checks that the test left no /dev/shm/cuframes-* behind."""
    d = tmp_path / "run"
    d.mkdir()
    monkeypatch.setenv("CUFRAMES_RUNTIME_DIR", str(d))
    before = {n for n in os.listdir("/dev/shm") if n.startswith("cuframes-")}
    yield str(d)
    import gc

    gc.collect()
    after = {n for n in os.listdir("/dev/shm") if n.startswith("cuframes-")}
    assert after - before == set(), f"SHM objects left behind: {sorted(after - before)}"


@pytest.fixture
def key():
    return f"py-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
