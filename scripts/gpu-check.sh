#!/usr/bin/env bash
# Every GPU test and benchmark, with one summary.
#
#   scripts/gpu-check.sh build   # here (needs cargo): build the GPU binaries into .gpu/
#   scripts/gpu-check.sh run     # on the GPU machine (no cargo needed): run them all
#   scripts/gpu-check.sh         # both, on a machine that has cargo and a GPU
#   GPU_CHECK_ONLY=ffmpeg scripts/gpu-check.sh run   # only the FFmpeg frame-path steps
#   GPU_CHECK_ONLY=python scripts/gpu-check.sh run   # only the Python package steps
#   GPU_CHECK_ONLY=core scripts/gpu-check.sh run     # all but the FFmpeg, Python and camera steps
#   GPU_CHECK_ONLY=ends scripts/gpu-check.sh run     # only the whole run of a short job (whole_run.py)
#   GPU_CHECK_ONLY=cameras scripts/gpu-check.sh run  # only the many-cameras benchmark (bench-cameras.sh;
#                                                      BENCH_CAMERAS_OUT=FILE keeps its output for
#                                                      scripts/plot_bench_cameras.py)
#   GPU_SKIP_BENCH=1                                   # leave out the benchmarks (tests only)
#   GPU_CHURN_SECS=30 / GPU_CHURN_MAX=8                # churn soak length, subscriber processes (a soak much
#                                                      shorter than 30 s may see no SIGSTOP and fail its
#                                                      "the churn really happened" check)
#   CUFRAMES_RELEASE_CYCLES=1000                       # release-then-destroy cycles
#   GPU_HOSTILE_SECS=10                                # hostile-subscriber run, per policy
#   GPU_SOAK_SECS=60                                   # ring-replacement soak on CUDA
#   GPU_BATCH_BENCH_BATCHES=500                        # batches per figure of the batch benchmark
#   GPU_CHECK_DIAG=1 scripts/gpu-check.sh build        # also the diagnostics of tools/diag/
#
# .gpu/ is git-ignored; carry it to a GPU machine that has no toolchain. The summary ends
# with "N passed, N failed, N skipped": a test that printed SKIPPED did not run and counts as
# skipped, never as passed, and one that skipped for want of a GPU fails its step here. Where
# one command may run 10 minutes at most, run it as four commands (GPU_CHECK_ONLY=core,
# =ffmpeg, =python, =cameras): core alone takes more than 5 minutes on an H200 (its frame
# benchmark is most of it), the many-cameras benchmark 2 to 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
out=.gpu

build() {
  set -e
  export PATH="$HOME/.cargo/bin:$PATH"
  rm -rf "$out" && mkdir -p "$out"
  # Test executables, found through cargo's JSON messages (the churn soak where it exists).
  local tests=(--test cuda_vmm --test frame_ring_cuda --test rgb_batch_cuda)
  [ -f core/tests/frame_ring_churn/main.rs ] && tests+=(--test frame_ring_churn)
  [ -f core/tests/hostile_subscriber/main.rs ] && tests+=(--test hostile_subscriber)
  [ -f core/tests/gpu_identity.rs ] && tests+=(--test gpu_identity --test hostile_publisher)
  [ -f core/tests/soak_replace.rs ] && tests+=(--test soak_replace)
  [ -f core/tests/batch_cuda.rs ] && tests+=(--test batch_cuda)
  # The GPU tests use the test kernels of feature `testing` (the dev-dependency turns it on;
  # named here too, so the script says what it builds).
  cargo test --release -p cuframes-core --features testing "${tests[@]}" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["target"]["name"], m["executable"])' | while read -r name exe; do cp "$exe" "$out/$name"; done
  cargo build --release -p cuframes-core --features testing --example frame_bench --example packet_bench \
    --example camera_reader --example batch_bench
  cargo build --release --bin cuframes-demo --bin cuframes
  local tgt=${CARGO_TARGET_DIR:-target}
  cp "$tgt/release/examples/frame_bench" "$tgt/release/examples/packet_bench" "$tgt/release/examples/camera_reader" \
    "$tgt/release/examples/batch_bench" "$tgt/release/cuframes-demo" "$tgt/release/cuframes" "$out/"
  # `cuframes snapshot` of a CUDA ring (tool/tests/snapshot.rs), run with $out/cuframes there.
  cargo test --release -p cuframes-tool --test snapshot --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["executable"])' | while read -r exe; do cp "$exe" "$out/tool_snapshot"; done
  for f in "$out"/*; do strip --strip-debug "$f"; done
  cp scripts/gpu-check.sh scripts/steady_fps.py scripts/ffbench.sh scripts/whole_run.py "$out/"
  # The many-cameras benchmark (camera_reader above is its frame reader).
  cp scripts/bench-cameras.sh scripts/bench_cameras.py scripts/bench_cameras_phase.py scripts/bench_cameras_stats.py "$out/"
  # The decode-pipeline diagnostics (tools/diag/README.md), only when asked for: they are a
  # lab bench, not a check.
  if [ -n "${GPU_CHECK_DIAG:-}" ]; then
    cp tools/diag/ff-readers-diag.sh tools/diag/ff-readers-ioctl.sh tools/diag/proc_sched.py \
      tools/diag/diag_subscriber.py "$out/"
    # The ioctl tracer of ff-readers-ioctl.sh (an LD_PRELOAD shim; plain C, glibc only).
    gcc -O2 -Wall -shared -fPIC -o "$out/ioctl_trace.so" tools/diag/ioctl_trace.c -ldl -lpthread
  fi
  # The Python package: the abi3 wheel (any CPython >= 3.9) and its GPU check.
  scripts/build-python.sh
  cp "$(ls -t build/wheels/cuframes-*-abi3-*.whl | head -1)" "$out/"
  cp python/tests/gpu_check.py python/tests/rgb_reference.py python/benches/gpu_bench.py \
    python/tests/gpu_streams.py examples/python/motion_stats.py "$out/"
  cp python/benches/batch_bench.py python/tests/batch_reference.py "$out/"
  # FFmpeg frame path (hwupload_cuframes, -f cuframes): the cuframes FFmpeg build and the real
  # sample (the decode-pipeline benchmark encodes its clips on the GPU machine).
  if [ -x build/ffmpeg/bin/ffmpeg ]; then
    cp build/ffmpeg/bin/ffmpeg build/ffmpeg/bin/ffprobe "$out/"
    cp fate-samples/test-25fps.h264 "$out/sample.h264"
  fi
  # The libav* API tests (tests/ffmpeg-sys) linked against the 9.0 build; their CUDA test
  # (input device -> AV_PIX_FMT_CUDA frames with hw_frames_ctx) runs only here.
  if [ -f build/ffmpeg/lib/libavformat.a ]; then
    cp "$(scripts/test-ffmpeg-sys.sh --no-run build/ffmpeg | tail -n1)" "$out/ffmpeg_sys_libav"
    strip --strip-debug "$out/ffmpeg_sys_libav"
  fi
  # tests/ffmpeg_frames.rs: its GPU tests (a ring moved between host and CUDA memory under
  # a running `-f cuframes` reader) run against $out/ffmpeg there.
  cargo test --release -p cuframes --test ffmpeg_frames --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["executable"])' | while read -r exe; do cp "$exe" "$out/ffmpeg_frames"; done
  strip --strip-debug "$out/ffmpeg_frames"
  ls -la "$out"
  set +e
}

# --- FFmpeg frame path on the GPU (hwupload_cuframes filter, cuframes input device) -------
# framemd5 columns 1..5 (stream, dts, pts, duration, size) and the hash; headers dropped.
ff_frames() { grep -v '^#' "$1"; }
ff_hashes() { grep -v '^#' "$1" | awk -F, '{gsub(/ /,"",$NF); print $NF}'; }
# Publisher on the sample (-hwaccel cuda frames) + N `-f cuframes` readers; every reader's
# frames after hwdownload (or after $3 filters) must equal the direct decode's.
ff_ring_check() { # readers, reader_opts, reader_filters, direct_filters, tag
  local n=$1 ropts=$2 rvf=$3 dvf=$4 tag=$5 ff="$out/ffmpeg" d key ok=0 pids=() i
  d=$(mktemp -d /tmp/cuframes-ff.XXXXXX); key="gpuff-$tag-$$"
  "$ff" -hide_banner -nostdin -y -hwaccel cuda -hwaccel_output_format cuda -i "$out/sample.h264" \
    -vf "$dvf" -f framemd5 "$d/direct.md5" 2>"$d/direct.log" || { tail -5 "$d/direct.log"; return 1; }
  for i in $(seq 1 "$n"); do
    # shellcheck disable=SC2086
    "$ff" -hide_banner -nostdin -y -f cuframes -framerate 25 -wait_publisher 30 -read_timeout 30 \
      $ropts -name "r$i" -i "$key" -vf "$rvf" -f framemd5 "$d/r$i.md5" 2>"$d/r$i.log" & pids+=($!)
  done
  "$ff" -hide_banner -nostdin -y -hwaccel cuda -hwaccel_output_format cuda -i "$out/sample.h264" \
    -vf "hwupload_cuframes=key=$key:policy=strict_wait:ring_size=8:ack_timeout=10:wait_subscribers=$n:wait_timeout=30" \
    -f null - 2>"$d/pub.log" || { echo "publisher failed"; tail -5 "$d/pub.log"; ok=1; }
  grep -h "published\|Publishing" "$d/pub.log"
  grep -q "cuframes host copies: 0" "$d/pub.log" || { echo "publisher made host copies"; ok=1; }
  for i in $(seq 1 "$n"); do
    wait "${pids[$((i - 1))]}" || { echo "reader $i failed"; tail -5 "$d/r$i.log"; ok=1; continue; }
    if [ "$i" = 1 ]; then grep -h "frames out" "$d/r$i.log"; fi
    grep -q "cuframes host copies: 0" "$d/r$i.log" || { echo "reader $i made host copies"; ok=1; }
    if ! diff -q <(ff_hashes "$d/direct.md5") <(ff_hashes "$d/r$i.md5") >/dev/null; then
      echo "reader $i: frame hashes differ from the direct decode"; ok=1
    elif [ "$i" = 1 ]; then
      echo "reader 1: $(ff_hashes "$d/r1.md5" | wc -l) frames, hashes identical to the direct decode" \
        "(full frame lines identical: $(diff -q <(ff_frames "$d/direct.md5") <(ff_frames "$d/r1.md5") >/dev/null && echo yes || echo no))"
    fi
  done
  rm -rf "$d"; rm -f /dev/shm/cuframes-"$key"*
  return "$ok"
}
# An RTSP camera into both rings on the GPU (the CUDA variant of tests/rtsp_cameras, whose
# GStreamer camera this machine lacks): FFmpeg is the RTSP server here, the publisher
# listening (-rtsp_flags listen) for the camera's push of a GOP-1 s clip in a loop, so its
# input is RTSP/RTP depacketised as from a camera. One ffmpeg relays the packets into the
# packet ring and decodes with nvdec into hwupload_cuframes (CUDA); a packet reader and a
# CUDA frame reader read at once. Checked: every process succeeds, 60 packets that
# decode without an error, the frames are the direct nvdec decode's pictures in order, and
# no host copy in the publisher or the frame reader.
ff_rtsp_camera() {
  local ff="$out/ffmpeg" d key port ok=0 pub pk fr src n
  d=$(mktemp -d /tmp/cuframes-rtsp.XXXXXX); key="gpurtsp-$$"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$ff" -v error -nostdin -y -i "$out/sample.h264" -frames:v 100 -c:v libx264 -preset veryfast -bf 0 \
    -g 25 -keyint_min 25 -sc_threshold 0 -x264-params repeat-headers=1 -f matroska "$d/clip.mkv" \
    2>"$d/clip.log" || { tail -5 "$d/clip.log"; return 1; }
  "$ff" -hide_banner -nostdin -y -hwaccel cuda -hwaccel_output_format cuda -i "$d/clip.mkv" \
    -vf hwdownload,format=nv12 -f framemd5 "$d/direct.md5" 2>"$d/direct.log" || { tail -5 "$d/direct.log"; return 1; }
  # -listen_timeout: FFmpeg's default (-1) is rejected in listen mode ("out of range").
  "$ff" -hide_banner -nostdin -hwaccel cuda -hwaccel_output_format cuda -rtsp_flags listen \
    -listen_timeout 30 -i "rtsp://127.0.0.1:$port/cam" -copyts \
    -map 0:v:0 -c copy -frames:v 60 -f cuframes_pkt "$key" \
    -map 0:v:0 -vf "hwupload_cuframes=key=$key:ring_size=16" -frames:v 60 -f null - 2>"$d/pub.log" & pub=$!
  "$ff" -hide_banner -nostdin -v error -f cuframes_pkt -wait_publisher 30 -read_timeout 30 -i "$key" \
    -c copy -f h264 "$d/packets.h264" 2>"$d/pk.log" & pk=$!
  "$ff" -hide_banner -nostdin -f cuframes -wait_publisher 30 -read_timeout 30 -i "$key" \
    -vf hwdownload,format=nv12 -f framemd5 "$d/frames.md5" 2>"$d/fr.log" & fr=$!
  sleep 1
  "$ff" -hide_banner -nostdin -v error -re -stream_loop -1 -i "$d/clip.mkv" -c copy -f rtsp \
    -rtsp_transport tcp "rtsp://127.0.0.1:$port/cam" 2>"$d/src.log" & src=$!
  wait "$pub" || { echo "publisher failed"; tail -5 "$d/pub.log"; ok=1; }
  kill "$src" 2>/dev/null; wait "$src" 2>/dev/null
  wait "$pk" || { echo "packet reader failed"; tail -5 "$d/pk.log"; ok=1; }
  wait "$fr" || { echo "frame reader failed"; tail -5 "$d/fr.log"; ok=1; }
  grep -q "cuframes host copies: 0" "$d/pub.log" || { echo "publisher made host copies"; ok=1; }
  grep -q "cuframes host copies: 0" "$d/fr.log" || { echo "frame reader made host copies"; ok=1; }
  n=$("$out/ffprobe" -v error -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$d/packets.h264" 2>"$d/count.log")
  [ "$n" = 60 ] && [ ! -s "$d/count.log" ] || { echo "packet reader: $n pictures (want 60)"; cat "$d/count.log"; ok=1; }
  python3 - "$d/direct.md5" "$d/frames.md5" <<'PY' || ok=1
import sys
def hashes(p):
    return [l.rsplit(",", 1)[1].strip() for l in open(p) if not l.startswith("#") and l.strip()]
want, seen = hashes(sys.argv[1]), hashes(sys.argv[2])
if len(seen) < 40:
    sys.exit(f"frame reader: {len(seen)} frames (want at least 40 of 60)")
at = want.index(seen[0]) if seen[0] in want else sys.exit("frame 0 is no picture of the clip")
for i, h in enumerate(seen[1:], 1):
    step = next((d for d in range(1, len(want)) if want[(at + d) % len(want)] == h), None)
    if step is None or step > 16:
        sys.exit(f"frame {i} is not the clip's next picture")
    at += step
print(f"RTSP camera (FFmpeg as the server) -> nvdec -> both rings: 60 packets decode cleanly; "
      f"{len(seen)} CUDA frames, the direct decode's pictures in order; no host copy")
PY
  rm -rf "$d"; rm -f /dev/shm/cuframes-"$key"*
  return "$ok"
}
# fps of a decode pipeline with and without the ring (docs/benchmarks.md, "FFmpeg decode
# pipeline"): long clips (1500 frames at 1080p, 600 at 4K; encoded here with libx264 on the
# GPU machine's cores, so nothing large is carried), decode only against decode +
# hwupload_cuframes with 0, 1 (strict_wait, zero copy) and 8 `-f cuframes` readers; each
# configuration GPU_BENCH_REPS (2) times, ratios to the decode-only run of the same round.
ff_bench() {
  local ff="$out/ffmpeg" d size rep readers ring cfg ref refw pids fps i key opts
  # shellcheck source=scripts/ffbench.sh
  . "$out/ffbench.sh"
  d=$(mktemp -d /tmp/cuframes-ffb.XXXXXX)
  for size in 1080p 4k; do
    case $size in
      1080p) ffbench_clip "$ff" 1920x1080 1500 "$d/clip.h264" ;;
      4k) ffbench_clip "$ff" 3840x2160 600 "$d/clip.h264" ;;
    esac
    for rep in $(seq 1 "${GPU_BENCH_REPS:-2}"); do
      ref=$(ffbench_fps "$d/win" "$ff" -hide_banner -nostdin -loglevel error -hwaccel cuda -hwaccel_output_format cuda \
        -i "$d/clip.h264")
      refw=$(cut -d' ' -f3 "$d/win")
      echo "$size round $rep: decode only (nvdec, CUDA frames): $ref fps (whole run: $refw fps)"
      # readers:ring_size. A STRICT_WAIT ring of 8 slots holds 8 frames in flight across
      # every reader's FFmpeg pipeline (each holds frames in its queues until its muxer is
      # done with them); 16 slots (the most v4 allows) shows what the ring's depth costs.
      for cfg in 0:8 1:8 8:8 1:16 8:16; do
        readers=${cfg%:*}; ring=${cfg#*:}
        key="gpuffb-$$-$size-$rep-$readers-$ring"; pids=()
        for i in $(seq 1 "$readers"); do
          "$ff" -hide_banner -nostdin -loglevel error -f cuframes -wait_publisher 30 -read_timeout 30 -name "b$i" \
            -i "$key" -f null - 2>"$d/r$i.log" & pids+=($!)
        done
        opts="hwupload_cuframes=key=$key:ring_size=$ring"
        [ "$readers" -gt 0 ] && opts="$opts:policy=strict_wait:wait_subscribers=$readers:wait_timeout=30:ack_timeout=10"
        # Steady state (scripts/steady_fps.py): 10 % to 90 % of the frames, so neither the
        # wait for the readers nor the end (the decoder's and the publisher's teardown, while
        # the readers close their CUDA contexts) is counted; the whole run is printed beside.
        # Verbose for the filter's closing line: where its frames waited (subscribers' ACKs,
        # queued publications), which tells a slow configuration's cause.
        fps=$(ffbench_fps "$d/win" "$ff" -hide_banner -nostdin -loglevel verbose -hwaccel cuda -hwaccel_output_format cuda \
          -i "$d/clip.h264" -vf "$opts" 2>"$d/pub.log")
        for i in "${pids[@]}"; do wait "$i" || echo "reader $i failed: $(tail -2 "$d/r$i.log")"; done
        echo "$size round $rep: decode + hwupload_cuframes, $readers reader(s), ring $ring: $fps fps = $(awk -v a="$fps" -v b="$ref" 'BEGIN { printf "%.1f", 100 * a / b }') % of decode only (whole run: $(cut -d' ' -f3 "$d/win") fps = $(awk -v a="$(cut -d' ' -f3 "$d/win")" -v b="$refw" 'BEGIN { printf "%.1f", 100 * a / b }') %)"
        grep -o 'waited for .*' "$d/pub.log" | sed 's/^/    /'
        rm -f /dev/shm/cuframes-"$key"*
      done
    done
  done
  rm -rf "$d"
}
# The Python package on the GPU (python/tests/gpu_check.py): FFmpeg decodes the sample with
# nvdec into hwupload_cuframes, a zero-copy Python subscriber imports every plane with
# torch.from_dlpack and cupy.from_dlpack, bit-exact against hwdownload. The wheel is unpacked
# onto PYTHONPATH (no network there for pip); a SKIPPED here (no torch/cupy) is a failure.
python_gpu() {
  local d whl log rc
  whl=$(ls "$out"/cuframes-*-abi3-*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] && [ -x "$out/ffmpeg" ] || { echo "no wheel or no ffmpeg in $out"; return 1; }
  d=$(mktemp -d /tmp/cuframes-py.XXXXXX)
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$d"
  log=$(mktemp /tmp/cuframes-py-log.XXXXXX)
  PYTHONPATH="$d${PYTHONPATH:+:$PYTHONPATH}" python3 "$out/gpu_check.py" "$out/ffmpeg" "$out/sample.h264" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count_skips "$log"
  grep -q '^PASS' "$log" || rc=1
  grep -q '^FAIL' "$log" && rc=1
  rm -rf "$d" "$log"
  return "$rc"
}
# Unpack the wheel into a temporary directory and run python3 with it on PYTHONPATH.
with_wheel() {
  local d whl rc
  whl=$(ls "$out"/cuframes-*-abi3-*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] || { echo "no wheel in $out"; return 1; }
  d=$(mktemp -d /tmp/cuframes-py.XXXXXX)
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$d"
  PYTHONPATH="$d${PYTHONPATH:+:$PYTHONPATH}" python3 "$@"; rc=$?
  rm -rf "$d"
  return "$rc"
}
# python/tests/gpu_streams.py (torch only, no FFmpeg): every check prints PASS or FAIL; a
# SKIPPED (no torch with CUDA) or a missing verdict fails the step.
python_streams() {
  local log rc
  log=$(mktemp /tmp/cuframes-streams-log.XXXXXX)
  with_wheel "$out/gpu_streams.py" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count_skips "$log"
  grep -q '^PASS' "$log" || rc=1
  grep -q '^FAIL' "$log" && rc=1
  rm -f "$log"
  return "$rc"
}
# examples/python/motion_stats.py beside an FFmpeg recorder, both on one camera ring fed by
# nvdec: the example sees every frame (strict_wait) and the recording has every frame too.
python_example() {
  local ff="$out/ffmpeg" d key n ok=0 pid rec
  d=$(mktemp -d /tmp/cuframes-ex.XXXXXX); key="gpuex-$$"
  n=$("$ff" -hide_banner -nostdin -i "$out/sample.h264" -f framemd5 - 2>/dev/null | grep -vc '^#')
  with_wheel "$out/motion_stats.py" "$key" --grid 4x4 --wait-publisher 30 >"$d/example.log" 2>&1 & pid=$!
  "$ff" -hide_banner -nostdin -y -f cuframes -framerate 25 -wait_publisher 30 -read_timeout 30 -name recorder \
    -i "$key" -vf hwdownload,format=nv12 -f framemd5 "$d/rec.md5" 2>"$d/rec.log" & rec=$!
  "$ff" -hide_banner -nostdin -y -hwaccel cuda -hwaccel_output_format cuda -readrate 4 -i "$out/sample.h264" \
    -vf "hwupload_cuframes=key=$key:policy=strict_wait:wait_subscribers=2:wait_timeout=30" \
    -f null - 2>"$d/pub.log" || { echo "publisher failed"; tail -5 "$d/pub.log"; ok=1; }
  wait "$pid" || { echo "the example failed"; ok=1; }
  wait "$rec" || { echo "the recorder failed"; tail -5 "$d/rec.log"; ok=1; }
  cat "$d/example.log"
  grep -q "^total $n frames" "$d/example.log" || { echo "the example did not see all $n frames"; ok=1; }
  [ "$(grep -vc '^#' "$d/rec.md5")" = "$n" ] || { echo "the recording lacks frames"; ok=1; }
  grep -q "zero copy True" "$d/example.log" || { echo "the example was not zero-copy"; ok=1; }
  rm -rf "$d"; rm -f /dev/shm/cuframes-"$key"*
  return "$ok"
}
# The whole run of a short job, its start and its end included (docs/benchmarks.md "The whole
# run"): readers started first, the publisher with wait_subscribers, timed from outside (process
# start to exit) and from its progress blocks, against decode only in the same round.
ends_steps() {
  step "FFmpeg: the whole run of a 1500-frame 1080p decode with 0, 1 and 8 readers started first, timed from outside and from its progress (scripts/whole_run.py)" ff_whole_run
}
ff_whole_run() {
  local d rc
  # shellcheck source=scripts/ffbench.sh
  . "$out/ffbench.sh"
  d=$(mktemp -d /tmp/cuframes-whole.XXXXXX)
  ffbench_clip "$out/ffmpeg" 1920x1080 1500 "$d/clip.h264"
  python3 "$out/whole_run.py" "$out/ffmpeg" "$d/clip.h264" "${GPU_BENCH_REPS:-2}" decode,pub0,pub1,pub8
  rc=$?
  rm -rf "$d"
  return "$rc"
}
# The many-cameras benchmark (scripts/bench-cameras.sh, docs/benchmarks.md "Many cameras on one
# GPU"): fails when a process of a camera failed, a reader missed a frame or a recording lacks
# a packet; its goals are reported, not checked.
camera_steps() {
  if [ ! -x "$out/ffmpeg" ] || [ ! -x "$out/camera_reader" ]; then
    skip_step "many cameras on one GPU" "no $out/ffmpeg or $out/camera_reader at build time"
    return 0
  fi
  step "many cameras on one GPU: N = 1, 4, 8, 16 (32 if the decoder keeps up) nvdec decodes publishing both rings, a zero-copy reader and a recorder each, against the same decodes without rings" \
    cameras_bench
}
# A SKIPPED (no GPU found) fails the step here, as for the GPU tests.
cameras_bench() {
  local log rc
  log=$(mktemp /tmp/cuframes-cameras-log.XXXXXX)
  bash "$out/bench-cameras.sh" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count_skips "$log"
  if grep -q 'SKIPPED' "$log"; then echo "the many-cameras benchmark skipped on the GPU machine"; rc=1; fi
  rm -f "$log"
  return "$rc"
}
# python/benches/batch_bench.py: 16 cameras of 1080p NV12 into one cuframes.Batch against the
# naive torch loop, with its checks (GPU = host conversion bit for bit, float64 reference, one
# launch per batch, no host copy). The cameras are FFmpeg processes decoding a generated clip
# with nvdec where $out/ffmpeg exists, Python publishers from device memory otherwise.
python_batch() {
  local d log rc args=()
  d=$(mktemp -d /tmp/cuframes-batch.XXXXXX)
  if [ -x "$out/ffmpeg" ]; then
    # shellcheck source=scripts/ffbench.sh
    . "$out/ffbench.sh"
    ffbench_clip "$out/ffmpeg" 1920x1080 300 "$d/clip.h264" && args=(--ffmpeg "$out/ffmpeg" --clip "$d/clip.h264")
  fi
  log=$(mktemp /tmp/cuframes-batch-log.XXXXXX)
  with_wheel "$out/batch_bench.py" --cameras "${GPU_BATCH_CAMERAS:-16}" --batches "${GPU_BATCH_BATCHES:-300}" \
    "${args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count_skips "$log"
  grep -q '^PASS' "$log" || rc=1
  grep -q '^FAIL' "$log" && rc=1
  grep -q '^SKIPPED' "$log" && rc=1
  rm -rf "$d" "$log"
  return "$rc"
}
python_steps() {
  step "Python: zero-copy CUDA frames into torch and cupy through DLPack, bit-exact vs hwdownload; to_rgb vs reference; publish from device memory" python_gpu
  step "Python: stream= rule on torch's default stream (release and publish ordered after it), to_rgb from two threads, frame drop without the GIL (python/tests/gpu_streams.py)" \
    python_streams
  step "Python example (examples/python/motion_stats.py) beside an FFmpeg recorder on one camera" python_example
  step "Python benchmark (python/benches/gpu_bench.py: import overhead, consumer fps, to_rgb vs D2D copy)" \
    with_wheel "$out/gpu_bench.py" --frames "${GPU_PY_BENCH_FRAMES:-3000}"
  step "Python Batch: 16 x 1080p NV12 into one 640x640 float16 letterbox batch vs the naive torch loop; GPU = host bit for bit, one launch per batch, no host copy (python/benches/batch_bench.py)" \
    python_batch
}
# Snapshots of a CUDA ring (docs/ffmpeg.md, "Snapshots"): the input device downloading
# (-output software), hwdownload in the graph, a JPEG, and `cuframes snapshot`. Every PNG
# has the sample's size; FFmpeg's PNGs are, pixel for pixel, one of the sample's frames
# decoded in software and converted by FFmpeg from NV12 (nvdec's frames are bit-exact with
# the software decoder's).
ff_snapshot_cuda() {
  local ff="$out/ffmpeg" d key ok=0 pub f size want
  d=$(mktemp -d /tmp/cuframes-snap.XXXXXX); key="gpusnap-$$"
  "$ff" -hide_banner -nostdin -v error -i "$out/sample.h264" -vf format=nv12 "$d/ref%03d.png" &&
    "$ff" -hide_banner -nostdin -v error -i "$d/ref%03d.png" -f framemd5 "$d/ref.md5" ||
    { echo "reference PNGs failed"; rm -rf "$d"; return 1; }
  "$ff" -hide_banner -nostdin -re -hwaccel cuda -hwaccel_output_format cuda -i "$out/sample.h264" \
    -vf "hwupload_cuframes=key=$key" -f null - 2>"$d/pub.log" & pub=$!
  snap() { # file, reader options and filters...
    local file=$1; shift
    timeout 30 "$ff" -hide_banner -nostdin -y -f cuframes -wait_publisher 10 "$@" -frames:v 1 -update 1 \
      "$d/$file" 2>"$d/$file.log" || { echo "snapshot $file failed:"; tail -5 "$d/$file.log"; return 1; }
  }
  snap sw.png -output software -i "$key" || ok=1
  snap dl.png -i "$key" -vf hwdownload,format=nv12 || ok=1
  snap sw.jpg -output software -i "$key" || ok=1
  timeout 30 "$out/cuframes" snapshot "$key" "$d/tool.png" --wait-publisher 10 || { echo "cuframes snapshot failed"; ok=1; }
  for f in sw.png dl.png sw.jpg tool.png; do
    [ -f "$d/$f" ] || continue
    size=$("$out/ffprobe" -v error -show_entries stream=width,height -of csv=p=0 "$d/$f")
    if [ "$size" = "320,240" ]; then echo "$f: 320x240"; else echo "$f: size '$size', expected 320,240"; ok=1; fi
  done
  for f in sw.png dl.png; do
    [ -f "$d/$f" ] || continue
    want=$("$ff" -hide_banner -nostdin -v error -i "$d/$f" -f framemd5 - | ff_hashes /dev/stdin)
    if [ -n "$want" ] && ff_hashes "$d/ref.md5" | grep -qx "$want"; then
      echo "$f: pixels identical to one of the sample's frames converted by FFmpeg"
    else
      echo "$f: pixels are none of the sample's frames (hash '$want')"; ok=1
    fi
  done
  kill "$pub" 2>/dev/null; wait "$pub" 2>/dev/null
  rm -rf "$d"; rm -f /dev/shm/cuframes-"$key"*
  return "$ok"
}
tool_snapshot_cuda() {
  CUFRAMES_TOOL_BIN="$PWD/$out/cuframes" gpu_test "$out/tool_snapshot" --exact a_cuda_ring_is_downloaded_and_converted --nocapture
}
ffmpeg_sys_gpu() {
  CUFRAMES_SAMPLE_H264="$out/sample.h264" gpu_test "$out/ffmpeg_sys_libav" --test-threads=1 --nocapture
}
ff_ring_moved() {
  CUFRAMES_FFMPEG="$PWD/$out/ffmpeg" gpu_test "$out/ffmpeg_frames" ring_moved --test-threads=1 --nocapture
}
ffmpeg_steps() {
  [ -x "$out/ffmpeg" ] || { skip_step "FFmpeg frame checks" "no $out/ffmpeg: build/ffmpeg missing at build time"; return 0; }
  step "FFmpeg: -hwaccel cuda into hwupload_cuframes, 1 reader, hwdownload = direct decode, no host copy" \
    ff_ring_check 1 "" "hwdownload,format=nv12" "hwdownload,format=nv12" one
  step "FFmpeg: same with 8 -f cuframes readers" \
    ff_ring_check 8 "" "hwdownload,format=nv12" "hwdownload,format=nv12" eight
  step "FFmpeg: reader mode=copy (device copies), 2 readers" \
    ff_ring_check 2 "-mode copy" "hwdownload,format=nv12" "hwdownload,format=nv12" copy
  step "FFmpeg: scale_cuda after the input device = scale_cuda after the decoder" \
    ff_ring_check 1 "" "scale_cuda=w=160:h=120,hwdownload,format=nv12" "scale_cuda=w=160:h=120,hwdownload,format=nv12" scale
  step "FFmpeg: snapshots of a CUDA ring (-output software, hwdownload; PNG and JPEG) and cuframes snapshot" \
    ff_snapshot_cuda
  step "FFmpeg: an RTSP camera (FFmpeg RTSP server) relayed into the packet ring and decoded once with nvdec into hwupload_cuframes; packet and frame readers at once" \
    ff_rtsp_camera
  [ -n "${GPU_SKIP_BENCH:-}" ] || step "FFmpeg: decode pipeline fps with and without the ring (1080p 1500 frames, 4K 600 frames; 0/1/8 readers)" ff_bench
  [ -n "${GPU_SKIP_BENCH:-}" ] || ends_steps
  if [ -x "$out/ffmpeg_frames" ]; then
    step "FFmpeg: -f cuframes follows a ring moved from host to CUDA memory and back (tests/ffmpeg_frames.rs), bit-exact" \
      ff_ring_moved
  fi
  if [ -x "$out/ffmpeg_sys_libav" ]; then
    step "libav* API (ffmpeg-sys-next): cuframes input device gives AV_PIX_FMT_CUDA frames with hw_frames_ctx, bit-exact; demuxer, muxer, filter graph, failed open" \
      ffmpeg_sys_gpu
  fi
}

# Tests that printed SKIPPED (cargo's harness counts them "ok"): counted apart, with why.
skipped=0
skip_reasons=()
count_skips() { # log
  local line
  while IFS= read -r line; do
    skipped=$((skipped + 1)); skip_reasons+=("$line")
  done < <(grep -o 'SKIPPED.*' "$1")
}
# A GPU test binary that must not skip here: "SKIPPED (no CUDA ...)" / "SKIPPED: no CUDA ..."
# on the GPU machine is a failure, not a pass; so is a run in which no test ran (a filter that
# matches nothing any more). Other skips (a test of the no-driver error, which a GPU machine
# cannot run) are counted in the summary.
gpu_test() {
  local log rc
  log=$(mktemp /tmp/cuframes-gpu-test.XXXXXX)
  "$@" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
  count_skips "$log"
  if grep -qE 'SKIPPED( \(|: )no CUDA' "$log"; then echo "a GPU test skipped on the GPU machine"; rc=1; fi
  if grep -q '^running 0 tests' "$log" && ! grep -qE '^running [1-9]' "$log"; then echo "no test ran"; rc=1; fi
  rm -f "$log"
  return "$rc"
}
# The churn soak (core/tests/frame_ring_churn/) with its slots on CUDA VMM device 0.
# At most 8 subscriber processes (CI: 33): on an H200 a subscriber process's CUDA start-up
# (driver + context) takes 9.5 s on average with up to 33 starting at once, 1.3 s with 8, so
# with 33 most of a 15 s soak is start-up and too few sessions run for the soak's "the churn
# really happened" checks (rejoins, stalls, zombie ACKers) to hold.
churn_cuda() {
  CUFRAMES_CHURN_MEMORY=cuda CUFRAMES_CHURN_SECS="${GPU_CHURN_SECS:-30}" CUFRAMES_CHURN_MAX="${GPU_CHURN_MAX:-8}" \
    gpu_test "$out/frame_ring_churn" --nocapture
}
# The ring-replacement soak (core/tests/soak_replace.rs) with its slots on CUDA VMM device 0:
# reader processes import CUDA slots, fork children that drop them, and are SIGKILLed.
soak_cuda() {
  CUFRAMES_SOAK_MEMORY=cuda CUFRAMES_SOAK_SECS="${GPU_SOAK_SECS:-60}" \
    gpu_test "$out/soak_replace" --exact replacing_the_ring_under_churn_for_a_while --nocapture
}
# The hostile-subscriber run (core/tests/hostile_subscriber/) with its slots on CUDA VMM.
# It needs root and setpriv (the hostile child runs as uid 65534): a skip here is a failure.
# The binary is copied where uid 65534 can execute it (the checkout may sit under /root).
hostile_cuda() {
  local d rc log
  d=$(mktemp -d /tmp/cuframes-hostile.XXXXXX); chmod 755 "$d"
  cp "$out/hostile_subscriber" "$d/" && chmod 755 "$d/hostile_subscriber"
  log=$(mktemp /tmp/cuframes-hostile-log.XXXXXX)
  CUFRAMES_HOSTILE_MEMORY=cuda CUFRAMES_HOSTILE_SECS="${GPU_HOSTILE_SECS:-10}" \
    "$d/hostile_subscriber" --test-threads=1 --nocapture 2>&1 | tee "$log" |
    grep -E '^(StrictWait|DropOldest) on|^honest [0-9]|^hostile: exit|slot memfds|^GAP|SKIPPED|panicked|^test result'
  rc=${PIPESTATUS[0]}
  count_skips "$log"
  if grep -q 'SKIPPED' "$log"; then echo "the hostile-subscriber run skipped on the GPU machine"; rc=1; fi
  rm -rf "$d" "$log"
  return "$rc"
}
# Tests of frame_ring_cuda that get a summary line of their own (and are skipped in its main step).
ring_own_steps=(release::release_then_destroy_cycles_tear_down_on_our_thread
  release::dropping_a_zero_copy_frame_waits_for_the_gpu_work_queued_before
  release::dropping_a_copy_frame_waits_for_the_gpu_work_queued_before_its_buffer_is_reused
  context::no_call_replaces_the_callers_current_context)

run() {
  local pass=0 fail=0 failed=() t skips=()
  for t in "${ring_own_steps[@]}"; do skips+=(--skip "$t"); done
  export CUFRAMES_RUNTIME_DIR
  CUFRAMES_RUNTIME_DIR=$(mktemp -d /tmp/cuframes-gpu.XXXXXX)
  step() { # name, command...
    local name=$1; shift
    echo "=== $name"
    if "$@"; then pass=$((pass + 1)); echo "--- $name: PASS"; else fail=$((fail + 1)); failed+=("$name"); echo "--- $name: FAIL"; fi
  }
  skip_step() { # name, why: a step that cannot run here, counted as skipped
    echo "=== $1: SKIPPED ($2)"
    skipped=$((skipped + 1)); skip_reasons+=("SKIPPED step $1 ($2)")
  }
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  if [ "${GPU_CHECK_ONLY:-}" = ffmpeg ]; then ffmpeg_steps
  elif [ "${GPU_CHECK_ONLY:-}" = python ]; then python_steps
  elif [ "${GPU_CHECK_ONLY:-}" = cameras ]; then camera_steps
  elif [ "${GPU_CHECK_ONLY:-}" = ends ]; then ends_steps; else
  step "CUDA VMM layer (alloc/export/import across processes, copies, events)" gpu_test "$out/cuda_vmm" --test-threads=1 --nocapture
  step "batched RGB conversion (rgb_batch_cuda): kernel = convert_batch_host bit for bit (every format, dtype, layout, resize, normalisation; mixed batch), one launch per batch, parameter slots reused safely" \
    gpu_test "$out/rgb_batch_cuda" --test-threads=1 --nocapture
  step "frame ring on CUDA VMM (both policies, COPY/ZERO_COPY, 8 subscribers, bit-exact)" gpu_test "$out/frame_ring_cuda" --test-threads=1 --nocapture "${skips[@]}"
  step "release on a stream, then subscriber destroy, x${CUFRAMES_RELEASE_CYCLES:-1000}: torn down on our thread, no failed driver release, memory and mappings flat" \
    gpu_test "$out/frame_ring_cuda" --exact release::release_then_destroy_cycles_tear_down_on_our_thread --test-threads=1 --nocapture
  step "dropping a zero-copy CUDA frame waits for the GPU work queued before it, then ACKs" \
    gpu_test "$out/frame_ring_cuda" --exact release::dropping_a_zero_copy_frame_waits_for_the_gpu_work_queued_before --test-threads=1 --nocapture
  step "dropping a COPY CUDA frame waits for the GPU work queued on it before its buffer is reused" \
    gpu_test "$out/frame_ring_cuda" --exact release::dropping_a_copy_frame_waits_for_the_gpu_work_queued_before_its_buffer_is_reused --test-threads=1 --nocapture
  step "no call replaces the caller's current context (own cuCtxCreate context)" \
    gpu_test "$out/frame_ring_cuda" --exact context::no_call_replaces_the_callers_current_context --test-threads=1 --nocapture
  if [ -x "$out/frame_ring_churn" ]; then
    step "churn soak on CUDA VMM (both policies, ${GPU_CHURN_SECS:-30} s each, up to ${GPU_CHURN_MAX:-8} subscriber processes)" churn_cuda
  else
    skip_step "churn soak on CUDA" "no $out/frame_ring_churn: core/tests/frame_ring_churn/ missing at build time"
  fi
  if [ -x "$out/soak_replace" ]; then
    step "CUDA ring replaced every 50 ms under STRICT_WAIT load (${GPU_SOAK_SECS:-60} s; readers join, leave, fork, are SIGKILLed): no hang, crash or wrong frame" \
      soak_cuda
  fi
  if [ -x "$out/hostile_subscriber" ]; then
    step "hostile subscriber on CUDA VMM (both policies, ${GPU_HOSTILE_SECS:-10} s each): 0 wrong frames, no crash, no stall" hostile_cuda
  else
    skip_step "hostile subscriber on CUDA" "no $out/hostile_subscriber at build time"
  fi
  if [ -x "$out/gpu_identity" ]; then
    step "GPU identity: the ring's UUID resolved under CUDA_VISIBLE_DEVICES variations, an invisible or other GPU refused naming both UUIDs" \
      gpu_test "$out/gpu_identity" --test-threads=1 --nocapture
    step "GPU identity: an explicit device that is another GPU is refused (hostile_publisher)" \
      gpu_test "$out/hostile_publisher" --exact an_explicit_device_that_is_another_gpu_is_refused_naming_both_uuids --nocapture
  fi
  if [ -x "$out/tool_snapshot" ]; then
    step "cuframes snapshot of CUDA rings (nv12, p010, yuv420p, bgra): the PNG bit-exact against to_rgb_host of the published frame" \
      tool_snapshot_cuda
  fi
  if [ -x "$out/batch_cuda" ]; then
    step "batch reader on CUDA rings: bit-exact vs convert_batch_host, one launch per batch, no host copy, a slot released only after the kernel that reads it (core/tests/batch_cuda.rs)" \
      gpu_test "$out/batch_cuda" --test-threads=1 --nocapture
  fi
  step "demo on CUDA (4 subscriber processes, 1080p)" "$out/cuframes-demo" --frames 120 --subscribers 4 --cuda 0
  if [ -z "${GPU_SKIP_BENCH:-}" ]; then
    step "frame ring benchmark" "$out/frame_bench" --frames "${GPU_BENCH_FRAMES:-300}"
    step "batched RGB conversion benchmark (16 x 1080p NV12 into 640x640 float16 letterbox: one launch vs 16 per-camera to_rgb)" \
      "$out/batch_bench" --batches "${GPU_BATCH_BENCH_BATCHES:-500}"
    # The packet ring needs no GPU; it runs here for this machine's cores (docs/benchmarks.md).
    step "packet ring benchmark (CPU)" "$out/packet_bench" "${GPU_PKT_BENCH_SECS:-4}" "${GPU_PKT_BENCH_PACKETS:-20000}"
  fi
  if [ "${GPU_CHECK_ONLY:-}" != core ]; then
    ffmpeg_steps
    python_steps
    [ -n "${GPU_SKIP_BENCH:-}" ] || camera_steps
  fi
  fi
  rm -rf "$CUFRAMES_RUNTIME_DIR"
  echo
  echo "GPU check summary: ${failed[*]:-all steps passed}"
  if [ "$skipped" -gt 0 ]; then
    echo "skipped (neither passed nor failed):"
    printf '  %s\n' "${skip_reasons[@]}" | sort | uniq -c
  fi
  echo "$pass passed, $fail failed, $skipped skipped"
  [ "$fail" -eq 0 ]
}

case "${1:-all}" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build|run]" >&2; exit 2 ;;
esac
