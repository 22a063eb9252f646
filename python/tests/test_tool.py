"""`python -m cuframes ls|stat|clean|snapshot`: the operator tool's commands from
Python, run by the `cuframes` binary's own code (the crate cuframes-tool), so with the same
options, output and exit status; compared here with the binary where it is built (cargo
builds it as target/release/cuframes). Ctrl-C ends a wait at once."""

import json
import os
import struct
import zlib
import pathlib
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import cuframes
from cuframes._cuframes import _tool_main

from conftest import leaked_shm

ROOT = pathlib.Path(__file__).resolve().parents[2]
W, H = 64, 48


def _binary():
    """The `cuframes` binary cargo built, or None."""
    dirs = [os.environ.get("CARGO_TARGET_DIR"), str(ROOT / "target")]
    for d in dirs:
        if d:
            p = pathlib.Path(d) / "release" / "cuframes"
            if p.is_file() and os.access(p, os.X_OK):
                return p
    return None


BINARY = _binary()
needs_binary = pytest.mark.skipif(BINARY is None, reason="target/release/cuframes not built")


def py_tool(*args):
    """`python -m cuframes ARGS` in a fresh interpreter: (status, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-m", "cuframes", *args], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def bin_tool(*args):
    r = subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def publisher(key):
    """A host NV12 publisher with one frame published and no reader (nothing changes)."""
    p = cuframes.Publisher(key, width=W, height=H)
    p.publish([np.full((H, W), 16, np.uint8), np.full((H // 2, W), 128, np.uint8)])
    return p


def test_ls_json_shows_a_python_publisher(runtime_dir, key, capsys):
    with publisher(key) as p:
        assert _tool_main(["ls", "--json", "--interval", "0"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["runtime_dir"] == runtime_dir
        mine = [x for x in out["publishers"] if x["key"] == key]
        assert len(mine) == 1, out
        assert mine[0]["alive"] is True and mine[0]["pid"] == os.getpid()
        assert mine[0]["frames"]["format"] == "nv12"
        assert (mine[0]["frames"]["width"], mine[0]["frames"]["height"]) == (W, H)
        assert mine[0]["frames"]["seq"] == 1
        # The same through `python -m cuframes` in another process.
        status, stdout, _ = py_tool("ls", "--json", "--interval", "0")
        assert status == 0
        assert [x["key"] for x in json.loads(stdout)["publishers"]].count(key) == 1
        p.close()


def test_stat_key_text_and_json(runtime_dir, key, capsys):
    with publisher(key):
        assert _tool_main(["stat", key, "--interval", "0"]) == 0
        text = capsys.readouterr().out
        assert text.startswith(f"{key}: alive (")
        assert f"nv12 {W}x{H} ring 4 drop_oldest host" in text
        assert _tool_main(["stat", key, "--json", "--interval", "0"]) == 0
        j = json.loads(capsys.readouterr().out)
        assert j["key"] == key and j["frames"]["seq"] == 1
    # Gone: status 1 and the reason on stderr, as the binary says it.
    assert _tool_main(["stat", key, "--interval", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cuframes: no publisher ") and key in err


def test_stat_samples_without_the_gil(runtime_dir, key, capsys):
    """A Python thread publishes while `stat --interval 1` samples: the rate it shows needs
    the thread to run during the interval, so the GIL must not be held over it."""
    stop = threading.Event()
    planes = [np.zeros((H, W), np.uint8), np.zeros((H // 2, W), np.uint8)]
    with cuframes.Publisher(key, width=W, height=H) as p:
        def feed():
            while not stop.is_set():
                p.publish(planes)
                time.sleep(0.01)

        t = threading.Thread(target=feed)
        t.start()
        try:
            time.sleep(0.2)
            assert _tool_main(["stat", key, "--json", "--interval", "1"]) == 0
        finally:
            stop.set()
            t.join()
        fps = json.loads(capsys.readouterr().out)["frames"]["fps"]
        # About 100 a second unloaded; a thread starved of the GIL for the second gives 0.
        assert fps is not None and fps > 5, fps


def _read_png_rgb(path):
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG, decoded here: IHDR, the IDAT
    stream inflated, every row unfiltered (PNG filter types 0-4)."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    w, h, depth, colour_type, _, _, interlace = ihdr
    assert (depth, colour_type, interlace) == (8, 2, 0), ihdr
    raw, stride, rows, prev = zlib.decompress(idat), 3 * w, [], bytearray(3 * w)
    for y in range(h):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows


def test_snapshot_is_to_rgb_of_the_frame(runtime_dir, key, tmp_path, capsys):
    """`snapshot` writes what `Frame.to_rgb(layout="hwc")` gives for the same frame, reading
    the ring's colour description (BT.601 full range here) as to_rgb does."""
    rng = np.random.default_rng(7)
    planes = [rng.integers(0, 256, (H, W), np.uint8), rng.integers(0, 256, (H // 2, W), np.uint8)]
    stop = threading.Event()
    colour = {"matrix": "bt470bg", "range": "full"}
    with cuframes.Publisher(key, width=W, height=H, colour=colour) as p:
        def feed():
            while not stop.is_set():
                p.publish(planes)
                time.sleep(0.01)

        t = threading.Thread(target=feed)
        t.start()
        try:
            with cuframes.Subscriber(key) as sub:
                frame = sub.next(timeout=5)
                assert frame is not None
                with frame:
                    want = np.asarray(frame.to_rgb(layout="hwc"))
                    as709 = np.asarray(frame.to_rgb(layout="hwc", matrix="bt709", range="limited"))
            out = tmp_path / "snap.png"
            assert _tool_main(["snapshot", key, str(out)]) == 0
        finally:
            stop.set()
            t.join()
    assert f"{key}: frame " in capsys.readouterr().out
    w, h, rows = _read_png_rgb(out)
    assert (w, h) == (W, H)
    got = np.frombuffer(b"".join(rows), np.uint8).reshape(H, W, 3)
    assert np.array_equal(got, want)
    # The BT.709 limited reading differs: the colour description was used.
    assert not np.array_equal(got, as709)


def _die_publishing(key, runtime_dir):
    """A publisher (frames and packets) SIGKILLed: its socket and SHM objects stay behind."""
    script = (
        "import os, signal, cuframes\n"
        f"p = cuframes.Publisher({key!r}, width=16, height=16)\n"
        f"q = cuframes.PacketPublisher({key + '-pkt'!r}, codec='h264')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], timeout=60,
                       env=dict(os.environ, CUFRAMES_RUNTIME_DIR=runtime_dir))
    assert r.returncode == -signal.SIGKILL
    assert (pathlib.Path(runtime_dir) / f"{key}.sock").exists()
    assert f"cuframes-{key}" in leaked_shm(key)


def test_clean_dry_run_on_a_dead_key_then_clean(runtime_dir, key, capsys):
    _die_publishing(key, runtime_dir)
    dead = [key, key + "-pkt"]
    assert _tool_main(["clean", "--dry-run", *dead]) == 0
    out = capsys.readouterr().out
    assert f"would remove socket {runtime_dir}/{key}.sock (key {key}: " in out
    assert f"/dev/shm/cuframes-{key} (key {key}: " in out
    assert f"{runtime_dir}/{key}-pkt.sock (key {key}-pkt: " in out
    # A dry run removes nothing.
    assert f"cuframes-{key}" in leaked_shm(key)
    assert _tool_main(["clean", "--json", *dead]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is False and report["removed"] and not report.get("failed")
    assert leaked_shm(key) == []
    assert not (pathlib.Path(runtime_dir) / f"{key}.sock").exists()


@needs_binary
def test_output_equals_the_binarys(runtime_dir, key):
    """The same command, in the same state, through both: the same status, stdout and
    stderr (only the publisher's own key is asked for: others come and go meanwhile)."""
    with publisher(key):
        for args in (
            ["stat", key, "--interval", "0"],
            ["stat", key, "--json", "--interval", "0"],
            ["clean", "--dry-run", key],
            ["clean", "--dry-run", "--json", key],
            ["stat", key, "--bogus"],
            ["--help"],
            [],
        ):
            assert py_tool(*args) == bin_tool(*args), args
        # ls shows the whole machine: our key's row and entry are the same.
        for args in (["ls", "--interval", "0"], ["ls", "--json", "--interval", "0"]):
            (ps, pout, _), (bs, bout, _) = py_tool(*args), bin_tool(*args)
            assert ps == bs == 0
            if "--json" in args:
                def pick(out):
                    return [x for x in json.loads(out)["publishers"] if x["key"] == key]
                assert pick(pout) == pick(bout) != []
            else:
                def row(out):
                    return [line for line in out.splitlines() if line.startswith(key + " ")]
                assert row(pout) == row(bout) != []
    _die_publishing(key, runtime_dir)
    args = ["clean", "--dry-run", key, key + "-pkt"]
    assert py_tool(*args) == bin_tool(*args)
    assert py_tool("clean", key, key + "-pkt")[0] == 0
    assert py_tool("stat", key) == bin_tool("stat", key)


def test_exporter_is_the_binarys(runtime_dir, capsys):
    for args in (["exporter"], ["exporter", "--listen", "127.0.0.1:0"],
                 ["--runtime-dir", runtime_dir, "exporter", "--listen=127.0.0.1:0", "k"]):
        assert _tool_main(args) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "cuframes binary" in captured.err and "ls, stat, clean" in captured.err


def test_usage_errors_and_help(runtime_dir, capsys):
    assert _tool_main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith('cuframes: unknown command "frobnicate"') and "Usage:" in err
    assert _tool_main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("cuframes: see, watch and clean")


def test_writes_to_fd_1_without_sys_stdout(runtime_dir):
    code = ("import sys\nfrom cuframes._cuframes import _tool_main\n"
            "sys.stdout = None\nsys.exit(_tool_main(['--help']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("cuframes: see, watch and clean")


def _first_line(p, within):
    ready, _, _ = select.select([p.stdout], [], [], within)
    assert ready, f"no output within {within} s"
    return p.stdout.readline()


@pytest.mark.parametrize("args", [["stat", "{key}", "--watch", "60", "--json"],
                                  ["stat", "{key}", "--watch", "60"],
                                  ["ls", "--interval", "60"]])
def test_ctrl_c_ends_a_wait_at_once(runtime_dir, key, args):
    args = [a.format(key=key) for a in args]
    with publisher(key):
        p = subprocess.Popen([sys.executable, "-m", "cuframes", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            if args[0] == "stat":
                # The first redraw is out: the 60 s wait for the next has begun.
                assert key in _first_line(p, 30).decode()
            else:
                time.sleep(1.0)  # inside the 60 s sample
            t = time.monotonic()
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=30)
            took = time.monotonic() - t
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == 130, err
        assert took < 5, took
        assert b"Traceback" not in err and b"panicked" not in err, err
