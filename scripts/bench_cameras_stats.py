"""The arithmetic of the many-cameras benchmark (scripts/bench_cameras.py), apart from the
processes it runs, so that scripts/tests/test_bench_cameras.py can check it on made-up data.

Times are wall-clock seconds (CLOCK_REALTIME, the clock the frames are stamped with); a
camera's progress is a list of (time, frames decoded) in order; a process's CPU samples are
(time, user + system clock ticks).
"""

import math
import os

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def interpolate(points, t):
    """The value at time t of a sorted list of (time, value), linear between points and
    clamped at both ends; nan for an empty list."""
    if not points:
        return math.nan
    if t <= points[0][0]:
        return float(points[0][1])
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else float(v1)
    return float(points[-1][1])


def steady_window(progress, lo=0.1, hi=0.9):
    """(t_lo, t_hi): the first progress blocks with at least `lo` and `hi` of the final frame
    count (scripts/steady_fps.py's window: neither start-up nor the end is counted); None
    when fewer than two blocks had frames or both shares fall on one block."""
    points = [p for p in progress if p[1] > 0]
    if len(points) < 2:
        return None
    final = points[-1][1]
    t_lo = next(t for t, f in points if f >= lo * final)
    t_hi = next(t for t, f in points if f >= hi * final)
    return (t_lo, t_hi) if t_hi > t_lo else None


def steady_fps(progress):
    """Frames per second of one camera over its steady window; nan without one."""
    w = steady_window(progress)
    if w is None:
        return math.nan
    return (interpolate(progress, w[1]) - interpolate(progress, w[0])) / (w[1] - w[0])


def aggregate_fps(progresses, min_overlap=0.2):
    """Decoded frames per second of all cameras together while every one of them is in its
    steady window: over [latest window start, earliest window end], the frames each camera
    decoded in it, summed, over its length. Returns (fps, window seconds, synchronised).
    When the windows overlap for less than `min_overlap` of the median window (the cameras
    did not run together), the sum of each camera's own steady rate is returned instead,
    with synchronised False."""
    windows = [steady_window(p) for p in progresses]
    if not windows or any(w is None for w in windows):
        return math.nan, 0.0, False
    start = max(w[0] for w in windows)
    end = min(w[1] for w in windows)
    lengths = sorted(w[1] - w[0] for w in windows)
    median = lengths[len(lengths) // 2]
    if end - start < min_overlap * median:
        return sum(steady_fps(p) for p in progresses), 0.0, False
    frames = sum(interpolate(p, end) - interpolate(p, start) for p in progresses)
    return frames / (end - start), end - start, True


def cpu_per_frame_us(cpu_samples, progress, window=None):
    """CPU time per frame (µs) of one process over a camera's steady window (or `window`):
    its user + system time at both ends (interpolated between samples) over the frames the
    camera decoded in between; nan when there is no window or no frame in it, or the samples
    do not cover the window."""
    w = window or steady_window(progress)
    if w is None or len(cpu_samples) < 2:
        return math.nan
    if cpu_samples[0][0] > w[0] or cpu_samples[-1][0] < w[1]:
        return math.nan
    frames = interpolate(progress, w[1]) - interpolate(progress, w[0])
    if frames <= 0:
        return math.nan
    ticks = interpolate(cpu_samples, w[1]) - interpolate(cpu_samples, w[0])
    return ticks / CLK_TCK / frames * 1e6


def proc_cpu_ticks(stat_text):
    """utime + stime (clock ticks, every thread of the process) from /proc/PID/stat's text;
    None for text that is not such a line. The command name (field 2) may hold spaces and
    parentheses, so the fields are counted after its last ')'."""
    end = stat_text.rfind(")")
    if end < 0:
        return None
    fields = stat_text[end + 1 :].split()
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    if len(fields) < 13:
        return None
    try:
        return int(fields[11]) + int(fields[12])
    except ValueError:
        return None


def schedstat_ns(text):
    """Nanoseconds on a CPU from a /proc/PID/task/TID/schedstat line (its first field); None
    for text that is not such a line."""
    try:
        return int(text.split()[0])
    except (IndexError, ValueError):
        return None


def cpu_per_frame_marks_us(marks):
    """CPU time per frame (µs) between two marks (frames out, CPU ns) taken when the camera
    passed 10 % and 90 % of its frames; nan without both or without frames between."""
    if len(marks) < 2 or marks[1][0] <= marks[0][0]:
        return math.nan
    return (marks[1][1] - marks[0][1]) / 1000 / (marks[1][0] - marks[0][0])


def percentile(sorted_values, p):
    """Nearest-rank percentile `p` (0..1) of an ascending list; nan for an empty one (the
    rank rule of core/examples/bench_common/stats.rs)."""
    if not sorted_values:
        return math.nan
    return sorted_values[round((len(sorted_values) - 1) * p)]


def median(values):
    """The median of the finite values; nan when there are none."""
    v = sorted(x for x in values if isinstance(x, (int, float)) and math.isfinite(x))
    if not v:
        return math.nan
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def parse_reader_line(line):
    """The fields of camera_reader's summary line (`camera_reader KEY k=v ...`) as a dict
    (numbers as floats, `nan` as nan, the rest as text, the key under "key"); None for
    another line."""
    parts = line.split()
    if len(parts) < 3 or parts[0] != "camera_reader":
        return None
    out = {"key": parts[1]}
    for item in parts[2:]:
        k, sep, v = item.partition("=")
        if not sep:
            return None
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


def read_latencies(path, limit=10_000_000):
    """The latencies (ns) of a camera_reader --latencies file, its first frame left out
    (stamped before the publisher's wait for its readers); at most `limit` lines are read and
    lines that are not two integers are skipped."""
    out = []
    with open(path, encoding="ascii", errors="replace") as f:
        for i, line in enumerate(f):
            if i >= limit:
                break
            parts = line.split()
            if len(parts) != 2:
                continue
            try:
                int(parts[0])  # the frame's seq: the line must be two integers
                ns = int(parts[1])
            except ValueError:
                continue
            if i > 0:
                out.append(ns)
    return out


def parse_smi_apps(text):
    """{pid: MiB} from `nvidia-smi --query-compute-apps=pid,used_memory
    --format=csv,noheader,nounits`; lines that are not two integers are skipped (a process
    the driver cannot account shows `[N/A]`)."""
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            continue
        try:
            out[int(parts[0])] = out.get(int(parts[0]), 0) + int(parts[1])
        except ValueError:
            continue
    return out


def parse_smi_used(text):
    """MiB used on the first GPU listed by `nvidia-smi --query-gpu=memory.used
    --format=csv,noheader,nounits`; nan when there is none."""
    for line in text.splitlines():
        try:
            return float(line.strip())
        except ValueError:
            continue
    return math.nan


def ratio(a, b):
    """a / b, nan where either is missing or b is 0."""
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (a, b)) or b == 0:
        return math.nan
    return a / b
