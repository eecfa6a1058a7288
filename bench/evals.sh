#!/usr/bin/env bash
# eve eval throughput: 200 mock cases (each a tool call of a real script tool, then a reply,
# checked against four expectations) in one `eve eval` run. Target: under 2 s on this machine.
# Prints the wall time of the whole command (build included) and of the suite itself, and the
# time of an empty run (the process, the build and the store set-up alone) as the baseline.
#
#   bench/evals.sh                 # target/debug/eve; 200 cases, --max-concurrency 8
#   EVE=target/release/eve N=500 JOBS=16 bench/evals.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EVE=${EVE:-target/debug/eve}
N=${N:-200}
JOBS=${JOBS:-8}
[ -x "$EVE" ] || cargo build --workspace --locked --bin eve >&2
DIR=target/bench-evals
rm -rf "$DIR"
"$EVE" init "$DIR" --template default >/dev/null 2>&1
rm -rf "$DIR/evals"
mkdir -p "$DIR/evals/bench"
python3 - "$DIR/evals/bench" "$N" <<'PY'
import json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
cases = []
for i in range(n):
    city = f"City{i}"
    cases.append({
        "id": f"c{i}",
        "tags": ["bench"],
        "messages": [f"What's the weather in {city}?"],
        "mock": [
            {"tool_calls": [{"name": "get_weather", "input": {"city": city}}]},
            {"text": f"It is sunny in {city}, 22 °C."},
        ],
        "expect": {
            "called_tool": {"name": "get_weather", "input": {"city": city}, "count": 1},
            "text": {"contains": "sunny", "regex": "\\d+ °C"},
            "not_called": "load_skill",
            "max_steps": 2,
        },
    })
with open(os.path.join(out, "cases.yaml"), "w") as f:
    json.dump(cases, f, indent=1)
PY
"$EVE" build -C "$DIR" >/dev/null 2>&1
now() { python3 -c 'import time; print(time.time())'; }
t0=$(now)
NO_COLOR=1 "$EVE" eval -C "$DIR" --tag nothing-has-this-tag >/dev/null 2>&1 || true
t1=$(now)
NO_COLOR=1 "$EVE" eval -C "$DIR" --max-concurrency "$JOBS" --json >"$DIR/results.json"
t2=$(now)
python3 - "$DIR/results.json" "$t0" "$t1" "$t2" "$N" "$JOBS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t0, t1, t2 = map(float, sys.argv[2:5])
n, jobs = sys.argv[5], sys.argv[6]
assert r["passed"] == r["total"] == int(n), f"not every case passed: {r['passed']}/{r['total']}"
wall = t2 - t1
print(f"eve eval: {n} mock cases, --max-concurrency {jobs}: {wall:.2f} s wall "
      f"({r['seconds']:.2f} s in the suite, {1000 * wall / int(n):.1f} ms a case); "
      f"an empty selection: {t1 - t0:.2f} s; target < 2 s: {'met' if wall < 2 else 'NOT met'}")
PY
