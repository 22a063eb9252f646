#!/usr/bin/env bash
# Install libcuframes.a, the headers of include/ and cuframes.pc under PREFIX (default /usr/local).
# Builds the release library first (a no-op when it is current). The .pc file is the one
# build.rs wrote into cargo's OUT_DIR, with its prefix set to PREFIX.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
target=${CARGO_TARGET_DIR:-target}
# cargo names the build script's OUT_DIR in its JSON messages.
out_dir=$(cargo build --release -p cuframes --message-format=json | python3 -c '
import json, re, sys
for line in sys.stdin:
    m = json.loads(line)
    # The root package (its id has no stable form: "…#cuframes@V", or "…#V" when the
    # checkout directory is itself named cuframes); its OUT_DIR is build/cuframes-<hash>/out.
    if m.get("reason") == "build-script-executed" and m["package_id"].startswith("path+") \
            and re.search(r"/build/cuframes-[0-9a-f]+/out$", m["out_dir"]):
        print(m["out_dir"])')
[ -n "$out_dir" ] && [ -f "$out_dir/cuframes.pc" ] || { echo "install.sh: no cuframes.pc from build.rs (out_dir '$out_dir')" >&2; exit 1; }
version=$(sed -n 's/^Version: //p' "$out_dir/cuframes.pc")
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0644 "$target/release/libcuframes.a" "$prefix/lib/"
# Every public header (cuframes.h and the headers it includes).
install -m 0644 include/*.h "$prefix/include/"
sed "s|^prefix=.*|prefix=$prefix|" "$out_dir/cuframes.pc" > "$prefix/lib/pkgconfig/cuframes.pc"
chmod 0644 "$prefix/lib/pkgconfig/cuframes.pc"
echo "installed libcuframes $version into $prefix"
