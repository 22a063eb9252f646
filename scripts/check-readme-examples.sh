#!/usr/bin/env bash
# Compiles the README's Rust and C examples, so that what a newcomer copies builds.
#
# An example is a fenced ```rust or ```c block whose line before the fence is exactly
#   <!-- compiled by scripts/check-readme-examples.sh -->
# and each such block is a whole program. The Rust ones are built as binaries of a throw-away
# crate that depends on the workspace's cuframes-core (under the target directory, with the
# workspace's Cargo.lock); the C ones are compiled against include/cuframes.h and linked
# against libcuframes.a with `pkg-config --static --cflags --libs cuframes`, from an
# installation into a temporary prefix (as scripts/check-c-link.sh does). Nothing runs:
# the examples need a publisher on the other side.
#
# Usage: scripts/check-readme-examples.sh [README]   (honours CARGO_TARGET_DIR and CC)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
readme=${1:-README.md}
target=${CARGO_TARGET_DIR:-$root/target}
marker='<!-- compiled by scripts/check-readme-examples.sh -->'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Extract the marked blocks into $tmp/rust/NN.rs and $tmp/c/NN.c; a marked block of another
# language, or one never closed, is an error.
mkdir -p "$tmp/rust" "$tmp/c"
awk -v marker="$marker" -v dir="$tmp" '
  in_block && /^```[[:space:]]*$/ { in_block = 0; close(file); next }
  in_block { print > file; next }
  prev == marker && /^```/ {
    lang = substr($0, 4); sub(/[[:space:]].*/, "", lang)
    n++; file = sprintf("%s/%s/%02d.%s", dir, lang, n, lang == "rust" ? "rs" : "c")
    if (lang != "rust" && lang != "c") {
      printf "line %d: a marked block must be rust or c, not \"%s\"\n", NR, lang > "/dev/stderr"
      bad = 1; file = "/dev/null"
    }
    in_block = 1; prev = ""; next
  }
  { prev = $0 }
  END { if (in_block) { print "a marked block is never closed" > "/dev/stderr"; bad = 1 } exit bad }
' "$readme"
rust=("$tmp"/rust/*.rs) c=("$tmp"/c/*.c)
[ -e "${rust[0]}" ] || rust=()
[ -e "${c[0]}" ] || c=()
echo "check-readme-examples: $readme has ${#rust[@]} Rust and ${#c[@]} C example(s)" >&2
if [ $((${#rust[@]} + ${#c[@]})) -eq 0 ]; then
  echo "check-readme-examples: no marked example in $readme (the marker is: $marker)" >&2
  exit 1
fi

# Rust: one binary per example. The crate sits under the target directory (the run must not
# change the checkout) and shares it, so the workspace's dependencies are not built again.
if [ ${#rust[@]} -gt 0 ]; then
  crate=$target/readme-examples
  rm -rf "$crate" && mkdir -p "$crate/src/bin"
  cp Cargo.lock "$crate/"
  cat >"$crate/Cargo.toml" <<TOML
[package]
name = "readme-examples"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
cuframes-core = { path = "$root/core" }

[workspace]

# The workspace's release profile, so that the dependencies it built are used as they are.
$(sed -n '/^\[profile\.release\]/,/^\[/{/^\[profile\.release\]/p;/^[^[]/p}' Cargo.toml)
TOML
  for f in "${rust[@]}"; do cp "$f" "$crate/src/bin/example_$(basename "$f")"; done
  CARGO_TARGET_DIR=$target cargo build --release --offline --manifest-path "$crate/Cargo.toml" --bins
fi

# C: compiled and linked the way a C program (FFmpeg) uses the library.
if [ ${#c[@]} -gt 0 ]; then
  scripts/install.sh "$tmp/prefix" >&2
  export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  flags=$(pkg-config --static --cflags --libs cuframes)
  for f in "${c[@]}"; do
    # shellcheck disable=SC2086 # $flags is a list of compiler/linker arguments
    "${CC:-cc}" -std=c11 -Wall -Wextra -pedantic -Werror -o "${f%.c}" "$f" $flags
  done
fi
echo "check-readme-examples: OK" >&2
