"""The FFmpeg filter (hwupload_cuframes, host memory) -> a Python subscriber, compared with
FFmpeg's own raw output of the same chain. Skipped without build/ffmpeg/bin/ffmpeg."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

import cuframes

FFMPEG = pathlib.Path(__file__).resolve().parents[2] / "build/ffmpeg/bin/ffmpeg"
W, H = 64, 48


@pytest.mark.skipif(not FFMPEG.exists(), reason=f"{FFMPEG} not built")
def test_ffmpeg_filter_to_python(runtime_dir, key):
    src = ["-f", "lavfi", "-i", f"testsrc=s={W}x{H}:r=25:d=0.4"]
    ref = subprocess.run(
        [str(FFMPEG), "-v", "error", *src, "-vf", "format=nv12", "-f", "rawvideo", "-"],
        check=True, capture_output=True,
    ).stdout
    pub = subprocess.Popen(
        [str(FFMPEG), "-v", "error", *src, "-vf",
         f"format=nv12,hwupload_cuframes=key={key}:memory=host:policy=strict_wait"
         ":wait_subscribers=1:wait_timeout=10", "-f", "null", "-"],
        env=dict(os.environ, CUFRAMES_RUNTIME_DIR=runtime_dir),
    )
    # FFmpeg creates the ring when its first frame is decoded: wait for it.
    sub = cuframes.Subscriber(key, mode="zero_copy", wait_publisher=10)
    got = []
    with sub:
        for f in sub:
            with f:
                got.append(np.concatenate([np.asarray(f.plane(0)).reshape(-1),
                                           np.asarray(f.plane(1)).reshape(-1)]))
    assert pub.wait(30) == 0
    size = W * H * 3 // 2
    assert len(got) == len(ref) // size == 10
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, np.frombuffer(ref[i * size:(i + 1) * size], np.uint8))
