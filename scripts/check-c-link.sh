#!/usr/bin/env bash
# Checks that a plain C program can use libcuframes the way FFmpeg does: include cuframes.h
# and link libcuframes.a with `pkg-config --static --cflags --libs cuframes`, from an
# installation into a temporary prefix (scripts/install.sh, as FFmpeg's build uses it).
#
# Usage: scripts/check-c-link.sh      (honours CARGO_TARGET_DIR and CC; default ./target, cc)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "check-c-link: scripts/install.sh $tmp/prefix" >&2
scripts/install.sh "$tmp/prefix" >&2
for f in "$tmp/prefix/lib/libcuframes.a" "$tmp/prefix/lib/pkgconfig/cuframes.pc" \
    "$tmp/prefix/include/cuframes.h" "$tmp/prefix/include/cuframes_protocol.h"; do
    if [ ! -f "$f" ]; then
        echo "check-c-link: $f is missing after the installation" >&2
        exit 1
    fi
done

export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
flags=$(pkg-config --static --cflags --libs cuframes)
echo "check-c-link: pkg-config --static --cflags --libs cuframes: $flags" >&2

# link_smoke.c includes cuframes.h alone: the API header needs no other.
# shellcheck disable=SC2086 # $flags is a list of compiler/linker arguments
"${CC:-cc}" -std=c11 -Wall -Wextra -pedantic -Werror \
    -o "$tmp/link_smoke" tests/conformance/c/link_smoke.c $flags

# The installed protocol header compiles on its own (it includes cuframes.h beside it).
# shellcheck disable=SC2086
echo '#include <cuframes_protocol.h>' |
    "${CC:-cc}" -std=c11 -Wall -Wextra -pedantic -Werror -fsyntax-only -x c - $flags

"$tmp/link_smoke"

# The publisher/subscriber API end to end from C, linked the same way.
# shellcheck disable=SC2086
"${CC:-cc}" -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -pedantic -Werror \
    -o "$tmp/api_smoke" tests/conformance/c/api_smoke.c $flags
"$tmp/api_smoke"
echo "check-c-link: OK"
