#!/usr/bin/env bash
# The Python package: a venv in build/venv (system python3) with maturin, ziglang and
# auditwheel (to build and check the wheel) and numpy + pytest (to test it); the abi3 wheel
# (CPython >= 3.9) built into build/wheels/ for manylinux2014 (glibc 2.17: Ubuntu 20.04,
# RHEL 8, Amazon Linux 2) by linking through zig, checked with `auditwheel show`, and
# installed in build/venv. Skips the wheel build when it is newer than every input
# (CUFRAMES_PY_FORCE=1 rebuilds).
#
# --matrix also makes the venvs that scripts/test.sh runs the suite in besides build/venv:
#   build/venv-oldest  CPython 3.9 (the oldest the wheel claims) + NumPy $NUMPY_OLDEST
#   build/venv-newest  the newest CPython in Debian + the newest NumPy
# with CPythons built from Debian's sources (scripts/build-cpython.sh, cached in
# ~/.cache/cuframes/cpython). A venv that cannot be made (no network on the first run) is reported as
# SKIP with its reason, and scripts/test.sh says so again; the others go on.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
matrix=""
[ "${1:-}" = --matrix ] && matrix=1

# The oldest NumPy the package supports (pyproject.toml's extras say the same): 1.23 is the
# first with the public np.from_dlpack (1.22 has only np._from_dlpack).
NUMPY_OLDEST=1.23.0
# What builds and checks the wheel. ziglang links against glibc 2.17 symbols from any host;
# its minor is pinned because cargo-zigbuild (inside maturin) follows zig's command line.
BUILD_REQS=("maturin>=1.9,<2" "ziglang>=0.17,<0.18" "auditwheel>=6" numpy pytest)

venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  python3 -m venv "$venv"
fi
# A stamp of what was installed: a change of BUILD_REQS installs again, nothing else does.
if [ "$(cat "$venv/.cuframes-build-reqs" 2>/dev/null)" != "${BUILD_REQS[*]}" ]; then
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q --upgrade "${BUILD_REQS[@]}"
  echo "${BUILD_REQS[*]}" >"$venv/.cuframes-build-reqs"
fi

# Every input of the wheel: the binding, the crates it is built from, the metadata.
inputs=(python/src python/cuframes python/Cargo.toml python/pyproject.toml python/README.md LICENSE
  core/src core/Cargo.toml Cargo.toml Cargo.lock)
[ -d tool ] && inputs+=(tool/src tool/Cargo.toml)
wheel=$(ls -t build/wheels/cuframes-*-abi3-*.whl 2>/dev/null | head -1 || true)
newer=""
if [ -n "$wheel" ]; then
  newer=$(find "${inputs[@]}" -newer "$wheel" -print -quit)
fi
if [ -z "$wheel" ] || [ -n "$newer" ] || [ -n "${CUFRAMES_PY_FORCE:-}" ]; then
  echo "== building the cuframes wheel (maturin --zig, abi3-py39, manylinux2014)"
  rm -f build/wheels/cuframes-*.whl
  # The venv first on PATH: cargo-zigbuild runs `python3 -m ziglang`.
  (cd python && PATH="$PWD/../$venv/bin:$PATH" maturin build --release --zig --compatibility manylinux2014 \
    -i "../$venv/bin/python" --out ../build/wheels)
  wheel=$(ls -t build/wheels/cuframes-*-abi3-*.whl | head -1)
  # What the wheel really needs, read from its ELF symbols: glibc 2.17 at most.
  shown=$("$venv/bin/auditwheel" show "$wheel")
  tag=$(echo "$shown" | tr -s ' \n' '  ' | grep -o 'consistent with the following platform tag: "manylinux_2_[0-9]*_' |
    grep -o 'manylinux_2_[0-9]*' || true)
  if [ -z "$tag" ] || [ "${tag#manylinux_2_}" -gt 17 ]; then
    echo "$shown" >&2
    echo "build-python: $wheel needs more than manylinux_2_17 (glibc 2.17): ${tag:-unknown}" >&2
    rm -f "$wheel"
    exit 1
  fi
  echo "== auditwheel: $(basename "$wheel") is $tag"
fi

# Installs the wheel into a venv unless that very wheel is there already.
install_wheel() {
  local v=$1 stamp
  stamp="$(basename "$wheel") $(stat -c %Y "$wheel")"
  if [ "$(cat "$v/.cuframes-wheel" 2>/dev/null)" != "$stamp" ] || ! "$v/bin/python" -c 'import cuframes' 2>/dev/null; then
    "$v/bin/pip" install -q --force-reinstall --no-deps "$wheel"
    echo "$stamp" >"$v/.cuframes-wheel"
  fi
}
install_wheel "$venv"
echo "== $wheel installed in $venv"
[ -n "$matrix" ] || exit 0

# make_venv NAME WHICH-PYTHON NUMPY-SPEC: build/venv-NAME from build-cpython.sh's WHICH, with
# NUMPY-SPEC and pytest (wheels only: a NumPy without a wheel for that Python is a SKIP, not
# a half-hour source build). Made once; the test loop only reinstalls the cuframes wheel.
make_venv() {
  local name=$1 which=$2 numpy=$3 v=build/venv-$1 py rc=0
  # Made again only when what it should hold changes (another NumPy pin, another CPython)
  # or its interpreter is gone (the cached CPython removed).
  if [ "$(cat "$v/.cuframes-ready" 2>/dev/null)" != "$which $numpy" ] || ! "$v/bin/python" -c '' 2>/dev/null; then
    rm -rf "$v"
    py=$(scripts/build-cpython.sh "$which" | tail -1) || rc=$?
    if [ $rc -ne 0 ]; then
      echo "SKIP build/venv-$name: no CPython $which (scripts/build-cpython.sh said why above; exit $rc)"
      return 0
    fi
    "$py" -m venv "$v"
    if ! { "$v/bin/python" -m pip install -q --upgrade pip &&
      "$v/bin/pip" install -q --only-binary numpy "$numpy" pytest; }; then
      echo "SKIP build/venv-$name: pip could not install $numpy + pytest for $("$py" -V) (PyPI unreachable?)"
      rm -rf "$v"
      return 0
    fi
    echo "$which $numpy" >"$v/.cuframes-ready"
  fi
  install_wheel "$v"
  echo "== build/venv-$name: $("$v/bin/python" -V), NumPy $("$v/bin/python" -c 'import numpy; print(numpy.__version__)')"
}
make_venv oldest 3.9 "numpy==$NUMPY_OLDEST"
make_venv newest newest numpy
