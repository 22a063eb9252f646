#!/usr/bin/env bash
# "Bring your own tree" (docs/ffmpeg-build.md): scripts/patch-ffmpeg.sh on a fresh FFmpeg
# tree, then FFmpeg's own configure with a BROAD line (every component, autodetection on,
# not the lean --disable-everything of build-ffmpeg.sh) plus --enable-libcuframes, a full
# build, and the four components in the result. Also: an unsupported version and an
# already-patched tree are refused, changing nothing; --enable-libcuframes without the
# library fails at configure time with a clear message.
#
#   scripts/test-patch-ffmpeg.sh [VERSION]     (9.0 default; the tarball build-ffmpeg.sh fetched)
#
# A pass is remembered under the cache, keyed by every input (tarball, patches, glue,
# scripts, libcuframes): an unchanged tree is not rebuilt (CUFRAMES_FORCE=1 redoes it).
# The build compiles through the FFmpeg builds' ccache (scripts/ccache-env.sh), so a tree
# whose only change is libcuframes compiles little more than it links.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VER=${1:-9.0}
CACHE=${CUFRAMES_CACHE:-$HOME/.cache/cuframes}
JOBS=${JOBS:-$(nproc)}
# shellcheck source=scripts/ccache-env.sh
. "$REPO/scripts/ccache-env.sh"
log() { printf '[test-patch-ffmpeg %4ds] %s\n' "$SECONDS" "$*" >&2; }
fail() { printf '[test-patch-ffmpeg] FAIL: %s\n' "$*" >&2; exit 1; }

tarball=$(ls "$CACHE"/src/ffmpeg_"$VER".*.orig.tar.xz 2>/dev/null | sort -V | tail -n1 || true)
[[ -n $tarball ]] || { echo "SKIPPED (no FFmpeg $VER tarball in $CACHE/src: run scripts/build-ffmpeg.sh $VER)"; exit 0; }
cf_pc="$REPO/build/prefix/lib/pkgconfig"
[[ -f $cf_pc/cuframes.pc ]] || { echo "SKIPPED (no libcuframes in build/prefix: run scripts/install.sh build/prefix)"; exit 0; }
deps=$(readlink -f "build/ffmpeg-$VER/deps" 2>/dev/null || true)
[[ -d $deps/lib/pkgconfig ]] || { echo "SKIPPED (no deps prefix: run scripts/build-ffmpeg.sh $VER)"; exit 0; }

key=$( {
  sha256sum "$tarball" "$0" scripts/patch-ffmpeg.sh "build/prefix/lib/libcuframes.a" build/prefix/include/cuframes.h
  (find patches ffmpeg-glue -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  dpkg-query -W -f='${Package} ${Version}\n' build-essential nasm 2>/dev/null
} | sha256sum | cut -c1-16)
stamp="$CACHE/patch-test-$VER-$key.pass"
if [[ ${CUFRAMES_FORCE:-0} != 1 && -f $stamp ]]; then
  log "passed before with these inputs ($stamp):"; cat "$stamp" >&2
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cuframes-patch-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The tree lies in a new temporary directory each run: with it as ccache's base directory,
# its absolute source paths reach the compiler relative, the same in every run.
ccache_setup "$CACHE" "$work"
unpack() { mkdir -p "$2" && tar --no-same-owner --strip-components=1 -xf "$1" -C "$2"; }
tree_sum() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum); }

# 1. An unsupported version is refused, changing nothing.
log "unpacking $(basename "$tarball")"
unpack "$tarball" "$work/src"
cp -a "$work/src" "$work/old"
echo 6.1.2 >"$work/old/RELEASE"
before=$(tree_sum "$work/old")
rc=0; out=$(scripts/patch-ffmpeg.sh "$work/old" 2>&1) || rc=$?
[[ $rc == 2 && $out == *"FFmpeg 6.1 in"*"is not supported"* ]] || fail "an FFmpeg 6.1 tree: exit $rc, '$out'"
[[ $(tree_sum "$work/old") == "$before" ]] || fail "the refused 6.1 tree was changed"
rm -rf "$work/old"
log "unsupported version refused: $out"

# 2. Patched once; a second run is refused, changing nothing.
scripts/patch-ffmpeg.sh "$work/src" >"$work/patch.log" 2>&1 || { cat "$work/patch.log"; fail "patch-ffmpeg.sh on FFmpeg $VER"; }
before=$(tree_sum "$work/src")
rc=0; out=$(scripts/patch-ffmpeg.sh "$work/src" 2>&1) || rc=$?
[[ $rc == 3 && $out == *"already patched"* ]] || fail "patching twice: exit $rc, '$out'"
[[ $(tree_sum "$work/src") == "$before" ]] || fail "the already-patched tree was changed"
log "patched; a second run refused: $out"

# 3. --enable-libcuframes without the library: configure stops, naming it.
mkdir -p "$work/nolib"
rc=0
(cd "$work/nolib" && PKG_CONFIG_PATH="$deps/lib/pkgconfig" "$work/src/configure" \
   --enable-libcuframes --disable-doc >"$work/nolib.log" 2>&1) || rc=$?
[[ $rc != 0 ]] || fail "configure --enable-libcuframes succeeded without libcuframes"
grep -q "ERROR: cuframes not found using pkg-config" "$work/nolib.log" \
  || { tail -n 20 "$work/nolib.log"; fail "configure failed without naming cuframes"; }
log "without libcuframes: $(grep 'ERROR:' "$work/nolib.log" | head -n1)"

# 4. A broad configure line (all components, autodetection) + --enable-libcuframes, built
#    out of tree, in full.
flags=(--prefix="$work/prefix" --disable-doc --enable-gpl --pkg-config-flags=--static
       --enable-libcuframes --enable-ffnvcodec --enable-libx264 --enable-libdav1d
       --extra-ldflags="-L$deps/staticlib")
mkdir -p "$work/build"
log "configure ${flags[*]}"
(cd "$work/build" && PKG_CONFIG_PATH="$cf_pc:$deps/lib/pkgconfig" "$work/src/configure" "${flags[@]}" \
   >"$work/configure.log" 2>&1) || { tail -n 30 "$work/configure.log"; fail "broad configure"; }
n_filters=$(grep -c '^#define CONFIG_[A-Z0-9_]*_FILTER 1' "$work/build/config_components.h")
for c in HWUPLOAD_CUFRAMES_FILTER CUFRAMES_INDEV CUFRAMES_PKT_MUXER CUFRAMES_PKT_DEMUXER; do
  grep -q "^#define CONFIG_$c 1" "$work/build/config_components.h" || fail "broad configure did not enable $c"
done
log "configured: $n_filters filters enabled, the four cuframes components among them; make -j$JOBS CC='$CCACHE_CC'"
t0=$SECONDS
ccache_before=$(ccache_counts)
# ccache on make's command line, as in scripts/build-ffmpeg.sh: configure stays as a user
# runs it.
make -C "$work/build" -j"$JOBS" CC="$CCACHE_CC" >"$work/make.log" 2>&1 || { grep -B5 -A5 -m3 'error' "$work/make.log"; fail "broad build"; }
log "built in $((SECONDS - t0))s; $(ccache_summary "$ccache_before")"
ff="$work/build/ffmpeg"
for w in filter=hwupload_cuframes demuxer=cuframes demuxer=cuframes_pkt muxer=cuframes_pkt; do
  "$ff" -hide_banner -h "$w" 2>&1 | grep -q "runtime_dir" || fail "ffmpeg -h $w shows no cuframes options"
done
# One frame through a host ring and back, in the broad build.
export CUFRAMES_RUNTIME_DIR="$work/run"; mkdir -p "$CUFRAMES_RUNTIME_DIR"
k="patchtest-$$"
"$ff" -hide_banner -nostdin -v error -f cuframes -wait_publisher 20 -read_timeout 20 -i "$k" -frames:v 5 \
  -f framemd5 "$work/read.md5" & reader=$!
"$ff" -hide_banner -nostdin -v error -re -f lavfi -i testsrc=s=64x48:r=25:d=2 \
  -vf "format=nv12,hwupload_cuframes=key=$k:memory=host:wait_subscribers=1" -f null - \
  || fail "publishing with the broad build"
wait "$reader" || fail "reading with the broad build"
[[ $(grep -vc '^#' "$work/read.md5") == 5 ]] || fail "the broad build's reader got $(grep -vc '^#' "$work/read.md5") frames, not 5"
rm -f /dev/shm/cuframes-"$k"*
{
  echo "FFmpeg $(cat "$work/src/RELEASE"): patch-ffmpeg.sh refuses 6.1 and a patched tree;"
  echo "configure --enable-libcuframes without the library: $(grep 'ERROR:' "$work/nolib.log" | head -n1)"
  echo "broad configure (${flags[*]#--prefix=*}): $n_filters filters; full build $((SECONDS - t0))s; 5 frames through a host ring"
} >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
cat "$stamp" >&2
log "pass"
