"""GPU check (run on a GPU machine by scripts/gpu-check.sh, not by pytest):

    python gpu_check.py FFMPEG SAMPLE

1. FFmpeg (with hwupload_cuframes) decodes SAMPLE on the GPU and publishes it to a CUDA ring
   (strict_wait); a zero-copy Python subscriber imports every plane with torch.from_dlpack and
   cupy.from_dlpack, copies it to the host, and compares with FFmpeg's own decode
   (hwdownload,format=nv12); 0 host copies in publisher and subscriber; the first frames'
   to_rgb (on the GPU) agrees with the NumPy reference (rgb_reference.py).
2. Every format through a Python CUDA publisher: to_rgb of zero-copy and copy frames, every
   matrix, range, dtype and layout, against the reference.
3. Publisher.publish from device memory: torch tensors (pitched views), CuPy arrays, and a
   DLPack-only object, on the default and on a side stream; the subscriber's bytes are the
   source's.
Prints one PASS/FAIL line per check; exits 1 if any failed.
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
import rgb_reference
from rgb_reference import max_abs_diff, quantise

# As in test_rgb.py (the GPU kernel is the same arithmetic in float32, no fused multiply-add).
TOLERANCE = {"uint8": 1.0, "float32": 2.5e-7, "float16": 5e-4}
FORMATS = ["nv12", "p010", "p016", "yuv420p", "yuv444p", "rgba", "bgra"]


def rgb_diff(frame, want, dtype, layout, matrix, rng, stream=None):
    """Largest |to_rgb - reference| of one frame (to_rgb on the GPU, imported by torch);
    `want` is the float64 reference (3, h, w) of the frame."""
    t = frame.to_rgb(dtype=dtype, layout=layout, matrix=matrix, range=rng, stream=stream)
    got = torch.from_dlpack(t).cpu().numpy()
    want = quantise(want, dtype)
    if layout == "hwc":
        want = want.transpose(1, 2, 0)
    if got.shape != want.shape:
        return float("inf")
    return max_abs_diff(got, want)


def ffmpeg_zero_copy(ffmpeg, sample):
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
            sub = cuframes.Subscriber(key, mode="zero_copy", handshake_timeout=0.1)
            break
        except cuframes.Error:
            time.sleep(0.1)
    if sub is None:
        pub.kill()
        print("FAIL: could not connect to the FFmpeg publisher")
        return False
    failures, frames, t_torch, t_cupy = [], 0, [], []
    rgb_worst = {}
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
            if frames < 5:
                # Real decoded NV12 through to_rgb on the GPU (this frame's own planes as the
                # reference's input), on the reader's stream.
                planes = [y_host, uv_host.reshape(h // 2, w // 2, 2)]
                want = rgb_reference.to_rgb("nv12", planes, w, h)
                for dtype in ("uint8", "float32", "float16"):
                    d = rgb_diff(f, want, dtype, "chw", "bt709", "limited", stream)
                    rgb_worst[dtype] = max(rgb_worst.get(dtype, 0.0), d)
                    if d > TOLERANCE[dtype]:
                        failures.append(f"frame {f.seq}: to_rgb {dtype} differs by {d}")
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
    stats += "; to_rgb vs reference (5 frames): " + ", ".join(f"{k} {v:.3g}" for k, v in rgb_worst.items())
    if failures:
        print(f"FAIL: python zero-copy CUDA, {frames} frames: {'; '.join(failures[:5])} ({stats})")
        return False
    print(f"PASS: python zero-copy CUDA, {frames} frames bit-exact via torch and cupy, 0 host copies in publisher and subscriber ({stats})")
    return True


def key_for(tag):
    return f"pygpu-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def combos(fmt, width):
    """(matrix, range, dtypes, layouts) to check: everything at the small size; at 1080p (where
    the float64 reference takes a while) two matrix/range pairs, every dtype, CHW and HWC."""
    dtypes, layouts = ("uint8", "float32", "float16"), ("chw", "hwc")
    if fmt in ("rgba", "bgra"):  # no matrix
        return [("bt709", "limited", dtypes, layouts)]
    if width < 100:
        return [(m, r, dtypes, layouts) for m in ("bt709", "bt601", "bt2020") for r in ("limited", "full")]
    return [("bt709", "limited", dtypes, layouts), ("bt601", "full", dtypes, ("chw",))]


def every_format_to_rgb():
    """Each format through a CUDA ring (host planes uploaded by the Python publisher): to_rgb of
    zero-copy and copy frames against the reference, every matrix, range, dtype, layout."""
    failures, worst, checked = [], {}, 0
    for fmt in FORMATS:
        for w, h in ((38, 22), (1920, 1080)):
            planes = rgb_reference.random_planes(fmt, w, h, seed=w + len(fmt))
            key = key_for("rgb")
            with cuframes.Publisher(key, format=fmt, width=w, height=h, memory="cuda", policy="strict_wait") as pub:
                subs = [cuframes.Subscriber(key, name=m, mode=m) for m in ("zero_copy", "copy")]
                pub.wait_for_subscribers(2)
                pub.publish(planes)
                for sub in subs:
                    with sub:
                        f = sub.next(timeout=10)
                        if f is None:
                            failures.append(f"{fmt} {w}x{h} {sub.zero_copy}: no frame")
                            continue
                        # The frame's own bytes (read back through torch) feed the reference.
                        host = [cupy.asnumpy(cupy.from_dlpack(f.plane(i))) for i in range(f.num_planes)]
                        with f:
                            for matrix, rng, dtypes, layouts in combos(fmt, w):
                                want = rgb_reference.to_rgb(fmt, host, w, h, matrix, rng)
                                for dtype in dtypes:
                                    for layout in layouts:
                                        d = rgb_diff(f, want, dtype, layout, matrix, rng)
                                        checked += 1
                                        worst[dtype] = max(worst.get(dtype, 0.0), d)
                                        if d > TOLERANCE[dtype]:
                                            failures.append(f"{fmt} {w}x{h} {matrix} {rng} {dtype} {layout}: {d}")
    stats = f"{checked} conversions; worst difference " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items())
    if failures:
        print(f"FAIL: to_rgb on the GPU, every format: {'; '.join(failures[:5])} ({stats})")
        return False
    print(f"PASS: to_rgb on the GPU agrees with the NumPy reference, 7 formats x 2 sizes x copy/zero-copy ({stats})")
    return True


class DlpackOnly:
    """Hands out only DLPack (no __cuda_array_interface__), as JAX arrays do."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def publish_from_device():
    """Publisher.publish from CUDA memory: bytes in = bytes out, strided sources included."""
    failures, cases = [], 0
    w, h = 1920, 1080
    for fmt in ("nv12", "p010", "yuv420p"):
        planes = rgb_reference.random_planes(fmt, w, h, seed=11)
        key = key_for("pubdev")
        with cuframes.Publisher(key, format=fmt, width=w, height=h, memory="cuda", policy="strict_wait") as pub:
            with cuframes.Subscriber(key, mode="zero_copy") as sub:
                pub.wait_for_subscribers(1)
                side = torch.cuda.Stream()
                sources = []
                # torch: uint8 formats (uint16 tensors have few CUDA kernels in torch); CuPy: all.
                if planes[0].dtype == np.uint8:
                    dense = [torch.from_numpy(p).cuda() for p in planes]
                    sources.append(("torch dense", dense, None))
                    # Pitched: each row inside a wider allocation (a non-contiguous view).
                    padded = []
                    for t in dense:
                        big = torch.zeros((t.shape[0], t.shape[1] + 64), dtype=t.dtype, device="cuda")
                        big[:, : t.shape[1]] = t
                        padded.append(big[:, : t.shape[1]])
                    sources.append(("torch pitched view", padded, None))
                    sources.append(("DLPack only", [DlpackOnly(t) for t in dense], None))
                    # Written on a side stream and published on it: the copy must follow the write.
                    with torch.cuda.stream(side):
                        late = [torch.empty_like(t) for t in dense]
                        torch.cuda._sleep(50_000_000)  # keep the stream busy before the write
                        for dst, src in zip(late, dense):
                            dst.copy_(src)
                    sources.append(("torch on a side stream", late, side))
                sources.append(("cupy", [cupy.asarray(p) for p in planes], None))
                big = [cupy.zeros((p.shape[0], p.shape[1] + 32), dtype=p.dtype) for p in planes]
                for b, p in zip(big, planes):
                    b[:, : p.shape[1]] = cupy.asarray(p)
                sources.append(("cupy pitched view", [b[:, : p.shape[1]] for b, p in zip(big, planes)], None))
                for name, src, stream in sources:
                    cases += 1
                    pub.publish(src, stream=stream)
                    f = sub.next(timeout=10)
                    if f is None:
                        failures.append(f"{fmt} {name}: no frame")
                        continue
                    with f:
                        for i, want in enumerate(planes):
                            got = cupy.asnumpy(cupy.from_dlpack(f.plane(i))).reshape(want.shape)
                            if not np.array_equal(got, want):
                                failures.append(f"{fmt} {name}: plane {i} differs")
        # A host ring refuses device planes clearly.
    try:
        with cuframes.Publisher(key_for("hostring"), format="nv12", width=64, height=64) as pub:
            pub.publish([torch.zeros((64, 64), dtype=torch.uint8, device="cuda")] * 2)
        failures.append("a host ring took device planes")
    except TypeError as e:
        if "host memory" not in str(e):
            failures.append(f"unclear refusal: {e}")
    if failures:
        print(f"FAIL: Publisher.publish from device memory: {'; '.join(failures[:5])}")
        return False
    print(f"PASS: Publisher.publish from device memory: {cases} frames (torch dense and pitched, DLPack-only, a side stream; CuPy dense and pitched; NV12/P010/YUV420P 1080p) bit-exact")
    return True


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    ffmpeg, sample = sys.argv[1], sys.argv[2]
    results = [ffmpeg_zero_copy(ffmpeg, sample)]
    os.environ["CUFRAMES_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="cuframes-gpu-check.")
    for check in (every_format_to_rgb, publish_from_device):
        try:
            results.append(check())
        except Exception as e:  # a crash of one check is its FAIL line, the others still run
            print(f"FAIL: {check.__name__}: {type(e).__name__}: {e}")
            results.append(False)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
