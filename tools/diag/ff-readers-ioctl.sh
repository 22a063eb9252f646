#!/usr/bin/env bash
# Which driver calls make the NVIDIA ioctls of a decoder that publishes to 8 readers, and of
# one of those readers (docs/investigations/, "Where 8 readers lose decode speed"): the
# decoder (and reader 1) run under ioctl_trace.c, which records every NVIDIA ioctl
# with its call stack. Runs: decode only, hwupload_cuframes without a reader, 8 `-f cuframes`
# readers, 8 Python readers; prints each process's stacks that took the most ioctl time.
#
#   GPU_CHECK_DIAG=1 scripts/gpu-check.sh build         # here (builds .gpu/ioctl_trace.so)
#   bash .gpu/ff-readers-ioctl.sh                       # on the GPU machine
#   IOCTL_RESULTS=DIR bash .gpu/ff-readers-ioctl.sh     # keep the trace files in DIR
set -uo pipefail
out=$(cd "$(dirname "$0")" && pwd)
ff=$out/ffmpeg so=$out/ioctl_trace.so
[ -x "$ff" ] && [ -f "$so" ] || { echo "no $ff or $so: run GPU_CHECK_DIAG=1 scripts/gpu-check.sh build first"; exit 1; }
export CUFRAMES_RUNTIME_DIR=${CUFRAMES_RUNTIME_DIR:-$(mktemp -d /tmp/cuframes-ioctl-rt.XXXXXX)}
d=$(mktemp -d /tmp/cuframes-ioctl.XXXXXX)
res=${IOCTL_RESULTS:-$d/results}; mkdir -p "$res"
cleanup() { rm -rf "$d"; rm -f /dev/shm/cuframes-ioctl-*; rmdir "$CUFRAMES_RUNTIME_DIR" 2>/dev/null; }
trap cleanup EXIT

# shellcheck source=scripts/ffbench.sh
. "$out/ffbench.sh"
ffbench_clip "$ff" 1920x1080 1500 "$d/clip.h264"
whl=$(ls "$out"/cuframes-*-abi3-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$d/py"

traced() { # trace name, command...
  local name=$1; shift
  IOCTL_TRACE_OUT=$res/$name LD_PRELOAD=$so "$@"
}
decode() { # trace name, filter (or empty): prints the steady fps
  local vf=()
  [ -n "$2" ] && vf=(-vf "$2")
  FFBENCH_STATS_PERIOD=0.1 ffbench_fps "" traced "$1" "$ff" -hide_banner -nostdin -loglevel error -hwaccel cuda \
    -hwaccel_output_format cuda -i "$d/clip.h264" "${vf[@]}"
}
echo "decode only: $(decode decoder-alone "") fps"
echo "hwupload_cuframes, no reader: $(decode decoder-no-reader "hwupload_cuframes=key=ioctl-$$-0:ring_size=8") fps"
for kind in ffmpeg python; do
  [ "$kind" = python ] && [ ! -d "$d/py" ] && continue
  key=ioctl-$$-$kind pids=()
  for i in 1 2 3 4 5 6 7 8; do
    pre=()
    [ "$i" = 1 ] && pre=(traced "$kind-reader1")
    if [ "$kind" = ffmpeg ]; then
      "${pre[@]}" "$ff" -hide_banner -nostdin -loglevel error -f cuframes -wait_publisher 30 -read_timeout 30 \
        -name "r$i" -i "$key" -f null - & pids+=($!)
    else
      # Zero copy, every frame released at once (diag_subscriber.py).
      "${pre[@]}" env PYTHONPATH="$d/py" python3 "$out/diag_subscriber.py" "$key" "r$i" read & pids+=($!)
    fi
  done
  echo "8 $kind readers: $(decode "decoder-8-$kind" "hwupload_cuframes=key=$key:ring_size=8:policy=strict_wait:wait_subscribers=8:wait_timeout=30:ack_timeout=10") fps"
  wait "${pids[@]}"
done
for f in "$res"/*; do
  # The processes that made NVIDIA ioctls (a traced bash makes none), the costliest stacks.
  grep -q '^req' "$f" || continue
  echo "=== $(basename "$f")"
  head -60 "$f"
done
