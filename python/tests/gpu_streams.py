"""GPU check of the Python package's CUDA stream handling; run on a GPU
machine by scripts/gpu-check.sh (step "Python: stream= rule ..."), not by pytest:

    PYTHONPATH=<unpacked wheel> python3 gpu_streams.py            # every check
    PYTHONPATH=<unpacked wheel> python3 gpu_streams.py --check a  # one check, in this process

Needs torch (CUDA) and numpy; no FFmpeg, no CuPy. Every check runs in a child process of its
own with a time limit, so that a deadlock or a hang is a FAIL line (with the child's output and
its threads' tracebacks), never a hang of the script. Prints one PASS or FAIL line per check and
exits 1 if any failed (or if torch/CUDA is missing: SKIPPED line, exit 1).

a. Release after torch's default stream (handle 0): a STRICT_WAIT CUDA ring of 2 slots, a
   zero-copy subscriber holds frame k; a ~200 ms kernel then a copy of frame k's luma are queued
   on torch's default stream, and the frame is released with stream=<that stream> (also as the
   int 0, and through a to_rgb queued on it). Another thread meanwhile publishes the frame that
   reuses frame k's slot (STRICT_WAIT: it waits for the ACK). After synchronising, the copy must
   be frame k's bytes. Before the fix, 0 meant "no stream" and the ACK came at once: the slot
   was rewritten under the queued copy. A control releases after an idle side stream (ACK at
   once, as before the fix) and must see the rewrite, so that a PASS cannot be vacuous.
b. Publish from torch's default stream: per frame a slow kernel then a fill of the frame's value
   on the default stream, then publish(..., stream=<default stream> / 0) without a synchronize;
   the subscriber must see every frame with exactly the values written. Before the fix the copy
   ran on the ring's own stream, unordered with the fill.
c. Two threads calling to_rgb at once on frames of one subscriber (its first conversion, which
   loads the kernel, and then many): both finish (before the fix: a deadlock between the slot's
   mutex and the GIL) and agree with a conversion made on one thread.
d. Dropping a zero-copy CUDA frame whose release waits for the GPU (a ~1 s kernel queued before,
   plain and after a to_rgb behind it) lets another Python thread run meanwhile (before the fix
   the drop held the GIL through cuCtxSynchronize: the other thread stood still).
"""

import faulthandler
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

CHECKS = {
    "a": "release(stream=torch default stream) waits for the work queued on it (STRICT_WAIT slot not rewritten)",
    "b": "publish(stream=torch default stream) copies after the producer's work (every frame = what was written)",
    "c": "two threads calling to_rgb on one subscriber at once finish (no deadlock) and agree",
    "d": "dropping a zero-copy CUDA frame whose release waits for the GPU does not hold the GIL",
}
# Seconds a check's child may run (each is a few seconds on an H100; torch's import included).
LIMIT_S = 120


def key_for(tag):
    return f"gpustreams-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------------------------------------
# helpers (child side)


def setup():
    import numpy as np
    import torch

    import cuframes

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    torch.cuda.init()
    torch.cuda.synchronize()
    return np, torch, cuframes


def cycles_per_ms(torch):
    """torch.cuda._sleep's cycles per millisecond on this GPU (measured with events)."""
    torch.cuda._sleep(1_000_000)  # warm up (the kernel's first launch loads it)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 20_000_000
    start.record()
    torch.cuda._sleep(n)
    end.record()
    end.synchronize()
    return n / max(start.elapsed_time(end), 1e-3)


def nv12_tensors(torch, w, h, value):
    """Device NV12 planes filled with `value` (luma) and `value ^ 0x55` (chroma)."""
    y = torch.full((h, w), value, dtype=torch.uint8, device="cuda")
    uv = torch.full((h // 2, w), value ^ 0x55, dtype=torch.uint8, device="cuda")
    return [y, uv]


def frame_value(k):
    """A luma value per frame, different for consecutive frames and never 0."""
    return 16 + (k * 37) % 200


# ---------------------------------------------------------------------------------------------
# (a) release after torch's default stream


def release_case(np, torch, cuframes, per_ms, how, sleep_ms=200):
    """One frame held under STRICT_WAIT, read behind a slow kernel on torch's default stream,
    released per `how`; returns (ok, message)."""
    w, h, ring = 256, 128, 2
    key = key_for("a")
    side = torch.cuda.Stream()  # non-blocking: the publisher's copies do not wait for legacy work
    sources = [nv12_tensors(torch, w, h, frame_value(k)) for k in range(ring + 1)]
    torch.cuda.synchronize()
    with cuframes.Publisher(key, format="nv12", width=w, height=h, memory="cuda",
                            policy="strict_wait", ring_size=ring, ack_timeout=20.0) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            if not sub.zero_copy:
                return False, "zero copy not granted"
            if not pub.wait_for_subscribers(1, timeout=10):
                return False, "the subscriber did not join"
            # Fill the ring: frames 0 .. ring-1; frame `ring` needs frame 0's slot.
            for k in range(ring):
                pub.publish(sources[k], stream=side)
            f = sub.next(timeout=10)
            if f is None or f.seq != 1:
                return False, f"frame 0 not read ({f!r})"
            reused = {}

            def publish_next():
                try:
                    pub.publish(sources[ring], stream=side)  # waits for frame 0's ACK
                    reused["at"] = time.perf_counter()
                except Exception as e:  # reported below
                    reused["error"] = repr(e)

            dst = torch.empty((h, w), dtype=torch.uint8, device="cuda")
            default = torch.cuda.current_stream()
            if default.cuda_stream != 0:
                return False, f"torch's current stream is not its default stream (handle {default.cuda_stream})"
            rgb_ref = None
            if how == "to_rgb":
                # frame 0's RGB, converted while the frame is safely held (synchronised).
                rgb_ref = torch.from_dlpack(f.to_rgb()).clone()
                torch.cuda.synchronize()
            y = torch.from_dlpack(f.plane(0))  # an export: gone (del) before the release
            torch.cuda._sleep(int(per_ms * sleep_ms))  # on torch's default stream
            dst.copy_(y)  # queued behind the slow kernel, reads the slot
            del y
            rgb = None
            if how == "to_rgb":
                rgb = f.to_rgb(stream=default)  # also queued behind the slow kernel
            t = threading.Thread(target=publish_next, daemon=True)
            t.start()
            time.sleep(0.02)  # the publisher is waiting for the ACK now
            released_at = time.perf_counter()
            if how in ("torch stream", "to_rgb"):
                f.release(stream=default)
            elif how == "int 0":
                f.release(stream=0)
            elif how == "control":
                # An idle non-blocking stream: ACK at once, as stream=0 did before the fix.
                f.release(stream=torch.cuda.Stream())
            else:
                raise ValueError(how)
            t.join(30)
            if t.is_alive():
                return False, "the publisher never got frame 0's slot back (no ACK within 30 s)"
            if "error" in reused:
                return False, f"publish failed: {reused['error']}"
            torch.cuda.synchronize()
            got = dst.cpu().numpy()
            want = frame_value(0)
            values = sorted(set(np.unique(got).tolist()))
            waited_ms = (reused["at"] - released_at) * 1e3
            detail = f"slot reused {waited_ms:.0f} ms after the release (kernel {sleep_ms} ms); copy holds {values[:4]}, frame 0 is {want}, frame {ring} is {frame_value(ring)}"
            rewritten = values != [want]
            if how == "to_rgb" and not rewritten:
                diff = (torch.from_dlpack(rgb).int() - rgb_ref.int()).abs().max().item()
                detail += f"; to_rgb max diff vs frame 0's RGB {diff}"
                rewritten = diff != 0
            # The rest of the ring: read and release (the publisher is done).
            for _ in range(ring):
                g = sub.next(timeout=5)
                if g is not None:
                    g.release()
            if how == "control":
                if not rewritten:
                    return False, f"control: an ACK at once did not let the slot be rewritten, so this check cannot tell ({detail})"
                return True, f"control sees the rewrite ({detail})"
            if rewritten:
                return False, f"slot rewritten under queued work ({detail})"
            return True, detail


def check_a():
    np, torch, cuframes = setup()
    per_ms = cycles_per_ms(torch)
    failures, notes = [], []
    for how in ("torch stream", "int 0", "to_rgb", "control"):
        ok, msg = release_case(np, torch, cuframes, per_ms, how)
        (notes if ok else failures).append(f"[{how}] {msg}")
    if failures:
        return False, "; ".join(failures + notes)
    return True, "; ".join(notes)


# ---------------------------------------------------------------------------------------------
# (b) publish from torch's default stream


def check_b():
    np, torch, cuframes = setup()
    per_ms = cycles_per_ms(torch)
    w, h, frames = 640, 360, 40
    key = key_for("b")
    seen, errors = [], []
    done = threading.Event()

    def subscribe(sub):
        # Reads on a side stream of its own, copying each frame to the host before the release.
        s = torch.cuda.Stream()
        try:
            while len(seen) < frames:
                f = sub.next(timeout=20)
                if f is None:
                    errors.append(f"frame {len(seen)}: none within 20 s")
                    return
                with torch.cuda.stream(s):
                    y = torch.from_dlpack(f.plane(0)).cpu().numpy()
                    uv = torch.from_dlpack(f.plane(1)).cpu().numpy()
                f.release(stream=s)  # idle after the synchronous copies: ACKed at once
                seen.append((f.seq, np.unique(y).tolist(), np.unique(uv).tolist()))
        except Exception as e:
            errors.append(repr(e))
        finally:
            done.set()

    with cuframes.Publisher(key, format="nv12", width=w, height=h, memory="cuda",
                            policy="strict_wait", ring_size=4, ack_timeout=20.0) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            if not pub.wait_for_subscribers(1, timeout=10):
                return False, "the subscriber did not join"
            t = threading.Thread(target=subscribe, args=(sub,), daemon=True)
            t.start()
            y = torch.zeros((h, w), dtype=torch.uint8, device="cuda")
            uv = torch.zeros((h // 2, w), dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            spellings = [("current_stream()", lambda: torch.cuda.current_stream()),
                         ("int 0", lambda: 0),
                         ("default_stream()", lambda: torch.cuda.default_stream())]
            for k in range(frames):
                # All on torch's default stream, no synchronize: a slow kernel, then the write.
                torch.cuda._sleep(int(per_ms * 15))
                y.fill_(frame_value(k))
                uv.fill_(frame_value(k) ^ 0x55)
                pub.publish([y, uv], stream=spellings[k % 3][1]())
            done.wait(60)
    if errors:
        return False, f"subscriber: {errors[:3]}"
    wrong = [(seq, ys, uvs) for seq, ys, uvs in seen
             if ys != [frame_value(seq - 1)] or uvs != [frame_value(seq - 1) ^ 0x55]]
    if len(seen) != frames or wrong:
        return False, (f"{len(seen)}/{frames} frames seen, {len(wrong)} differ from what was written "
                       f"(first: seq, luma values, chroma values = {wrong[:3]}); spellings "
                       f"cycled {[s for s, _ in spellings]}")
    return True, f"{frames} frames (1 slow kernel + fill each, stream= {', '.join(s for s, _ in spellings)}) all equal what was written"


# ---------------------------------------------------------------------------------------------
# (c) two threads calling to_rgb at once


def check_c():
    _, torch, cuframes = setup()
    w, h = 1280, 720
    rounds, steady = 5, 40
    failures = []
    for r in range(rounds):
        key = key_for("c")
        with cuframes.Publisher(key, format="nv12", width=w, height=h, memory="cuda",
                                policy="strict_wait", ring_size=4, ack_timeout=30.0) as pub:
            with cuframes.Subscriber(key, mode="zero_copy") as sub:
                if not pub.wait_for_subscribers(1, timeout=10):
                    return False, "the subscriber did not join"
                pub.publish(nv12_tensors(torch, w, h, frame_value(1)))
                pub.publish(nv12_tensors(torch, w, h, frame_value(2)))
                frames = [sub.next(timeout=10), sub.next(timeout=10)]
                if None in frames:
                    return False, f"round {r}: frames not read"
                barrier = threading.Barrier(2)
                out, errs = [None, None], []

                def convert(i):
                    try:
                        barrier.wait(10)
                        # The subscriber's first conversion (kernel load) from both at once,
                        # then many more.
                        first = frames[i].to_rgb()
                        for _ in range(steady if r == 0 else 2):
                            frames[i].to_rgb(dtype="float32")
                        out[i] = torch.from_dlpack(first).cpu()
                    except Exception as e:
                        errs.append(f"thread {i}: {e!r}")

                threads = [threading.Thread(target=convert, args=(i,), daemon=True) for i in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                if any(t.is_alive() for t in threads):
                    return False, f"round {r}: to_rgb threads still running after 60 s (deadlock)"
                if errs:
                    return False, f"round {r}: {errs}"
                for i, f in enumerate(frames):
                    want = torch.from_dlpack(f.to_rgb()).cpu()  # one thread, the kernel loaded
                    if not torch.equal(out[i], want):
                        failures.append(f"round {r} thread {i}: RGB differs from a one-thread conversion")
                    f.release()
                if torch.equal(out[0], out[1]):
                    failures.append(f"round {r}: both threads got the same image for different frames")
    if failures:
        return False, "; ".join(failures[:4])
    return True, f"{rounds} fresh subscribers, two threads' first to_rgb at once (kernel load) plus {steady} more each: no deadlock, results equal single-thread conversions"


# ---------------------------------------------------------------------------------------------
# (d) drop without the GIL


def drop_case(torch, cuframes, per_ms, with_rgb, sleep_ms=1000):
    w, h = 640, 360
    key = key_for("d")
    with cuframes.Publisher(key, format="nv12", width=w, height=h, memory="cuda",
                            policy="strict_wait", ring_size=2, ack_timeout=20.0) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            if not sub.zero_copy:
                return False, "zero copy not granted"
            if not pub.wait_for_subscribers(1, timeout=10):
                return False, "the subscriber did not join"
            pub.publish(nv12_tensors(torch, w, h, 77))
            f = sub.next(timeout=10)
            if f is None:
                return False, "no frame"
            if with_rgb:
                # The subscriber's first to_rgb loads the kernel, which waits for the device:
                # done before the slow kernel, so that the drop is what waits for it.
                f.to_rgb()
            torch.cuda.synchronize()
            ticks, stop = [0], threading.Event()

            def ticker():  # pure Python: runs only while the GIL is free
                while not stop.is_set():
                    ticks[0] += 1
                    time.sleep(0.001)

            torch.cuda._sleep(int(per_ms * sleep_ms))  # the drop's cuCtxSynchronize waits for it
            rgb = f.to_rgb() if with_rgb else None  # queued behind the slow kernel
            t = threading.Thread(target=ticker, daemon=True)
            t.start()
            time.sleep(0.05)  # the ticker is running
            before = ticks[0]
            t0 = time.perf_counter()
            del f  # the last reference: Frame's drop releases it
            dropped_ms = (time.perf_counter() - t0) * 1e3
            during = ticks[0] - before
            stop.set()
            t.join(5)
            torch.cuda.synchronize()
            del rgb
            # The release was an ACK: the ring's slot comes back (STRICT_WAIT, 2 slots).
            for k in range(2):
                pub.publish(nv12_tensors(torch, w, h, k))
                g = sub.next(timeout=10)
                if g is None:
                    return False, "after the drop, the publisher got no slot back (no ACK)"
                g.release()
            detail = f"drop took {dropped_ms:.0f} ms (kernel {sleep_ms} ms); the other thread ticked {during} times meanwhile"
            if dropped_ms < sleep_ms * 0.3:
                return False, f"the drop did not wait for the GPU, so this check cannot tell ({detail})"
            # 1 ms ticks: hundreds while the GIL is free; 0-2 while the drop holds it.
            if during < 20:
                return False, f"the drop held the GIL ({detail})"
            return True, detail


def check_d():
    _, torch, cuframes = setup()
    per_ms = cycles_per_ms(torch)
    failures, notes = [], []
    for with_rgb in (False, True):
        name = "after to_rgb" if with_rgb else "plain"
        ok, msg = drop_case(torch, cuframes, per_ms, with_rgb)
        (notes if ok else failures).append(f"[{name}] {msg}")
    if failures:
        return False, "; ".join(failures + notes)
    return True, "; ".join(notes)


# ---------------------------------------------------------------------------------------------
# driver


def run_one(name):
    """In the child: run check `name`, print its PASS/FAIL line, exit 0/1."""
    # A hang prints every thread's traceback before the parent's limit kills this process.
    faulthandler.dump_traceback_later(LIMIT_S - 15, exit=True)
    check = globals()[f"check_{name}"]
    try:
        ok, msg = check()
    except Exception as e:
        import traceback

        traceback.print_exc()
        ok, msg = False, f"raised {type(e).__name__}: {e}"
    print(f"{'PASS' if ok else 'FAIL'}: ({name}) {CHECKS[name]}: {msg}", flush=True)
    sys.stderr.flush()
    os._exit(0 if ok else 1)


def leftovers(prefix):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        run_one(sys.argv[2])
    if len(sys.argv) != 1:
        print(__doc__)
        sys.exit(2)
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch.cuda.is_available() is False")
    except ImportError as e:
        print(f"SKIPPED: gpu_streams needs torch with CUDA ({e})")
        sys.exit(1)
    run_dir = tempfile.mkdtemp(prefix="cuframes-gpu-streams.")
    env = dict(os.environ, CUFRAMES_RUNTIME_DIR=run_dir, PYTHONFAULTHANDLER="1")
    results = []
    for name, what in CHECKS.items():
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--check", name],
                               env=env, capture_output=True, text=True, timeout=LIMIT_S)
            out, rc, hung = p.stdout + p.stderr, p.returncode, False
        except subprocess.TimeoutExpired as e:
            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

            out, rc, hung = text(e.stdout) + text(e.stderr), None, True
        took = time.perf_counter() - t0
        lines = [l for l in out.splitlines() if l.startswith(("PASS:", "FAIL:"))]
        if hung:
            print(f"FAIL: ({name}) {what}: no result within {LIMIT_S} s: a hang or deadlock; the child's last output:")
            print("    " + "\n    ".join(out.splitlines()[-40:]))
            results.append(False)
        elif lines and rc == 0 and all(l.startswith("PASS:") for l in lines):
            print(f"{lines[-1]} [{took:.1f} s]")
            results.append(True)
        else:
            if lines and lines[-1].startswith("FAIL:"):
                print(f"{lines[-1]} [{took:.1f} s]")
            elif "Timeout (" in out:
                print(f"FAIL: ({name}) {what}: hung for {LIMIT_S - 15} s (a deadlock: the threads' "
                      f"tracebacks at that moment follow) [{took:.1f} s]")
            else:
                print(f"FAIL: ({name}) {what}: the child exited with {rc} and no verdict (a crash; "
                      f"its output follows) [{took:.1f} s]")
            print("    " + "\n    ".join([l for l in out.splitlines() if not l.startswith(("PASS:", "FAIL:"))][-40:]))
            results.append(False)
    # Every publisher closed: no SHM object of ours may remain (a killed child leaves some:
    # removed here, and a FAIL).
    left = leftovers("cuframes-gpustreams-")
    for n in left:
        try:
            os.unlink(os.path.join("/dev/shm", n))
        except OSError:
            pass
    shutil.rmtree(run_dir, ignore_errors=True)
    if left:
        why = " (expected after a hung or crashed check)" if not all(results) else ""
        print(f"FAIL: SHM objects left behind{why}, removed now: {left[:5]}")
        results.append(False)
    print(f"gpu_streams: {sum(results)} of {len(results)} checks passed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
