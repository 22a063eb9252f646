#!/usr/bin/env python3
"""Run a command and report how the scheduler treated it (ff-readers-diag.sh).

    python3 proc_sched.py OUT_FILE command args...
    PROC_SCHED_HIST=1 python3 proc_sched.py OUT_FILE command args...   # and OUT_FILE.hist

Writes one line to OUT_FILE: "cpu_s runqueue_ms nivcsw threads", where runqueue_ms is the
time the command's threads spent runnable but not running (/proc/PID/task/TID/schedstat,
second field), summed over every thread it had. A process that loses time to others on its
CPUs shows it here, whatever its CPU time says. The command's stdin, stdout and stderr are
the caller's; its exit status is returned.

With PROC_SCHED_HIST=1 it also samples, every 2 ms, what each thread is doing (its state and,
when it sleeps, the system call it sleeps in: /proc/PID/task/TID/stat and syscall) and writes
per thread name its CPU time and where its samples fell into OUT_FILE.hist: a poor man's
off-CPU profile, for machines without perf or nsys. Thread names are the command's own
(FFmpeg names its threads dec0:0:h264, vf#0:0, ...; the CUDA driver's callback thread is
cuda-EvtHandlr or similar). The raw samples go to OUT_FILE.samples (time, thread, state,
its CPU time so far), so that one window of the run can be looked at alone:

    python3 proc_sched.py --window T0 T1 OUT_FILE.samples   # CLOCK_MONOTONIC seconds

prints the same per-thread lines for the samples taken between T0 and T1 (a steady-state
window, e.g. the one scripts/steady_fps.py writes), start-up and teardown left out, and

    python3 proc_sched.py --timeline T0 T1 OUT_FILE.samples

per quarter of that window, each thread's share of samples spent in an ioctl (the driver);
`--ends T1 OUT_FILE.samples` prints when each thread was last seen, relative to T1.
"""

import collections
import glob
import os
import resource
import subprocess
import sys
import time

# x86-64 system call numbers seen in a sleeping FFmpeg / CUDA process.
SYSCALLS = {
    "0": "read", "1": "write", "7": "poll", "16": "ioctl", "23": "select", "35": "nanosleep",
    "202": "futex", "230": "clock_nanosleep", "232": "epoll_wait", "270": "pselect6",
    "271": "ppoll", "281": "epoll_pwait", "45": "recvfrom", "47": "recvmsg", "24": "sched_yield",
}


def sample(pid, last):
    """Latest (run_ns, wait_ns) of each live thread of pid, into last."""
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                run_ns, wait_ns, _ = f.read().split()
        except (OSError, ValueError):
            continue  # the thread ended between the glob and the read
        last[path] = (int(run_ns), int(wait_ns))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def ioctl_target(task, fd_hex):
    """The device file behind fd (hex, as /proc/.../syscall prints it), without /dev/."""
    try:
        return os.readlink(f"{task}/fd/{int(fd_hex, 16)}").removeprefix("/dev/")
    except (OSError, ValueError):
        return "fd " + fd_hex


def sample_states(pid, names, hist, raw, last):
    """One sample of each thread's state into hist[name][what], and (time, task, name, what,
    its CPU ns so far: from `last`, which `sample` has just filled) into raw."""
    now = time.monotonic()
    for task in glob.glob(f"/proc/{pid}/task/*"):
        stat = read(task + "/stat")
        if stat is None:
            continue
        # comm may hold spaces and parentheses: it ends at the last ')'.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        state = stat[stat.rindex(")") + 2]
        names[task] = name
        sc = (read(task + "/syscall") or "?").split() if state != "R" else ["running"]
        nr = sc[0] if sc else "?"
        if nr == "running":  # it woke between the two reads
            what = "running or runnable"
        elif nr == "16" and len(sc) > 2:
            # Which ioctl: the device file it goes to and the request code (for NVIDIA's
            # driver the code names the call: 0x2a RM control, 0x2b alloc, ...).
            what = f"{state} ioctl {ioctl_target(task, sc[1])} {sc[2]}"
        else:
            what = f"{state} {SYSCALLS.get(nr, 'syscall ' + nr)}"
        hist[name][what] += 1
        run_ns = last.get(task + "/schedstat", (0, 0))[0]
        raw.append((now, os.path.basename(task), name, what, run_ns))


def summary_lines(cpu_ms, hist):
    """One line per thread name, by CPU time: its CPU ms and where its samples fell."""
    lines = []
    for name, ms in sorted(cpu_ms.items(), key=lambda kv: -kv[1]):
        n = sum(hist[name].values()) or 1
        top = ", ".join(f"{w} {100 * c / n:.0f}%" for w, c in hist[name].most_common(6))
        lines.append(f"    {name:<18} {ms:8.1f} ms CPU  {top}")
    return lines


def read_samples(path):
    """The samples of OUT_FILE.samples: (time, task, thread name, what, CPU ns so far)."""
    with open(path) as f:
        for line in f:
            t, task, name, what, run_ns = line.rstrip("\n").split("\t")
            yield float(t), task, name, what, int(run_ns)


def window(t0, t1, path):
    """The per-thread lines of the samples in path taken between t0 and t1."""
    hist = collections.defaultdict(collections.Counter)
    first, last, names = {}, {}, {}
    for t, task, name, what, run_ns in read_samples(path):
        if not t0 <= t <= t1:
            continue
        hist[name][what] += 1
        names[task] = name
        first.setdefault(task, run_ns)
        last[task] = run_ns
    cpu = collections.Counter()
    for task, name in names.items():
        cpu[name] += (last[task] - first[task]) / 1e6
    print(f"    ({t1 - t0:.2f} s window)")
    for line in summary_lines(cpu, hist)[:12]:
        print(line)


def timeline(t0, t1, path, slices=4):
    """Per slice of the window t0..t1: each thread's share of samples in an ioctl (the
    driver), for the threads that spent any: where in the run the driver held them."""
    counts = collections.defaultdict(lambda: [[0, 0] for _ in range(slices)])
    for t, _task, name, what, _run_ns in read_samples(path):
        if not t0 <= t <= t1:
            continue
        k = min(int((t - t0) / (t1 - t0) * slices), slices - 1)
        counts[name][k][0] += "ioctl" in what
        counts[name][k][1] += 1
    for name, per in sorted(counts.items()):
        if any(c for c, _ in per):
            shares = " ".join(f"{100 * c / max(n, 1):3.0f}%" for c, n in per)
            print(f"    {name:<18} in an ioctl, by quarter of the window: {shares}")


def ends(t1, path):
    """When each thread was last seen, relative to t1 (negative: before it), in one line:
    which threads (a muxer, the filter thread and with it a publisher, a reader) were gone
    before the window's end, and how long the rest took after it."""
    last = {}
    for t, _task, name, _what, _run_ns in read_samples(path):
        last[name] = max(last.get(name, 0.0), t)
    shown = sorted(last.items(), key=lambda kv: kv[1])
    print("    threads last seen (s after the window's end): "
          + ", ".join(f"{name} {t - t1:+.3f}" for name, t in shown if not name.startswith("av:")))


def main():
    if sys.argv[1] == "--ends":
        ends(float(sys.argv[2]), sys.argv[3])
        return 0
    if sys.argv[1] == "--window":
        window(float(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return 0
    if sys.argv[1] == "--timeline":
        timeline(float(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return 0
    out, cmd = sys.argv[1], sys.argv[2:]
    hist_on = os.environ.get("PROC_SCHED_HIST") == "1"
    proc = subprocess.Popen(cmd)
    last = {}
    names = {}
    hist = collections.defaultdict(collections.Counter)
    raw = []
    # Threads that end before the process are counted at their last sample: polled often
    # enough (10 ms, 2 ms with the histogram) to lose little.
    while proc.poll() is None:
        sample(proc.pid, last)
        if hist_on:
            sample_states(proc.pid, names, hist, raw, last)
        time.sleep(0.002 if hist_on else 0.01)
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    wait_ms = sum(w for _, w in last.values()) / 1e6
    with open(out, "w") as f:
        print(f"{r.ru_utime + r.ru_stime:.2f} {wait_ms:.1f} {r.ru_nivcsw} {len(last)}", file=f)
    if hist_on:
        cpu = collections.Counter()
        for path, (run_ns, _) in last.items():
            cpu[names.get(os.path.dirname(path), "?")] += run_ns / 1e6
        with open(out + ".hist", "w") as f:
            print("\n".join(summary_lines(cpu, hist)), file=f)
        with open(out + ".samples", "w") as f:
            for t, task, name, what, run_ns in raw:
                print(f"{t:.6f}\t{task}\t{name}\t{what}\t{run_ns}", file=f)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
