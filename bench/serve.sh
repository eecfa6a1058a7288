#!/usr/bin/env bash
# Server benchmarks (release build): cold start of `eve serve` and `eve dev` to a healthy /health
# (median, RSS, peak RSS), the first turn POST → `session.waiting`, and 100 / 1,000 concurrent
# sessions (RSS, added p99 turn latency). Prints each result's ratio to its target.
#
#   bench/serve.sh                                  # defaults: --runs 10 --turns 100 --sessions 100,1000 --rate 20
#   bench/serve.sh --runs 5 --sessions 100          # quicker
#   EVE_BENCH_BIN=path/to/eve bench/serve.sh        # measure this binary instead of building one
#
# Needs python3 (standard library only). Temp projects live under $TMPDIR and are removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${EVE_BENCH_BIN:-}" ]; then
  bin=$EVE_BENCH_BIN
else
  echo "== cargo build --release -p eve-cli" >&2
  cargo build --release -q -p eve-cli
  bin=target/release/eve
fi
exec python3 bench/serve.py --eve "$bin" "$@"
