#!/usr/bin/env bash
# The ring-replacement soak (core/tests/soak_replace.rs) at full length: a STRICT_WAIT ring
# replaced every 50 ms while readers join, leave, fork and are SIGKILLed, and a thread reads
# every read-only publisher function. The test suite runs it for 60 s; this, 10 minutes.
#
#   scripts/soak.sh [SECONDS]          # default 600
#   CUFRAMES_SOAK_SEED=N               # replay a run (each run prints its seed)
#   CUFRAMES_SOAK_MEMORY=cuda          # slots on CUDA VMM device 0 (GPU machine; gpu-check runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
CUFRAMES_SOAK_SECS="${1:-600}" exec cargo test --release -p cuframes-core --test soak_replace -- \
  --exact replacing_the_ring_under_churn_for_a_while --nocapture
