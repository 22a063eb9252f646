#!/usr/bin/env bash
# Many cameras on one GPU (docs/benchmarks.md, "Many cameras on one GPU"): N = 1, 4, 8, 16
# (and 32 when the decoder keeps up) camera pipelines, each an nvdec decode of a 1080p H.264
# clip publishing both rings with one zero-copy frame reader and one packet recorder, against
# the same N decodes without rings. scripts/bench_cameras.py does the work; this finds the
# binaries and sets the mode.
#
#   GPU_CHECK_ONLY=cameras bash .gpu/gpu-check.sh run   # on the GPU machine (gpu-check step)
#   bash .gpu/bench-cameras.sh                         # the same, alone
#   scripts/bench-cameras.sh                           # a checkout with build/ffmpeg, a GPU and the
#                                                      # camera_reader example built
#   BENCH_CAMERAS_MODE=host scripts/bench-cameras.sh   # dry run without a GPU: software decode,
#                                                      # host rings, N = 1 and 2, a small clip
#
# Settings (environment): BENCH_CAMERAS_COUNTS (1,4,8,16,32), BENCH_CAMERAS_FRAMES (900 per
# camera), BENCH_CAMERAS_LIVE_FRAMES (150: the live phase, read at the clip's 30 fps; 0 leaves
# it out), BENCH_CAMERAS_SIZE (1920x1080), BENCH_CAMERAS_RING_SIZE (8), BENCH_CAMERAS_BUDGET
# (330 s: N = 32 is left out when it would pass it), BENCH_CAMERAS_OUT (a file that gets a
# copy of the output, for scripts/plot_bench_cameras.py), BENCH_CAMERAS_KEEP=1 (keep the clip
# and every process's log in a directory named at the end).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${BENCH_CAMERAS_MODE:-cuda}
if [ -x "$here/camera_reader" ]; then # .gpu/, as gpu-check.sh build lays it out
  ff=$here/ffmpeg fp=$here/ffprobe reader=$here/camera_reader
else
  root=$(cd "$here/.." && pwd)
  ff=$root/build/ffmpeg/bin/ffmpeg fp=$root/build/ffmpeg/bin/ffprobe
  reader=${CARGO_TARGET_DIR:-$root/target}/release/examples/camera_reader
fi
for f in "$ff" "$fp" "$reader"; do
  [ -x "$f" ] || {
    echo "bench-cameras: $f is missing (build/ffmpeg: scripts/build-ffmpeg.sh; camera_reader:" \
      "cargo build --release -p cuframes-core --example camera_reader)" >&2
    exit 1
  }
done
case $mode in
  cuda) counts=1,4,8,16,32 frames=900 live=150 size=1920x1080 ;;
  host) counts=1,2 frames=300 live=60 size=1280x720 ;;
  *) echo "bench-cameras: BENCH_CAMERAS_MODE is cuda or host, not $mode" >&2; exit 2 ;;
esac
if [ "$mode" = cuda ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "bench-cameras: SKIPPED (no CUDA device: nvidia-smi lists none; BENCH_CAMERAS_MODE=host runs the" \
    "whole script without one)"
  exit 0
fi
# A runtime directory of its own: no key of this benchmark meets another publisher's.
CUFRAMES_RUNTIME_DIR=$(mktemp -d /tmp/cuframes-cameras-rt.XXXXXX) || exit 1
export CUFRAMES_RUNTIME_DIR
work=""
if [ -n "${BENCH_CAMERAS_KEEP:-}" ]; then work=$(mktemp -d /tmp/cuframes-cameras.XXXXXX) || exit 1; fi
trap 'rm -rf "$CUFRAMES_RUNTIME_DIR"' EXIT
args=(--ffmpeg "$ff" --ffprobe "$fp" --reader "$reader" --mode "$mode"
  --counts "${BENCH_CAMERAS_COUNTS:-$counts}" --frames "${BENCH_CAMERAS_FRAMES:-$frames}"
  --live-frames "${BENCH_CAMERAS_LIVE_FRAMES:-$live}"
  --size "${BENCH_CAMERAS_SIZE:-$size}" --ring-size "${BENCH_CAMERAS_RING_SIZE:-8}"
  --budget "${BENCH_CAMERAS_BUDGET:-330}")
[ -n "$work" ] && args+=(--work "$work" --keep)
python3 -u "$here/bench_cameras.py" "${args[@]}" 2>&1 | tee "${BENCH_CAMERAS_OUT:-/dev/null}"
rc=${PIPESTATUS[0]}
[ -n "$work" ] && echo "bench-cameras: clip and logs kept in $work"
exit "$rc"
