#!/usr/bin/env bash
# Spawn overhead of the `isolated` sandbox (eve-sandbox/examples/sandbox_spawn.rs): p50/p99 of
# spawn+exit of `true` isolated vs unconfined over RUNS runs (default 200), their difference
# (target: isolation adds under 5 ms p50), and what a network namespace costs on this kernel.
#
#   bench/sandbox.sh            # release build, 200 runs
#   RUNS=1000 bench/sandbox.sh
#   PROFILE=dev bench/sandbox.sh  # skip the release build (syscall-bound: numbers stay close)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PROFILE=${PROFILE:-release}
RUNS=${RUNS:-200}
cargo build -q --profile "$PROFILE" -p eve-sandbox --example sandbox_spawn
dir=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
exec "target/$dir/examples/sandbox_spawn" "$RUNS"
