#!/usr/bin/env bash
# Add the cuframes components to an FFmpeg source tree: apply patches/series and copy
# ffmpeg-glue/ into it (docs/ffmpeg-build.md, "Your own FFmpeg tree").
#
#   scripts/patch-ffmpeg.sh SRC_DIR
#
# SRC_DIR is an unpacked FFmpeg 7.1.x, 8.1.x or 9.0.x tree (a release tarball, a Debian
# source package, a git checkout of a release branch). Then configure it as usual, adding
# --enable-libcuframes (libcuframes must be found by pkg-config: scripts/install.sh).
#
# Refuses, changing nothing: an unsupported FFmpeg version, a tree that is already patched,
# a patch that does not apply exactly (every patch is tried with --dry-run first).
# Exit status: 0 patched, 1 usage or other error, 2 unsupported version, 3 already patched,
# 4 a patch does not apply.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The FFmpeg major.minor versions the series and the glue are written and tested for.
SUPPORTED="7.1 8.1 9.0"

die() { local rc=$1; shift; printf 'patch-ffmpeg: %s\n' "$*" >&2; exit "$rc"; }

[[ $# -eq 1 && $1 != -* ]] || die 1 "usage: $0 SRC_DIR (an FFmpeg $SUPPORTED source tree)"
SRC=$(cd "$1" 2>/dev/null && pwd) || die 1 "$1: no such directory"
[[ -x $SRC/configure && -f $SRC/libavformat/allformats.c ]] || die 1 "$SRC is not an FFmpeg source tree (no configure, no libavformat/allformats.c)"

# The tree's version: RELEASE ("9.0.2", "8.1.git"), else the libavformat version, which
# identifies the release line when RELEASE is missing.
ffmpeg_version() {
  local v major minor
  if [[ -f $SRC/RELEASE ]]; then
    v=$(head -n1 "$SRC/RELEASE")
    [[ $v =~ ^([0-9]+)\.([0-9]+) ]] && { echo "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"; return; }
  fi
  major=$(sed -n 's/^#define LIBAVFORMAT_VERSION_MAJOR *\([0-9]*\).*/\1/p' "$SRC/libavformat/version_major.h" 2>/dev/null)
  minor=$(sed -n 's/^#define LIBAVFORMAT_VERSION_MINOR *\([0-9]*\).*/\1/p' "$SRC/libavformat/version.h" 2>/dev/null)
  case "$major.$minor" in
    61.[7-9]|61.[1-9][0-9]) echo 7.1 ;;
    62.1[2-9])              echo 8.1 ;;
    63.*)                   echo 9.0 ;;
    *)                      echo "unknown (libavformat $major.$minor)" ;;
  esac
}
VER=$(ffmpeg_version)
[[ " $SUPPORTED " == *" $VER "* ]] || die 2 "FFmpeg $VER in $SRC is not supported: the cuframes patches and glue are for FFmpeg ${SUPPORTED// /, }"

# Already patched: the configure option, a registration or a glue file is there.
if grep -q 'libcuframes' "$SRC/configure" || grep -q 'cuframes' "$SRC/libavformat/allformats.c" \
   || [[ -e $SRC/libavdevice/cuframes_dec.c ]]; then
  die 3 "$SRC is already patched for cuframes (configure knows libcuframes or the glue is there); start from a clean tree"
fi

# version_ge A B: A >= B for major.minor versions.
version_ge() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1) == "$2" ]]; }
# The series' patches that apply to this version ("NAME [>=|< X.Y]" lines).
selected=()
while read -r name op want rest; do
  [[ -z ${name:-} || $name == \#* ]] && continue
  [[ -z ${rest:-} ]] || die 1 "patches/series: cannot read the line '$name $op $want $rest'"
  case "${op:-}" in
    '')   ;;
    '>=') version_ge "$VER" "$want" || continue ;;
    '<')  version_ge "$VER" "$want" && continue ;;
    *)    die 1 "patches/series: unknown condition '$op' for $name" ;;
  esac
  [[ -f $REPO/patches/$name ]] || die 1 "patches/series names a missing patch: $name"
  selected+=("$name")
done <"$REPO/patches/series"

# Every patch must apply exactly (no fuzz) before anything is changed. The patches touch
# disjoint files, so each can be tried against the unpatched tree.
for p in "${selected[@]}"; do
  if ! out=$(patch -d "$SRC" -p1 --dry-run --forward --batch --fuzz=0 <"$REPO/patches/$p" 2>&1); then
    die 4 "patches/$p does not apply to FFmpeg $VER in $SRC (nothing was changed):
$out"
  fi
done
for p in "${selected[@]}"; do
  patch -d "$SRC" -p1 --forward --batch --fuzz=0 --quiet <"$REPO/patches/$p"
  echo "patch-ffmpeg: applied patches/$p"
done

# The glue: every file under ffmpeg-glue/ goes to the same path in the tree.
(cd "$REPO/ffmpeg-glue" && find . -type f -print0 | LC_ALL=C sort -z) |
  while IFS= read -r -d '' f; do
    f=${f#./}
    mkdir -p "$SRC/$(dirname "$f")"
    cp "$REPO/ffmpeg-glue/$f" "$SRC/$f"
    echo "patch-ffmpeg: copied $f"
  done
echo "patch-ffmpeg: FFmpeg $VER in $SRC now has the cuframes components; configure with --enable-libcuframes"
