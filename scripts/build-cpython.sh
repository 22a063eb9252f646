#!/usr/bin/env bash
# A CPython of another version than the system's, for testing the Python package on the
# oldest and the newest Python it supports: built from Debian's source package of that
# version (the upstream tarball Debian ships, signed through its archive) into
# $CUFRAMES_CACHE/cpython/<version>/ (default ~/.cache/cuframes, beside the FFmpeg builds: a
# fresh clone on the same machine reuses them). Nothing is installed in system paths: apt runs
# with its own lists and cache under the same directory.
#
#   scripts/build-cpython.sh 3.9       # Debian 11's python3.9
#   scripts/build-cpython.sh newest    # the newest python3.N in Debian unstable
#
# Prints the interpreter's path on the last line of stdout. Exits 3 with a line on stderr
# when the source cannot be had (no network, the suite gone), so that callers can say SKIP.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:?usage: build-cpython.sh 3.9|newest}
top=${CUFRAMES_CACHE:-$HOME/.cache/cuframes}/cpython
mkdir -p "$top"
# One build at a time per cache (two checkouts' test runs may ask at once); the second one
# then finds the first one's interpreter.
exec 9>"$top/.lock"
flock 9

# An interpreter that runs and has what venv + pip need (ssl for PyPI, ensurepip, zlib).
usable() {
  [ -x "$1" ] && "$1" -c 'import ssl, ensurepip, zlib, ctypes, venv' >/dev/null 2>&1
}

# The newest one already built, when asked for "newest": the test loop never downloads.
if [ "$want" = newest ] && [ -L "$top/newest" ] && usable "$top/newest/bin/python3"; then
  echo "$top/newest/bin/python3"
  exit 0
fi
if [ "$want" != newest ] && usable "$top/$want/bin/python$want"; then
  echo "$top/$want/bin/python$want"
  exit 0
fi

# Debian 11 carries 3.9 (Debian 12 has only 3.11); unstable carries the newest.
case "$want" in
  3.9) suite=bullseye ;;
  newest) suite=sid ;;
  *) echo "build-cpython: no Debian suite known for Python $want" >&2; exit 2 ;;
esac

apt_dir=$top/apt/$suite
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
echo "deb-src http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o APT::Sandbox::User=root -o Acquire::Retries=2)
if ! timeout 300 apt-get "${apt_opts[@]}" -qq --error-on=any update >&2; then
  echo "build-cpython: cannot read Debian's $suite source index (network?)" >&2
  exit 3
fi
# Candidates, best first: "python3.N VERSION" lines of released versions (no ~rc, ~b).
# A mirror or proxy may not serve every version that the index names yet (here, unstable's
# python3.15 and 3.14 were missing), so the first one whose source downloads is built.
if [ "$want" = newest ]; then
  names=$(seq 40 -1 12 | sed 's/^/python3./')
else
  names=python$want
fi
candidates=$(for name in $names; do
  apt-cache "${apt_opts[@]}" showsrc --only-source "$name" 2>/dev/null | sed -n "s/^Version: /$name /p" |
    grep -v '~' | sort -k2 -V -r || true
done)
if [ -z "$candidates" ]; then
  echo "build-cpython: no python$want source package in Debian $suite" >&2
  exit 3
fi
# A CPython already built from an earlier run counts: no download at all then.
for name in $(echo "$candidates" | cut -d' ' -f1 | uniq); do
  v=${name#python}
  if usable "$top/$v/bin/python$v"; then
    version=$v
    break
  fi
done
if [ -z "${version:-}" ]; then
  src=$top/src
  rm -rf "$src" && mkdir -p "$src"
  got=""
  while read -r name pkgversion; do
    echo "build-cpython: fetching Debian $suite's $name $pkgversion source" >&2
    if (cd "$src" && timeout 600 apt-get "${apt_opts[@]}" -qq source --download-only "$name=$pkgversion" >&2); then
      got=$name
      break
    fi
    rm -rf "${src:?}"/*
  done <<<"$candidates"
  if [ -z "$got" ]; then
    echo "build-cpython: no python$want source could be downloaded from Debian $suite" >&2
    exit 3
  fi
  version=${got#python}
  prefix=$top/$version
  orig=$(ls "$src/$got"_*.orig.tar.{xz,gz,bz2} 2>/dev/null | head -1)
  tar -xf "$orig" -C "$src"
  tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'Python-*' | head -1)
  echo "build-cpython: building $(basename "$tree") into $prefix (a few minutes, once)" >&2
  # No --enable-optimizations: PGO would triple the build time for a test interpreter.
  (cd "$tree" && ./configure -q --prefix="$prefix" --with-ensurepip=no >/dev/null &&
    make -s -j"$(nproc)" >/dev/null 2>&1 && make -s install >/dev/null 2>&1) ||
    { echo "build-cpython: the build of $(basename "$tree") failed (see $tree)" >&2; exit 1; }
  # CPython's own test suite and the static libpython (for embedding) are not needed to run
  # venvs: two thirds of the size.
  rm -rf "$src" "$prefix/lib/python$version/test" "$prefix"/lib/libpython*.a "$prefix"/lib/python"$version"/config-*/libpython*.a
  if ! usable "$prefix/bin/python$version"; then
    echo "build-cpython: $prefix/bin/python$version lacks ssl, ensurepip, zlib, ctypes or venv" >&2
    exit 1
  fi
fi
if [ "$want" = newest ]; then
  ln -sfn "$version" "$top/newest"
  echo "$top/newest/bin/python3"
else
  echo "$top/$version/bin/python$version"
fi
