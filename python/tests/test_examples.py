"""examples/python/scene_cuts_numpy.py, the NumPy-only example, run as a user runs it.

With a Python publisher of two scenes whose luma levels are known (the cut, the distance and
the means are checked), and with FFmpeg's hwupload_cuframes on host memory (skipped without
build/ffmpeg/bin/ffmpeg): every frame read, no cut in a test pattern.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import cuframes

ROOT = pathlib.Path(__file__).resolve().parents[2]
FFMPEG = ROOT / "build/ffmpeg/bin/ffmpeg"
EXAMPLE = ROOT / "examples/python/scene_cuts_numpy.py"
W, H = 64, 48


def run_example(key, runtime_dir, *args):
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), key, *args],
        env=dict(os.environ, CUFRAMES_RUNTIME_DIR=runtime_dir),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(example):
    try:
        out, err = example.communicate(timeout=60)
    finally:
        example.kill()
    assert example.returncode == 0, err
    return out.splitlines()


def scene(first_level, i):
    """A frame whose luma rows hold 64 consecutive levels from `first_level`, shifted by `i`:
    every frame of a scene has the same histogram, the two scenes have no level in common."""
    y = np.empty((H, W), np.uint8)
    y[:] = first_level + (np.arange(W) + i) % 64
    return y


def test_numpy_example_finds_the_cut_and_the_luma(runtime_dir, key):
    uv = np.full((H // 2, W), 128, np.uint8)
    with cuframes.Publisher(key, width=W, height=H, memory="host", policy="strict_wait",
                            ack_timeout=30.0) as pub:
        example = run_example(key, runtime_dir, "--wait", "30")
        assert pub.wait_for_subscribers(1, timeout=60), "the example did not connect"
        for i in range(50):
            pub.publish([scene(16 if i < 25 else 160, i), uv], pts_ns=i * 40_000_000)
    lines = finish(example)
    # STRICT_WAIT: the example reads every frame. Levels 16..79 (mean 47.5), then 160..223
    # (mean 191.5): one cut, at the first frame of the second scene, at distance 1.
    assert lines[-1] == "frames 50, cuts [25]", lines
    cuts = [line for line in lines if line.startswith("cut at")]
    assert cuts == ["cut at frame 25 (t=1.000 s): distance 1.00, mean luma 47.5 -> 191.5"], lines


@pytest.mark.skipif(not FFMPEG.exists(), reason=f"{FFMPEG} not built")
def test_numpy_example_reads_ffmpeg_host_frames(runtime_dir, key):
    # The example first: it waits for the publisher, as a script started before the camera.
    example = run_example(key, runtime_dir, "--wait", "60")
    publisher = subprocess.run(
        [str(FFMPEG), "-v", "error", "-f", "lavfi", "-i", f"testsrc=s={W}x{H}:r=25:d=2", "-vf",
         f"format=nv12,hwupload_cuframes=key={key}:memory=host:policy=strict_wait"
         ":wait_subscribers=1:wait_timeout=60", "-f", "null", "-"],
        env=dict(os.environ, CUFRAMES_RUNTIME_DIR=runtime_dir), capture_output=True, text=True, timeout=120,
    )
    lines = finish(example)
    assert publisher.returncode == 0, publisher.stderr
    # testsrc's bars stay put while its counter changes: 50 frames, no scene cut.
    assert lines[-1] == "frames 50, cuts []", lines
