#!/usr/bin/env bash
# Runtime benchmarks (release build), measured on this checkout and on a baseline commit in the
# same run, so the ratio compares like with like on a noisy machine:
#   1. per-step overhead with the mock model and a no-op action (p50/p99, checkpoint commits included);
#   2. resume time of a session after 100, 1,000 and 10,000 events (target: flat, < 20 ms);
#   3. the store round trips from accepting a message to the first model request (SQLite; a new
#      session's first message and an existing session's next one), counted by
#      eve-runtime/tests/roundtrips.rs;
#   4. the crash loop (SIGKILL `eve run` at every kill point, restart, check) CRASH_ITERATIONS times
#      (this checkout only).
#
#   bench/runtime.sh                      # baseline f9bbee7; CRASH_ITERATIONS=200 per kill point
#   CRASH_ITERATIONS=0 bench/runtime.sh   # skip the crash loop
#   BASE=abc1234 bench/runtime.sh         # another baseline revision
#   BASE=none bench/runtime.sh            # this checkout only
#   ROUNDS=3 bench/runtime.sh             # alternate baseline and checkout three times each
#
# The baseline is exported (`git archive`, no worktree registered) to target/bench-base/src-REV
# (kept for later runs) and built in a target dir of its own, target/bench-base/target-REV (kept
# too; BASE_TARGET_DIR=dir to choose another): two baselines built in one target dir mixed their
# workspace crates. Each side runs its own `eve-runtime/tests/engine_bench.rs`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CRASH_ITERATIONS=${CRASH_ITERATIONS:-200}
BASE=${BASE:-f9bbee7}
ROUNDS=${ROUNDS:-1}

# Runs the engine benchmarks of the tree in $1 (target dir $2, empty: the tree's own) and prints
# their result lines.
measure() {
  local tree=$1 target=$2
  (
    cd "$tree"
    if [ -n "$target" ]; then export CARGO_TARGET_DIR=$target; fi
    cargo test --release -q -p eve-runtime --test all engine_bench -- --ignored --nocapture \
      --test-threads=1 | grep -oE '(per-step|context switches|resume after).*'
    # The count is printed before the test asserts it, so a baseline over the limit prints it too.
    { cargo test --release -q -p eve-runtime --test all roundtrips::sqlite -- --nocapture \
      --test-threads=1 2>&1 || true; } | grep -E '^store round trips from accept' || true
  )
}

# A baseline without eve-runtime/tests/roundtrips.rs gets this checkout's, with a counting store
# generated from the baseline's own `Store` trait (bench/counting_store.py). Returns 1 when it
# was already there or cannot be added.
add_roundtrips() {
  local tests=$1/eve-runtime/tests
  [ -f "$tests/all.rs" ] && [ ! -f "$tests/roundtrips.rs" ] || return 1
  cp "$ROOT/eve-runtime/tests/roundtrips.rs" "$tests/roundtrips.rs"
  python3 "$ROOT/bench/counting_store.py" "$1" >"$tests/counting_store.rs"
  grep -q '^mod counting_store;' "$tests/all.rs" || echo 'mod counting_store;' >>"$tests/all.rs"
  echo 'mod roundtrips;' >>"$tests/all.rs"
}

# Undoes add_roundtrips (the baseline's tests did not build with it).
drop_roundtrips() {
  local tests=$1/eve-runtime/tests
  rm -f "$tests/roundtrips.rs" "$tests/counting_store.rs"
  sed -i '/^mod counting_store;$/d; /^mod roundtrips;$/d' "$tests/all.rs"
}

# Builds the engine benchmarks of the tree in $1 (target dir $2), quietly unless it fails.
build() {
  local tree=$1 target=$2 log
  log=$(mktemp)
  if ! (
    cd "$tree"
    if [ -n "$target" ]; then export CARGO_TARGET_DIR=$target; fi
    cargo test --release -q -p eve-runtime --test all --no-run
  ) >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

base_tree=
if [ "$BASE" != none ]; then
  rev=$(git rev-parse --verify "$BASE^{commit}")
  base_tree=$ROOT/target/bench-base/src-${rev:0:12}
  BASE_TARGET_DIR=${BASE_TARGET_DIR:-$ROOT/target/bench-base/target-${rev:0:12}}
  if [ ! -f "$base_tree/Cargo.toml" ]; then
    echo "== exporting baseline $BASE ($rev) to $base_tree" >&2
    rm -rf "$base_tree.tmp"
    mkdir -p "$base_tree.tmp"
    git archive "$rev" | tar -x -C "$base_tree.tmp"
    mv "$base_tree.tmp" "$base_tree"
  fi
  echo "== building baseline $BASE (release; the first time takes a while)" >&2
  if add_roundtrips "$base_tree" && ! build "$base_tree" "$BASE_TARGET_DIR" 2>/dev/null; then
    echo "== the baseline does not build with the round-trip count; building it without" >&2
    drop_roundtrips "$base_tree"
  fi
  build "$base_tree" "$BASE_TARGET_DIR"
fi
echo "== building this checkout (release)" >&2
build "$ROOT" ""

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  if [ -n "$base_tree" ]; then
    echo "== round $round: baseline $BASE" >&2
    measure "$base_tree" "$BASE_TARGET_DIR" | tee -a "$out/base"
  fi
  echo "== round $round: this checkout ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes'))" >&2
  measure "$ROOT" "" | tee -a "$out/head"
done

if [ -n "$base_tree" ]; then
  echo
  echo "== median over $ROUNDS round(s): baseline $BASE vs this checkout (ratio: checkout / baseline)"
  python3 - "$out/base" "$out/head" <<'EOF'
import re, statistics, sys

def parse(path):
    rows = {}
    for line in open(path):
        m = re.match(r"per-step, (.*?): p50 ([\d.]+) ms\s+p99 ([\d.]+) ms", line)
        if m:
            rows.setdefault((m[1], "p50"), []).append(float(m[2]))
            rows.setdefault((m[1], "p99"), []).append(float(m[3]))
            continue
        m = re.match(r"resume after\s+(\d+) events: of which opening the store ([\d.]+) ms", line)
        if m:
            rows.setdefault((f"resume after {m[1]} events", "of which open"), []).append(float(m[2]))
            continue
        m = re.match(r"resume after\s+(\d+) events: load state ([\d.]+) ms\s+open store \+ finish the turn ([\d.]+) ms", line)
        if m:
            rows.setdefault((f"resume after {m[1]} events", "load state"), []).append(float(m[2]))
            rows.setdefault((f"resume after {m[1]} events", "open store + finish"), []).append(float(m[3]))
            continue
        m = re.match(r"store round trips from accept to the first model request, (.*?): (\d+) ", line)
        if m:
            rows.setdefault((f"store round trips to the first model call", m[1]), []).append(float(m[2]))
    return {k: statistics.median(v) for k, v in rows.items()}

def fmt(key, v):
    if key[0].startswith("store round trips"):
        return f"{v:>10.0f}"
    return f"{v:>7.3f} ms"

base, head = parse(sys.argv[1]), parse(sys.argv[2])
width = max(len(f"{k[0]}: {k[1]}") for k in [*base, *head]) if base else 40
print(f"{'measure':<{width}}  {'baseline':>10}  {'checkout':>10}  {'ratio':>6}")
for key, b in base.items():
    h = head.get(key)
    label = f"{key[0]}: {key[1]}"
    if h is None:
        print(f"{label:<{width}}  {fmt(key, b)}  {'n/a':>10}")
    else:
        print(f"{label:<{width}}  {fmt(key, b)}  {fmt(key, h)}  {h / b:>6.2f}")
for key, h in head.items():
    if key not in base:
        label = f"{key[0]}: {key[1]}"
        print(f"{label:<{width}}  {'n/a':>10}  {fmt(key, h)}")
EOF
fi

if [ "$CRASH_ITERATIONS" -gt 0 ]; then
  echo "== crash loop: $CRASH_ITERATIONS iterations per kill point (release)" >&2
  start=$(date +%s)
  EVE_CRASH_ITERATIONS=$CRASH_ITERATIONS cargo test --release -q -p eve-cli --test all crash:: \
    -- --test-threads=2 2>&1 | grep -E '^(test |test result|.*panicked)'
  echo "crash loop: 5 kill points x $CRASH_ITERATIONS iterations in $(( $(date +%s) - start )) s" >&2
fi
