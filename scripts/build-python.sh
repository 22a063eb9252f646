#!/usr/bin/env bash
# The Python package: a venv in build/venv (system python3), maturin + numpy + pytest from
# PyPI, the abi3 wheel (CPython >= 3.9) into build/wheels/, installed into the venv.
# Skips the wheel build when it is newer than every input (CUFRAMES_PY_FORCE=1 rebuilds).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import maturin, numpy, pytest' 2>/dev/null; then
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q 'maturin>=1.5,<2' numpy pytest
fi
wheel=$(ls -t build/wheels/cuframes-*-abi3-*.whl 2>/dev/null | head -1 || true)
newer=""
if [ -n "$wheel" ]; then
  newer=$(find python/src python/cuframes python/Cargo.toml python/pyproject.toml core/src core/Cargo.toml Cargo.lock \
    -newer "$wheel" -print -quit)
fi
if [ -z "$wheel" ] || [ -n "$newer" ] || [ -n "${CUFRAMES_PY_FORCE:-}" ]; then
  echo "== building the cuframes wheel (maturin, abi3-py39)"
  rm -f build/wheels/cuframes-*.whl
  (cd python && "../$venv/bin/maturin" build --release -i "../$venv/bin/python" --out ../build/wheels)
  wheel=$(ls -t build/wheels/cuframes-*-abi3-*.whl | head -1)
  "$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"
elif ! "$venv/bin/python" -c 'import cuframes' 2>/dev/null; then
  "$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"
fi
echo "== $wheel installed in $venv"
