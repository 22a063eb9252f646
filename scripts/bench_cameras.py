#!/usr/bin/env python3
"""Many cameras on one GPU: N camera pipelines at once, each decoding a 1080p H.264 clip with
nvdec and publishing both rings, against the same N decodes without rings.

    scripts/bench-cameras.sh            # the wrapper: finds the binaries, picks the mode
    python3 bench_cameras.py --ffmpeg F --ffprobe P --reader R [--mode cuda|host] ...

Per N, in one run of this script:

- **decode only**: N `ffmpeg -hwaccel cuda ... -i clip -vf setpts=... -f null -` at once;
- **rings**: N cameras at once, each the documented one-decode-both-rings command (frames
  through `hwupload_cuframes`, policy strict_wait, packets through `-f cuframes_pkt`), with
  one zero-copy frame reader (core/examples/camera_reader) and one packet recorder
  (`ffmpeg -f cuframes_pkt -i KEY -c copy rec.mkv`) per camera.

Every decoder makes its CUDA context first (`-init_hw_device`) and then blocks opening its
input, a FIFO; once every decoder of the phase is there (and every reader has its context),
the clip is written into all FIFOs at once, so that the N decodes run together and no
process's start-up falls inside the measured window.

What is measured (docs/benchmarks.md, "Many cameras on one GPU", defines each figure):
aggregate decoded fps while every camera is in its steady window, CPU per frame of the
publisher, the decoder, the recorder (/proc/PID/stat utime + stime) and the frame reader (its
own getrusage), the readers' stamp-to-wake latency (each frame's pts is the wall clock just
before hwupload_cuframes: `setpts=RTCTIME/(TB*1000000)`), and GPU memory (nvidia-smi) per
process and in all. Lines starting with `CAMERAS-JSON ` carry each N's figures for
scripts/plot_bench_cameras.py. Exit status 1 when a process failed, a reader missed a frame
or a recording lacks a packet; goals missed are reported, not failed.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cameras_phase as phase  # noqa: E402
import bench_cameras_stats as st  # noqa: E402

# The goals of the many-cameras benchmark (issue "Scale: sixteen cameras on one GPU").
GOAL_FPS_SHARE = 0.97
GOAL_MEMORY_OVERHEAD = 0.05
GOAL_CPU_GROWTH = 1.2
GOAL_LATENCY_GROWTH = 1.5


def parse_args(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--ffmpeg", required=True)
    a.add_argument("--ffprobe", required=True)
    a.add_argument("--reader", required=True, help="the camera_reader binary")
    a.add_argument("--mode", choices=("cuda", "host"), default="cuda",
                   help="cuda: nvdec and CUDA rings; host: software decode and host rings (a dry run without a GPU)")
    a.add_argument("--counts", default="1,4,8,16,32", help="camera counts, in order")
    a.add_argument("--if-keeps-up", type=int, default=32,
                   help="counts from this one on run only if the previous count's decode-only rate would keep "
                        "that many cameras at the clip's rate and the time budget allows")
    a.add_argument("--size", default="1920x1080")
    a.add_argument("--frames", type=int, default=900, help="frames per camera")
    a.add_argument("--live-frames", type=int, default=150,
                   help="frames of the live phase (the rings read at the clip's rate, as from cameras); 0: none")
    a.add_argument("--rate", type=int, default=30, help="the clip's frame rate (a camera's real time)")
    a.add_argument("--ring-size", type=int, default=8)
    a.add_argument("--budget", type=float, default=330, help="seconds this script may take")
    a.add_argument("--timeout", type=float, default=120, help="seconds any wait of a phase may take")
    a.add_argument("--work", default=None, help="directory for clips and logs (default: a new temporary one)")
    a.add_argument("--keep", action="store_true", help="keep the work directory")
    a.add_argument("--key-prefix", default=f"bcam{os.getpid()}")
    args = a.parse_args(argv)
    try:
        args.counts = [int(n) for n in args.counts.split(",") if n]
        args.width, args.height = (int(v) for v in args.size.split("x"))
    except ValueError:
        a.error("--counts takes numbers separated by commas, --size WxH")
    if not args.counts or min(args.counts) < 1 or max(args.counts) > 64:
        a.error("--counts: 1 to 64 cameras")
    if not 1 <= args.ring_size <= 16:
        a.error("--ring-size: 1..16 slots")
    if args.frames < 20 or 0 < args.live_frames < 20:
        a.error("--frames, --live-frames: at least 20 (the steady window is 10 % to 90 % of them)")
    return args


def fmt(v, spec=".1f", unit=""):
    return "n/a" if not isinstance(v, (int, float)) or not math.isfinite(v) else f"{v:{spec}}{unit}"


def make_clip(args, path, frames):
    """The camera's stream: testsrc2 at the clip's rate, libx264 ultrafast, crf 30, a keyframe
    every 2 s, yuv420p (scripts/ffbench.sh's ffbench_clip), encoded on this machine's cores."""
    phase.check_run(
        [args.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi",
         "-i", f"testsrc2=s={args.width}x{args.height}:r={args.rate}", "-frames:v", str(frames),
         "-c:v", "libx264", "-preset", "ultrafast", "-crf", "30", "-g", str(2 * args.rate),
         "-pix_fmt", "yuv420p", path],
        "encoding the clip", timeout=args.timeout)


def compare(n, base, rings, live, args):
    """One N's row: the rings run against the decode-only run, and the live run's latency
    and CPU (nan without one)."""
    live = live or {}
    nan = float("nan")
    nominal = args.ring_size * args.width * args.height * 3 / 2 / 2**20
    r = {
        "n": n,
        "mode": args.mode,
        "rate": args.rate,
        "fps_base": base["agg_fps"],
        "fps_rings": rings["agg_fps"],
        "fps_share": st.ratio(rings["agg_fps"], base["agg_fps"]),
        "synchronised": base["synchronised"] and rings["synchronised"],
        "window_s": min(base["window_s"], rings["window_s"]),
        "cpu_decoder_us": base["cpu_pub_us"],
        "cpu_publisher_us": rings["cpu_pub_us"],
        "cpu_publisher_max_us": rings["cpu_pub_max_us"],
        "cpu_rings_us": rings["cpu_pub_us"] - base["cpu_pub_us"],
        "cpu_reader_us": rings["cpu_reader_us"],
        "cpu_reader_max_us": rings["cpu_reader_max_us"],
        "cpu_recorder_us": rings["cpu_recorder_us"],
        "cpu_exact_share": min(base["cpu_exact_share"], rings["cpu_exact_share"]),
        "lat_p50_us": rings["lat_p50_us"],
        "lat_p99_us": rings["lat_p99_us"],
        "lat_max_us": rings["lat_max_us"],
        "lat_worst_camera_p99_us": rings["lat_worst_p99_us"],
        "ring_nominal_mib": nominal,
        "ring_allocated_mib": rings["ring_allocated_mib"],
        "mem_publisher_extra_mib": rings["mem_pub_mib"] - base["mem_pub_mib"],
        "mem_reader_import_mib": rings["mem_reader_import_mib"],
        "mem_reader_mib": rings["mem_reader_mib"],
        "mem_per_camera_base_mib": base["mem_total_per_camera_mib"],
        "mem_per_camera_rings_mib": rings["mem_total_per_camera_mib"],
        "mem_per_process": rings["mem_per_process"] and base["mem_per_process"],
        "live_lat_p50_us": live.get("lat_p50_us", nan),
        "live_lat_p99_us": live.get("lat_p99_us", nan),
        "live_lat_worst_camera_p99_us": live.get("lat_worst_p99_us", nan),
        "live_cpu_publisher_us": live.get("cpu_pub_us", nan),
        "live_cpu_reader_us": live.get("cpu_reader_us", nan),
        "packet_ring_mib": rings["packet_ring_mib"],
        "wall_s": base["wall_s"] + rings["wall_s"] + live.get("wall_s", 0.0),
        "errors": base["errors"] + rings["errors"] + live.get("errors", []),
        "notes": base["notes"] + rings["notes"] + live.get("notes", []),
    }
    r["mem_overhead"] = st.ratio(r["mem_publisher_extra_mib"] - nominal, nominal)
    return r


def print_row(r):
    print(f"--- N = {r['n']} ({r['mode']}): {r['wall_s']:.1f} s")
    sync = "" if r["synchronised"] else " (windows did not overlap: sum of each camera's steady rate)"
    print(f"  aggregate decoded fps: decode only {fmt(r['fps_base'])}, with rings {fmt(r['fps_rings'])} "
          f"= {fmt(100 * r['fps_share'])} % (window {r['window_s']:.2f} s){sync}")
    print(f"  CPU per frame (median camera): decoder alone {fmt(r['cpu_decoder_us'])} µs, publisher "
          f"{fmt(r['cpu_publisher_us'])} µs (worst {fmt(r['cpu_publisher_max_us'])}; rings "
          f"{fmt(r['cpu_rings_us'])}), frame reader {fmt(r['cpu_reader_us'])} µs (worst "
          f"{fmt(r['cpu_reader_max_us'])}), recorder {fmt(r['cpu_recorder_us'])} µs (packet rings of "
          f"{r['packet_ring_mib']:.0f} MiB)")
    print(f"  stamp-to-wake latency (all readers' frames): p50 {fmt(r['lat_p50_us'])} µs, p99 "
          f"{fmt(r['lat_p99_us'])} µs, max {fmt(r['lat_max_us'])} µs; worst camera's p99 "
          f"{fmt(r['lat_worst_camera_p99_us'])} µs")
    if math.isfinite(r["live_lat_p50_us"]):
        print(f"  live cameras (each at {r['rate']} fps): latency p50 {fmt(r['live_lat_p50_us'])} µs, p99 "
              f"{fmt(r['live_lat_p99_us'])} µs (worst camera's p99 {fmt(r['live_lat_worst_camera_p99_us'])}); CPU "
              f"per frame: publisher {fmt(r['live_cpu_publisher_us'])} µs, frame reader {fmt(r['live_cpu_reader_us'])} µs")
    if r["mode"] == "cuda":
        how = "per process" if r["mem_per_process"] else "nvidia-smi lists no per-process memory here"
        print(f"  GPU memory per camera: ring nominal {fmt(r['ring_nominal_mib'])} MiB (ring_size x frame bytes), "
              f"allocated {fmt(r['ring_allocated_mib'])} MiB (slots rounded to the VMM granularity), publisher's "
              f"extra over a decoder {fmt(r['mem_publisher_extra_mib'])} MiB = overhead "
              f"{fmt(100 * r['mem_overhead'], '+.1f')} % ({how}); reader process {fmt(r['mem_reader_mib'])} MiB "
              f"(imported slots {fmt(r['mem_reader_import_mib'])}); all processes per camera: decode only "
              f"{fmt(r['mem_per_camera_base_mib'])} MiB, rings {fmt(r['mem_per_camera_rings_mib'])} MiB")
    for e in r["notes"]:
        print(f"  note: {e}")
    for e in r["errors"]:
        print(f"  ERROR: {e}")
    print("CAMERAS-JSON " + json.dumps(r, allow_nan=True), flush=True)


def summary(rows):
    """The table of every N against the first (N = 1), as docs/benchmarks.md shows it, and
    the goals."""
    if not rows:
        return
    one = rows[0]
    x1 = f"x N={one['n']}"
    print()
    print(f"| N | decode only fps | with rings fps | share | publisher CPU/frame | {x1} | decoder alone "
          f"| reader CPU/frame | {x1} | latency p50 / p99 | p99 {x1} | publisher's extra GPU memory | overhead |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {fmt(r['fps_base'])} | {fmt(r['fps_rings'])} | {fmt(100 * r['fps_share'])} % "
              f"| {fmt(r['cpu_publisher_us'])} µs | {fmt(st.ratio(r['cpu_publisher_us'], one['cpu_publisher_us']), '.2f')} "
              f"| {fmt(r['cpu_decoder_us'])} µs "
              f"| {fmt(r['cpu_reader_us'])} µs | {fmt(st.ratio(r['cpu_reader_us'], one['cpu_reader_us']), '.2f')} "
              f"| {fmt(r['lat_p50_us'])} / {fmt(r['lat_p99_us'])} µs "
              f"| {fmt(st.ratio(r['lat_p99_us'], one['lat_p99_us']), '.2f')} "
              f"| {fmt(r['mem_publisher_extra_mib'])} MiB | {fmt(100 * r['mem_overhead'], '+.1f')} % |")
    print()
    if any(math.isfinite(r["live_lat_p50_us"]) for r in rows):
        print(f"| N | live: latency p50 / p99 | p99 {x1} | publisher CPU/frame | {x1} | reader CPU/frame | {x1} |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['n']} | {fmt(r['live_lat_p50_us'])} / {fmt(r['live_lat_p99_us'])} µs "
                  f"| {fmt(st.ratio(r['live_lat_p99_us'], one['live_lat_p99_us']), '.2f')} "
                  f"| {fmt(r['live_cpu_publisher_us'])} µs "
                  f"| {fmt(st.ratio(r['live_cpu_publisher_us'], one['live_cpu_publisher_us']), '.2f')} "
                  f"| {fmt(r['live_cpu_reader_us'])} µs "
                  f"| {fmt(st.ratio(r['live_cpu_reader_us'], one['live_cpu_reader_us']), '.2f')} |")
        print()

    def verdict(name, ok):
        state = "n/a" if ok is None else ("met" if ok else "MISSED")
        print(f"goal {name}: {state}")

    def all_ok(values, test):
        vals = [v for v in values if isinstance(v, float) and math.isfinite(v)]
        return None if not vals else all(test(v) for v in vals)

    verdict(f"aggregate fps with rings >= {100 * GOAL_FPS_SHARE:.0f} % of decode only at every N",
            all_ok([r["fps_share"] for r in rows], lambda v: v >= GOAL_FPS_SHARE))
    verdict(f"ring memory overhead <= {100 * GOAL_MEMORY_OVERHEAD:.0f} %",
            all_ok([r["mem_overhead"] for r in rows], lambda v: v <= GOAL_MEMORY_OVERHEAD))
    for label, field in (("publisher", "cpu_publisher_us"), ("reader", "cpu_reader_us")):
        verdict(f"{label} CPU per frame within {GOAL_CPU_GROWTH}x of N = {one['n']}",
                all_ok([st.ratio(r[field], one[field]) for r in rows], lambda v: v <= GOAL_CPU_GROWTH))
    for field in ("lat_p50_us", "lat_p99_us", "live_lat_p50_us", "live_lat_p99_us"):
        run = "live cameras" if field.startswith("live") else "full speed"
        verdict(f"wake-up latency {field[-6:-3]} ({run}) within {GOAL_LATENCY_GROWTH}x of N = {one['n']}",
                all_ok([st.ratio(r[field], one[field]) for r in rows], lambda v: v <= GOAL_LATENCY_GROWTH))
    for label, field in (("publisher", "live_cpu_publisher_us"), ("reader", "live_cpu_reader_us")):
        verdict(f"{label} CPU per frame (live cameras) within {GOAL_CPU_GROWTH}x of N = {one['n']}",
                all_ok([st.ratio(r[field], one[field]) for r in rows], lambda v: v <= GOAL_CPU_GROWTH))


def main(argv):
    args = parse_args(argv)
    t_start = time.monotonic()
    work = args.work or tempfile.mkdtemp(prefix="cuframes-cameras.")
    os.makedirs(work, exist_ok=True)
    # The publishers' sockets go to a directory of this run's unless one is given, never to
    # the system's /run/cuframes (the phases clean up what they leave in it).
    own_runtime = None
    if not os.environ.get("CUFRAMES_RUNTIME_DIR"):
        own_runtime = tempfile.mkdtemp(prefix="cuframes-cameras-rt.")
        os.environ["CUFRAMES_RUNTIME_DIR"] = own_runtime
    rows = []
    failed = False
    try:
        clip = os.path.join(work, "clip.h264")
        make_clip(args, clip, args.frames)
        live_clip = os.path.join(work, "live.h264")
        if args.live_frames:
            make_clip(args, live_clip, args.live_frames)
        print(f"clip: {args.width}x{args.height}, {args.frames} frames at {args.rate} fps, "
              f"{os.path.getsize(clip)} bytes; live phase: {args.live_frames} frames at {args.rate} fps; "
              f"mode {args.mode}; ring {args.ring_size} slots", flush=True)
        for n in args.counts:
            if n >= args.if_keeps_up and rows:
                prev = rows[-1]
                need = n * args.rate
                elapsed = time.monotonic() - t_start
                estimate = prev["wall_s"] * n / prev["n"] * 1.2 + 10
                if not (math.isfinite(prev["fps_base"]) and prev["fps_base"] >= need):
                    print(f"--- N = {n}: not run: decode only at N = {prev['n']} gave {fmt(prev['fps_base'])} fps, "
                          f"less than {n} cameras x {args.rate} fps = {need} fps (the decoder does not keep up)")
                    continue
                if elapsed + estimate > args.budget:
                    print(f"--- N = {n}: not run: about {estimate:.0f} s more would pass the {args.budget:.0f} s "
                          f"budget ({elapsed:.0f} s spent)")
                    continue
                print(f"--- N = {n}: decode only at N = {prev['n']} gave {fmt(prev['fps_base'])} fps >= {need} fps "
                      f"({n} cameras in real time): running it (about {estimate:.0f} s)", flush=True)
            base = phase.run(args, clip, args.frames, n, rings=False, work=work)
            rings = phase.run(args, clip, args.frames, n, rings=True, work=work)
            live = phase.run(args, live_clip, args.live_frames, n, rings=True, work=work,
                             live=True) if args.live_frames else None
            row = compare(n, base, rings, live, args)
            print_row(row)
            rows.append(row)
            failed |= bool(row["errors"])
        summary(rows)
    except phase.BenchError as e:
        print(f"ERROR: {e}")
        failed = True
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
        if own_runtime:
            shutil.rmtree(own_runtime, ignore_errors=True)
    print(f"many-cameras benchmark: {time.monotonic() - t_start:.0f} s, "
          f"{'FAILED' if failed else 'every process ran cleanly'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
