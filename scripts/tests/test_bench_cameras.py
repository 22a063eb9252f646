"""The many-cameras benchmark's arithmetic and parsers (scripts/bench_cameras_stats.py), its
memory figures, its plots' input, and its clean failure when a process of a camera fails."""

import glob
import json
import math
import os
import subprocess
import sys
import time
import types

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROOT = os.path.join(SCRIPTS, "..")
sys.path.insert(0, SCRIPTS)

import bench_cameras_phase as phase  # noqa: E402
import bench_cameras_stats as st  # noqa: E402
import plot_bench_cameras as plot  # noqa: E402


def ramp(t0, fps, frames, step=0.02):
    """Progress blocks of a camera that decodes `frames` at `fps` from t0."""
    out, f, t = [], 0, t0
    while f < frames:
        t += step
        f = min(frames, int((t - t0) * fps))
        if f > 0:
            out.append((t, f))
    return out


def test_steady_window_leaves_out_the_ends():
    p = [(0.0, 1), (1.0, 10), (2.0, 50), (3.0, 90), (4.0, 100)]
    assert st.steady_window(p) == (1.0, 3.0)
    assert st.steady_fps(p) == pytest.approx(40.0)
    assert st.steady_window([(0.0, 5)]) is None
    assert math.isnan(st.steady_fps([]))


def test_aggregate_counts_only_the_time_every_camera_runs():
    # Two cameras at 100 and 300 fps, started together: 400 fps while both run.
    fps, window, sync = st.aggregate_fps([ramp(0.0, 100, 600), ramp(0.0, 300, 600)])
    assert sync and window > 0.5
    assert fps == pytest.approx(400, rel=0.03)
    # One camera starts when the other is done: no common window, the rates are summed and
    # the figure says it is not synchronised.
    fps, window, sync = st.aggregate_fps([ramp(0.0, 100, 300), ramp(10.0, 100, 300)])
    assert not sync and window == 0.0
    assert fps == pytest.approx(200, rel=0.05)
    assert math.isnan(st.aggregate_fps([ramp(0.0, 100, 300), []])[0])


def test_cpu_per_frame_over_the_window():
    prog = ramp(0.0, 100, 1000)  # 10 s
    ticks = [(t / 10, int(t / 10 * st.CLK_TCK / 2)) for t in range(0, 101)]  # half a CPU
    # Half a CPU at 100 fps: 5 ms of CPU per frame.
    assert st.cpu_per_frame_us(ticks, prog) == pytest.approx(5000, rel=0.03)
    # Samples that do not cover the window give no figure rather than a wrong one.
    assert math.isnan(st.cpu_per_frame_us(ticks[:20], prog))
    assert math.isnan(st.cpu_per_frame_us([], prog))


def test_proc_stat_with_a_hostile_command_name():
    # A process may name itself anything, parentheses and spaces included (prctl PR_SET_NAME).
    fields = ["S"] + ["0"] * 10 + ["1234", "56"] + ["0"] * 30
    assert st.proc_cpu_ticks("4242 (a) (b c) " + " ".join(fields)) == 1290
    assert st.proc_cpu_ticks("4242 (x) S 1 2") is None
    assert st.proc_cpu_ticks("garbage") is None
    assert st.proc_cpu_ticks("1 (x) " + " ".join(["S"] + ["z"] * 14)) is None


def test_reader_lines_and_latency_files(tmp_path):
    r = st.parse_reader_line("camera_reader k1 frames=600 missed=0 end=shutdown lat_p50_us=nan zero_copy=1")
    assert r["key"] == "k1" and r["frames"] == 600 and r["end"] == "shutdown" and math.isnan(r["lat_p50_us"])
    assert st.parse_reader_line("ready") is None
    assert st.parse_reader_line("camera_reader k1 frames") is None
    f = tmp_path / "lat"
    f.write_text("1 999999\n2 100\nnonsense\n3 x\n4 300 5\n5 200\n")
    # The first frame is left out; lines that are not two integers are skipped.
    assert st.read_latencies(f) == [100, 200]
    assert st.read_latencies(f, limit=2) == [100]


def test_percentiles_and_nvidia_smi_parsing():
    assert st.percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert st.percentile([1, 2, 3, 4, 5], 0.99) == 5
    assert math.isnan(st.percentile([], 0.5))
    assert st.median([3, float("nan"), 1, 2, None]) == 2
    assert st.parse_smi_apps("100, 512\n200, [N/A]\n100, 4\nbad\n") == {100: 516}
    assert st.parse_smi_used("garbage\n 81559 \n") == 81559
    assert math.isnan(st.parse_smi_used(""))
    assert math.isnan(st.ratio(1, 0)) and st.ratio(3, 2) == 1.5


def fake_cam(i, pub_pid, reader_pid):
    proc = lambda pid: None if pid is None else types.SimpleNamespace(pid=pid)  # noqa: E731
    return types.SimpleNamespace(i=i, publisher=proc(pub_pid), reader=proc(reader_pid))


def test_memory_figures_per_process_and_in_all():
    cams = [fake_cam(0, 10, 11), fake_cam(1, 20, 21)]
    mem = {"before": (1000.0, {}), "barrier": (3000.0, {10: 400, 11: 300, 20: 400, 21: 300}),
           "during": (5000.0, {10: 800, 11: 340, 20: 820, 21: 340, 99: 5000})}
    m = phase.memory_figures(cams, mem)
    assert m["mem_per_process"] and m["mem_pub_mib"] == 810 and m["mem_reader_mib"] == 340
    assert m["mem_reader_import_mib"] == 40
    assert m["mem_total_per_camera_mib"] == 2000
    # In a container nvidia-smi may list other pids (or none): no per-process figure then.
    m = phase.memory_figures(cams, {"before": (0.0, {}), "during": (100.0, {1: 5})})
    assert not m["mem_per_process"] and math.isnan(m["mem_pub_mib"]) and m["mem_total_per_camera_mib"] == 50
    assert math.isnan(phase.memory_figures(cams, {})["mem_total_per_camera_mib"])


def test_plot_input_keeps_the_last_row_of_each_n():
    lines = ["noise", "CAMERAS-JSON {bad", "x CAMERAS-JSON " + json.dumps({"n": 4, "fps_base": 1.0}),
             "CAMERAS-JSON " + json.dumps({"n": 1, "fps_base": float("nan")}),
             "CAMERAS-JSON " + json.dumps({"n": 4, "fps_base": 2.0}), "CAMERAS-JSON [1]",
             "CAMERAS-JSON " + json.dumps({"n": "4"})]
    rows = plot.load(lines)
    assert [r["n"] for r in rows] == [1, 4] and rows[1]["fps_base"] == 2.0
    assert plot.series(rows, "fps_base") == [(4, 2.0)]


FFMPEG = os.path.join(ROOT, "build", "ffmpeg", "bin", "ffmpeg")


def leftovers(prefix):
    """Processes whose command line names `prefix`, and /dev/shm objects of it."""
    procs = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if prefix.encode() in f.read():
                        procs.append(pid)
            except OSError:
                pass
    return procs, [n for n in os.listdir("/dev/shm") if prefix in n]


@pytest.mark.parametrize("reader", ["false", "sleep"])
def test_a_reader_that_fails_or_never_gets_ready_fails_the_run_cleanly(tmp_path, reader):
    if not os.access(FFMPEG, os.X_OK):
        pytest.skip(f"SKIPPED (no {FFMPEG}: scripts/build-ffmpeg.sh)")
    # The reader exits at once, or hangs without ever saying ready: the benchmark reports the
    # camera's failure within its timeout, and leaves no process, socket or SHM object.
    stand_in = tmp_path / "reader"
    # (The hanging one keeps its arguments, the key among them, in its command line.)
    hang = f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(600)' \"$@\"\n"
    stand_in.write_text("#!/bin/sh\nexit 3\n" if reader == "false" else hang)
    stand_in.chmod(0o755)
    runtime = tmp_path / "rt"
    runtime.mkdir()
    prefix = f"bcamtest{os.getpid()}{reader}"
    env = {**os.environ, "CUFRAMES_RUNTIME_DIR": str(runtime)}
    if reader == "false":
        # Without a runtime directory the run makes its own, and removes it: nothing goes to
        # the system's /run/cuframes.
        del env["CUFRAMES_RUNTIME_DIR"]
    own_dirs = lambda: set(glob.glob("/tmp/cuframes-cameras-rt.*"))  # noqa: E731
    dirs_before = own_dirs()
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "bench_cameras.py"), "--ffmpeg", FFMPEG, "--ffprobe", FFMPEG,
         "--reader", str(stand_in), "--mode", "host", "--counts", "1", "--frames", "30", "--size", "160x120",
         "--timeout", "5", "--key-prefix", prefix, "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the reader" in r.stdout and "FAILED" in r.stdout, r.stdout
    assert time.monotonic() - t0 < 60
    assert leftovers(prefix) == ([], [])
    assert os.listdir(runtime) == []
    assert own_dirs() <= dirs_before
    if os.path.isdir("/run/cuframes"):
        assert not [n for n in os.listdir("/run/cuframes") if prefix in n]


def test_packet_rings_fit_in_dev_shm():
    mib = 1 << 20
    assert phase.packet_ring_bytes(3 * mib, 1, 64 << 30) == 8 * mib  # the library's default at least
    assert phase.packet_ring_bytes(20 * mib, 1, 64 << 30) == 64 * mib  # twice the clip, capped
    assert phase.packet_ring_bytes(20 * mib, 32, 1 << 30) == 16 * mib  # 32 rings in half of 1 GiB
    assert phase.packet_ring_bytes(20 * mib, 32, 64 * mib) == 4 * mib  # a container's 64 MiB: the floor
    assert phase.packet_ring_bytes(20 * mib, 1, 0) == 4 * mib


def test_nvidia_smi_queries(tmp_path, monkeypatch):
    # A stand-in nvidia-smi that answers the two queries the benchmark makes, and only those.
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in\n'
                   '"--query-gpu=memory.used -i 0 --format=csv,noheader,nounits") echo 1234 ;;\n'
                   '"--query-compute-apps=pid,used_memory --format=csv,noheader,nounits") printf "7, 500\\n8, 300\\n" ;;\n'
                   '*) exit 9 ;;\nesac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert phase.memory_sample() == (1234.0, {7: 500, 8: 300})
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    used, apps = phase.memory_sample()  # no nvidia-smi: no figures, no exception
    assert math.isnan(used) and apps == {}


def test_the_camera_command_on_the_gpu():
    args = types.SimpleNamespace(ffmpeg="ff", mode="cuda", rate=30, frames=900, ring_size=8, timeout=120)
    cam = phase.Camera(3, "k3", "/x")
    cmd = phase.publisher_cmd(args, cam, True, 64 << 20)
    # The context is made while the options are read, before the input (the FIFO) is opened.
    assert cmd.index("-init_hw_device") < cmd.index("-i") and cmd[cmd.index("-i") + 1] == "/x/in.h264"
    assert cmd[cmd.index("-hwaccel_device") + 1] == "bench" and "-hwaccel_output_format" in cmd
    vf = cmd[cmd.index("-vf") + 1]
    assert vf.startswith("setpts=RTCTIME/(TB*1000000),hwupload_cuframes=key=k3:ring_size=8:policy=strict_wait")
    assert "wait_subscribers=1" in vf and "memory=host" not in vf  # the frame reader (the recorder is no frame reader)
    assert cmd[cmd.index("cuframes_pkt") - 2:cmd.index("cuframes_pkt")] == ["copy", "-f"]
    assert cmd[cmd.index("-data_size") + 1] == str(64 << 20) and cmd[cmd.index("-ring_slots") + 1] == "964"
    assert cmd[-5:] == ["-enc_time_base:v", "filter", "-f", "null", "-"]
    assert "-readrate" not in cmd
    live = phase.publisher_cmd(args, cam, True, 64 << 20, frames=150, live=True)
    # A live camera: read at the clip's rate from the first packet, the ring sized for its frames.
    assert live.index("-readrate") < live.index("-i") and live[live.index("-readrate") + 1] == "1"
    assert live[live.index("-readrate_initial_burst") + 1] == "0" and live[live.index("-ring_slots") + 1] == "214"
    base = phase.publisher_cmd(args, cam, False, 0)
    assert "cuframes_pkt" not in base and base[base.index("-vf") + 1] == "setpts=RTCTIME/(TB*1000000)"


READER = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "release", "examples",
                      "camera_reader")


def test_gpu_memory_is_sampled_per_process_during_a_phase(tmp_path, monkeypatch):
    if not (os.access(FFMPEG, os.X_OK) and os.access(READER, os.X_OK)):
        pytest.skip(f"SKIPPED (no {FFMPEG} or {READER})")
    # A stand-in nvidia-smi that gives the processes of this test memory by role: a publisher
    # (its command line has hwupload_cuframes) 532 MiB, a decoder alone 500, a reader 300.
    prefix = f"bcammem{os.getpid()}"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"""#!{sys.executable}
import os, sys
apps = {{}}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{{pid}}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        continue
    if "{prefix}" not in cmd and "{tmp_path}" not in cmd:
        continue
    if "camera_reader" in cmd:
        apps[pid] = 300
    elif "hwupload_cuframes" in cmd:
        apps[pid] = 532
    elif "setpts" in cmd:
        apps[pid] = 500
if "--query-gpu=memory.used" in sys.argv:
    print(1000 + sum(apps.values()))
else:
    print("\\n".join(f"{{p}}, {{m}}" for p, m in apps.items()))
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUFRAMES_RUNTIME_DIR", str(tmp_path))
    args = types.SimpleNamespace(ffmpeg=FFMPEG, ffprobe=os.path.join(os.path.dirname(FFMPEG), "ffprobe"),
                                 reader=READER, mode="host", gpu_memory=True, rate=30, frames=45, ring_size=4,
                                 timeout=30, keep=False, key_prefix=prefix, width=160, height=120)
    work = tmp_path / "w"
    work.mkdir()
    clip = str(work / "clip.h264")
    sys.path.insert(0, SCRIPTS)
    import bench_cameras

    bench_cameras.make_clip(args, clip, 45)
    # Paced at 30 fps, so that the sample at 30 % of the frames comes while every process runs.
    base = phase.run(args, clip, 45, 2, rings=False, work=str(work), live=True)
    rings = phase.run(args, clip, 45, 2, rings=True, work=str(work), live=True)
    assert base["errors"] == [] and rings["errors"] == [], (base["errors"], rings["errors"])
    assert base["notes"] == [] and rings["notes"] == []
    assert base["mem_per_process"] and rings["mem_per_process"]
    assert (base["mem_pub_mib"], rings["mem_pub_mib"], rings["mem_reader_mib"]) == (500, 532, 300)
    assert rings["mem_reader_import_mib"] == 0
    assert rings["mem_total_per_camera_mib"] == 832 and base["mem_total_per_camera_mib"] == 500
    # The CPU figures came from the exact marks at 10 % and 90 % of the frames, not the ticks.
    assert base["cpu_exact_share"] == 1.0 and rings["cpu_exact_share"] == 1.0
    assert rings["cpu_pub_us"] > 0 and rings["cpu_recorder_us"] > 0 and rings["cpu_reader_us"] > 0
    assert leftovers(prefix) == ([], [])


def test_exact_cpu_between_the_marks():
    assert st.schedstat_ns("123456789 5 6\n") == 123456789
    assert st.schedstat_ns("") is None and st.schedstat_ns("x 1 2") is None
    # 80 frames between the marks, 4 ms of CPU: 50 µs a frame.
    assert st.cpu_per_frame_marks_us([(10, 1_000_000), (90, 5_000_000)]) == pytest.approx(50.0)
    assert math.isnan(st.cpu_per_frame_marks_us([(10, 1)]))
    assert math.isnan(st.cpu_per_frame_marks_us([(10, 1), (10, 5)]))
    # This process's threads: a positive count that grows with work.
    a = phase.threads_cpu_ns(os.getpid())
    sum(i * i for i in range(300_000))
    b = phase.threads_cpu_ns(os.getpid())
    assert a is not None and b > a
    assert phase.threads_cpu_ns(2**22 + 12345) is None  # no such process
