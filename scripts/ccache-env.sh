# shellcheck shell=bash
# The compiler cache of the FFmpeg builds, sourced by scripts/build-ffmpeg.sh (the lean
# lines and dav1d) and scripts/test-patch-ffmpeg.sh (the broad tree).
#
# Each inputs hash of build-ffmpeg.sh has its own build directory, and the patch test builds
# in a temporary one, so every change of libcuframes or of a line compiles a tree afresh in
# a new place. ccache gives back each object whose preprocessed source and flags it has seen
# before: the objects are those the compiler writes, so the results stay keyed by their
# inputs hash exactly as without the cache.
#
#   CUFRAMES_CCACHE       0 = compile without the cache (default: used when ccache is installed)
#   CUFRAMES_CCACHE_SIZE  the size limit of the cache (default 5G; ccache evicts the least
#                         recently used objects beyond it)
#
# The cache lies in $CACHE/ccache (see docs/ffmpeg-build.md); `CCACHE_DIR=$CACHE/ccache
# ccache -s` shows it and `ccache -C` with the same CCACHE_DIR empties it.

# ccache_setup CACHE BASEDIR: exports ccache's settings and sets CCACHE_CC, the C compiler
# command for make and meson ("ccache gcc", or "gcc" when the cache is off or missing).
ccache_setup() {
  CCACHE_CC=gcc
  if [[ ${CUFRAMES_CCACHE:-1} == 0 ]] || ! command -v ccache >/dev/null; then
    return 0
  fi
  export CCACHE_DIR="$1/ccache"
  export CCACHE_MAXSIZE=${CUFRAMES_CCACHE_SIZE:-5G}
  # Paths under BASEDIR reach the compiler relative to the working directory, and that
  # directory is not hashed: a tree built in another directory of the same depth (another
  # inputs hash, another temporary directory) hits the same entries.
  export CCACHE_BASEDIR=$2
  export CCACHE_NOHASHDIR=1
  CCACHE_CC="ccache gcc"
}

# ccache_counts: "DIRECT PREPROCESSED MISSES" of the cache's counters (empty without the
# cache); two readings around a build give that build's hits, provided no other build used
# the cache meanwhile.
ccache_counts() {
  [[ $CCACHE_CC == ccache* ]] || return 0
  ccache --print-stats | awk '$1 == "direct_cache_hit" {d = $2} $1 == "preprocessed_cache_hit" {p = $2}
    $1 == "cache_miss" {m = $2} END {print d + 0, p + 0, m + 0}'
}

# ccache_summary BEFORE: one line saying how many compiles since the reading BEFORE came
# from the cache.
ccache_summary() {
  [[ $CCACHE_CC == ccache* && -n $1 ]] || { echo "ccache: off"; return 0; }
  local d0 p0 m0 d1 p1 m1
  read -r d0 p0 m0 <<<"$1"
  read -r d1 p1 m1 <<<"$(ccache_counts)"
  local hits=$(( d1 - d0 + p1 - p0 )) misses=$(( m1 - m0 ))
  echo "ccache: $hits of $(( hits + misses )) compiles from the cache ($(( d1 - d0 )) direct, $(( p1 - p0 )) preprocessed), $misses compiled ($CCACHE_DIR)"
}
