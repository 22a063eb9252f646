"""The measuring scripts the benchmarks rely on: scripts/steady_fps.py and tools/diag/proc_sched.py."""

import os
import subprocess
import sys
import time

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DIAG = os.path.join(SCRIPTS, "..", "tools", "diag")


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
    t0, t1, whole = window[:3]
    assert float(whole) < 420, whole  # the whole run, teardown included
    assert 0.3 < float(t1) - float(t0) < 0.6


def test_teardown_before_the_final_block_is_not_counted(tmp_path):
    # What fftools really prints: progress stops when the muxer is done (here at 450 of 500
    # frames in ~0.45 s), and the final block, with every frame, comes after the threads were
    # joined (0.6 s of teardown). Counting to the first block with every frame would give
    # ~470 fps; the middle of the frames runs at ~1000.
    feed = [(blocks(n), 0.05) for n in range(0, 451, 50)]
    feed[-1] = (blocks(450), 0.6)
    feed.append(("frame=500\nprogress=end\n", 0))
    fps, window = steady_fps(feed, tmp_path)
    assert 800 < fps < 1100, fps
    whole = float(window[2])
    assert whole < 550, window  # the whole run, teardown included, is reported beside it


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
        [sys.executable, os.path.join(DIAG, "proc_sched.py"), "--window", "10.5", "12.5",
         str(samples)],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "(2.00 s window)" in out
    line = next(l for l in out.splitlines() if "main" in l)
    assert "2.0 ms CPU" in line  # 3 ms - 1 ms: the samples at 11 and 12 s only
    assert "running or runnable 50%" in line and "D ioctl nvidiactl 0xc0104629 50%" in line
    assert "S futex" not in line


def test_middle_and_quarter_rates_show_a_slow_end(tmp_path):
    # 300 frames at ~1000 fps, then the last 100 in ~0.5 s: the middle rate (30 to 270
    # frames) stays fast, the last quarter is slow.
    feed = [(blocks(0), 0.05)] + [(blocks(n), 0.05) for n in range(50, 301, 50)]
    feed += [(blocks(325), 0.12), (blocks(350), 0.12), (blocks(375), 0.12), (blocks(400), 0.12)]
    feed += [("frame=400\nprogress=end\n", 0)]
    _, window = steady_fps(feed, tmp_path)
    middle, q1, q4 = float(window[3]), float(window[4]), float(window[7])
    assert q4 < 0.5 * q1, window
    assert middle > 2 * q4, window


def test_proc_sched_timeline_places_the_ioctls(tmp_path):
    samples = tmp_path / "s.samples"
    lines = []
    for i in range(40):  # 4 s of samples every 0.1 s; the last second in an ioctl
        what = "D ioctl nvidiactl 0xc0104629" if i >= 30 else "S futex"
        lines.append(f"{10 + i / 10:.1f}\t1\tdec\t{what}\t0\n")
        lines.append(f"{10 + i / 10:.1f}\t2\tother\tS futex\t0\n")
    samples.write_text("".join(lines))
    out = subprocess.run(
        [sys.executable, os.path.join(DIAG, "proc_sched.py"), "--timeline", "10", "13.95",
         str(samples)],
        capture_output=True, text=True, check=True,
    ).stdout
    line = next(l for l in out.splitlines() if "dec" in l)
    assert line.split(":", 1)[1].split() == ["0%", "0%", "0%", "100%"], line
    assert "other" not in out  # never in an ioctl


def test_proc_sched_ends_tells_when_threads_went(tmp_path):
    samples = tmp_path / "s.samples"
    samples.write_text(
        "10.0\t1\tvf#0:0\tS futex\t0\n10.5\t1\tvf#0:0\tS futex\t0\n"
        "10.0\t2\tmux0:null\tS futex\t0\n12.0\t2\tmux0:null\tS futex\t0\n"
    )
    out = subprocess.run(
        [sys.executable, os.path.join(DIAG, "proc_sched.py"), "--ends", "11", str(samples)],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "vf#0:0 -0.500" in out and "mux0:null +1.000" in out, out
