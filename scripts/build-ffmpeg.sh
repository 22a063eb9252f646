#!/usr/bin/env bash
# Build a lean, static FFmpeg with the cuframes components (see docs/ffmpeg-build.md).
#
#   scripts/build-ffmpeg.sh [VERSION]     VERSION: 9.0 (default), 8.1 or 7.1
#
# Sources come only from Debian source packages (testing, sid and trixie = Debian 13),
# fetched with `apt-get source --download-only` through a PRIVATE apt configuration under
# the cache (nothing in /etc/apt is touched):
#   ffmpeg            -> the FFmpeg tree of VERSION (patched by scripts/patch-ffmpeg.sh)
#   nv-codec-headers  -> ffnvcodec headers (>= 12.1; bookworm's are too old)
#   dav1d             -> libdav1d built as a static library (Debian ships no .a)
# Build tools and libx264 (.a) come from the system's own apt (bookworm).
#
# Environment:
#   CUFRAMES_CACHE          cache root (default: $HOME/.cache/cuframes)
#   CUFRAMES_ALLOW_UNPINNED 1 = accept a source version missing from the
#                           KNOWN_SHA256 table (apt's signed index still checked)
#   CUFRAMES_APT_MAX_AGE    seconds before the private apt lists are refreshed
#                           (default 86400)
#   CUFRAMES_KEEP_BUILD     1 = keep the FFmpeg object tree after installing, also
#                           after FATE (without it the tree is kept only until FATE runs)
#   CUFRAMES_FORCE          1 = rebuild even if the keyed prefix is complete
#   CUFRAMES_SKIP_APT_INSTALL 1 = never call the system apt-get install
#   CUFRAMES_FATE           1 = run FFmpeg's FATE tests that need no samples on the built
#                           tree (make fate-source and make fate SAMPLES=); the result
#                           goes to PREFIX/FATE. On a build that is complete without it,
#                           only FATE runs, in the object tree kept for it
#   CUFRAMES_CCACHE         0 = compile without ccache (scripts/ccache-env.sh)
#   CUFRAMES_CCACHE_SIZE    the size limit of the ccache in CACHE/ccache (default 5G)
#   JOBS                    parallel make jobs (default: nproc)
set -euo pipefail

# The FFmpeg release lines the patches and the glue support (scripts/patch-ffmpeg.sh).
FF_LINE=${1:-9.0}
case $FF_LINE in
  7.1|8.1|9.0) ;;
  *) echo "[build-ffmpeg] ERROR: FFmpeg '$FF_LINE' is not supported: give 9.0 (default), 8.1 or 7.1" >&2; exit 1 ;;
esac
# The default line is build/ffmpeg; every line is also build/ffmpeg-VERSION.
DEFAULT_LINE=9.0

T_START=$SECONDS
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT="$REPO/scripts/build-ffmpeg.sh"
CACHE=${CUFRAMES_CACHE:-$HOME/.cache/cuframes}
JOBS=${JOBS:-$(nproc)}
# shellcheck source=scripts/ccache-env.sh
. "$REPO/scripts/ccache-env.sh"

# Versions/checksums we have tested. apt already verifies every file against
# the signed Sources index; this table pins what the patches were written and
# tested against. A known file with a different checksum is always refused.
declare -A KNOWN_SHA256=(
  [ffmpeg_9.0.2.orig.tar.xz]=8c3850283eb25fa026482078a04051e0be17347b09ef81a0849bec15a96e002e
  [ffmpeg_8.1.2.orig.tar.xz]=464beb5e7bf0c311e68b45ae2f04e9cc2af88851abb4082231742a74d97b524c
  [ffmpeg_7.1.5.orig.tar.xz]=de668509caf9e35e3cd162473441fdb29538c6d96ed080292b3cf9e6fc5d558f
  [nv-codec-headers_12.1.14.0.orig.tar.xz]=0ca1a0c85b149646fa6ce4d600584507fdccf5a23d58e668d8701e89cee0c3fb
  [dav1d_1.5.4.orig.tar.xz]=686616b7c69eb88d44459391ab25cac13b6647a3b288835c5784e71c1514a5c5
)
# Bump when the way the deps (dav1d, nv-codec-headers) are built changes.
DEPS_RECIPE=2

# System (bookworm) packages needed to build; scripts/packages-debian.txt must list them too
# (check_package_list). Their versions are inputs of the deps hash.
BUILD_PACKAGES=(
  build-essential pkg-config make patch xz-utils nasm clang
  libx264-dev zlib1g-dev meson ninja-build debian-archive-keyring
)
# Installed like them but no input of any hash: ccache gives back the objects the compiler
# writes, so its version does not change a result.
CACHE_PACKAGES=(ccache)
# Shared objects the final binaries may depend on (glibc family only).
ALLOWED_SONAMES='^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|libgcc_s\.so\.1|/lib64/ld-linux-x86-64\.so\.2|ld-linux-x86-64\.so\.2)$'

log()  { printf '[build-ffmpeg %4ds] %s\n' "$((SECONDS - T_START))" "$*" >&2; }
warn() { printf '[build-ffmpeg] WARNING: %s\n' "$*" >&2; }
die()  { printf '[build-ffmpeg] ERROR: %s\n' "$*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
# unpack TARBALL DIR: extract the single top-level directory of TARBALL as DIR.
unpack() { mkdir -p "$2" && tar --no-same-owner --strip-components=1 -xf "$1" -C "$2"; }

# --------------------------------------------------------------------------
# 0. Lock the cache (other workers may run this script concurrently).
mkdir -p "$CACHE"
exec 9>"$CACHE/.build-ffmpeg.lock"
if ! flock -n 9; then
  log "another build-ffmpeg.sh holds $CACHE/.build-ffmpeg.lock; waiting"
  flock 9
fi

# --------------------------------------------------------------------------
# 1. System build dependencies (bookworm, system apt).
# scripts/packages-debian.txt is what setup installs: every package built on here must be
# listed there (checked, never written: a build does not edit tracked files).
check_package_list() {
  local list="$REPO/scripts/packages-debian.txt" p missing=()
  for p in "${BUILD_PACKAGES[@]}" "${CACHE_PACKAGES[@]}"; do
    sed 's/[[:space:]].*//' "$list" | grep -qxF "$p" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] || die "add to scripts/packages-debian.txt (setup installs from it): ${missing[*]}"
}

install_build_deps() {
  local missing=() p
  for p in "${BUILD_PACKAGES[@]}" "${CACHE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ ${CUFRAMES_SKIP_APT_INSTALL:-0} == 1 ]]; then
    # Without the cache the build is slower, not different: only a build package is fatal.
    local needed=()
    for p in "${missing[@]}"; do
      [[ " ${CACHE_PACKAGES[*]} " == *" $p "* ]] || needed+=("$p")
    done
    [[ ${#needed[@]} -eq 0 ]] || die "missing packages: ${needed[*]}"
    warn "not installed: ${missing[*]}; compiling without the cache"
    return 0
  fi
  local sudo=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || die "missing packages (need root to install): ${missing[*]}"
    sudo=(sudo)
  fi
  log "installing system packages: ${missing[*]}"
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 \
    install -y -qq --no-install-recommends "${missing[@]}"
}

# --------------------------------------------------------------------------
# 2. Private apt configuration for Debian deb-src: testing (FFmpeg 9.0, the deps), sid
# (8.1) and trixie = Debian 13 (7.1, with its security updates).
APT_SOURCES=(
  'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian testing main'
  'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main'
  'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main'
  'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://security.debian.org/debian-security trixie-security main'
)
APTDIR="$CACHE/apt"
SRCDIR="$CACHE/src"

setup_private_apt() {
  mkdir -p "$APTDIR/etc/sources.list.d" "$APTDIR/etc/preferences.d" \
           "$APTDIR/state/lists/partial" "$APTDIR/cache/archives/partial" "$SRCDIR"
  [[ -e $APTDIR/state/status ]] || : >"$APTDIR/state/status"
  # A changed list of suites invalidates the lists fetched for the old one.
  if [[ $(cat "$APTDIR/etc/sources.list" 2>/dev/null) != "$(printf '%s\n' "${APT_SOURCES[@]}")" ]]; then
    printf '%s\n' "${APT_SOURCES[@]}" >"$APTDIR/etc/sources.list"
    rm -f "$APTDIR/state/.last-update"
  fi
  {
    printf 'Dir::Etc::sourcelist "%s";\n' "$APTDIR/etc/sources.list"
    printf 'Dir::Etc::sourceparts "%s";\n' "$APTDIR/etc/sources.list.d"
    printf 'Dir::Etc::preferences "%s";\n' "$APTDIR/etc/preferences"
    printf 'Dir::Etc::preferencesparts "%s";\n' "$APTDIR/etc/preferences.d"
    printf 'Dir::State "%s";\n' "$APTDIR/state"
    printf 'Dir::State::status "%s";\n' "$APTDIR/state/status"
    printf 'Dir::Cache "%s";\n' "$APTDIR/cache"
    printf 'Acquire::Languages "none";\n'
    # root cannot hand the cache dirs to _apt without chown games; stay root.
    [[ $EUID -eq 0 ]] && printf 'APT::Sandbox::User "root";\n'
  } >"$APTDIR/apt.conf"
}

papt() { APT_CONFIG="$APTDIR/apt.conf" "$@"; }

refresh_private_apt() {
  local stamp="$APTDIR/state/.last-update" age max=${CUFRAMES_APT_MAX_AGE:-86400}
  if [[ -e $stamp ]]; then
    age=$(( $(date +%s) - $(stat -c %Y "$stamp") ))
    (( age < max )) && return 0
  fi
  log "refreshing private apt lists (Debian testing, sid, trixie deb-src)"
  if papt apt-get update -qq; then
    touch "$stamp"
  else
    warn "private apt-get update failed; using cached lists/tarballs if any"
  fi
}

# orig_of PKG FULLVER -> "sha256 name" of that version's orig tarball in the Sources index.
orig_of() {
  local pkg=$1 full=$2 up=${2#*:}
  up=${up%-*}
  papt apt-cache showsrc --only-source "$pkg" | awk -v v="$full" -v p="${pkg}_${up}.orig.tar." '
    /^Package:/ {inrec=0} /^Version:/ {inrec=($2==v)}
    inrec && /^Checksums-Sha256:/ {cs=1; next}
    cs && /^ / { if (index($3, p) == 1 && $3 !~ /\.asc$/) print $1, $3; next }
    {cs=0}' | head -n1
}

# fetch_src PKG [UPSTREAM_PREFIX] -> sets SRC_FILE (path of verified orig tarball) and
# SRC_VER (upstream version). With a prefix ("7.1."), only those upstream versions count.
# The suites hold several versions (trixie 7.1, sid 8.1, testing 9.0, newer deps in sid):
# the newest PINNED one wins; an unpinned newer one is only reported.
fetch_src() {
  local pkg=$1 prefix=${2:-} full up name='' idx_sha='' file sha cached newest='' v
  SRC_FILE='' SRC_VER=''
  cached=$(for k in "${!KNOWN_SHA256[@]}"; do [[ $k == "${pkg}_${prefix}"* && -f $SRCDIR/$k ]] && echo "$k"; done | sort -V | tail -n1 || true)
  while read -r v; do
    [[ -n $v ]] || continue
    up=${v#*:}; up=${up%-*}
    [[ -z $prefix || $up == "$prefix"* ]] || continue
    [[ -n $newest ]] || newest=$v
    read -r idx_sha name < <(orig_of "$pkg" "$v") || true
    if [[ -n ${name:-} && ( -n ${KNOWN_SHA256[$name]:-} || ${CUFRAMES_ALLOW_UNPINNED:-0} == 1 ) ]]; then
      full=$v
      break
    fi
    name='' idx_sha=''
  done < <(papt apt-cache showsrc --only-source "$pkg" 2>/dev/null | awk '/^Version:/{print $2}' | sort -Vru)
  if [[ -z $name ]]; then
    if [[ -n $cached ]]; then
      # Offline, or the suites moved on past every pinned version.
      warn "no pinned ${pkg} ${prefix}x in the private index${newest:+ (it has $newest)}; using the cached, pinned $cached"
      name=$cached idx_sha=''
    elif [[ -n $newest ]]; then
      read -r idx_sha name < <(orig_of "$pkg" "$newest") || true
      die "Debian has $pkg $newest (${name:-?}, sha256 ${idx_sha:-?}), which is not in KNOWN_SHA256 of $SCRIPT. Test it and add it to the table, or set CUFRAMES_ALLOW_UNPINNED=1."
    else
      die "the private index (Debian testing, sid, trixie) has no source package '$pkg'${prefix:+ of version ${prefix}x} and nothing is cached"
    fi
  else
    [[ -n ${KNOWN_SHA256[$name]:-} ]] || warn "$name ($pkg $full) is not in KNOWN_SHA256; accepted because CUFRAMES_ALLOW_UNPINNED=1"
    [[ $full == "$newest" ]] || log "$pkg: building the pinned $full; Debian also has $newest (untested)"
  fi
  file="$SRCDIR/$name"
  if [[ ! -f $file ]] || { [[ -n $idx_sha ]] && [[ $(sha256_of "$file") != "$idx_sha" ]]; }; then
    rm -f "$file"
    log "apt-get source --download-only $pkg=$full"
    # Only the orig tarball is used; tolerate failures on the Debian packaging
    # files (.dsc/.debian.tar.xz) as long as the orig tarball arrived intact.
    if ! (cd "$SRCDIR" && papt apt-get source -qq --download-only "$pkg=$full") >"$SRCDIR/apt-source-$pkg.log" 2>&1; then
      warn "apt-get source $pkg reported errors (see $SRCDIR/apt-source-$pkg.log); only the orig tarball is needed"
    fi
    [[ -f $file ]] || { cat "$SRCDIR/apt-source-$pkg.log" >&2; die "apt-get source did not deliver $name"; }
  fi
  sha=$(sha256_of "$file")
  [[ -z $idx_sha || $sha == "$idx_sha" ]] || die "$name: sha256 $sha does not match the signed Debian index ($idx_sha)"
  if [[ -n ${KNOWN_SHA256[$name]:-} && $sha != "${KNOWN_SHA256[$name]}" ]]; then
    die "$name: sha256 $sha does not match the pinned ${KNOWN_SHA256[$name]}; refusing"
  fi
  SRC_FILE=$file
  SRC_VER=${name#"${pkg}"_}; SRC_VER=${SRC_VER%.orig.tar.*}
}

# --------------------------------------------------------------------------
check_package_list
install_build_deps
setup_private_apt
refresh_private_apt

fetch_src ffmpeg "$FF_LINE."; FF_TAR=$SRC_FILE FF_VER=$SRC_VER
fetch_src nv-codec-headers; NV_TAR=$SRC_FILE NV_VER=$SRC_VER
fetch_src dav1d;            DAV1D_TAR=$SRC_FILE DAV1D_VER=$SRC_VER
log "sources: ffmpeg $FF_VER, nv-codec-headers $NV_VER, dav1d $DAV1D_VER"

[[ $FF_VER == "$FF_LINE".* ]] || die "asked for FFmpeg $FF_LINE, got $FF_VER"
dpkg --compare-versions "$NV_VER" ge 12.1 || die "nv-codec-headers $NV_VER < 12.1"

# --------------------------------------------------------------------------
# 3. cuframes mode: enabled only if libcuframes is installed and the glue exists.
GLUE_FILES=(
  libavfilter/vf_hwupload_cuframes.c
  libavdevice/cuframes_dec.c
  libavformat/cuframes_pktenc.c
  libavformat/cuframes_pktdec.c
)
CUFRAMES_MODE=1 why=''
if ! pkg-config --exists cuframes 2>/dev/null; then
  CUFRAMES_MODE=0 why="pkg-config cannot find 'cuframes' (PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-})"
fi
for f in "${GLUE_FILES[@]}"; do
  [[ -f $REPO/ffmpeg-glue/$f ]] || { CUFRAMES_MODE=0; why="${why:+$why; }missing ffmpeg-glue/$f"; }
done
CUFRAMES_INPUTS=''
if [[ $CUFRAMES_MODE == 1 ]]; then
  cf_libdir=$(pkg-config --variable=libdir cuframes)
  cf_incdir=$(pkg-config --variable=includedir cuframes)
  for f in "$cf_libdir/libcuframes.a" "$cf_incdir/cuframes.h"; do
    [[ -f $f ]] && CUFRAMES_INPUTS+="$f $(sha256_of "$f")"$'\n'
  done
  CUFRAMES_INPUTS+="pc $(pkg-config --static --cflags --libs cuframes)"$'\n'
  log "libcuframes found ($(pkg-config --modversion cuframes)): building WITH --enable-libcuframes"
else
  log "building WITHOUT --enable-libcuframes: $why (patches are still applied; they are inert)"
fi

# --------------------------------------------------------------------------
# 4. Configure flags.
# shellcheck disable=SC2054  # commas are part of the --enable-X=a,b,c values
CONFIGURE_FLAGS=(
  --pkg-config-flags=--static
  --enable-static --disable-shared
  --disable-doc --disable-debug
  --disable-autodetect
  --disable-everything
  --disable-ffplay --enable-ffmpeg --enable-ffprobe
  --enable-gpl --enable-libx264 --enable-libdav1d --enable-zlib
  --enable-ffnvcodec --enable-cuda --enable-cuda-llvm --enable-cuvid --enable-nvdec
  --enable-decoder=h264,hevc,av1,libdav1d,rawvideo,wrapped_avframe,h264_cuvid,hevc_cuvid,av1_cuvid,mjpeg,png
  --enable-encoder=libx264,rawvideo,wrapped_avframe,mjpeg,png
  --enable-hwaccel=h264_nvdec,hevc_nvdec,av1_nvdec
  --enable-parser=h264,hevc,av1
  --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb,av1_frame_merge,extract_extradata,dump_extradata
  --enable-demuxer=mov,matroska,mpegts,flv,h264,hevc,ivf,obu,rawvideo,rtsp,sdp,image2
  --enable-muxer=mp4,mov,matroska,mpegts,flv,h264,hevc,ivf,obu,framecrc,framemd5,md5,null,rawvideo,rtsp,rtp,image2
  --enable-protocol=file,pipe,tcp,udp,rtp
  --enable-indev=lavfi
  --enable-filter=scale_cuda,hwupload_cuda,hwdownload,format,null,testsrc,testsrc2,scale,setparams,setsar,setpts
)
if [[ $CUFRAMES_MODE == 1 ]]; then
  CONFIGURE_FLAGS+=(
    --enable-libcuframes
    --enable-filter=hwupload_cuframes
    --enable-indev=cuframes
    --enable-muxer=cuframes_pkt
    --enable-demuxer=cuframes_pkt
  )
fi

# --------------------------------------------------------------------------
# 5. Input hash -> build directory.
hash_dir_files() { # relative path + sha256 of every file under $1 (sorted)
  [[ -d $1 ]] || return 0
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}
tool_versions() {
  dpkg-query -W -f='${Package} ${Version}\n' "${BUILD_PACKAGES[@]}" 2>/dev/null | LC_ALL=C sort
}
DEPS_HASH=$( {
  echo "recipe $DEPS_RECIPE"
  echo "nv $(sha256_of "$NV_TAR")"
  echo "dav1d $(sha256_of "$DAV1D_TAR")"
  tool_versions
} | sha256sum | cut -c1-16)
BUILD_HASH=$( {
  echo "deps $DEPS_HASH"
  echo "ffmpeg $(sha256_of "$FF_TAR")"
  echo "script $(sha256_of "$SCRIPT") $(sha256_of "$REPO/scripts/patch-ffmpeg.sh")"
  echo "== patches"; hash_dir_files "$REPO/patches"
  echo "== glue";    hash_dir_files "$REPO/ffmpeg-glue"
  echo "== flags";   printf '%s\n' "${CONFIGURE_FLAGS[@]}"
  echo "== cuframes"; printf '%s' "$CUFRAMES_INPUTS"
} | sha256sum | cut -c1-16)

DEPS_DIR="$CACHE/deps-$DEPS_HASH"
DEPS_PREFIX="$DEPS_DIR/prefix"
BUILD_DIR="$CACHE/ffmpeg-$BUILD_HASH"
PREFIX="$BUILD_DIR/prefix"
# Every build directory lies under the cache at the same depth: with the cache as ccache's
# base directory, a tree of another inputs hash finds the objects of this one.
ccache_setup "$CACHE" "$CACHE"

link_results() {
  mkdir -p "$REPO/build"
  ln -sfn "$PREFIX" "$REPO/build/.ffmpeg.tmp" && mv -Tf "$REPO/build/.ffmpeg.tmp" "$REPO/build/ffmpeg-$FF_LINE"
  [[ $FF_LINE == "$DEFAULT_LINE" ]] || return 0
  ln -sfn "$PREFIX" "$CACHE/.ffmpeg-current.tmp" && mv -Tf "$CACHE/.ffmpeg-current.tmp" "$CACHE/ffmpeg-current"
  ln -sfn "$PREFIX" "$REPO/build/.ffmpeg.tmp" && mv -Tf "$REPO/build/.ffmpeg.tmp" "$REPO/build/ffmpeg"
}

# FATE without samples (none can be downloaded here): fate-source checks every source file,
# the glue included (license headers, include guards); `make fate` with SAMPLES unset runs
# the tests this configuration enables that need no sample files.
# FFmpeg 7.1's FATE enables some tests without declaring all they need, so a
# --disable-everything build runs them and they fail for want of a component, not because
# of cuframes: pixfmt-* read their input with the image2 demuxer ("Unknown input format:
# 'image2'"), movenc's test program goes on to a muxer mode the lean build lacks. 8.1 and
# 9.0 declare these dependencies and skip them. Their results are ignored (FATE's own
# IGNORE_TESTS) and listed in prefix/FATE.
declare -A FATE_IGNORE=(
  [7.1]="movenc pixfmt-bgr24 pixfmt-gray pixfmt-monob pixfmt-monow pixfmt-rgb24 pixfmt-rgb32 pixfmt-rgb555 pixfmt-rgb565 pixfmt-xyz12le pixfmt-yuv410p pixfmt-yuv411p pixfmt-yuv420p pixfmt-yuv422p pixfmt-yuv440p pixfmt-yuv444p pixfmt-yuvj420p pixfmt-yuvj422p pixfmt-yuvj440p pixfmt-yuvj444p pixfmt-yuyv422"
)
# run_fate: FATE in the object tree $SRC that built $PREFIX; the result goes to PREFIX/FATE
# ("result: pass" or "result: FAIL"), and a failure stops the script.
run_fate() {
  local t0=$SECONDS fate_rc=0 n before
  before=$(ccache_counts)
  log "FATE: make fate-source, make fate (SAMPLES unset)"
  make -C "$SRC" -j"$JOBS" CC="$CCACHE_CC" fate-source >"$BUILD_DIR/fate-source.log" 2>&1 || fate_rc=1
  make -C "$SRC" -j"$JOBS" CC="$CCACHE_CC" -k fate SAMPLES= IGNORE_TESTS="${FATE_IGNORE[$FF_LINE]:-}" \
    >"$BUILD_DIR/fate.log" 2>&1 || fate_rc=1
  n=$(grep -c '^TEST' "$BUILD_DIR/fate.log" || true)
  {
    echo "FFmpeg $FF_VER: make fate-source: $(grep -q '^TEST *source' "$BUILD_DIR/fate-source.log" && echo ran)"
    echo "make fate SAMPLES= : $n tests, $(grep -c '^IGNORE' "$BUILD_DIR/fate.log" || true) of them ignored (lean-build gaps of this FFmpeg's FATE): ${FATE_IGNORE[$FF_LINE]:-none}"
    grep '^TEST' "$BUILD_DIR/fate.log" | awk '{print $2}' | tr '\n' ' '; echo
    echo "result: $([[ $fate_rc == 0 ]] && echo pass || echo FAIL)"
  } >"$PREFIX/FATE"
  if [[ $fate_rc != 0 ]]; then
    tail -n 30 "$BUILD_DIR/fate-source.log" "$BUILD_DIR/fate.log" >&2
    die "FATE failed on FFmpeg $FF_VER (logs: $BUILD_DIR/fate*.log; the object tree stays for another try)"
  fi
  log "FATE: $n tests + fate-source passed in $((SECONDS - t0))s; $(ccache_summary "$before")"
}
fate_passed() { grep -qx 'result: pass' "$PREFIX/FATE" 2>/dev/null; }

# The object tree stays after a build without FATE, so that a later CUFRAMES_FATE=1 (setup
# builds without it, scripts/test.sh asks for it) runs FATE alone on the tree that built the
# prefix instead of compiling the line again. TREE_MARK says the tree is whole; one kept tree
# per FFmpeg version bounds the disk it takes (a lean tree is about 300 MB).
SRC="$BUILD_DIR/ffmpeg-$FF_VER"
TREE_MARK="$BUILD_DIR/.object-tree"
drop_tree() {
  [[ ${CUFRAMES_KEEP_BUILD:-0} == 1 || -f $BUILD_DIR/.keep-build ]] && return 0
  rm -f "$TREE_MARK"
  rm -rf "$SRC"
}
prune_other_trees() {
  local m d
  for m in "$CACHE"/ffmpeg-*/.object-tree; do
    d=${m%/.object-tree}
    [[ -f $m && $d != "$BUILD_DIR" && ! -f $d/.keep-build && -d $d/ffmpeg-$FF_VER ]] || continue
    rm -f "$m"
    rm -rf "$d/ffmpeg-$FF_VER"
    log "removed the object tree kept for FATE in $d (the newest one of FFmpeg $FF_VER stays)"
  done
}

if [[ ${CUFRAMES_FORCE:-0} != 1 && -f $BUILD_DIR/.complete && -x $PREFIX/bin/ffmpeg ]]; then
  if [[ ${CUFRAMES_FATE:-0} != 1 ]] || fate_passed; then
    link_results
    log "up to date (inputs hash $BUILD_HASH); nothing to do"
    echo "$PREFIX/bin/ffmpeg"
    exit 0
  fi
  if [[ -f $TREE_MARK && -d $SRC ]]; then
    log "built before without FATE (inputs hash $BUILD_HASH): FATE alone, in the kept object tree"
    run_fate
    drop_tree
    link_results
    echo "$PREFIX/bin/ffmpeg"
    exit 0
  fi
  log "built before without FATE and without its object tree: building again for FATE (ccache gives back the objects)"
fi

# --------------------------------------------------------------------------
# 6. Dependencies built from Debian testing sources: nv-codec-headers, dav1d.
build_deps() {
  if [[ -f $DEPS_DIR/.complete ]]; then
    log "deps up to date: $DEPS_DIR"
    return 0
  fi
  rm -rf "$DEPS_DIR"; mkdir -p "$DEPS_DIR/src"
  local t0=$SECONDS
  log "nv-codec-headers $NV_VER -> $DEPS_PREFIX"
  unpack "$NV_TAR" "$DEPS_DIR/src/nv-codec-headers"
  make -s -C "$DEPS_DIR/src/nv-codec-headers" PREFIX="$DEPS_PREFIX" install >/dev/null
  log "dav1d $DAV1D_VER (static) -> $DEPS_PREFIX"
  local d="$DEPS_DIR/src/dav1d"
  unpack "$DAV1D_TAR" "$d"
  # CC names the compiler (through ccache) so that meson never picks up a ccache of its own
  # accord, with ccache's default directory.
  CC="$CCACHE_CC" meson setup "$d/build" "$d" --prefix="$DEPS_PREFIX" --libdir=lib --buildtype=release \
    -Ddefault_library=static -Denable_tools=false -Denable_tests=false \
    -Denable_examples=false -Denable_docs=false >"$DEPS_DIR/dav1d-setup.log" 2>&1 \
    || { tail -n 30 "$DEPS_DIR/dav1d-setup.log"; die "dav1d meson setup failed"; }
  ninja -C "$d/build" -j "$JOBS" install >"$DEPS_DIR/dav1d-build.log" 2>&1 \
    || { tail -n 30 "$DEPS_DIR/dav1d-build.log"; die "dav1d build failed"; }
  # libx264: Debian ships libx264.a; expose only the .a so the linker cannot pick the .so.
  mkdir -p "$DEPS_PREFIX/staticlib"
  local x264a
  x264a=$(dpkg -L libx264-dev | grep '/libx264\.a$' | head -n1)
  [[ -n $x264a && -f $x264a ]] || die "libx264-dev ships no libx264.a"
  ln -sf "$x264a" "$DEPS_PREFIX/staticlib/libx264.a"
  # zlib (the PNG encoder and decoder): the same, so the binaries stay free of libz.so.
  local zlib_a
  zlib_a=$(dpkg -L zlib1g-dev | grep '/libz\.a$' | head -n1)
  [[ -n $zlib_a && -f $zlib_a ]] || die "zlib1g-dev ships no libz.a"
  ln -sf "$zlib_a" "$DEPS_PREFIX/staticlib/libz.a"
  rm -rf "$DEPS_DIR/src"
  touch "$DEPS_DIR/.complete"
  log "deps built in $((SECONDS - t0))s"
}
build_deps
export PKG_CONFIG_PATH="$DEPS_PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

# --------------------------------------------------------------------------
# 7. FFmpeg: unpack, patch, copy glue, configure, build, install.
rm -rf "$BUILD_DIR"; mkdir -p "$BUILD_DIR"
T_FF=$SECONDS
log "unpacking FFmpeg $FF_VER into $BUILD_DIR"
unpack "$FF_TAR" "$SRC"
[[ -x $SRC/configure ]] || die "unexpected tarball layout: no $SRC/configure"

# The series and the glue, exactly as a user adding cuframes to their own tree does it.
"$REPO/scripts/patch-ffmpeg.sh" "$SRC" >"$BUILD_DIR/patch.log" 2>&1 \
  || { cat "$BUILD_DIR/patch.log" >&2; die "scripts/patch-ffmpeg.sh failed on FFmpeg $FF_VER"; }
log "patched with scripts/patch-ffmpeg.sh ($(grep -c '^patch-ffmpeg: applied' "$BUILD_DIR/patch.log") patches, glue copied)"

log "configure ${CONFIGURE_FLAGS[*]}"
(cd "$SRC" && ./configure --prefix="$PREFIX" \
   --extra-ldflags="-L$DEPS_PREFIX/staticlib" \
   "${CONFIGURE_FLAGS[@]}" >"$BUILD_DIR/configure.log" 2>&1) \
  || { tail -n 40 "$BUILD_DIR/configure.log"; tail -n 40 "$SRC/ffbuild/config.log"; die "FFmpeg configure failed (full log: $SRC/ffbuild/config.log)"; }
T_CONF=$SECONDS
# The compiler goes through ccache on make's command line, not configure's: configure's
# test programs are not worth caching, and the configuration FFmpeg records (-buildconf)
# stays the same with and without the cache.
log "make -j$JOBS CC='$CCACHE_CC'"
ccache_before=$(ccache_counts)
make -C "$SRC" -j"$JOBS" CC="$CCACHE_CC" >"$BUILD_DIR/make.log" 2>&1 \
  || { tail -n 40 "$BUILD_DIR/make.log"; die "FFmpeg build failed (log: $BUILD_DIR/make.log)"; }
make -C "$SRC" CC="$CCACHE_CC" install >"$BUILD_DIR/install.log" 2>&1 \
  || { tail -n 40 "$BUILD_DIR/install.log"; die "FFmpeg install failed"; }
T_MAKE=$SECONDS
log "$(ccache_summary "$ccache_before")"

# --------------------------------------------------------------------------
# 8. Portability check: only glibc-family shared libraries may be needed.
for b in ffmpeg ffprobe; do
  bad=$(ldd "$PREFIX/bin/$b" | awk '{print $1}' | grep -Ev "$ALLOWED_SONAMES" || true)
  [[ -z $bad ]] || die "$b links non-glibc libraries: $bad"
done
# Smoke test (CPU only): lavfi -> libx264 -> mp4 -> h264 decode -> framemd5, ffprobe.
smoke="$BUILD_DIR/smoke"; mkdir -p "$smoke"
"$PREFIX/bin/ffmpeg" -nostdin -hide_banner -loglevel error -f lavfi -i testsrc2=size=320x240:rate=25 \
  -t 1 -c:v libx264 -preset ultrafast -y "$smoke/t.mp4" || die "smoke test: x264 encode failed"
"$PREFIX/bin/ffmpeg" -nostdin -hide_banner -loglevel error -i "$smoke/t.mp4" -f framemd5 "$smoke/t.framemd5" \
  || die "smoke test: h264 decode failed"
[[ $(grep -vc '^#' "$smoke/t.framemd5") == 25 ]] || die "smoke test: expected 25 decoded frames"
"$PREFIX/bin/ffprobe" -v error -show_entries stream=codec_name -of csv=p=0 "$smoke/t.mp4" | grep -qx h264 \
  || die "smoke test: ffprobe failed"
# Snapshots (docs/ffmpeg.md): one frame as JPEG and as PNG, decoded back.
for img in jpg png; do
  "$PREFIX/bin/ffmpeg" -nostdin -hide_banner -loglevel error -i "$smoke/t.mp4" -frames:v 1 -y "$smoke/t.$img" \
    || die "smoke test: a .$img snapshot failed"
  "$PREFIX/bin/ffprobe" -v error -show_entries stream=width -of csv=p=0 "$smoke/t.$img" | grep -qx 320 \
    || die "smoke test: the .$img snapshot does not decode"
done
rm -rf "$smoke"
# The deps (dav1d.pc, the static-only libx264.a) for programs that link these static
# libraries (scripts/test-ffmpeg-sys.sh).
ln -sfn "$DEPS_PREFIX" "$PREFIX/deps"
{
  echo "ffmpeg $FF_VER ($(basename "$FF_TAR") $(sha256_of "$FF_TAR"))"
  echo "nv-codec-headers $NV_VER, dav1d $DAV1D_VER (static), x264 $(pkg-config --modversion x264) (static)"
  echo "libcuframes: $([[ $CUFRAMES_MODE == 1 ]] && echo enabled || echo "disabled ($why)")"
  echo "inputs hash: $BUILD_HASH"
} >"$PREFIX/BUILDINFO"

# Complete before FATE: a FATE that fails leaves a usable build and its object tree, and the
# next CUFRAMES_FATE=1 runs FATE alone again.
touch "$TREE_MARK"
[[ ${CUFRAMES_KEEP_BUILD:-0} == 1 ]] && touch "$BUILD_DIR/.keep-build"
touch "$BUILD_DIR/.complete"
if [[ ${CUFRAMES_FATE:-0} == 1 ]]; then
  run_fate
  drop_tree
else
  prune_other_trees
fi
link_results

log "done: unpack+configure $((T_CONF - T_FF))s, make+install $((T_MAKE - T_CONF))s, total $((SECONDS - T_START))s (jobs=$JOBS)"
log "ldd $PREFIX/bin/ffmpeg:"
ldd "$PREFIX/bin/ffmpeg" >&2
log "libcuframes: $([[ $CUFRAMES_MODE == 1 ]] && echo enabled || echo disabled)"
log "$REPO/build/ffmpeg-$FF_LINE -> $PREFIX$([[ $FF_LINE == "$DEFAULT_LINE" ]] && echo "; also build/ffmpeg and $CACHE/ffmpeg-current")"
echo "$PREFIX/bin/ffmpeg"
