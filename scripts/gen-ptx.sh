#!/usr/bin/env bash
# Regenerate the PTX of cuframes' product kernels from their CUDA C sources, with Debian's clang
# (no CUDA toolkit needed). `--check`: fail if a committed .ptx differs from what its .cu gives
# (scripts/test.sh runs this, so a kernel edit cannot ship with stale PTX).
#
# Kernels: core/src/rgb/kernel.cu -> kernel.ptx (RGB conversion), core/src/rgb/batch/kernel.cu
# -> kernel.ptx (batched conversion: resize, normalisation). The test kernels
# (core/src/testing/kernels.cu) are generated with nvcc on the GPU machine; see that file.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = --check ] && check=1
CLANG=${CLANG:-clang}
command -v "$CLANG" >/dev/null || { echo "gen-ptx: $CLANG not found (apt-get install clang)" >&2; exit 1; }
status=0
for cu in core/src/rgb/*.cu core/src/rgb/batch/*.cu; do
  ptx=${cu%.cu}.ptx
  tmp=$(mktemp)
  # -O3 and no FP contraction (see the .cu); sm_75 = Turing, the oldest GPU with the features
  # the VMM path needs anyway.
  "$CLANG" --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_75 -O3 \
    -ffp-contract=off -S -o "$tmp" "$cu"
  if [ "$check" = 1 ]; then
    if ! cmp -s "$tmp" "$ptx"; then
      echo "gen-ptx: $ptx is stale: run scripts/gen-ptx.sh and commit it" >&2
      status=1
    fi
    rm -f "$tmp"
  else
    mv "$tmp" "$ptx"
    echo "gen-ptx: wrote $ptx ($("$CLANG" --version | head -1))"
  fi
done
exit "$status"
