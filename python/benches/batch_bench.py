"""cuframes.Batch on a GPU machine (docs/benchmarks.md, "Many cameras, one batch"):

    python batch_bench.py [--cameras 16] [--batches 300] [--ffmpeg FFMPEG --clip CLIP.h264]

Publishers: `--cameras` 1080p NV12 CUDA rings (strict_wait, 8 slots). With --ffmpeg and --clip,
each is an FFmpeg process decoding the clip with nvdec in a loop at its frame rate
(`-stream_loop -1 -re -hwaccel cuda ... -vf hwupload_cuframes`), as a camera's decoder would;
without them, one Python process publishes every camera's frames from device memory at 30 fps
(`Publisher.publish` of torch tensors, copied device to device).

1. Batch: `Batch(keys, 640, 640, "float16", letterbox)` with policy "latest": per batch
   `next(stream)`, `torch.from_dlpack(tensor)` and a synchronize of the stream. Reported:
   batches/s, per-batch latency p50/p99 (next() to the synchronize's return), kernel launches
   per batch (the reader's counter), host copies (`host_copy_count()`, must stay 0).
2. The naive torch loop on the same publishers, in the same run: per camera its newest frame,
   `Frame.to_rgb(dtype="float16")`, `torch.nn.functional.interpolate(bilinear,
   align_corners=False)` to the letterbox size, padded into 640x640, then `torch.stack`.
   Reported the same way, and the ratio.
3. Checks (PASS/FAIL lines; any FAIL exits 1): one launch per batch, no host copy, the GPU
   batch bit-identical to the same Batch made from host rings of the same frames (the host
   conversion, convert_batch_host), and the accuracy against a float64 reference of the same
   resize (batch_reference.py; max abs error printed).
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import torch
import torch.nn.functional as F

import cuframes

HERE = os.path.dirname(os.path.abspath(__file__))
for d in (HERE, os.path.join(HERE, "..", "tests")):
    if os.path.exists(os.path.join(d, "batch_reference.py")):
        sys.path.insert(0, d)
import batch_reference  # noqa: E402
import rgb_reference  # noqa: E402

W, H, OUT = 1920, 1080, 640
PAD = 114 / 255


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] * 1e3


def publish_python(keys, fps):
    """Child process: every camera's frames from device memory, round robin at `fps` each."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    frames = [
        [torch.randint(16, 236, (H, W), dtype=torch.uint8, device="cuda", generator=gen),
         torch.randint(16, 241, (H // 2, W), dtype=torch.uint8, device="cuda", generator=gen)]
        for _ in range(4)
    ]
    pubs = [cuframes.Publisher(k, format="nv12", width=W, height=H, memory="cuda",
                               policy="strict_wait", ring_size=8, ack_timeout=10.0) for k in keys]
    print("READY", flush=True)
    n = 0
    period = 1.0 / fps
    next_at = time.monotonic()
    try:
        while True:
            for p in pubs:
                p.publish(frames[n % len(frames)])
            n += 1
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        for p in pubs:
            p.close()


def start_publishers(args, keys):
    if args.ffmpeg:
        procs = []
        for k in keys:
            procs.append(subprocess.Popen(
                [args.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-stream_loop", "-1",
                 "-re", "-hwaccel", "cuda", "-hwaccel_output_format", "cuda", "-i", args.clip,
                 "-vf", f"hwupload_cuframes=key={k}:policy=strict_wait:ring_size=8:ack_timeout=10",
                 "-f", "null", "-"]))
        return procs, "FFmpeg nvdec of the clip, one process per camera"
    p = subprocess.Popen([sys.executable, __file__, "--publish", str(args.fps), *keys],
                         stdout=subprocess.PIPE)
    if b"READY" not in p.stdout.readline():
        p.kill()
        sys.exit("the publisher process did not start")
    return [p], f"Python publishers from device memory at {args.fps} fps each"


def run_batch(keys, n, stream):
    b = cuframes.Batch(keys, OUT, OUT, "float16", "nchw", "letterbox", wait_publisher=60,
                       mode="zero_copy")
    lat = []
    with b, torch.cuda.stream(stream):
        # Until every camera has a frame, then a warm-up.
        deadline = time.monotonic() + 60
        while not all(b.next(stream).valid):
            if time.monotonic() > deadline:
                sys.exit(f"not every camera delivered a frame: {b.errors}")
            time.sleep(0.01)
        for _ in range(20):
            torch.from_dlpack(b.next(stream).tensor)
        stream.synchronize()
        launches, copies = b.kernel_launches, cuframes.host_copy_count()
        t_start = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            r = b.next(stream)
            x = torch.from_dlpack(r.tensor)
            stream.synchronize()
            lat.append(time.perf_counter() - t0)
            del x, r
        total = time.perf_counter() - t_start
        return {
            "bps": n / total, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
            "launches": (b.kernel_launches - launches) / n,
            "copies": cuframes.host_copy_count() - copies,
        }


def run_naive(keys, n, stream):
    subs = [cuframes.Subscriber(k, mode="zero_copy", wait_publisher=60) for k in keys]
    held = [None] * len(keys)
    x, y, cw, ch = batch_reference.content_box(W, H, OUT, OUT)
    lat = []

    def one():
        images = []
        for i, s in enumerate(subs):
            while True:
                f = s.next(timeout=0)
                if f is None:
                    break
                if held[i] is not None:
                    held[i].release(stream)
                held[i] = f
            rgb = torch.from_dlpack(held[i].to_rgb(dtype="float16", stream=stream))
            small = F.interpolate(rgb[None], size=(ch, cw), mode="bilinear", align_corners=False)
            img = torch.full((3, OUT, OUT), PAD, dtype=torch.float16, device="cuda")
            img[:, y:y + ch, x:x + cw] = small[0]
            images.append(img)
        return torch.stack(images)

    try:
        with torch.cuda.stream(stream):
            deadline = time.monotonic() + 60
            while any(h is None for h in held):
                for i, s in enumerate(subs):
                    f = s.next(timeout=0.05)
                    if f is not None:
                        if held[i] is not None:
                            held[i].release(stream)
                        held[i] = f
                if time.monotonic() > deadline:
                    sys.exit("naive loop: not every camera delivered a frame")
            for _ in range(20):
                one()
            stream.synchronize()
            t_start = time.perf_counter()
            for _ in range(n):
                t0 = time.perf_counter()
                one()
                stream.synchronize()
                lat.append(time.perf_counter() - t0)
            total = time.perf_counter() - t_start
    finally:
        for h in held:
            if h is not None:
                h.release(stream)
        for s in subs:
            s.close()
    return {"bps": n / total, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99)}


def check_exactness(stream):
    """The same random 1080p frames published into CUDA rings and host rings: the GPU batch
    must equal the host batch bit for bit; both against the float64 reference."""
    tag = f"bbx-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    keys_gpu, keys_host = [f"{tag}-g{i}" for i in range(2)], [f"{tag}-h{i}" for i in range(2)]
    sizes = [(W, H), (1280, 720)]
    planes = [rgb_reference.random_planes("nv12", w, h, seed=i) for i, (w, h) in enumerate(sizes)]
    pubs = []
    try:
        for kg, kh, (w, h) in zip(keys_gpu, keys_host, sizes):
            pubs.append(cuframes.Publisher(kg, format="nv12", width=w, height=h, memory="cuda",
                                           policy="strict_wait"))
            pubs.append(cuframes.Publisher(kh, format="nv12", width=w, height=h,
                                           policy="strict_wait"))
        bg = cuframes.Batch(keys_gpu, OUT, OUT, "float16", wait_publisher=10, mode="zero_copy")
        bh = cuframes.Batch(keys_host, OUT, OUT, "float16", wait_publisher=10, mode="zero_copy")
        with bg, bh:
            for i, p in enumerate(planes):
                pubs[2 * i].publish([torch.from_numpy(a).cuda() for a in p])
                pubs[2 * i + 1].publish(p)
            torch.cuda.synchronize()
            # Frames published on a stream are visible once its work has run.
            deadline = time.monotonic() + 10
            while True:
                rg, rh = bg.next(stream), bh.next(stream)
                if all(rg.valid) and all(rh.valid):
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"exactness check: frames missing {rg.valid} {rh.valid}")
                time.sleep(0.01)
            gpu = torch.from_dlpack(rg.tensor).cpu().numpy()
            host = np.asarray(rh.tensor)
            same = np.array_equal(gpu.view(np.uint16), host.view(np.uint16))
            err = 0.0
            for i, (w, h) in enumerate(sizes):
                p = [planes[i][0], planes[i][1].reshape(h // 2, w // 2, 2)]
                want = batch_reference.fit(rgb_reference.to_rgb("nv12", p, w, h), OUT, OUT)
                err = max(err, float(np.max(np.abs(gpu[i].astype(np.float64) - want))))
            return same, err
    finally:
        for p in pubs:
            p.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cameras", type=int, default=16)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--ffmpeg")
    ap.add_argument("--clip")
    ap.add_argument("--publish", nargs="+")
    args = ap.parse_args()
    if args.publish:
        return publish_python(args.publish[1:], float(args.publish[0]))
    if not torch.cuda.is_available():
        print("SKIPPED (no CUDA device): torch sees no GPU")
        return 1
    torch.cuda.init()
    stream = torch.cuda.Stream()
    fails = 0

    def verdict(ok, what):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + what)
        fails += 0 if ok else 1

    same, err = check_exactness(stream)
    verdict(same, "GPU batch bit-identical to the host batch (convert_batch_host) of the same frames")
    verdict(err <= 1e-3, f"float16 batch vs float64 reference of the same resize: max abs error {err:.3g}")

    keys = [f"bb-{os.getpid()}-{uuid.uuid4().hex[:6]}-{i}" for i in range(args.cameras)]
    procs, what = start_publishers(args, keys)
    try:
        b = run_batch(keys, args.batches, stream)
        n = run_naive(keys, args.batches, stream)
    finally:
        # SIGINT: FFmpeg and the Python publishers end their publishers cleanly (socket and
        # SHM objects removed); what does not end in time is killed.
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)
        for name in os.listdir("/dev/shm"):
            if any(name.startswith(f"cuframes-{k}") for k in keys):
                os.unlink(os.path.join("/dev/shm", name))
    print(f"{args.cameras} cameras of 1080p NV12 ({what}) -> [{args.cameras}, 3, {OUT}, {OUT}] "
          f"float16 letterbox, {args.batches} batches, {torch.cuda.get_device_name()}")
    print(f"  Batch:      {b['bps']:8.1f} batches/s  latency p50 {b['p50']:.2f} ms  p99 {b['p99']:.2f} ms  "
          f"kernel launches/batch {b['launches']:.2f}  host copies {b['copies']}")
    print(f"  naive loop: {n['bps']:8.1f} batches/s  latency p50 {n['p50']:.2f} ms  p99 {n['p99']:.2f} ms")
    print(f"  speed-up:   {b['bps'] / n['bps']:.1f}x throughput, {n['p50'] / b['p50']:.1f}x p50 latency")
    verdict(0 < b["launches"] <= 1.0, f"at most one kernel launch per batch ({b['launches']:.2f})")
    verdict(b["copies"] == 0, f"no host copy while batching ({b['copies']})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
