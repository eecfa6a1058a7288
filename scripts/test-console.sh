#!/usr/bin/env bash
# The web console in a real browser: installs playwright-core from npm into target/console-test
# (cached: nothing is installed while scripts/console-test/package-lock.json is unchanged), finds
# Debian's `chromium` (installs it with apt-get when missing and running as root), builds the
# `eve` binary, lays out a mock-model agent with an `approval: always` tool, a tool that runs
# until a gate file exists and a schedule, and runs scripts/console-test/console-test.mjs with
# Node's test runner. Screenshots of the main views go to target/console-test/shots (or to the
# folder given as `--screenshots DIR`; `docs/console/` holds the ones the docs show, and
# docs/console/shots.json the structure of each view when it was taken: the test fails when a
# view no longer has the structure its documented screenshot shows, until
# `--screenshots docs/console` takes them again).
# Exits non-zero when any step fails. `./scripts/test.sh` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

SHOTS="$REPO/target/console-test/shots"
if [ "${1:-}" = "--screenshots" ]; then
    SHOTS=$(mkdir -p "$2" && cd "$2" && pwd)
fi

DIR="target/console-test"
FIXTURE="scripts/console-test"
scripts/npm-install.sh "$FIXTURE" "$DIR" "playwright-core" node_modules/playwright-core/package.json
# The test sits next to node_modules so that `import "playwright-core"` resolves.
cp "$FIXTURE/console-test.mjs" "$DIR/console-test.mjs"

find_chromium() {
    for name in chromium chromium-browser google-chrome-stable google-chrome; do
        if command -v "$name" >/dev/null 2>&1; then
            command -v "$name"
            return 0
        fi
    done
    return 1
}
CHROMIUM=${CHROMIUM:-$(find_chromium || true)}
if [ -z "$CHROMIUM" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        printf 'installing chromium (apt-get install -y chromium)\n' >&2
        if ! { apt-get install -y -qq chromium >&2 ||
            { apt-get update -qq >&2 && apt-get install -y -qq chromium >&2; }; }; then
            echo "error: \`apt-get install -y chromium\` failed; install Chromium and set CHROMIUM=/path/to/chromium" >&2
            exit 1
        fi
        CHROMIUM=$(find_chromium || true)
    fi
fi
if [ -z "$CHROMIUM" ] || [ ! -x "$CHROMIUM" ]; then
    echo "error: no Chromium found for the console test: install Debian's \`chromium\` (apt-get install -y chromium, as root) or set CHROMIUM=/path/to/chromium" >&2
    exit 1
fi
# Debian's /usr/bin/chromium is a wrapper script; the real binary sits beside its resources.
if [ -x /usr/lib/chromium/chromium ] && [ "$CHROMIUM" = "/usr/bin/chromium" ]; then
    CHROMIUM=/usr/lib/chromium/chromium
fi

cargo build --quiet --locked --workspace --bins
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-console.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
# The folder's name is the agent's name.
PROJECT="$ROOT/console-agent"
mkdir -p "$PROJECT/agent/tools" "$PROJECT/agent/sandbox" "$PROJECT/agent/schedules"
printf 'You are the console test agent. You refund orders.\n' > "$PROJECT/agent/instructions.md"
# A price for the mock model, so the session shows what it cost.
printf 'prices:\n  mock/echo: {input: 1000, output: 2000}\n' > "$PROJECT/agent/agent.yaml"
# The slow tool reads its gate outside the workspace: the tools run unconfined.
printf 'provider: host\n' > "$PROJECT/agent/sandbox/sandbox.yaml"
cat > "$PROJECT/agent/tools/refund.sh" <<'SH'
#!/bin/sh
# ---
# description: Refund an amount to the customer.
# approval: always
# input:
#   type: object
#   properties:
#     amount: {type: number, description: Dollars to refund}
#   required: [amount]
# ---
cat >/dev/null
echo '{"refunded": 5, "currency": "USD"}'
SH
cat > "$PROJECT/agent/tools/slow.sh" <<SH
#!/bin/sh
# ---
# description: Waits until the test opens its gate.
# effect: read
# timeout: 60s
# ---
cat >/dev/null
while [ ! -f "$PROJECT/slow.gate" ]; do sleep 0.05; done
echo 'done waiting'
SH
chmod +x "$PROJECT"/agent/tools/*.sh
cat > "$PROJECT/agent/schedules/nightly.md" <<'MD'
---
cron: "0 3 * * *"
timezone: UTC
---
Nightly report please.
MD
cat > "$ROOT/script.json" <<'JSON'
[
  {"reasoning": "I should call the refund tool for this order.",
   "text": "Let me refund that for you right away.",
   "tool_calls": [{"name": "refund", "input": {"amount": 5}}],
   "delay_ms": 60},
  {"tool_calls": [{"name": "slow", "input": {}}]},
  {"text": "All done: refunded and waited.", "delay_ms": 20}
]
JSON

cd "$REPO/$DIR"
EVE="$EVE" EVE_PROJECT_DIR="$PROJECT" EVE_MOCK_SCRIPT="$ROOT/script.json" CHROMIUM="$CHROMIUM" \
    SHOTS="$SHOTS" DOCS_SHOTS="$REPO/docs/console" node --test --test-reporter=spec console-test.mjs
