#!/usr/bin/env bash
# Every GPU test and benchmark, with one summary.
#
#   scripts/gpu-check.sh build   # here (needs cargo): build the GPU binaries into .gpu/
#   scripts/gpu-check.sh run     # on the GPU machine (no cargo needed): run them all
#   scripts/gpu-check.sh         # both, on a machine that has cargo and a GPU
#
# .gpu/ is git-ignored; carry it to a GPU machine that has no toolchain. The summary ends
# with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
out=.gpu

build() {
  set -e
  export PATH="$HOME/.cargo/bin:$PATH"
  rm -rf "$out" && mkdir -p "$out"
  # Test executables, found through cargo's JSON messages.
  cargo test --release -p cuframes-core --test cuda_vmm --test frame_ring_cuda --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["target"]["name"], m["executable"])' | while read -r name exe; do cp "$exe" "$out/$name"; done
  cargo build --release -p cuframes-core --example frame_bench
  cargo build --release --bin cuframes-demo
  cp target/release/examples/frame_bench target/release/cuframes-demo "$out/"
  for f in "$out"/*; do strip --strip-debug "$f"; done
  cp scripts/gpu-check.sh "$out/"
  ls -la "$out"
  set +e
}

run() {
  local pass=0 fail=0 failed=()
  export CUFRAMES_RUNTIME_DIR
  CUFRAMES_RUNTIME_DIR=$(mktemp -d /tmp/cuframes-gpu.XXXXXX)
  step() { # name, command...
    local name=$1; shift
    echo "=== $name"
    if "$@"; then pass=$((pass + 1)); echo "--- $name: PASS"; else fail=$((fail + 1)); failed+=("$name"); echo "--- $name: FAIL"; fi
  }
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  step "CUDA VMM layer (alloc/export/import across processes, copies, events)" "$out/cuda_vmm" --test-threads=1 --nocapture
  step "frame ring on CUDA VMM (both policies, COPY/ZERO_COPY, 8 subscribers, bit-exact)" "$out/frame_ring_cuda" --test-threads=1 --nocapture
  step "demo on CUDA (4 subscriber processes, 1080p)" "$out/cuframes-demo" --frames 120 --subscribers 4 --cuda 0
  step "frame ring benchmark" "$out/frame_bench" --frames "${GPU_BENCH_FRAMES:-300}"
  rm -rf "$CUFRAMES_RUNTIME_DIR"
  echo
  echo "GPU check summary: ${failed[*]:-all steps passed}"
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

case "${1:-all}" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build|run]" >&2; exit 2 ;;
esac
