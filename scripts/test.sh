#!/usr/bin/env bash
# The whole test suite (the README's second command; .ci/run runs it too).
# Tests that need a GPU print why they are skipped here; scripts/gpu-check.sh runs them on
# a GPU machine.
set -uo pipefail
cd "$(dirname "$0")/.."
# The one install step here, and why: CI (.ci/run) runs this command on a fresh machine
# without the setup command before it, so the Debian packages and the Rust toolchain may be
# missing. After setup it finds everything present and installs nothing.
# The run must not change the checkout (builds write only under target/, build/ and the
# cache): the state of tracked and unignored files before, compared at the end.
tree_before=$(git status --porcelain 2>/dev/null || true)
echo "== dependencies (scripts/install-deps.sh: a no-op when setup already ran)"
scripts/install-deps.sh || exit 1
export PATH="$HOME/.cargo/bin:$PATH"
# Every test uses its own runtime directory and keys; this keeps strays out of /run.
export CUFRAMES_RUNTIME_DIR="${CUFRAMES_RUNTIME_DIR:-$(mktemp -d /tmp/cuframes-tests.XXXXXX)}"
trap 'rm -rf "$CUFRAMES_RUNTIME_DIR"' EXIT

# Every stage runs, whatever an earlier one gave: one failure never hides the others' results.
# The summary at the end lists each stage's time and result; the exit status is 1 when any
# stage failed.
failed=()
summary=()
stage() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "== $name"
  # Not `( ... ) || rc=$?`: a subshell whose status a || tests runs with -e ignored inside.
  (set -euo pipefail; "$@")
  rc=$?
  local mark=ok
  if [ $rc -ne 0 ]; then
    mark="FAILED (exit $rc)"
    failed+=("$name")
  fi
  summary+=("$(printf '%6ss  %-18s %s' $((SECONDS - t0)) "$mark" "$name")")
}

build_ffmpeg() {
  # libcuframes into build/prefix, then scripts/build-ffmpeg.sh against it; the FFmpeg tests
  # (tests/ffmpeg_*.rs) run build/ffmpeg/bin/ffmpeg.
  cargo build --release -p cuframes
  scripts/install.sh "$PWD/build/prefix"
  # Two FFmpeg release lines: 9.0 (build/ffmpeg, the default) and 7.1 (Debian 13's,
  # build/ffmpeg-7.1), each with FFmpeg's own sample-free FATE tests (CUFRAMES_FATE=1; their
  # result is in build/ffmpeg-*/FATE). 8.1 builds the same way (scripts/build-ffmpeg.sh 8.1).
  for v in 9.0 7.1; do
    CUFRAMES_FATE=1 PKG_CONFIG_PATH="$PWD/build/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
      scripts/build-ffmpeg.sh "$v" >/dev/null
    sed -n 's/^make fate/FFmpeg '"$v"': make fate/p; s/^result/  FATE result/p' "build/ffmpeg-$v/FATE"
  done
}

cargo_tests() {
  # --no-fail-fast: one failing test binary never hides the results of the others.
  cargo test --workspace --release --no-fail-fast -- --test-threads=2 2>&1 | tee /tmp/cuframes-test.log
}

ffmpeg71_tests() {
  CUFRAMES_FFMPEG="$PWD/build/ffmpeg-7.1/bin/ffmpeg" cargo test --release --no-fail-fast --test ffmpeg_frames --test ffmpeg_snapshot \
    --test ffmpeg_pkt --test ffmpeg_options -- --test-threads=2 2>&1 | tee /tmp/cuframes-test-7.1.log
}

libav_api_tests() {
  local rc=0
  scripts/test-ffmpeg-sys.sh build/ffmpeg-9.0 || rc=1
  scripts/test-ffmpeg-sys.sh build/ffmpeg-7.1 || rc=1
  return $rc
}

python_tests() {
  # Three venvs: build/venv (Debian's python3), CPython 3.9 + the oldest NumPy supported, and
  # the newest CPython + the newest NumPy (build-python.sh --matrix makes them once). Each runs
  # the whole suite, and one failing never hides the others' results.
  scripts/build-python.sh --matrix
  local py_failed=() v
  for v in venv venv-oldest venv-newest; do
    if [ ! -x "build/$v/bin/python" ]; then
      echo "SKIP pytest in build/$v: it could not be made (build-python.sh said why above)"
      continue
    fi
    echo "-- pytest in build/$v: $("build/$v/bin/python" -c 'import sys, numpy; print("Python", sys.version.split()[0], "NumPy", numpy.__version__)')"
    build/$v/bin/python -m pytest python/tests -q -p no:cacheprovider || py_failed+=("build/$v")
  done
  if [ ${#py_failed[@]} -gt 0 ]; then
    echo "pytest failed in: ${py_failed[*]}" >&2
    return 1
  fi
}

loom_models() {
  # Its own build (RUSTFLAGS differ) in its own target directory, so the rest is not rebuilt.
  RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" cargo test -p cuframes-core --release --lib loom
}

gpu_tests_here() {
  # A GPU test without a GPU prints SKIPPED and returns, and cargo counts it "ok": the SKIPPED
  # lines are what did not run, counted here as skipped, never as passed. On a machine with a
  # GPU none may skip for want of one.
  local gpu_log
  gpu_log=$(mktemp /tmp/cuframes-gpu-tests.XXXXXX)
  if ! { cargo test --release -p cuframes-core --test cuda_vmm --test frame_ring_cuda --test rgb_batch_cuda --test batch_cuda -- --nocapture --test-threads=1 &&
    cargo test --release --test ffmpeg_frames -- ring_moved_from --nocapture --test-threads=1; } >"$gpu_log" 2>&1; then
    tail -50 "$gpu_log"; rm -f "$gpu_log"; return 1
  fi
  grep -o 'SKIPPED.*' "$gpu_log" | sort | uniq -c | while read -r n reason; do
    echo "$n GPU tests skipped: $reason"
  done
  if nvidia-smi -L >/dev/null 2>&1 && grep -qE 'SKIPPED( \(|: )no CUDA' "$gpu_log"; then
    echo "GPU tests skipped on a machine with a GPU (nvidia-smi sees one): that is a failure" >&2
    rm -f "$gpu_log"; return 1
  fi
  rm -f "$gpu_log"
}

no_leftovers() {
  local leftovers
  leftovers=$(comm -13 <(echo "$shm_before" | sort) <(ls /dev/shm | grep -E '^cuframes-' | sort) || true)
  if [ -n "$leftovers" ]; then
    echo "tests left SHM objects behind:" $leftovers >&2
    return 1
  fi
}

# The GPU benchmark's whole script on this machine: software decode, host rings, N = 1 and 2.
cameras_dry_run() {
  cargo build --release -p cuframes-core --example camera_reader && BENCH_CAMERAS_MODE=host scripts/bench-cameras.sh
}

checkout_unchanged() {
  local tree_after
  tree_after=$(git status --porcelain 2>/dev/null || true)
  if [ "$tree_before" != "$tree_after" ]; then
    echo "the test run changed the checkout:" >&2
    diff <(echo "$tree_before") <(echo "$tree_after") >&2 || true
    return 1
  fi
}

stage "cargo fmt --check" cargo fmt --all -- --check
stage "cargo clippy -D warnings" cargo clippy --workspace --all-targets --release -- -D warnings
stage "rustdoc without warnings (the library crates' docs and their links)" \
  env RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps -p cuframes-core -p cuframes -p cuframes-python
stage "kernel PTX is what its CUDA source gives (scripts/gen-ptx.sh --check)" scripts/gen-ptx.sh --check
stage "C link through pkg-config --static" scripts/check-c-link.sh
stage "the README's Rust and C examples compile and link (scripts/check-readme-examples.sh)" \
  scripts/check-readme-examples.sh
stage "FFmpeg with the cuframes components (cached: rebuilt only when its inputs change)" build_ffmpeg
stage "your own FFmpeg tree: scripts/patch-ffmpeg.sh, a broad configure, a full build (cached)" \
  scripts/test-patch-ffmpeg.sh 9.0
# SHM objects that exist before the run are not ours to judge.
shm_before=$(ls /dev/shm | grep -E '^cuframes-' || true)
stage "cargo test (release: the stress tests push millions of packets)" cargo_tests
stage "the FFmpeg tests again, against FFmpeg 7.1" ffmpeg71_tests
stage "libav* API tests (ffmpeg-sys-next), against each FFmpeg" libav_api_tests
stage "Python package (scripts/build-python.sh: rebuilt only when its inputs changed) and pytest" python_tests
stage "the many-cameras benchmark end to end on the host (BENCH_CAMERAS_MODE=host scripts/bench-cameras.sh)" \
  cameras_dry_run
# After the dry run, which builds the camera_reader example some of these tests run.
stage "the benchmarks' measuring scripts (steady_fps.py, proc_sched.py, the many-cameras benchmark's)" \
  build/venv/bin/python -m pytest scripts/tests -q -p no:cacheprovider
stage "memory-order models (loom: the seqlock copy and the ACK page's store/load; docs/testing.md)" loom_models
stage "GPU tests (they run on a GPU machine through scripts/gpu-check.sh; here they say why not)" gpu_tests_here
stage "no SHM objects left behind" no_leftovers
stage "the checkout is unchanged" checkout_unchanged

echo
echo "== summary (seconds, result, stage)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "${#failed[@]} stage(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "all ${#summary[@]} stages passed in $SECONDS s"
