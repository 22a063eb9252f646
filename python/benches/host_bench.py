"""The host path's numbers (docs/benchmarks.md, "Python on the host: publish from NumPy, `to_rgb` against OpenCV"), no GPU needed:

    python host_bench.py [--iterations N] [--width W --height H]

1. `Publisher.publish([y, uv])` of one 1080p NV12 frame from NumPy arrays into a host ring
   (drop_oldest, no subscriber), against `np.copyto` of the same bytes into a preallocated
   array: the ratio is what publishing costs over the one copy it cannot avoid. Also from
   `bytes`, from a non-contiguous view (every other column of a wider array) and through
   `PacketPublisher.publish` of a 1 MB ndarray / bytearray / memoryview.
2. Host `frame.to_rgb()` (uint8 and float32, CHW and HWC) of the same frame, against
   `cv2.cvtColor(nv12, cv2.COLOR_YUV2RGB_NV12)` (uint8, HWC) and, for float32, the cvtColor
   followed by `astype(np.float32) / 255` (what a user does to get floats from OpenCV).
Both sides of every ratio are measured in this run, on this machine; medians of N runs.
"""

import argparse
import os
import statistics
import tempfile
import time
import uuid

import numpy as np

import cuframes

try:
    import cv2
except ImportError:  # the OpenCV baselines are skipped, the rest still runs
    cv2 = None


def median_ms(fn, n):
    """Median wall time of `fn` in ms; the CPU time of the process (all threads) per call is
    printed by `row` too, as it is less sensitive to other work on the machine."""
    fn()  # warm up (first-touch page faults, lazy initialisation)
    times = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    global LAST_CPU_MS
    LAST_CPU_MS = (time.process_time() - cpu0) / n * 1e3
    return statistics.median(times) * 1e3


LAST_CPU_MS = 0.0


def row(name, ms, base_ms=None, base_name=None):
    cpu = LAST_CPU_MS
    ratio = f"  {ms / base_ms:6.2f}x {base_name}" if base_ms else ""
    print(f"  {name:<46} {ms:8.3f} ms wall {cpu:8.3f} ms CPU{ratio}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    a = ap.parse_args()
    w, h, n = a.width, a.height, a.iterations
    print(f"cuframes {cuframes.__file__}, NumPy {np.__version__}, "
          f"OpenCV {cv2.__version__ if cv2 else 'missing'} ({cv2.getNumThreads() if cv2 else 0} "
          f"threads), {os.cpu_count()} CPUs, {w}x{h} NV12, median of {n}")
    rng = np.random.default_rng(1)
    y = rng.integers(16, 236, (h, w), dtype=np.uint8)
    uv = rng.integers(16, 241, (h // 2, w), dtype=np.uint8)
    nv12 = np.concatenate([y, uv])
    os.environ.setdefault("CUFRAMES_RUNTIME_DIR", tempfile.mkdtemp(prefix="cuframes-bench-"))
    key = f"host-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    print("publish (host ring, drop_oldest)")
    dst = np.empty_like(nv12)
    copy_ms = median_ms(lambda: np.copyto(dst, nv12), n)
    row("np.copyto of the frame's bytes (baseline)", copy_ms)
    with cuframes.Publisher(key, format="nv12", width=w, height=h) as pub:
        row("publish([y, uv]) ndarrays", median_ms(lambda: pub.publish([y, uv]), n),
            copy_ms, "np.copyto")
        yb, uvb = y.tobytes(), uv.tobytes()
        row("publish([y, uv]) bytes", median_ms(lambda: pub.publish([yb, uvb]), n),
            copy_ms, "np.copyto")
        wide_y = np.repeat(y, 2, axis=1)
        wide_uv = np.repeat(uv.reshape(h // 2, w // 2, 2), 2, axis=1)
        ys, uvs = wide_y[:, ::2], wide_uv[:, ::2]
        row("publish([y, uv]) non-contiguous views", median_ms(lambda: pub.publish([ys, uvs]), n),
            copy_ms, "np.copyto")

        print("to_rgb (host frame)")
        with cuframes.Subscriber(key) as sub:
            pub.wait_for_subscribers(1, timeout=5.0)
            pub.publish([y, uv])
            frame = sub.next(timeout=5.0)
            if cv2 is not None:
                cv_ms = median_ms(lambda: cv2.cvtColor(nv12, cv2.COLOR_YUV2RGB_NV12), n)
                row("cv2.cvtColor NV12->RGB uint8 (baseline)", cv_ms)
                cvf_ms = median_ms(
                    lambda: cv2.cvtColor(nv12, cv2.COLOR_YUV2RGB_NV12).astype(np.float32) / 255, n)
                row("cvtColor + astype(float32) / 255 (baseline)", cvf_ms)
            else:
                cv_ms = cvf_ms = None
            for dtype, base in (("uint8", cv_ms), ("float32", cvf_ms)):
                for layout in ("chw", "hwc"):
                    ms = median_ms(lambda: frame.to_rgb(dtype=dtype, layout=layout), n)
                    row(f"frame.to_rgb({dtype}, {layout})", ms, cv_ms, "cvtColor")
                    if dtype == "float32" and base:
                        print(f"  {'':<46} {'':8}    {ms / base:6.2f}x cvtColor+astype")
            frame.release()

    print("PacketPublisher.publish of 1 MB")
    pkt = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    pdst = np.empty_like(pkt)
    pcopy = median_ms(lambda: np.copyto(pdst, pkt), n)
    row("np.copyto of 1 MB (baseline)", pcopy)
    with cuframes.PacketPublisher(key + "-p", ring_slots=64, data_size=64 << 20) as pp:
        for name, obj in (("bytes", pkt.tobytes()), ("ndarray", pkt),
                          ("bytearray", bytearray(pkt.tobytes())),
                          ("memoryview", memoryview(pkt))):
            try:
                row(f"publish({name})", median_ms(lambda: pp.publish(obj), n), pcopy, "np.copyto")
            except TypeError as e:
                print(f"  publish({name}): {e}")


if __name__ == "__main__":
    main()
