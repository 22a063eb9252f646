#!/usr/bin/env python3
"""Plots of the many-cameras benchmark against N, from its saved output.

    BENCH_CAMERAS_OUT=cameras.txt GPU_CHECK_ONLY=cameras bash .gpu/gpu-check.sh run   # GPU machine
    python3 scripts/plot_bench_cameras.py cameras.txt [--out docs/bench-cameras]        # here

Reads the `CAMERAS-JSON {...}` lines scripts/bench_cameras.py prints (one per N; any other
line is ignored, so the whole gpu-check log will do) and writes one PNG per figure:
PREFIX-fps.png (aggregate decoded fps with and without rings, and their ratio),
PREFIX-cpu.png (CPU per frame of the publisher, the decoder alone, the frame reader and the
recorder), PREFIX-latency.png (the readers' stamp-to-wake p50 and p99, at full speed and with
live cameras) and PREFIX-memory.png
(GPU memory per camera: the ring's nominal size, what its slots take, what the publisher holds
more than a decoder). Needs matplotlib (not needed on the GPU machine: plot where it is).
"""

import argparse
import json
import math
import sys

PREFIX = "CAMERAS-JSON "


def load(lines):
    """The rows of the benchmark's output, in order, the last one of each N kept (a rerun in
    the same log replaces an earlier one); lines that are not rows or hold bad JSON are
    skipped."""
    rows = {}
    for line in lines:
        at = line.find(PREFIX)
        if at < 0:
            continue
        try:
            row = json.loads(line[at + len(PREFIX):])
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("n"), int) and row["n"] > 0:
            rows[row["n"]] = row
    return [rows[n] for n in sorted(rows)]


def series(rows, field):
    """(N, value) of the rows whose field is a finite number."""
    out = []
    for r in rows:
        v = r.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((r["n"], float(v)))
    return out


# One PNG per figure: (file suffix, title, y label, [(field, label, scale)], the goal line, log
# scale: the reader's few µs beside the publisher's hundreds, p50 beside p99).
FIGURES = [
    ("fps", "Aggregate decoded frames per second", "frames per second",
     [("fps_base", "decode only", 1.0), ("fps_rings", "decode + both rings, reader + recorder", 1.0)], None, False),
    ("share", "Decoded fps with rings / without", "% of decode only",
     [("fps_share", "with rings", 100.0)], (97.0, "goal >= 97 %"), False),
    ("cpu", "CPU per frame (median camera)", "µs per frame",
     [("cpu_publisher_us", "publisher (decode + rings)", 1.0), ("cpu_decoder_us", "decoder alone", 1.0),
      ("cpu_reader_us", "zero-copy frame reader", 1.0), ("cpu_recorder_us", "packet recorder", 1.0)], None, True),
    ("latency", "Frame readers' stamp-to-wake latency (full speed, live)", "µs",
     [("lat_p50_us", "p50 (all readers)", 1.0), ("lat_p99_us", "p99 (all readers)", 1.0),
      ("lat_worst_camera_p99_us", "worst camera's p99", 1.0),
      ("live_lat_p50_us", "p50, live cameras", 1.0), ("live_lat_p99_us", "p99, live cameras", 1.0)], None, True),
    ("memory", "GPU memory per camera", "MiB",
     [("ring_nominal_mib", "ring_size x frame bytes", 1.0), ("ring_allocated_mib", "ring slots allocated", 1.0),
      ("mem_publisher_extra_mib", "publisher's extra over a decoder", 1.0),
      ("mem_reader_mib", "frame reader process", 1.0)], None, False),
]


def plot(rows, prefix):
    """Writes the PNGs; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    mode = rows[0].get("mode", "?") if rows else "?"
    for suffix, title, ylabel, fields, goal, log in FIGURES:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
        drawn = False
        for field, label, scale in fields:
            pts = series(rows, field)
            if pts:
                ax.plot([n for n, _ in pts], [v * scale for _, v in pts], marker="o", label=label)
                drawn = True
        if goal:
            ax.axhline(goal[0], color="grey", linestyle="--", linewidth=1, label=goal[1])
        if not drawn:
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"{title} ({mode})")
        ax.set_xlabel("cameras (N)")
        ax.set_ylabel(ylabel)
        ax.set_xticks([r["n"] for r in rows])
        if log and drawn:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if drawn or goal:
            ax.legend(fontsize="small")
        fig.tight_layout()
        path = f"{prefix}-{suffix}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def main(argv):
    a = argparse.ArgumentParser(description="Plots of the many-cameras benchmark's saved output.")
    a.add_argument("results", help="the benchmark's output (BENCH_CAMERAS_OUT, or a gpu-check log)")
    a.add_argument("--out", default="docs/bench-cameras", help="path prefix of the PNGs (default docs/bench-cameras)")
    args = a.parse_args(argv)
    with open(args.results, encoding="utf-8", errors="replace") as f:
        rows = load(f)
    if not rows:
        print(f"{args.results}: no CAMERAS-JSON line (is it the many-cameras benchmark's output?)", file=sys.stderr)
        return 1
    try:
        written = plot(rows, args.out)
    except ImportError:
        print("matplotlib is missing: pip install matplotlib", file=sys.stderr)
        return 1
    print("\n".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
