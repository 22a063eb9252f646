#!/usr/bin/env python3
"""Where a whole decode run with `-f cuframes` readers spends its time outside the steady state.

    python3 ff_timeline.py FFMPEG CLIP [ROUNDS] [CONFIGS]

CONFIGS (comma-separated, default "decode,pub0,pub1,pub4,pub8"): `decode` is the decode alone
(nvdec, CUDA frames, null muxer); `pubN` the same into `hwupload_cuframes` with N `-f cuframes`
readers started first (STRICT_WAIT, zero copy, `wait_subscribers=N`), as a user times a batch
job. Every process's stderr line (`-loglevel verbose`) and the publisher's progress blocks are
stamped on arrival with one clock (CLOCK_MONOTONIC, seconds from the publisher's start), and
each process's exit with the time `waitpid` returned. Per run it prints:

- `outside`: the publisher's start to its exit (what `time ffmpeg ...` measures), and the ratio
  of decode only's `outside` in the same round to it (the decode-only run's rate share);
- `whole`: the first progress block with frames to the final block (steady_fps.py's whole
  run), as a ratio too;
- the phases: start (process start to the first block with frames), the ring's creation
  ("Publishing key"), the subscribers' readiness, the muxer's last block with frames before
  the final one, the filter's closing line (its teardown: "published N frames"), the final
  block, the exit; the readers' "Subscribed", "End of stream" and exits (first and last).

Extra publisher options for all pub runs: TIMELINE_PUB_OPTS (appended to the filter's), extra
reader options: TIMELINE_READER_OPTS (before -i), extra environment for readers:
TIMELINE_READER_ENV ("A=1 B=2"). TIMELINE_HOST=1: a dry run on a machine without a GPU
(software decode into a host ring).
"""

import os
import subprocess
import sys
import threading
import time


# TIMELINE_HOST=1: software decode into a host ring, for a dry run without a GPU.
HOST = os.environ.get("TIMELINE_HOST") == "1"


def stamp_lines(stream, sink, t0):
    for raw in iter(stream.readline, b""):
        sink.append((time.monotonic() - t0, raw.decode(errors="replace").rstrip()))


def run(ff, clip, readers, key, t_env):
    t0 = time.monotonic()
    rt = os.environ.get("CUFRAMES_RUNTIME_DIR", "")
    procs = []
    reader_env = dict(os.environ)
    for kv in os.environ.get("TIMELINE_READER_ENV", "").split():
        k, _, v = kv.partition("=")
        reader_env[k] = v
    for i in range(readers):
        cmd = [ff, "-hide_banner", "-nostdin", "-loglevel", "verbose", "-f", "cuframes",
               "-wait_publisher", "30", "-read_timeout", "30", "-name", f"t{i}"]
        cmd += os.environ.get("TIMELINE_READER_OPTS", "").split()
        cmd += ["-i", key, "-f", "null", "-"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=reader_env)
        lines = []
        th = threading.Thread(target=stamp_lines, args=(p.stderr, lines, t0), daemon=True)
        th.start()
        procs.append((p, lines, th))
    # The readers are waiting for the publisher (a user starts them first).
    time.sleep(1.0 if readers else 0)
    cmd = [ff, "-hide_banner", "-nostdin", "-loglevel", "verbose"]
    if not HOST:
        cmd += ["-hwaccel", "cuda", "-hwaccel_output_format", "cuda"]
    cmd += ["-i", clip]
    if key is not None and readers >= 0:
        vf = f"hwupload_cuframes=key={key}:ring_size=8" + (":memory=host" if HOST else "")
        if readers > 0:
            vf += f":policy=strict_wait:wait_subscribers={readers}:wait_timeout=30:ack_timeout=10"
        vf += os.environ.get("TIMELINE_PUB_OPTS", "")
        cmd += ["-vf", vf]
    cmd += ["-f", "null", "-progress", "pipe:1", "-stats_period", "0.05", "-nostats", "-"]
    ts = time.monotonic() - t0
    pub = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    plines, progress = [], []
    th = threading.Thread(target=stamp_lines, args=(pub.stderr, plines, t0), daemon=True)
    th.start()
    frame = 0
    for raw in iter(pub.stdout.readline, b""):
        now = time.monotonic() - t0
        k, _, v = raw.decode().strip().partition("=")
        if k == "frame":
            frame = int(v or 0)
        elif k == "progress":
            progress.append((now, frame))
    pub.wait()
    te = time.monotonic() - t0
    th.join()
    rexits = []
    for p, lines, th in procs:
        p.wait(timeout=60)
        rexits.append(time.monotonic() - t0)
        th.join()
    return ts, te, plines, progress, [(lines, x) for (_, lines, _), x in zip(procs, rexits)]


def first(lines, text):
    return next((t for t, line in lines if text in line), float("nan"))


def main():
    ff, clip = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    configs = (sys.argv[4] if len(sys.argv) > 4 else "decode,pub0,pub1,pub4,pub8").split(",")
    for r in range(1, rounds + 1):
        base = None
        for cfg in configs:
            readers = -1 if cfg == "decode" else int(cfg[3:])
            key = None if cfg == "decode" else f"timeline-{os.getpid()}-{r}-{cfg}"
            ts, te, plines, progress, rdr = run(ff, clip, readers, key, None)
            with_frames = [p for p in progress if p[1] > 0]
            final_frames = progress[-1][1] if progress else 0
            outside = te - ts
            whole = (with_frames[-1][0] - with_frames[0][0]) if len(with_frames) > 1 else float("nan")
            # The muxer's last block before fftools joins its threads (steady_fps.py's docstring).
            last_live = with_frames[-2][0] if len(with_frames) > 1 else float("nan")
            if base is None:
                base = (outside, whole, final_frames)
            rel = lambda t: t - ts
            print(f"round {r} {cfg:7s}: {final_frames} frames; outside {outside:.3f} s "
                  f"({100 * base[0] / outside:.1f} % of decode only's rate); whole run {whole:.3f} s "
                  f"({100 * base[1] / whole:.1f} %)")
            print(f"    start -> first frame block {rel(with_frames[0][0]) if with_frames else float('nan'):.3f}"
                  f"; ring created {rel(first(plines, 'Publishing key')):.3f}"
                  f"; subscribers ready {rel(first(plines, 'subscribers ready')):.3f}"
                  f"; last live block {rel(last_live):.3f}"
                  f"; filter closed {rel(first(plines, 'published ')):.3f}"
                  f"; final block {rel(progress[-1][0]) if progress else float('nan'):.3f}"
                  f"; exit {outside:.3f}")
            waited = [line for _, line in plines if "waited for" in line]
            for w in waited:
                print("    " + w[w.find("waited for"):])
            if rdr:
                sub = [first(lines, "Subscribed to") for lines, _ in rdr]
                eos = [first(lines, "End of stream") for lines, _ in rdr]
                closed = [first(lines, "frames out") for lines, _ in rdr]
                ex = [x for _, x in rdr]
                fmt = lambda xs: f"{min(xs) - ts:.3f}..{max(xs) - ts:.3f}"
                print(f"    readers: subscribed {fmt(sub)}; end of stream {fmt(eos)}; "
                      f"closed {fmt(closed)}; exited {fmt(ex)}")
            for _, line in plines:
                if "rror" in line and "decode errors" not in line:
                    print("    publisher: " + line)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
