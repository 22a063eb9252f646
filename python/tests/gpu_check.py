"""GPU check (run by hand on a GPU machine, not by pytest):

    python gpu_check.py FFMPEG SAMPLE

FFmpeg (with hwupload_cuframes) decodes SAMPLE on the GPU and publishes it to a CUDA ring
(strict_wait); a zero-copy Python subscriber imports every plane with torch.from_dlpack and
cupy.from_dlpack, copies it to the host, and compares with FFmpeg's own decode
(hwdownload,format=nv12). Prints one PASS/FAIL line and the from_dlpack overhead p50/p99.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid

try:
    import cupy
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIPPED: gpu_check needs torch, cupy and numpy ({e})")
    sys.exit(0)

import cuframes


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    ffmpeg, sample = sys.argv[1], sys.argv[2]
    run_dir = tempfile.mkdtemp(prefix="cuframes-gpu-check.")
    env = dict(os.environ, CUFRAMES_RUNTIME_DIR=run_dir)
    key = f"pygpu-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    ref = subprocess.run(
        [ffmpeg, "-v", "error", "-hwaccel", "cuda", "-hwaccel_output_format", "cuda", "-i", sample,
         "-vf", "hwdownload,format=nv12", "-f", "rawvideo", "-"],
        check=True, capture_output=True,
    ).stdout
    # The publisher's log goes to a file (a pipe nobody reads while frames flow could fill up
    # and stall the publisher); its last line counts the host copies.
    pub_err = open(os.path.join(run_dir, "publisher.log"), "w+")
    pub = subprocess.Popen(
        [ffmpeg, "-v", "info", "-nostats", "-hwaccel", "cuda", "-hwaccel_output_format", "cuda", "-i", sample,
         "-vf", f"hwupload_cuframes=key={key}:policy=strict_wait:wait_subscribers=1:wait_timeout=30",
         "-f", "null", "-"],
        env=env, stderr=pub_err,
    )
    os.environ["CUFRAMES_RUNTIME_DIR"] = run_dir
    sub = None
    for _ in range(300):
        try:
            sub = cuframes.Subscriber(key, mode="zero_copy", connect_timeout=0.1)
            break
        except cuframes.Error:
            time.sleep(0.1)
    if sub is None:
        pub.kill()
        print("FAIL: could not connect to the FFmpeg publisher")
        sys.exit(1)
    failures, frames, t_torch, t_cupy = [], 0, [], []
    stream = torch.cuda.Stream()
    with sub:
        if not sub.zero_copy:
            failures.append("zero_copy not granted")
        for f in sub:
            with torch.cuda.stream(stream):
                y_p, uv_p = f.plane(0), f.plane(1)
                if f.memory != "cuda" or y_p.__dlpack_device__()[0] != 2:
                    failures.append(f"frame {f.seq}: not a CUDA frame")
                t0 = time.perf_counter()
                y = torch.from_dlpack(y_p)
                t1 = time.perf_counter()
                uv = cupy.from_dlpack(uv_p)
                t2 = time.perf_counter()
                t_torch.append(t1 - t0)
                t_cupy.append(t2 - t1)
                y_host = y.cpu().numpy()
                uv_host = cupy.asnumpy(uv).reshape(f.height // 2, f.width)
            w, h = f.width, f.height
            size = w * h * 3 // 2
            off = frames * size
            want = np.frombuffer(ref[off : off + size], np.uint8)
            if want.size != size:
                failures.append(f"frame {f.seq}: beyond the reference decode")
            else:
                if not np.array_equal(y_host, want[: w * h].reshape(h, w)):
                    failures.append(f"frame {f.seq}: luma differs")
                if not np.array_equal(uv_host, want[w * h :].reshape(h // 2, w)):
                    failures.append(f"frame {f.seq}: chroma differs")
            del y, uv
            f.release(stream)
            frames += 1
    pub.wait(60)
    pub_err.seek(0)
    pub_log = pub_err.read()
    if "cuframes host copies: 0" not in pub_log:
        failures.append("the FFmpeg publisher made host copies (or did not say)")
    if cuframes.host_copy_count() != 0:
        failures.append(f"the Python subscriber made {cuframes.host_copy_count()} host copies")
    if frames == 0:
        failures.append("no frame received")
    elif frames * size != len(ref):
        failures.append(f"{frames} frames received, the reference has {len(ref) // size}")
    if pub.returncode != 0:
        failures.append(f"ffmpeg exited with {pub.returncode}")

    def pct(v, p):
        return sorted(v)[min(len(v) - 1, int(len(v) * p))] * 1e6 if v else float("nan")

    stats = (
        f"torch.from_dlpack p50 {pct(t_torch, 0.5):.1f} us p99 {pct(t_torch, 0.99):.1f} us; "
        f"cupy.from_dlpack p50 {pct(t_cupy, 0.5):.1f} us p99 {pct(t_cupy, 0.99):.1f} us"
    )
    if failures:
        print(f"FAIL: python zero-copy CUDA, {frames} frames: {'; '.join(failures[:5])} ({stats})")
        sys.exit(1)
    print(f"PASS: python zero-copy CUDA, {frames} frames bit-exact via torch and cupy, 0 host copies in publisher and subscriber ({stats})")


if __name__ == "__main__":
    main()
