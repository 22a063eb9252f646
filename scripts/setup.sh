#!/usr/bin/env bash
# The README's first command: install what a fresh Debian machine lacks, build everything,
# install libcuframes into build/prefix, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "== building the workspace (release)"
cargo build --workspace --release --bins

echo "== the Python package (build/venv, wheel in build/wheels; CPython 3.9 and the newest for the tests)"
# --matrix: also the venvs that scripts/test.sh tests the oldest and the newest Python and
# NumPy in, with CPythons built from Debian's sources into ~/.cache/cuframes/cpython (once, minutes).
scripts/build-python.sh --matrix

echo "== installing libcuframes into build/prefix"
scripts/install.sh "$root/build/prefix"

if [ -x scripts/build-ffmpeg.sh ] && [ -z "${CUFRAMES_SKIP_FFMPEG:-}" ]; then
  echo "== building FFmpeg with --enable-libcuframes (cached; set CUFRAMES_SKIP_FFMPEG=1 to skip)"
  PKG_CONFIG_PATH="$root/build/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" scripts/build-ffmpeg.sh
fi

echo "== demo: one publisher, four subscriber processes, 1080p NV12 frames verified bit for bit"
./target/release/cuframes-demo --frames 200 --subscribers 4
if [ -x scripts/demo-ffmpeg.sh ] && [ -z "${CUFRAMES_SKIP_FFMPEG:-}" ]; then
  scripts/demo-ffmpeg.sh
fi
