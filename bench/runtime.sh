#!/usr/bin/env bash
# Runtime benchmarks (release build):
#   1. per-step overhead with the mock model and a no-op action (p50/p99, checkpoint commits included);
#   2. resume time of a session after 100, 1,000 and 10,000 events (target: flat, < 20 ms);
#   3. the crash loop (SIGKILL `eve run` at every kill point, restart, check) CRASH_ITERATIONS times.
#
#   bench/runtime.sh                      # CRASH_ITERATIONS=200 per kill point
#   CRASH_ITERATIONS=0 bench/runtime.sh   # skip the crash loop
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CRASH_ITERATIONS=${CRASH_ITERATIONS:-200}

echo "== runtime overhead and resume (release)" >&2
cargo test --release -q -p eve-runtime --test all engine_bench -- --ignored --nocapture --test-threads=1 \
  | grep -oE '(per-step|resume after).*'

if [ "$CRASH_ITERATIONS" -gt 0 ]; then
  echo "== crash loop: $CRASH_ITERATIONS iterations per kill point (release)" >&2
  start=$(date +%s)
  EVE_CRASH_ITERATIONS=$CRASH_ITERATIONS cargo test --release -q -p eve-cli --test all crash:: \
    -- --test-threads=2 2>&1 | grep -E '^(test |test result|.*panicked)'
  echo "crash loop: 5 kill points x $CRASH_ITERATIONS iterations in $(( $(date +%s) - start )) s" >&2
fi
