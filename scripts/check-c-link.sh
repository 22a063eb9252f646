#!/usr/bin/env bash
# Checks that a plain C program can use libcuframes the way FFmpeg does: include cuframes.h
# and link libcuframes.a with `pkg-config --static --cflags --libs cuframes`, using the
# uninstalled cuframes.pc that build.rs writes next to the library.
#
# Usage: scripts/check-c-link.sh      (honours CARGO_TARGET_DIR and CC; default ./target, cc)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in
/*) ;;
*) target_dir=$root/$target_dir ;; # cargo resolves a relative CARGO_TARGET_DIR from the cwd
esac
profile_dir=$target_dir/release

echo "check-c-link: cargo build --release -p cuframes" >&2
cargo build --release -p cuframes

for f in "$profile_dir/libcuframes.a" "$profile_dir/cuframes.pc"; do
    if [ ! -f "$f" ]; then
        echo "check-c-link: $f is missing after the build" >&2
        exit 1
    fi
done

export PKG_CONFIG_PATH=$profile_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
flags=$(pkg-config --static --cflags --libs cuframes)
echo "check-c-link: pkg-config --static --cflags --libs cuframes: $flags" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck disable=SC2086 # $flags is a list of compiler/linker arguments
"${CC:-cc}" -std=c11 -Wall -Wextra -pedantic -Werror \
    -o "$tmp/link_smoke" tests/conformance/c/link_smoke.c $flags

"$tmp/link_smoke"

# The publisher/subscriber API end to end from C, linked the same way.
# shellcheck disable=SC2086
"${CC:-cc}" -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -pedantic -Werror \
    -o "$tmp/api_smoke" tests/conformance/c/api_smoke.c $flags
"$tmp/api_smoke"
echo "check-c-link: OK"
