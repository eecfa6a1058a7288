#!/usr/bin/env bash
# `eve build` on generated agents of 10, 1,000 and 10,000 tools (plus skills): median wall time
# and peak RSS, against the target (1,000 tools + 200 skills: < 100 ms, < 50 MiB).
#
#   bench/build.sh                          # release build, 10 runs per size
#   RUNS=20 bench/build.sh                  # more runs
#   SIZES=1000:200 bench/build.sh           # only the target size (TOOLS:SKILLS, comma-separated)
#   EVE_BIN=target/debug/eve bench/build.sh # measure a given binary, skip cargo
#
# Generated agents live in target/bench-build/ (regenerated each run). Exits 1 when a target is
# missed. Needs bash, Python 3 and cargo; uses GNU time for RSS when /usr/bin/time is GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${EVE_BIN:-}" ]]; then
  cargo build --release -p eve-cli >&2
  EVE_BIN=target/release/eve
fi
echo "measuring $EVE_BIN ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
exec python3 bench/build_measure.py "$EVE_BIN" target/bench-build
