"""The `runtime_dir` fixture judges only the test's own SHM objects.

A pytest run in a subprocess, with this directory's conftest.py, holds two tests: one leaks
objects of its own key (its name, a generation name, a packet ring, a key made from it),
the other makes objects of keys that are not its own (another run's key, and one that only
starts with its key) as a parallel test run or a real publisher would. The first must be
reported, with every leaked name; the second must pass.
"""

import os
import shutil
import subprocess
import sys
import uuid

from conftest import owned_by

INNER = '''
import os


def _make(name):
    with open(os.environ["CREATED"], "a") as f:
        f.write(name + "\\n")
    open("/dev/shm/" + name, "x").close()


def test_leaks_its_own(runtime_dir, key):
    for name in (
        f"cuframes-{key}",
        f"cuframes-{key}.0123456789abcdef",
        f"cuframes-{key}-packets",
        f"cuframes-{key}-pkt-packets.fedcba9876543210",
    ):
        _make(name)


def test_others_objects_are_not_its_own(runtime_dir, key):
    _make("cuframes-" + os.environ["OTHER_KEY"])
    _make("cuframes-" + os.environ["OTHER_KEY"] + "-packets.0123456789abcdef")
    _make(f"cuframes-{key}x")
    _make(f"cuframes-{key}x.0123456789abcdef")
'''


def test_fixture_reports_its_own_leaks_and_only_those(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    shutil.copy(os.path.join(here, "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    created = tmp_path / "created.txt"
    created.write_text("")
    env = dict(os.environ, CREATED=str(created), OTHER_KEY=f"py-other-{uuid.uuid4().hex[:8]}")
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = r.stdout + r.stderr
        names = created.read_text().split()
        assert len(names) == 8, out
        own, others = names[:4], names[4:]
        # Both tests pass; the first then errors in the fixture's teardown.
        assert "2 passed, 1 error" in out, out
        assert "ERROR at teardown of test_leaks_its_own" in out, out
        assert "test_others_objects_are_not_its_own" not in out.split("short test summary")[-1], out
        for name in own:
            assert name in out, f"{name} not reported:\n{out}"
        report = out.split("SHM objects of this test left behind:")[1]
        for name in others:
            assert name not in report, f"{name} reported as a leak:\n{out}"
    finally:
        for name in created.read_text().split():
            try:
                os.unlink("/dev/shm/" + name)
            except FileNotFoundError:
                pass


def test_owned_by_follows_the_shm_names():
    k = "py-1-2-abcdef"
    for name in (
        f"cuframes-{k}",
        f"cuframes-{k}-packets",
        f"cuframes-{k}.0123456789abcdef",
        f"cuframes-{k}-packets.0123456789abcdef",
        f"cuframes-{k}-p",
        f"cuframes-{k}-p-packets",
    ):
        assert owned_by(name, k), name
    for name in (
        f"cuframes-{k}x",
        f"cuframes-{k}0.0123456789abcdef",
        "cuframes-py-1-2-abcde",
        "cuframes-py-1-3-abcdef",
        f"other-{k}",
        f"cuframes-{k}.notahexgeneration",
    ):
        assert not owned_by(name, k), name
