#!/usr/bin/env bash
# Where a decode pipeline with many `-f cuframes` readers loses its frames per second
# (docs/benchmarks.md, "FFmpeg decode pipeline"): the same 1080p clip as gpu-check's ff_bench,
# decoded with nvdec into hwupload_cuframes, with one thing changed at a time:
#   readers 1/2/4/8 (STRICT_WAIT), 8 readers under DROP_OLDEST (no ACK can hold anything up),
#   8 readers at SCHED_IDLE (they never preempt the decoder), 8 readers on other CPUs than the
#   decoder's (taskset), 8 readers that spin instead of sleeping (no wake-up per frame),
#   8 Python readers (one thread each, cuCtxSynchronize per frame: py8),
#   decode only beside 8 idle processes that hold a CUDA context (context presence),
#   decode only beside 8 busy CPU loops (CPU contention),
#   8 Python subscribers that map the ring's slots and never read (mapped8; mapsync8: and call
#   cuCtxSynchronize at the frame rate), and 1/2/4 Python
#   readers (pyscale),
#   decode only beside 8 processes calling the driver ~700 times a second (sync8, query8),
#   8 processes woken by every publication that are no subscribers (watch8; watchctx8: each
#   also holding a CUDA context), and the CPUs held out of deep idle states (lat0).
# DIAG_GPU=1 adds the GPU's and NVDEC's utilisation and the SM clock during each decode;
# DIAG_HIST=1 where each thread of the decoder (and of reader 1) spent its time in the steady
# window (proc_sched.py --window) and the filter's wait statistics.
# Each line: steady fps (steady_fps.py through ffbench.sh, both in scripts/), % of decode
# only, and the publisher's CPU seconds, the time its threads waited runnable for a CPU
# (proc_sched.py) and its involuntary context switches, the readers' CPU seconds.
#
#   GPU_CHECK_DIAG=1 scripts/gpu-check.sh build                         # here (copies it to .gpu/)
#   bash .gpu/ff-readers-diag.sh                                        # on the GPU machine
#   DIAG_ROWS="base strict8 idle8 pinned8 spin8 py8" bash .gpu/ff-readers-diag.sh   # some rows
#   DIAG_ROWS="base strict8 sync8 query8" ...                           # driver calls per frame?
#   DIAG_ROWS="strict8 mapped8 watch8 watchctx8 lat0" ...               # wake-ups, idle states?
#   DIAG_ROUNDS=1                                                       # one round (default 2)
#   DIAG_LOOP=4                                                         # the clip 5 times over (-stream_loop)
set -uo pipefail
out=$(cd "$(dirname "$0")" && pwd)
ff="$out/ffmpeg"
[ -x "$ff" ] || { echo "no $ff: run GPU_CHECK_DIAG=1 scripts/gpu-check.sh build first"; exit 1; }
export CUFRAMES_RUNTIME_DIR=${CUFRAMES_RUNTIME_DIR:-$(mktemp -d /tmp/cuframes-diag-rt.XXXXXX)}
d=$(mktemp -d /tmp/cuframes-diag.XXXXXX)
helpers=()
cleanup() {
  [ ${#helpers[@]} -gt 0 ] && kill "${helpers[@]}" 2>/dev/null
  rm -rf "$d"; rm -f /dev/shm/cuframes-diag-*; rmdir "$CUFRAMES_RUNTIME_DIR" 2>/dev/null
}
trap cleanup EXIT

# Runs a command (stdout kept), its scheduling line (proc_sched.py) into file $1.
# With DIAG_HIST=1, also where each thread's time went (OUT.hist, printed under the row).
# SCHED_HIST=0 turns the histogram off for one command (readers 2..n: sampling costs CPU).
sched() { local f=$1; shift; PROC_SCHED_HIST=${SCHED_HIST:-${DIAG_HIST:-0}} python3 "$out/proc_sched.py" "$f" "$@"; }

# With DIAG_GPU=1, the GPU's mean utilisation, decoder (NVDEC) utilisation and SM clock
# while the decoder runs (nvidia-smi every 100 ms), printed with the row.
gpu_on() { [ "${DIAG_GPU:-0}" = 1 ] || return 0
  nvidia-smi --query-gpu=utilization.gpu,utilization.decoder,clocks.sm --format=csv,noheader,nounits -lms 100 >"$d/gpu.log" 2>/dev/null &
  gpu_pid=$!; }
gpu_off() { [ "${DIAG_GPU:-0}" = 1 ] || return 0
  kill "$gpu_pid" 2>/dev/null; wait "$gpu_pid" 2>/dev/null
  awk -F', *' 'NF >= 3 { g += $1; e += $2; c += $3; n++ } END { if (n) printf "GPU %.0f %%, NVDEC %.0f %%, SM %.0f MHz (%d samples)", g / n, e / n, c / n, n }' "$d/gpu.log" >"$d/gpu.txt"; }

# shellcheck source=scripts/ffbench.sh
. "$out/ffbench.sh"
ffbench_clip "$ff" 1920x1080 1500 "$d/clip.h264"

# DIAG_LOOP=N: the clip N+1 times over (-stream_loop needs a container that can seek: MP4).
clip=$d/clip.h264 loop=()
if [ "${DIAG_LOOP:-0}" -gt 0 ]; then
  "$ff" -hide_banner -nostdin -loglevel error -y -framerate 30 -i "$d/clip.h264" -c copy "$d/clip.mp4"
  clip=$d/clip.mp4 loop=(-stream_loop "$DIAG_LOOP")
fi

# The wheel, unpacked for the Python readers (no pip there).
whl=$(ls "$out"/cuframes-*-abi3-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$d/py"

pin=()        # the decoder's CPUs, when the readers get the others
decode() { # filter (or empty): prints the steady fps; scheduling line in $d/pub.ru
  local vf=()
  [ -n "$1" ] && vf=(-vf "$1")
  gpu_on
  # Verbose, into a log: the filter's wait statistics (printed with the row), and errors.
  ffbench_fps "$d/win" sched "$d/pub.ru" "${pin[@]}" "$ff" -hide_banner -nostdin -loglevel level+verbose -hwaccel cuda \
    -hwaccel_output_format cuda "${loop[@]}" -i "$clip" "${vf[@]}" 2>"$d/pub.log"
  grep -h '\[error\]\|\[fatal\]' "$d/pub.log" >&2
  gpu_off
}

ref=
row() { # label, fps, readers' part
  local cpu wait nivcsw threads
  read -r cpu wait nivcsw _ <"$d/pub.ru"
  printf '%-58s %7s fps %6s %%  publisher %s s CPU, %s ms runnable-waiting, %s preempted  %s\n' "$1" "$2" \
    "$(awk -v a="$2" -v b="${ref:-$2}" 'BEGIN { printf "%.1f", 100 * a / b }')" \
    "$cpu" "$wait" "$nivcsw" "${3:-}"
  # The whole run (from the first frame out to the final block, teardown included) and the
  # rate per quarter of the frames (steady_fps.py).
  [ -s "$d/win" ] && echo "    whole run (teardown included): $(cut -d' ' -f3 "$d/win") fps; by quarters of the frames: $(cut -d' ' -f5-8 "$d/win") fps"
  [ -s "$d/gpu.txt" ] && echo "    $(cat "$d/gpu.txt")" && rm -f "$d/gpu.txt"
  grep -ho 'waited for .*' "$d/pub.log" | sed 's/^/    filter: /'
  # Where the threads' time went in the steady window only (start-up and teardown left out).
  if [ -s "$d/pub.ru.samples" ] && [ -s "$d/win" ]; then
    echo "    decoder's threads, steady window:"
    # shellcheck disable=SC2046
    python3 "$out/proc_sched.py" --window $(cut -d' ' -f1-2 "$d/win") "$d/pub.ru.samples"
    # shellcheck disable=SC2046
    python3 "$out/proc_sched.py" --timeline $(cut -d' ' -f1-2 "$d/win") "$d/pub.ru.samples"
    python3 "$out/proc_sched.py" --ends "$(cut -d' ' -f2 "$d/win")" "$d/pub.ru.samples"
    if [ -s "$d/r1.ru.samples" ]; then
      echo "    reader 1's threads, same window:"
      # shellcheck disable=SC2046
      python3 "$out/proc_sched.py" --window $(cut -d' ' -f1-2 "$d/win") "$d/r1.ru.samples" 2>/dev/null | head -7
      # shellcheck disable=SC2046
      python3 "$out/proc_sched.py" --timeline $(cut -d' ' -f1-2 "$d/win") "$d/r1.ru.samples"
      python3 "$out/proc_sched.py" --ends "$(cut -d' ' -f2 "$d/win")" "$d/r1.ru.samples"
    fi
  fi
  rm -f "$d"/*.hist "$d"/*.samples "$d/win"
}

# A process that is woken by every publication and reads global_seq, without subscribing:
# maps the ring's header (/dev/shm/cuframes-KEY), counts itself a waiter (R28) and sleeps on
# global_seq's futex; with $2 = 1 it also holds a CUDA context. Ends 1 s after the last frame.
watcher() { # key, cuda (0|1)
  exec python3 -c 'import ctypes, mmap, os, sys, time
key, with_cuda = sys.argv[1], sys.argv[2] == "1"
if with_cuda:
    cu = ctypes.CDLL("libcuda.so.1"); ctx = ctypes.c_void_p(); dev = ctypes.c_int()
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
path = "/dev/shm/cuframes-" + key
while not os.path.exists(path):
    time.sleep(0.005)
time.sleep(0.01)
fd = os.open(path, os.O_RDWR)
mm = mmap.mmap(fd, 7424)
base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
seq = ctypes.c_uint64.from_address(base + 0xC0)
waiters = ctypes.c_uint32.from_address(base + 0xD8)
waiters.value += 1
libc = ctypes.CDLL(None)
class timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
ts = timespec(0, 50000000)
last, n, changed = seq.value, 0, time.monotonic()
# Ends 1 s after the last publication (30 s when none comes).
while time.monotonic() - changed < (1 if n else 30):
    now = seq.value
    if now == last:
        libc.syscall(202, ctypes.c_void_p(base + 0xC0), 0, ctypes.c_uint32(now & 0xffffffff), ctypes.byref(ts), None, 0)
    else:
        last, n, changed = now, n + 1, time.monotonic()
print(n, "publications seen", file=sys.stderr)' "$1" "$2"
}

ring() { # label, readers, policy, kind of reader (ffmpeg|idle|pinned|spin|python|mapped|mapsync|watch|watchctx)
  local label=$1 n=$2 policy=$3 kind=$4 key="diag-$$-$RANDOM" pids=() i fps cpu=0 pre=()
  case $kind in
    idle) pre=(chrt -i 0) ;;
    pinned) pre=(taskset -c "$(( $(nproc) / 2 ))-$(( $(nproc) - 1 ))") ;;
  esac
  for i in $(seq 1 "$n"); do
    local SCHED_HIST=${DIAG_HIST:-0}
    [ "$i" -gt 1 ] && SCHED_HIST=0
    case $kind in
      # Python subscribers (diag_subscriber.py; env execs python, which proc_sched sees).
      python|mapsync) sched "$d/r$i.ru" env PYTHONPATH="$d/py" python3 "$out/diag_subscriber.py" "$key" "r$i" \
          "$([ "$kind" = python ] && echo read || echo mapsync)" 2>"$d/r$i.log" & pids+=($!) ;;
      watch|watchctx) sched "$d/r$i.ru" bash -c "$(declare -f watcher); watcher $key $([ "$kind" = watchctx ] && echo 1 || echo 0)" 2>"$d/r$i.log" & pids+=($!) ;;
      mapped) env PYTHONPATH="$d/py" python3 "$out/diag_subscriber.py" "$key" "r$i" mapped 2>"$d/r$i.log" & pids+=($!) ;;
      spin) sched "$d/r$i.ru" "$ff" -hide_banner -nostdin -loglevel error -f cuframes -wait_publisher 30 -read_timeout 30 \
          -spin 20ms -name "r$i" -i "$key" -f null - 2>"$d/r$i.log" & pids+=($!) ;;
      *) sched "$d/r$i.ru" "${pre[@]}" "$ff" -hide_banner -nostdin -loglevel error -f cuframes -wait_publisher 30 -read_timeout 30 \
          -name "r$i" -i "$key" -f null - 2>"$d/r$i.log" & pids+=($!) ;;
    esac
  done
  SCHED_HIST=${DIAG_HIST:-0}   # the decoder's
  [ "$kind" = pinned ] && pin=(taskset -c "0-$(( $(nproc) / 2 - 1 ))")
  local subs=$n
  case $kind in watch|watchctx) subs=0 ;; esac
  fps=$(decode "hwupload_cuframes=key=$key:ring_size=8:policy=$policy:wait_subscribers=$subs:wait_timeout=30:ack_timeout=10")
  pin=()
  if [ "$kind" = mapped ]; then
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    for i in $(seq 1 "$n"); do echo "0 0 0 0" >"$d/r$i.ru"; done; pids=()
  fi
  for i in "${pids[@]}"; do wait "$i" || echo "  a reader failed: $(tail -1 "$d"/r*.log | tail -1)"; done
  for i in $(seq 1 "$n"); do cpu=$(awk -v a="$cpu" -v b="$(cut -d' ' -f1 "$d/r$i.ru")" 'BEGIN { print a + b }'); done
  row "$label" "$fps" "readers $cpu s CPU in all"
}

want() { [ -z "${DIAG_ROWS:-}" ] || [[ " $DIAG_ROWS " == *" $1 "* ]]; }

for round in $(seq 1 "${DIAG_ROUNDS:-2}"); do
  echo "--- round $round"
  ref=$(decode ""); row "decode only" "$ref"
  if want base; then
    fps=$(decode "hwupload_cuframes=key=diag-$$-none:ring_size=8"); row "hwupload_cuframes, no reader" "$fps"
  fi
  if want readers; then for n in 1 2 4; do ring "$n reader(s), strict_wait" "$n" strict_wait ffmpeg; done; fi
  want strict8 && ring "8 readers, strict_wait" 8 strict_wait ffmpeg
  want drop8 && ring "8 readers, drop_oldest" 8 drop_oldest ffmpeg
  want idle8 && ring "8 readers at SCHED_IDLE" 8 strict_wait idle
  if want pinned8; then
    pin=(taskset -c "0-$(( $(nproc) / 2 - 1 ))")
    pref=$(decode ""); pin=(); row "decode only on CPUs 0-$(( $(nproc) / 2 - 1 ))" "$pref"
    ring "8 readers on the other CPUs" 8 strict_wait pinned
  fi
  want spin8 && ring "8 readers spinning (-spin 20ms)" 8 strict_wait spin
  [ -d "$d/py" ] && want py8 && ring "8 Python readers (cuCtxSynchronize per frame)" 8 strict_wait python
  for call in sync query; do
    want "${call}8" || continue
    # 8 processes that only call the driver ~700 times a second (cuCtxSynchronize, or
    # cuStreamQuery on the legacy stream), as a reader does per frame, without any ring.
    helpers=()
    for i in $(seq 1 8); do
      python3 -c 'import ctypes, sys, time
cu = ctypes.CDLL("libcuda.so.1"); ctx = ctypes.c_void_p(); dev = ctypes.c_int()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
call = cu.cuCtxSynchronize if sys.argv[1] == "sync" else (lambda: cu.cuStreamQuery(ctypes.c_void_p(1)))
end = time.monotonic() + 60
while time.monotonic() < end:
    call(); time.sleep(0.0014)' "$call" & helpers+=($!)
    done
    sleep 2
    fps=$(decode ""); row "decode only, 8 processes calling the driver (${call}) at ~700/s" "$fps"
    kill "${helpers[@]}" 2>/dev/null; wait "${helpers[@]}" 2>/dev/null
    helpers=()
  done
  if [ -d "$d/py" ] && want pyscale; then
    for n in 1 2 4; do ring "$n Python reader(s)" "$n" strict_wait python; done
  fi
  if want lat0; then
    # CPUs kept out of deep idle states (PM QoS: /dev/cpu_dma_latency held at 0 us, needs
    # root): do wake-ups from deep C-states cost the decoder its speed with readers?
    python3 -c 'import os, struct, time
fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
os.write(fd, struct.pack("i", 0))
time.sleep(300)' 2>"$d/lat.log" & latpid=$!
    sleep 0.5
    if kill -0 "$latpid" 2>/dev/null; then
      fps=$(decode ""); row "decode only, CPUs out of deep idle states" "$fps"
      lref=$ref; ref=$fps
      ring "8 readers, CPUs out of deep idle states (% of the row above)" 8 strict_wait ffmpeg
      ref=$lref
      kill "$latpid" 2>/dev/null; wait "$latpid" 2>/dev/null
    else
      echo "  (no /dev/cpu_dma_latency: $(tail -1 "$d/lat.log"))"
    fi
  fi
  want watch8 && ring "8 watchers woken per frame, no subscriber, no CUDA" 8 drop_oldest watch
  want watchctx8 && ring "8 watchers woken per frame, each holding a CUDA context" 8 drop_oldest watchctx
  [ -d "$d/py" ] && want mapsync8 && ring "8 mapped subscribers calling cuCtxSynchronize ~700/s, never reading" 8 drop_oldest mapsync
  [ -d "$d/py" ] && want mapped8 && ring "8 Python subscribers that map the slots, never read (drop_oldest)" 8 drop_oldest mapped
  if want contexts; then
    # 8 processes that made a CUDA context on the GPU and then sleep.
    helpers=()
    for i in $(seq 1 8); do
      python3 -c 'import ctypes, time
cu = ctypes.CDLL("libcuda.so.1"); ctx = ctypes.c_void_p(); dev = ctypes.c_int()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
time.sleep(60)' & helpers+=($!)
    done
    sleep 2
    fps=$(decode ""); row "decode only, 8 idle processes with a CUDA context" "$fps"
    kill "${helpers[@]}" 2>/dev/null; wait "${helpers[@]}" 2>/dev/null
    helpers=()
  fi
  if want cpu; then
    for i in $(seq 1 8); do bash -c 'while :; do :; done' & helpers+=($!); done
    fps=$(decode ""); row "decode only, 8 busy CPU loops" "$fps"
    kill "${helpers[@]}" 2>/dev/null; wait "${helpers[@]}" 2>/dev/null
    helpers=()
  fi
done
