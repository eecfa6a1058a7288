#!/usr/bin/env bash
# `eve build` on generated agents of 10, 1,000 and 10,000 tools (plus skills): median wall time
# and peak RSS, against the target (1,000 tools + 200 skills: < 100 ms, < 50 MiB).
#
#   bench/build.sh                          # release build, 10 runs per size
#   RUNS=20 bench/build.sh                  # more runs
#   SIZES=1000:200 bench/build.sh           # only the target size (TOOLS:SKILLS, comma-separated)
#   EVE_BIN=target/debug/eve bench/build.sh # measure a given binary, skip cargo
#   BASE=7aee417 bench/build.sh             # also a baseline revision: clean scaffold builds of both
#   BASE_BIN=path/to/eve bench/build.sh     # a baseline binary already built
#   SCAFFOLD_ONLY=1 bench/build.sh          # only the clean scaffold builds (no generated agents)
#
# First, a clean build of the scaffold (`eve init`, no `.eve/`), this checkout against the
# baseline when one is given, alternating (bench/clean_build.py; target <= 10 ms). The baseline
# revision is exported (`git archive`) to target/bench-base/src-REV and built in
# target/bench-base/target-REV (both kept). Generated agents live in target/bench-build/
# (regenerated each run). Exits 1 when a target is missed. Needs bash, Python 3 and cargo; uses
# GNU time for RSS when /usr/bin/time is GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${EVE_BIN:-}" ]]; then
  cargo build --release -p eve-cli >&2
  EVE_BIN=target/release/eve
fi
if [[ -z "${BASE_BIN:-}" && -n "${BASE:-}" ]]; then
  rev=$(git rev-parse --verify "$BASE^{commit}")
  tree=target/bench-base/src-${rev:0:12}
  if [[ ! -f "$tree/Cargo.toml" ]]; then
    echo "== exporting baseline $BASE ($rev) to $tree" >&2
    rm -rf "$tree.tmp" && mkdir -p "$tree.tmp"
    git archive "$rev" | tar -x -C "$tree.tmp"
    mv "$tree.tmp" "$tree"
  fi
  echo "== building baseline $BASE (release; the first time takes a while)" >&2
  target=$PWD/target/bench-base/target-${rev:0:12}
  (cd "$tree" && CARGO_TARGET_DIR=$target cargo build --release -p eve-cli >&2)
  BASE_BIN=$target/release/eve
fi
echo "measuring $EVE_BIN ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
status=0
python3 bench/clean_build.py "$EVE_BIN" target/bench-build ${BASE_BIN:+--base "$BASE_BIN"} || status=$?
if [[ -n "${SCAFFOLD_ONLY:-}" ]]; then
  exit "$status"
fi
python3 bench/build_measure.py "$EVE_BIN" target/bench-build || status=$?
exit "$status"
