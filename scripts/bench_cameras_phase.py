"""One phase of the many-cameras benchmark (scripts/bench_cameras.py): N cameras, with or
without rings, started, released together through their input FIFOs, measured, checked and
cleaned up (every process killed and reaped, every FIFO, log, socket and /dev/shm object of
the phase removed, also when something fails)."""

import errno
import glob
import math
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time

import bench_cameras_stats as st

# How often the CPU of every process is read, and ffmpeg's progress period (seconds).
CPU_PERIOD = 0.02
PROGRESS_PERIOD = "0.02"
# GPU memory is sampled "during" a phase once every camera has decoded this share of its
# frames (the rings exist then and nothing has ended yet).
MEMORY_SAMPLE_AT = 0.3


class BenchError(Exception):
    """A failure that stops the benchmark (a missing tool, a clip that cannot be made)."""


def tail(path, lines=3):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def check_run(cmd, what, timeout):
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"{what}: {e}") from e
    if r.returncode != 0:
        raise BenchError(f"{what}: exit status {r.returncode}: {r.stderr.decode(errors='replace').strip()[-400:]}")


def smi(*query):
    """nvidia-smi's CSV answer to `query`, or None when it cannot answer."""
    try:
        r = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.decode(errors="replace") if r.returncode == 0 else None


def memory_sample():
    """(MiB used on GPU 0, {pid: MiB}) now."""
    used = st.parse_smi_used(smi("--query-gpu=memory.used", "-i", "0") or "")
    return used, st.parse_smi_apps(smi("--query-compute-apps=pid,used_memory") or "")


class Camera:
    """One camera's processes, files and measurements."""

    def __init__(self, i, key, d):
        self.i, self.key, self.dir = i, key, d
        self.fifo = os.path.join(d, "in.h264")
        self.latencies = os.path.join(d, "latencies.txt")
        self.recording = os.path.join(d, "rec.mkv")
        self.publisher = self.reader = self.recorder = None
        self.progress = []  # (wall-clock stamp of the last frame out, frames out) per block
        self.frames = 0
        self.stamp = None
        self.reader_lines = []
        self.cpu = {"publisher": [], "recorder": []}  # (time, ticks) every CPU_PERIOD
        self.marks = {"publisher": [], "recorder": []}  # (frames out, CPU ns) at 10 % and 90 %

    def log(self, role):
        return os.path.join(self.dir, f"{role}.log")

    def procs(self):
        return [p for p in (self.publisher, self.reader, self.recorder) if p is not None]


class Pump(threading.Thread):
    """Reads every publisher's `-progress` output and every reader's lines, on one thread.

    A progress block's time is its `out_time_us`: the pts of the last frame out, which the
    stamping filter made the wall clock (CLOCK_REALTIME, µs) at which that frame passed it.
    Each (time, frames) pair is thus exact whenever the block is read; a time taken on arrival
    (scripts/steady_fps.py) would move with this thread's scheduling, and with many processes
    on the CPUs blocks arrive in bursts."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sel = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.pending = {}
        self.stop = threading.Event()

    def add(self, pipe, cam, kind):
        with self.lock:
            self.sel.register(pipe, selectors.EVENT_READ, (cam, kind))
            self.pending[pipe] = b""

    def run(self):
        # Until every pipe reached its end (each child exited) or `stop`.
        while not self.stop.is_set():
            with self.lock:
                if not self.sel.get_map():
                    return
                events = self.sel.select(timeout=0.05)
            for key, _ in events:
                chunk = os.read(key.fileobj.fileno(), 65536)
                cam, kind = key.data
                if not chunk:
                    with self.lock:
                        self.sel.unregister(key.fileobj)
                    continue
                buf = self.pending[key.fileobj] + chunk
                *lines, self.pending[key.fileobj] = buf.split(b"\n")
                for line in lines:
                    if kind == "reader":
                        cam.reader_lines.append(line.decode(errors="replace"))
                        continue
                    k, _, v = line.strip().partition(b"=")
                    try:
                        if k == b"frame":
                            cam.frames = int(v or 0)
                        elif k == b"out_time_us":
                            cam.stamp = int(v) / 1e6
                    except ValueError:  # N/A before the first frame
                        continue
                    if k == b"progress" and cam.frames > 0 and cam.stamp is not None:
                        cam.progress.append((cam.stamp, cam.frames))


def threads_cpu_ns(pid):
    """CPU time (ns) of every thread of `pid` now (the sum of their schedstat runtimes:
    exact, where /proc/PID/stat counts 10 ms ticks); None when the kernel does not say."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                ns = st.schedstat_ns(f.read())
        except OSError:
            continue  # a thread that just ended
        if ns is None:
            return None
        total += ns
    return total


class CpuSampler(threading.Thread):
    """Reads utime + stime of the publishers (decoders) and recorders every CPU_PERIOD, with
    the wall clock the progress blocks' stamps are in; and, once a camera has passed 10 % and
    again 90 % of its frames, the exact CPU time of both processes' threads with the frames
    out at that moment (two reads of every thread per process: cheap enough to leave the
    CPUs to the cameras, exact where the ticks carry ±10 ms)."""

    def __init__(self, cams, frames):
        super().__init__(daemon=True)
        self.cams = cams
        self.frames = frames
        self.stop = threading.Event()

    def mark(self, c):
        taken = len(c.marks["publisher"])
        if taken >= 2 or c.frames < (0.1, 0.9)[taken] * self.frames:
            return
        frames = c.frames
        for role, p in (("publisher", c.publisher), ("recorder", c.recorder)):
            # None where there is no such process or the kernel does not say: the figure then
            # comes from the ticks.
            c.marks[role].append((frames, threads_cpu_ns(p.pid) if p is not None else None))

    def run(self):
        while not self.stop.is_set():
            for c in self.cams:
                if c.publisher is not None:
                    self.mark(c)
                for role, p in (("publisher", c.publisher), ("recorder", c.recorder)):
                    if p is None:
                        continue
                    try:
                        with open(f"/proc/{p.pid}/stat", encoding="ascii", errors="replace") as f:
                            ticks = st.proc_cpu_ticks(f.read())
                    except OSError:
                        continue
                    if ticks is not None:
                        c.cpu[role].append((time.time(), ticks))
            self.stop.wait(CPU_PERIOD)


def packet_ring_bytes(clip_bytes, n, shm_free):
    """The data area of each camera's packet ring: twice the clip (the ring never waits for
    its reader, so a recorder that falls behind still finds every packet), at least the
    library's 8 MiB, at most 64 MiB, and, as /dev/shm holds the N rings, a power of two no
    larger than half of its free space over N (a container's /dev/shm may be small); never
    below 4 MiB."""
    want = max(8 << 20, min(64 << 20, 1 << (2 * clip_bytes - 1).bit_length()))
    room = shm_free // 2 // max(1, n)
    fit = 1 << (room.bit_length() - 1) if room > 0 else 0
    return max(4 << 20, min(want, fit))


def publisher_cmd(args, c, rings, packet_data, frames=None, live=False):
    """The camera's decode: nvdec (or software in host mode) of its FIFO, each frame stamped
    with the wall clock and, with rings, published (frames and packets) under its key."""
    cmd = [args.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "info", "-nostats",
           "-progress", "pipe:1", "-stats_period", PROGRESS_PERIOD]
    if args.mode == "cuda":
        # The device is made while the options are read, before the input is opened: the
        # context exists when the process blocks on its FIFO.
        cmd += ["-init_hw_device", "cuda=bench:0", "-hwaccel", "cuda", "-hwaccel_device", "bench",
                "-hwaccel_output_format", "cuda"]
    # A raw H.264 stream has no timestamps: the camera's rate gives them (the packet ring and
    # the recordings carry them).
    cmd += ["-f", "h264", "-framerate", str(args.rate), "-fflags", "+genpts"]
    if live:
        # A live camera: packets at the stream's rate, from the first one.
        cmd += ["-readrate", "1", "-readrate_initial_burst", "0"]
    cmd += ["-i", c.fifo]
    stamp = ("" if args.mode == "cuda" else "format=nv12,") + "setpts=RTCTIME/(TB*1000000)"
    vf = stamp
    if rings:
        cmd += ["-map", "0:v:0", "-c", "copy", "-f", "cuframes_pkt", "-ring_slots", str(min(1024, (frames or args.frames) + 64)),
                "-data_size", str(packet_data), "-wait_subscribers", "1", "-wait_timeout", str(int(args.timeout)), c.key]
        # Each waits for its own ring's reader: the muxer for the recorder, the filter for the
        # frame reader.
        opts = [f"key={c.key}", f"ring_size={args.ring_size}", "policy=strict_wait", "wait_subscribers=1",
                f"wait_timeout={int(args.timeout)}", "ack_timeout=10"]
        if args.mode == "host":
            opts.append("memory=host")
        vf += ",hwupload_cuframes=" + ":".join(opts)
    # -enc_time_base: the null output keeps the stamps' time base (the codec's 1/rate would
    # merge frames stamped within one frame interval).
    return cmd + ["-map", "0:v:0", "-vf", vf, "-enc_time_base:v", "filter", "-f", "null", "-"]


def open_fifos(cams, deadline):
    """Opens every camera's FIFO for writing as soon as its decoder opened it for reading
    (ENXIO until then): every decoder has its context and waits for its first byte."""
    fds = {}
    try:
        while len(fds) < len(cams):
            for c in cams:
                if c.i in fds:
                    continue
                if c.publisher.poll() is not None:
                    raise BenchError(f"camera {c.i}: the decoder exited ({c.publisher.returncode}) before "
                                     f"opening its input: {tail(c.log('publisher'))}")
                try:
                    fds[c.i] = os.open(c.fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:
                    if e.errno != errno.ENXIO:
                        raise
            if len(fds) < len(cams):
                if time.monotonic() > deadline:
                    raise BenchError(f"{len(cams) - len(fds)} decoders did not open their input in time")
                time.sleep(0.02)
        for fd in fds.values():
            os.set_blocking(fd, True)
        return fds
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise


def wait_ready(cams, deadline):
    """Waits for every reader's `ready` (its CUDA context made)."""
    for c in cams:
        while "ready" not in c.reader_lines:
            if c.reader.poll() is not None and "ready" not in c.reader_lines:
                raise BenchError(f"camera {c.i}: the reader exited ({c.reader.returncode}): {tail(c.log('reader'))}")
            if time.monotonic() > deadline:
                raise BenchError(f"camera {c.i}: the reader was not ready in time")
            time.sleep(0.01)


def feed(fd, data, errors, i):
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 20]):]
    except OSError as e:
        errors.append(f"camera {i}: writing the clip into its input: {e}")
    finally:
        os.close(fd)


def run(args, clip, frames, n, rings, work, live=False):
    """Runs one phase of N cameras on `clip` (`frames` frames): decode only, or with rings;
    `live` reads the input at the clip's rate, as from a camera. Returns its figures and the
    list of what went wrong."""
    name = "live" if live else ("rings" if rings else "decode")
    d = tempfile.mkdtemp(prefix=f"{name}-{n}-", dir=work)
    cams = []
    for i in range(n):
        os.makedirs(os.path.join(d, f"cam{i}"))
        cams.append(Camera(i, f"{args.key_prefix}-{name[0]}{n}-{i}", os.path.join(d, f"cam{i}")))
        os.mkfifo(cams[-1].fifo, 0o600)
    errors, notes, logs = [], [], []
    cuda = args.mode == "cuda"
    # GPU memory is sampled in CUDA mode (a test samples it in host mode with a stand-in
    # nvidia-smi: the sampling and its trigger are the same).
    gpu_memory = getattr(args, "gpu_memory", cuda)
    shm = os.statvfs("/dev/shm")
    packet_data = packet_ring_bytes(os.path.getsize(clip), n, shm.f_bavail * shm.f_frsize)
    pump, cpu = Pump(), CpuSampler(cams, frames)
    mem = {}
    t0 = time.monotonic()
    deadline = t0 + args.timeout

    def start(cmd, log, out):
        f = open(log, "w")
        logs.append(f)
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=f)

    try:
        if gpu_memory:
            mem["before"] = memory_sample()
        if rings:
            for c in cams:
                c.reader = start([args.reader, c.key, "--wait-publisher", str(args.timeout), "--read-timeout",
                                  str(args.timeout), "--cuda-device", "0" if cuda else "-1", "--name", f"cam{c.i}",
                                  "--latencies", c.latencies], c.log("reader"), subprocess.PIPE)
                pump.add(c.reader.stdout, c, "reader")
                c.recorder = start([args.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "warning", "-f",
                                    "cuframes_pkt", "-wait_publisher", str(args.timeout), "-read_timeout",
                                    str(args.timeout), "-name", f"rec{c.i}", "-i", c.key, "-c", "copy", "-y",
                                    c.recording], c.log("recorder"), subprocess.DEVNULL)
        for c in cams:
            c.publisher = start(publisher_cmd(args, c, rings, packet_data, frames, live), c.log("publisher"), subprocess.PIPE)
            pump.add(c.publisher.stdout, c, "progress")
        pump.start()
        cpu.start()
        fds = open_fifos(cams, deadline)
        try:
            if rings:
                wait_ready(cams, deadline)
            if gpu_memory:
                mem["barrier"] = memory_sample()
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        with open(clip, "rb") as f:
            data = f.read()
        feeders = [threading.Thread(target=feed, args=(fds[c.i], data, errors, c.i), daemon=True) for c in cams]
        for t in feeders:
            t.start()
        deadline = time.monotonic() + args.timeout  # for the decodes and every process's end
        while gpu_memory and "during" not in mem and time.monotonic() < deadline:
            if all(c.frames >= MEMORY_SAMPLE_AT * frames for c in cams):
                mem["during"] = memory_sample()
            elif any(c.publisher.poll() is not None for c in cams):
                notes.append("a camera ended before GPU memory was sampled during the run: no memory figures")
                break
            else:
                time.sleep(0.01)
        for role in ("publisher", "reader", "recorder"):
            for c in cams:
                p = getattr(c, role)
                if p is None:
                    continue
                try:
                    rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    errors.append(f"camera {c.i}: the {role} did not end within {args.timeout:.0f} s (killed)")
                    continue
                if rc != 0:
                    errors.append(f"camera {c.i}: the {role} failed (exit status {rc}): {tail(c.log(role))}")
        for t in feeders:
            t.join(timeout=5)
    except (BenchError, OSError) as e:
        errors.append(str(e))
    finally:
        cpu.stop.set()
        if cpu.is_alive():
            cpu.join(timeout=1)
        for c in cams:
            for p in c.procs():
                if p.poll() is None:
                    p.kill()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    errors.append(f"camera {c.i}: pid {p.pid} did not die")
        # The pipes reach EOF once every child is gone; the pump drains them first.
        if pump.is_alive():
            pump.join(timeout=5)
        pump.stop.set()
        for f in logs:
            f.close()
        for c in cams:
            for p in c.procs():
                if p.stdout:
                    p.stdout.close()
    wall = time.monotonic() - t0
    try:
        result = measure(args, cams, frames, rings, mem, errors)
        result["wall_s"] = wall
        result["notes"] = notes
        result["packet_ring_mib"] = packet_data / 2**20 if rings else 0.0
        if errors:
            print(f"phase N={n} {name}: logs of camera 0: "
                  + " || ".join(f"{r}: {tail(cams[0].log(r), 2)}" for r in ("publisher", "reader", "recorder")),
                  flush=True)
        return result
    finally:
        cleanup(args, cams, d)


def recorded_packets(args, path):
    try:
        r = subprocess.run([args.ffprobe, "-v", "error", "-count_packets", "-select_streams", "v:0",
                            "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", path],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        return int(r.stdout.decode().strip().splitlines()[0].strip(","))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return -1


def measure(args, cams, frames, rings, mem, errors):
    """The phase's figures from what its processes left."""
    out = {"errors": errors}
    fps, window, sync = st.aggregate_fps([c.progress for c in cams])
    out.update(agg_fps=fps, window_s=window, synchronised=sync)
    for c in cams:
        if c.frames != frames:
            errors.append(f"camera {c.i}: {c.frames} frames decoded of {frames}")
    def cpu(c, role):
        """The exact figure between the marks, else the ticks' over the steady window."""
        exact = st.cpu_per_frame_marks_us([m for m in c.marks[role] if m[1] is not None])
        return exact if math.isfinite(exact) else st.cpu_per_frame_us(c.cpu[role], c.progress)

    pub = [cpu(c, "publisher") for c in cams]
    exact = [math.isfinite(st.cpu_per_frame_marks_us([m for m in c.marks["publisher"] if m[1] is not None]))
             for c in cams]
    out["cpu_exact_share"] = sum(exact) / len(exact) if exact else 0.0
    out["cpu_pub_us"], out["cpu_pub_max_us"] = st.median(pub), max(pub, default=float("nan"))
    out["cpu_recorder_us"] = st.median(cpu(c, "recorder") for c in cams)
    lines = [next((st.parse_reader_line(x) for x in c.reader_lines if x.startswith("camera_reader ")), None)
             for c in cams] if rings else []
    lat, worst_p99, granted = [], [], []
    for c, r in zip(cams, lines):
        if r is None:
            errors.append(f"camera {c.i}: the reader printed no summary")
            continue
        if r.get("frames") != frames or r.get("missed") != 0:
            errors.append(f"camera {c.i}: the reader saw {r.get('frames')} frames of {frames} "
                          f"({r.get('missed')} missed)")
        # The first 10 % of each reader's frames are start-up: the first frame waited for the
        # filter's subscribers, and the input's probe reads a burst of packets at once.
        mine = st.read_latencies(c.latencies) if os.path.exists(c.latencies) else []
        mine = sorted(mine[len(mine) // 10:])
        lat += mine
        worst_p99.append(st.percentile(mine, 0.99) / 1000)
        gran = r.get("granularity") or 4096.0
        fb = r.get("frame_bytes", float("nan"))
        granted.append(args.ring_size * math.ceil(fb / gran) * gran / 2**20 if math.isfinite(fb) else float("nan"))
        with open(c.log("publisher"), errors="replace") as f:
            log = f.read()
        if args.mode == "cuda" and "cuframes host copies: 0" not in log:
            errors.append(f"camera {c.i}: the publisher made host copies (or did not say)")
        if "publishing anyway" in log:
            # The filter gave up waiting for its 2 subscribers (the recorder and the reader):
            # its first frames went out before the reader was there, and the wait cost the
            # phase its wait_timeout.
            errors.append(f"camera {c.i}: the filter did not see its recorder and reader in time: {tail(c.log('publisher'))}")
        packets = recorded_packets(args, c.recording)
        if packets != frames:
            errors.append(f"camera {c.i}: the recording has {packets} packets of {frames}")
    lat.sort()
    out.update(
        cpu_reader_us=st.median(r.get("cpu_us_per_frame") for r in lines if r),
        cpu_reader_max_us=max((r.get("cpu_us_per_frame", float("nan")) for r in lines if r), default=float("nan")),
        lat_p50_us=st.percentile(lat, 0.5) / 1000, lat_p99_us=st.percentile(lat, 0.99) / 1000,
        lat_max_us=st.percentile(lat, 1.0) / 1000, lat_worst_p99_us=max(worst_p99, default=float("nan")),
        ring_allocated_mib=st.median(granted),
    )
    out.update(memory_figures(cams, mem))
    return out


def memory_figures(cams, mem):
    """GPU memory per process (publisher or decoder, reader) during the phase, and in all."""
    nan = float("nan")
    out = {"mem_pub_mib": nan, "mem_reader_mib": nan, "mem_reader_import_mib": nan,
           "mem_total_per_camera_mib": nan, "mem_per_process": False}
    if "during" not in mem or "before" not in mem:
        return out
    used, apps = mem["during"]
    out["mem_total_per_camera_mib"] = (used - mem["before"][0]) / len(cams)
    pubs = [apps[c.publisher.pid] for c in cams if c.publisher.pid in apps]
    out["mem_per_process"] = bool(pubs)
    out["mem_pub_mib"] = st.median(pubs)
    readers = [c.reader.pid for c in cams if c.reader is not None and c.reader.pid in apps]
    if readers:
        out["mem_reader_mib"] = st.median(apps[p] for p in readers)
        at_barrier = mem.get("barrier", (nan, {}))[1]
        out["mem_reader_import_mib"] = st.median(apps[p] - at_barrier[p] for p in readers if p in at_barrier)
    return out


def cleanup(args, cams, d):
    """Removes the phase's files and whatever of its keys is left in the runtime directory
    and /dev/shm (nothing, when every process ended cleanly)."""
    runtime = os.environ.get("CUFRAMES_RUNTIME_DIR", "")
    for c in cams:
        for path in glob.glob(f"/dev/shm/cuframes-{c.key}*") + (
                glob.glob(os.path.join(runtime, f"{c.key}*")) if runtime else []):
            try:
                os.unlink(path)
            except OSError:
                pass
    if not args.keep:
        shutil.rmtree(d, ignore_errors=True)

