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
  # Every FFmpeg tree the test suite uses is built here, once: 9.0 (build/ffmpeg, the demo's),
  # 7.1 (Debian 13's line) and the broad "bring your own tree" build. Each keeps its object
  # tree, so scripts/test.sh runs FATE on it and compiles no FFmpeg line again.
  export PKG_CONFIG_PATH="$root/build/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  echo "== building FFmpeg 9.0 with --enable-libcuframes (cached; set CUFRAMES_SKIP_FFMPEG=1 to skip)"
  scripts/build-ffmpeg.sh 9.0
  echo "== building FFmpeg 7.1 with --enable-libcuframes (cached)"
  scripts/build-ffmpeg.sh 7.1
  echo "== your own FFmpeg tree: scripts/patch-ffmpeg.sh on 9.0, a broad configure, a full build (cached)"
  scripts/test-patch-ffmpeg.sh 9.0
fi

echo "== demo: one publisher, four subscriber processes, 1080p NV12 frames verified bit for bit"
./target/release/cuframes-demo --frames 200 --subscribers 4
if [ -x scripts/demo-ffmpeg.sh ] && [ -z "${CUFRAMES_SKIP_FFMPEG:-}" ]; then
  scripts/demo-ffmpeg.sh
fi
