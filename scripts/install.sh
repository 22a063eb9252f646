#!/usr/bin/env bash
# Install libcuframes.a, cuframes.h and cuframes.pc under PREFIX (default /usr/local).
# Run after `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
target=${CARGO_TARGET_DIR:-target}
[ -f "$target/release/libcuframes.a" ] || cargo build --release -p cuframes
libs_private=$(sed -n 's/^pub const LIBS_PRIVATE: &str = "\(.*\)";/\1/p' build.rs)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0644 "$target/release/libcuframes.a" "$prefix/lib/"
install -m 0644 include/cuframes.h "$prefix/include/"
cat > "$prefix/lib/pkgconfig/cuframes.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: cuframes
Description: Share GPU frames and encoded packets between processes
Version: $version
Libs: -L\${libdir} -lcuframes
Libs.private: $libs_private
Cflags: -I\${includedir}
PC
echo "installed libcuframes $version into $prefix"
