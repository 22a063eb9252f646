#!/usr/bin/env bash
# Run every cargo-fuzz target of fuzz/ for a number of seconds each (default 60).
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer args...]
#
# Installs cargo-fuzz when it is missing; needs a nightly toolchain (`rustup toolchain
# install nightly`). Each target runs on corpus fuzz/corpus/<target> (git-ignored, grows from
# run to run) plus the committed seeds in fuzz/seeds/<target> when that folder exists.
# Exits non-zero if any target finds a crash; the input is then in fuzz/artifacts/<target>/.
# See docs/fuzzing.md.
set -euo pipefail

secs="${1:-60}"
shift || true
case "$secs" in
    '' | *[!0-9]*)
        echo "usage: $0 [SECONDS] [libFuzzer args...]" >&2
        exit 2
        ;;
esac

cd "$(dirname "$0")/../fuzz"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "cargo-fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

targets="$(cargo +nightly fuzz list)"
if [ -z "$targets" ]; then
    echo "no fuzz targets in fuzz/Cargo.toml" >&2
    exit 1
fi

failed=()
for target in $targets; do
    corpora=("corpus/$target")
    mkdir -p "corpus/$target"
    if [ -d "seeds/$target" ]; then
        corpora+=("seeds/$target")
    fi
    echo "==> $target: ${secs}s (corpora: ${corpora[*]})"
    if ! cargo +nightly fuzz run "$target" "${corpora[@]}" -- \
        -max_total_time="$secs" -print_final_stats=1 "$@"; then
        echo "==> $target FAILED: crashing input in fuzz/artifacts/$target/" >&2
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz targets that failed: ${failed[*]}" >&2
    exit 1
fi
echo "all fuzz targets ran ${secs}s without findings: ${targets//$'\n'/ }"
