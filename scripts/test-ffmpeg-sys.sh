#!/usr/bin/env bash
# The libav* API tests (tests/ffmpeg-sys: ffmpeg-sys-next bindings generated from the FFmpeg
# under test) against one built FFmpeg.
#
#   scripts/test-ffmpeg-sys.sh [PREFIX]     default build/ffmpeg (build-ffmpeg.sh's output)
#   scripts/test-ffmpeg-sys.sh --no-run PREFIX   build only; print the test binary's path
#
# Each FFmpeg gets its own cargo target directory (its bindings differ), under
# ${CARGO_TARGET_DIR:-target}/ffmpeg-sys-<version>.
set -euo pipefail
cd "$(dirname "$0")/.."
no_run=0
[[ ${1:-} == --no-run ]] && { no_run=1; shift; }
prefix=${1:-build/ffmpeg}
if [[ ! -f $prefix/lib/libavformat.a ]]; then
  echo "SKIPPED (no FFmpeg build at $prefix: run scripts/build-ffmpeg.sh)"
  exit 0
fi
prefix=$(readlink -f "$prefix")
version=$(sed -n 's/^ffmpeg \([0-9.]*\) .*/\1/p' "$prefix/BUILDINFO")
[[ -n $version ]] || { echo "test-ffmpeg-sys: $prefix/BUILDINFO names no FFmpeg version" >&2; exit 1; }
export FFMPEG_DIR=$prefix
# FFmpeg's .pc files name their dependencies: libcuframes (build/prefix, scripts/install.sh),
# dav1d and a static-only libx264 from build-ffmpeg.sh's deps prefix (linked as $prefix/deps).
export PKG_CONFIG_PATH="$PWD/build/prefix/lib/pkgconfig:$prefix/deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export CUFRAMES_FFMPEG_STATICLIB=$prefix/deps/staticlib
export CARGO_TARGET_DIR="$(readlink -f "${CARGO_TARGET_DIR:-target}")/ffmpeg-sys-$version"
manifest=tests/ffmpeg-sys/Cargo.toml
if [[ $no_run == 1 ]]; then
  cargo test --release --manifest-path "$manifest" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["executable"])'
  exit 0
fi
echo "== libav* API tests (ffmpeg-sys-next) against FFmpeg $version ($prefix)"
cargo fmt --manifest-path "$manifest" -- --check
cargo clippy --release --manifest-path "$manifest" --all-targets -- -D warnings
cargo test --release --manifest-path "$manifest" -- --test-threads=2
