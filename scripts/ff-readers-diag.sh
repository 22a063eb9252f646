#!/usr/bin/env bash
# Where a decode pipeline with many `-f cuframes` readers loses its frames per second
# (docs/benchmarks.md, "FFmpeg decode pipeline"): the same 1080p clip as gpu-check's ff_bench,
# decoded with nvdec into hwupload_cuframes, with one thing changed at a time:
#   readers 1/2/4/8 (STRICT_WAIT), 8 readers under DROP_OLDEST (no ACK can hold anything up),
#   decode only beside 8 idle processes that hold a CUDA context (context presence),
#   decode only beside 8 busy CPU loops (CPU contention).
# Each line: steady fps (scripts/steady_fps.py), % of decode only, and the publisher's CPU
# seconds and involuntary context switches (it was preempted), the readers' CPU seconds.
#
#   scripts/gpu-check.sh build                                          # here (copies it to .gpu/)
#   bash .gpu/ff-readers-diag.sh                                        # on the GPU machine
set -uo pipefail
out=$(cd "$(dirname "$0")" && pwd)
ff="$out/ffmpeg"
[ -x "$ff" ] || { echo "no $ff: run scripts/gpu-check.sh build first"; exit 1; }
export CUFRAMES_RUNTIME_DIR=${CUFRAMES_RUNTIME_DIR:-$(mktemp -d /tmp/cuframes-diag-rt.XXXXXX)}
d=$(mktemp -d /tmp/cuframes-diag.XXXXXX)
helpers=()
cleanup() {
  [ ${#helpers[@]} -gt 0 ] && kill "${helpers[@]}" 2>/dev/null
  rm -rf "$d"; rm -f /dev/shm/cuframes-diag-*
}
trap cleanup EXIT

# Runs a command, prints "cpu_s nivcsw" of it (and its children) on fd 3.
rusage() {
  python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{r.ru_utime + r.ru_stime:.2f} {r.ru_nivcsw}", file=open(3, "w", closefd=False))' "$@"
}

"$ff" -hide_banner -nostdin -loglevel error -y -f lavfi -i testsrc2=s=1920x1080:r=30 \
  -frames:v 1500 -c:v libx264 -preset ultrafast -crf 30 -g 60 -pix_fmt yuv420p "$d/clip.h264"

decode() { # filter (or empty): prints the steady fps; rusage on $d/pub.ru
  local vf=()
  [ -n "$1" ] && vf=(-vf "$1")
  rusage "$ff" -hide_banner -nostdin -loglevel error -hwaccel cuda -hwaccel_output_format cuda \
    -i "$d/clip.h264" "${vf[@]}" -f null -progress pipe:1 -stats_period 0.1 -nostats - 3>"$d/pub.ru" |
    python3 "$out/steady_fps.py"
}

ref=
row() { # label, fps
  local pub
  pub=$(cat "$d/pub.ru")
  printf '%-62s %7s fps %6s %%  publisher %s s CPU, %s preempted  %s\n' "$1" "$2" \
    "$(awk -v a="$2" -v b="${ref:-$2}" 'BEGIN { printf "%.1f", 100 * a / b }')" \
    "${pub% *}" "${pub#* }" "${3:-}"
}

ring() { # readers, policy
  local n=$1 policy=$2 key="diag-$$-$RANDOM" pids=() i fps cpu=0
  for i in $(seq 1 "$n"); do
    rusage "$ff" -hide_banner -nostdin -loglevel error -f cuframes -wait_publisher 30 -read_timeout 30 \
      -name "r$i" -i "$key" -f null - 2>"$d/r$i.log" 3>"$d/r$i.ru" & pids+=($!)
  done
  fps=$(decode "hwupload_cuframes=key=$key:ring_size=8:policy=$policy:wait_subscribers=$n:wait_timeout=30:ack_timeout=10")
  for i in "${pids[@]}"; do wait "$i"; done
  for i in $(seq 1 "$n"); do cpu=$(awk -v a="$cpu" -v b="$(cut -d' ' -f1 "$d/r$i.ru")" 'BEGIN { print a + b }'); done
  row "$n reader(s), $policy" "$fps" "readers $cpu s CPU in all"
}

for round in 1 2; do
  echo "--- round $round"
  ref=$(decode ""); row "decode only" "$ref"
  fps=$(decode "hwupload_cuframes=key=diag-$$-none:ring_size=8"); row "hwupload_cuframes, no reader" "$fps"
  for n in 1 2 4 8; do ring "$n" strict_wait; done
  ring 8 drop_oldest
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
  for i in $(seq 1 8); do bash -c 'while :; do :; done' & helpers+=($!); done
  fps=$(decode ""); row "decode only, 8 busy CPU loops" "$fps"
  kill "${helpers[@]}" 2>/dev/null; wait "${helpers[@]}" 2>/dev/null
  helpers=()
done
