#!/usr/bin/env bash
# eve's React binding in a real browser against `eve serve`: installs eve@0.80.1, react,
# react-dom, esbuild and playwright-core from npm into target/browser-test (cached: nothing is
# installed while scripts/browser-test/package-lock.json is unchanged), bundles
# scripts/browser-test/page.jsx (a small chat page built with `useEveAgent` from `eve/react`)
# with esbuild, finds Debian's `chromium` (installs it with apt-get when missing and running as
# root), builds the `eve` binary, lays out a mock-model agent whose `approval: always` refund tool
# takes longer than the stream lease and whose `channels/eve.yaml` lists the page's origin under
# `cors.origins`, and runs scripts/browser-test/browser-test.mjs with Node's test runner: the page
# (served from its own origin) streams an answer across several lease ends
# (`EVE_STREAM_LEASE_MS`, eve's stream control) and answers an approval by its button.
# Exits non-zero when any step fails. `./scripts/test.sh` runs it (EVE_SKIP_BROWSER=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DIR="target/browser-test"
FIXTURE="scripts/browser-test"
# eve's engines ask for a newer Node than may run npm; only its browser code is used, bundled.
scripts/npm-install.sh "$FIXTURE" "$DIR" "eve, react, esbuild, playwright-core" \
    node_modules/playwright-core/package.json node_modules/eve/package.json node_modules/.bin/esbuild
# The test and the page sit next to node_modules so that their imports resolve.
cp "$FIXTURE/browser-test.mjs" "$FIXTURE/page.jsx" "$DIR/"
SITE="$REPO/$DIR/site"
mkdir -p "$SITE"
cp "$FIXTURE/index.html" "$SITE/index.html"
(cd "$DIR" && node_modules/.bin/esbuild page.jsx --bundle --format=esm --platform=browser \
    --jsx=automatic --log-level=warning --outfile="$SITE/page.js")

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
    echo "error: no Chromium found for the browser test: install Debian's \`chromium\` (apt-get install -y chromium, as root) or set CHROMIUM=/path/to/chromium (EVE_SKIP_BROWSER=1 skips the browser tests)" >&2
    exit 1
fi
# Debian's /usr/bin/chromium is a wrapper script; the real binary sits beside its resources.
if [ -x /usr/lib/chromium/chromium ] && [ "$CHROMIUM" = "/usr/bin/chromium" ]; then
    CHROMIUM=/usr/lib/chromium/chromium
fi

cargo build --quiet --locked -p eve-cli
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-browser.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
# The folder's name is the agent's name.
PROJECT="$ROOT/browser-agent"
mkdir -p "$PROJECT/agent/tools" "$PROJECT/agent/channels"
printf 'You are the browser test agent. You tell stories and refund orders.\n' > "$PROJECT/agent/instructions.md"
# The page is served from its own origin and calls eve serve across origins.
cat > "$PROJECT/agent/channels/eve.yaml" <<'YAML'
cors:
  origins: ["${EVE_BROWSER_ORIGIN}"]
YAML
# Approved, the refund takes longer than several leases of the test's stream lease (400 ms).
cat > "$PROJECT/agent/tools/refund.sh" <<'SH'
#!/bin/sh
# ---
# description: Refund an amount for an order.
# approval: always
# approval_prompt: "Refund {{input.amount}} USD for order {{input.order}}?"
# input:
#   type: object
#   properties:
#     amount: {type: number}
#     order: {type: string}
#   required: [amount, order]
# ---
cat >/dev/null
sleep 1.5
echo '{"refunded": 5, "currency": "USD"}'
SH
# Quiet for longer than the binding's idle timeout (15 s): only heartbeats keep its stream open.
cat > "$PROJECT/agent/tools/quiet.sh" <<'SH'
#!/bin/sh
# ---
# description: Works quietly for a while.
# effect: read
# timeout: 60s
# ---
cat >/dev/null
sleep 17
echo '{"quiet": true}'
SH
chmod +x "$PROJECT"/agent/tools/*.sh
(cd "$PROJECT" && EVE_BROWSER_ORIGIN=http://127.0.0.1 env -u EVE_MODEL "$EVE" build >/dev/null)
# The story streams word by word for longer than several leases; then a refund asks for approval.
cat > "$ROOT/script.json" <<'JSON'
[
  {"text": "Once upon a time a small agent lived in a browser tab and answered every question it was asked, one word at a time, until the lease ran out and the stream came back where it left off, and the story ended well.",
   "delay_ms": 45},
  {"text": "Refunding order 42 now.",
   "tool_calls": [{"name": "refund", "input": {"amount": 5, "order": "42"}}]},
  {"text": "Refunded 5 USD for order 42.", "delay_ms": 20}
]
JSON

cd "$REPO/$DIR"
EVE="$EVE" EVE_PROJECT_DIR="$PROJECT" EVE_MOCK_SCRIPT="$ROOT/script.json" CHROMIUM="$CHROMIUM" \
    SITE="$SITE" node --test --test-reporter=spec browser-test.mjs
