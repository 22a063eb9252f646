"""The measuring scripts the benchmarks rely on: scripts/steady_fps.py and proc_sched.py."""

import os
import subprocess
import sys
import time

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def blocks(*frames):
    return "".join(f"frame={n}\nprogress=continue\n" for n in frames)


def steady_fps(feed, tmp_path):
    """Run steady_fps.py on timed chunks [(text, seconds to wait after), ...]."""
    window = tmp_path / "win"
    proc = subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, "steady_fps.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "STEADY_FPS_WINDOW": str(window)},
    )
    for text, pause in feed:
        proc.stdin.write(text.encode())
        proc.stdin.flush()
        time.sleep(pause)
    out, _ = proc.communicate()
    return float(out), window.read_text().split() if window.exists() else []


def test_teardown_after_the_last_frame_is_not_counted(tmp_path):
    # 400 frames in ~0.4 s, then 1 s of teardown with every frame out: the rate is the
    # frames' (~1000 fps), not 400 frames over 1.4 s.
    fps, window = steady_fps(
        [(blocks(0), 0.05), (blocks(100), 0.4), (blocks(500), 0.5), (blocks(500), 0.5),
         ("frame=500\nprogress=end\n", 0)],
        tmp_path,
    )
    assert 600 < fps < 1100, fps
    t0, t1, to_last = window
    assert float(to_last) < 420, to_last  # the old count, teardown included
    assert 0.3 < float(t1) - float(t0) < 0.6


def test_too_few_blocks_is_nan(tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "steady_fps.py")],
        input=b"frame=5\nprogress=end\n",
        capture_output=True,
        check=True,
    )
    assert out.stdout.strip() == b"nan"


def test_proc_sched_window_keeps_only_its_samples(tmp_path):
    samples = tmp_path / "s.samples"
    samples.write_text(
        "10.0\t1\tmain\tS futex\t0\n"
        "11.0\t1\tmain\trunning or runnable\t1000000\n"
        "12.0\t1\tmain\tD ioctl nvidiactl 0xc0104629\t3000000\n"
        "20.0\t1\tmain\tD ioctl nvidiactl 0xc0104629\t9000000\n"
    )
    out = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "proc_sched.py"), "--window", "10.5", "12.5",
         str(samples)],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "(2.00 s window)" in out
    line = next(l for l in out.splitlines() if "main" in l)
    assert "2.0 ms CPU" in line  # 3 ms - 1 ms: the samples at 11 and 12 s only
    assert "running or runnable 50%" in line and "D ioctl nvidiactl 0xc0104629 50%" in line
    assert "S futex" not in line
