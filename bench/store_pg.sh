#!/usr/bin/env bash
# PostgreSQL against SQLite, same machine, same run (release build): per-step overhead (a no-op
# script tool, and one that writes a file so the session workspace is checkpointed each step),
# turn latency, and resume time after 100, 1,000 and 10,000 events on both backends (target:
# flat, under 20 ms). Every PostgreSQL line prints its ratio to SQLite's. The `traffic` lines count,
# on the wire (a proxy reading the protocol), the round trips, transactions, statements and
# prepares of a resumed turn and of one no-op script-tool step on PostgreSQL.
#
#   bench/store_pg.sh                          # starts the throwaway cluster of scripts/postgres.sh
#   EVE_TEST_POSTGRES_URL=postgres://… bench/store_pg.sh   # another server
#
# The benchmarks are `eve-runtime/tests/store_bench.rs` (ignored in the normal suite). The
# cluster is the tests' own (target/postgres/), left running for the next run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

EVE_TEST_POSTGRES_URL="$(scripts/postgres.sh start)"
export EVE_TEST_POSTGRES_URL

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cargo test --release -q --workspace --test all --no-run >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
echo "== PostgreSQL vs SQLite ($(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version' "$EVE_TEST_POSTGRES_URL"))"
cargo test --release -q --workspace --test all store_bench -- --ignored --nocapture --test-threads=1 \
  | grep -E '^(per-step|turn latency|resume after|traffic)'
