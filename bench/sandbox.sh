#!/usr/bin/env bash
# Spawn overhead of the `isolated` sandbox (eve-sandbox/examples/sandbox_spawn.rs): p50/p99 of
# spawn+exit of `true` unconfined, isolated cold, and isolated from a pool of POOL warm boxes
# (default 2; the refill runs while the next calls do), back to back over RUNS runs (default
# 200), with CPU per call of the whole process tree, the differences and ratios to the
# unconfined spawn (target: isolation adds under 5 ms p50), warm calls paced 25 ms apart, and
# what a network namespace costs. Every isolated call includes what keeps boxes apart, as the
# runtime's does: a uid leased per box (as root), a cgroup per box (made per call cold, ahead by
# the pool warm; its limits written per call) and the workspace quota's watch; the cold path
# without them runs interleaved with it, so their cost shows under the same load.
#
#   bench/sandbox.sh            # release build, 200 runs
#   RUNS=1000 POOL=1 bench/sandbox.sh
#   ONLY=warm perf stat -e task-clock target/release/examples/sandbox_spawn 100  # one way alone
#   PROFILE=dev bench/sandbox.sh  # skip the release build (syscall-bound: numbers stay close)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PROFILE=${PROFILE:-release}
RUNS=${RUNS:-200}
cargo build -q --profile "$PROFILE" -p eve-sandbox --example sandbox_spawn
dir=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
exec "target/$dir/examples/sandbox_spawn" "$RUNS"
