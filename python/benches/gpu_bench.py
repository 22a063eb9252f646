"""The Python package's numbers on a GPU machine (docs/benchmarks.md, "Python consumer: import overhead, sustained fps, to_rgb"):

    python gpu_bench.py [--frames N]

1. A publisher process (the Python Publisher, CUDA ring, strict_wait, frames copied device to
   device from torch tensors, unthrottled) and one zero-copy Python consumer that, per frame,
   imports both planes with torch.from_dlpack, computes the mean luma on its stream and
   releases the frame on that stream. Reported: frames per second the consumer sustains, the
   time of sub.next() (the core's next_frame plus the Python Frame), and the import time
   (plane() + torch.from_dlpack for both planes) p50/p99: the overhead over next_frame.
   Baseline in the same run: the same loop with the consumer doing nothing but next() and
   release(), so the ratio shows what the imports cost.
2. Frame.to_rgb per frame (uint8 / float16 / float32, CHW) against a device-to-device copy of
   the same NV12 bytes and of the RGB output's size, timed with CUDA events.
At 1080p and 4K.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import torch

import cuframes

SIZES = {"1080p": (1920, 1080), "4K": (3840, 2160)}


def publish(key, w, h, frames):
    """The publisher process: `frames` NV12 frames from device memory, as fast as the ring takes
    them (strict_wait: as fast as the consumer releases)."""
    y = torch.randint(16, 236, (h, w), dtype=torch.uint8, device="cuda")
    uv = torch.randint(16, 241, (h // 2, w), dtype=torch.uint8, device="cuda")
    with cuframes.Publisher(key, format="nv12", width=w, height=h, memory="cuda",
                            policy="strict_wait", ring_size=8, ack_timeout=10.0) as pub:
        if not pub.wait_for_subscribers(1, timeout=60):
            sys.exit("no subscriber")
        for _ in range(frames):
            pub.publish([y, uv])
        # Let the consumer drain the ring before the shutdown ends its iteration.
        time.sleep(0.5)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] * 1e6


def consume(w, h, frames, with_import):
    key = f"pybench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    pub = subprocess.Popen([sys.executable, __file__, "--publish", key, str(w), str(h), str(frames)])
    sub = None
    for _ in range(600):
        try:
            sub = cuframes.Subscriber(key, mode="zero_copy", handshake_timeout=0.1)
            break
        except cuframes.Error:
            time.sleep(0.1)
    if sub is None:
        pub.kill()
        sys.exit("could not connect")
    stream = torch.cuda.Stream()
    t_next, t_import, got, means = [], [], 0, []
    start = None
    with sub, torch.cuda.stream(stream):
        while True:
            t0 = time.perf_counter()
            try:
                f = sub.next(timeout=10)
            except cuframes.Error:
                break  # the publisher finished
            t1 = time.perf_counter()
            if f is None:
                break
            if start is None:
                start = t0
            t_next.append(t1 - t0)
            if with_import:
                t2 = time.perf_counter()
                yp = torch.from_dlpack(f.plane(0))
                uvp = torch.from_dlpack(f.plane(1))
                t3 = time.perf_counter()
                t_import.append(t3 - t2)
                m = yp.float().mean()  # queued on `stream`; not read back per frame
                if got % 100 == 0:
                    means.append(m)
                del yp, uvp
            f.release(stream)
            got += 1
    stream.synchronize()
    elapsed = time.perf_counter() - start
    pub.wait(30)
    # The first frames include the publisher's start-up; the rate counts them anyway.
    return {
        "frames": got,
        "fps": got / elapsed,
        "next_p50": pct(t_next, 0.5),
        "next_p99": pct(t_next, 0.99),
        "import_p50": pct(t_import, 0.5) if t_import else float("nan"),
        "import_p99": pct(t_import, 0.99) if t_import else float("nan"),
        "host_copies": cuframes.host_copy_count(),
    }


def time_gpu(fn, iterations, stream):
    """Mean time per fn() queued on `stream`, after a warm-up, in µs: the GPU's and the
    caller's. GPU: CUDA events around `iterations` calls queued behind a sleep kernel, so the
    GPU runs them back to back and the host's launch overhead is not counted. Caller: wall
    clock of the same loop without the sleep, until the stream is done."""
    with torch.cuda.stream(stream):
        for _ in range(5):
            fn()
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        stream.synchronize()
        wall = (time.perf_counter() - t0) / iterations * 1e6
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Longer than the host needs to queue the loop (wall, measured above), at ~2 GHz.
        torch.cuda._sleep(int(wall * iterations * 1e-6 * 2e9 * 2) + 1_000_000)
        start.record(stream)
        for _ in range(iterations):
            fn()
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / iterations * 1e3, wall


def to_rgb_times(w, h, iterations=200):
    key = f"pybench-rgb-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    y = torch.randint(16, 236, (h, w), dtype=torch.uint8, device="cuda")
    uv = torch.randint(16, 241, (h // 2, w), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    out = {}
    with cuframes.Publisher(key, format="nv12", width=w, height=h, memory="cuda", policy="strict_wait") as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            pub.wait_for_subscribers(1)
            pub.publish([y, uv])
            with sub.next(timeout=10) as f:
                for dtype in ("uint8", "float16", "float32"):
                    # Each tensor is dropped at once: its buffer goes back to the pool (after its
                    # events), as in a consumer that converts every frame.
                    out[dtype] = time_gpu(lambda: f.to_rgb(dtype=dtype, stream=stream), iterations, stream)
                stream.synchronize()
    nv12 = torch.empty(w * h * 3 // 2, dtype=torch.uint8, device="cuda")
    rgb8 = torch.empty(3 * w * h, dtype=torch.uint8, device="cuda")
    rgb32 = torch.empty(3 * w * h * 4, dtype=torch.uint8, device="cuda")
    dst = [torch.empty_like(t) for t in (nv12, rgb8, rgb32)]
    out["copy_nv12"] = time_gpu(lambda: dst[0].copy_(nv12), iterations, stream)
    out["copy_rgb8"] = time_gpu(lambda: dst[1].copy_(rgb8), iterations, stream)
    out["copy_rgb32"] = time_gpu(lambda: dst[2].copy_(rgb32), iterations, stream)
    return out


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--publish":
        publish(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=3000)
    args = ap.parse_args()
    os.environ.setdefault("CUFRAMES_RUNTIME_DIR", tempfile.mkdtemp(prefix="cuframes-pybench."))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, cuframes protocol v{cuframes.PROTOCOL_VERSION}")
    for name, (w, h) in SIZES.items():
        n = args.frames if name == "1080p" else args.frames // 2
        for rep in (1, 2):
            base = consume(w, h, n, with_import=False)
            full = consume(w, h, n, with_import=True)
            print(
                f"{name} run {rep}: consumer next()+release: {base['fps']:.0f} fps, next p50 "
                f"{base['next_p50']:.1f} us p99 {base['next_p99']:.1f} us | with torch.from_dlpack of "
                f"both planes + mean luma: {full['fps']:.0f} fps ({full['fps'] / base['fps']:.2f}x), "
                f"next p50 {full['next_p50']:.1f} us, import p50 {full['import_p50']:.1f} us p99 "
                f"{full['import_p99']:.1f} us; {full['frames']} frames; host copies {full['host_copies']}"
            )
        t = to_rgb_times(w, h)
        c = t["copy_nv12"][0]
        print(
            f"{name} to_rgb per frame, GPU (wall) us: uint8 {t['uint8'][0]:.1f} ({t['uint8'][1]:.1f}), "
            f"float16 {t['float16'][0]:.1f} ({t['float16'][1]:.1f}), float32 {t['float32'][0]:.1f} "
            f"({t['float32'][1]:.1f}) | D2D copy of the NV12 frame {c:.1f}, of the uint8 RGB size "
            f"{t['copy_rgb8'][0]:.1f}, of the float32 RGB size {t['copy_rgb32'][0]:.1f} | to_rgb / NV12 "
            f"copy: {t['uint8'][0] / c:.2f} / {t['float16'][0] / c:.2f} / {t['float32'][0] / c:.2f}"
        )


if __name__ == "__main__":
    main()
