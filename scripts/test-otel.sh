#!/usr/bin/env bash
# Traces reach a real Arize Phoenix: installs arize-phoenix (PyPI, pinned) into
# target/phoenix-venv (cached), starts `phoenix serve` on loopback with its ports from the
# environment, lays out a mock-model agent whose turn calls a read tool, a tool that needs
# approval and a subagent, runs it with `eve run --yes` exporting to Phoenix's OTLP endpoint (with
# content capture on and a secret planted in the environment and in the tool's input), then
# `eve serve` with a caller's `traceparent`, and reads the spans back from Phoenix's REST API
# (scripts/otel_check.py): names, parent/child links, GenAI attributes, the tool's TRACEPARENT,
# the caller's trace joined, the local trace store (`eve traces`), and no secret value anywhere.
# Exits non-zero when any step fails. `./scripts/test.sh` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
start=$SECONDS

PHOENIX_VERSION="20.26.1"
VENV="target/phoenix-venv"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '$PHOENIX_VERSION')" 2>/dev/null; then
    printf 'setting up %s (arize-phoenix==%s)\n' "$VENV" "$PHOENIX_VERSION" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "arize-phoenix==$PHOENIX_VERSION"
fi
printf 'phoenix install: %ss\n' "$((SECONDS - start))" >&2

cargo build --quiet --locked -p eve-cli
EVE="${CARGO_TARGET_DIR:-$REPO/target}/debug/eve"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-otel.XXXXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$ROOT"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
GRPC_PORT=$(free_port)
mkdir -p "$ROOT/phoenix"
phoenix_start=$SECONDS
if [ -n "${EVE_TEST_PHOENIX_PORT:-}" ]; then
    # A Phoenix already running on this port (while developing: it takes minutes to start).
    PORT=$EVE_TEST_PHOENIX_PORT
    sleep infinity &
else
PHOENIX_WORKING_DIR="$ROOT/phoenix" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$PORT" \
    PHOENIX_GRPC_PORT="$GRPC_PORT" PHOENIX_TELEMETRY_ENABLED=false \
    "$VENV/bin/phoenix" serve >"$ROOT/phoenix.log" 2>&1 &
fi
PIDS+=($!)
for _ in $(seq 1 600); do
    if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "${PIDS[0]}" 2>/dev/null; then
        echo "error: phoenix exited; its log:" >&2
        tail -n 40 "$ROOT/phoenix.log" >&2
        exit 1
    fi
    sleep 0.5
done
curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null ||
    { echo "error: phoenix did not come up in 300 s" >&2; tail -n 40 "$ROOT/phoenix.log" >&2; exit 1; }
printf 'phoenix start: %ss\n' "$((SECONDS - phoenix_start))" >&2

# The folder's name is the agent's name.
PROJECT="$ROOT/otel-agent"
mkdir -p "$PROJECT/agent/tools" "$PROJECT/agent/sandbox" "$PROJECT/agent/subagents/helper"
printf 'You are the tracing test agent.\n' > "$PROJECT/agent/instructions.md"
printf 'provider: host\n' > "$PROJECT/agent/sandbox/sandbox.yaml"
cat > "$PROJECT/agent/tools/lookup.sh" <<'SH'
#!/bin/sh
# ---
# description: Looks an order up.
# effect: read
# env: [OTEL_TEST_SECRET]
# input:
#   type: object
#   properties:
#     order: {type: string}
# ---
cat >/dev/null
printf '{"traceparent": "%s", "key": "%s"}\n' "$TRACEPARENT" "$OTEL_TEST_SECRET"
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
# ---
cat >/dev/null
echo '{"refunded": 5}'
SH
chmod +x "$PROJECT"/agent/tools/*.sh
printf 'description: Summarises an order.\n' > "$PROJECT/agent/subagents/helper/agent.yaml"
printf 'You summarise orders.\n' > "$PROJECT/agent/subagents/helper/instructions.md"

SECRET="sk-otel-planted-$(date +%s%N)"
cat > "$ROOT/script.json" <<JSON
{"": [
  {"tool_calls": [{"name": "lookup", "input": {"order": "A-1 $SECRET"}}]},
  {"tool_calls": [{"name": "refund", "input": {"amount": 5}}]},
  {"tool_calls": [{"name": "helper", "input": {"message": "summarise order A-1"}}]},
  {"text": "Waiting for the summary."},
  {"text": "All done."},
  {"text": "All done."}
 ],
 "helper": [{"text": "Order A-1: refunded."}]}
JSON

export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$PORT"
export OTEL_SERVICE_NAME="eve-otel-test"
export OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
export OTEL_TEST_SECRET="$SECRET"
export EVE_MOCK_SCRIPT="$ROOT/script.json"

run_start=$SECONDS
"$EVE" -C "$PROJECT" run --yes "Refund order A-1" >"$ROOT/run.out" 2>"$ROOT/run.err" ||
    { echo "error: eve run failed:" >&2; cat "$ROOT/run.out" "$ROOT/run.err" >&2; exit 1; }
printf 'eve run: %ss\n' "$((SECONDS - run_start))" >&2
"$EVE" -C "$PROJECT" traces list --json >"$ROOT/local-list.json"
TRACE=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(t[0]["traceId"] if t else "")' "$ROOT/local-list.json")
[ -n "$TRACE" ] || { echo "error: eve traces lists no trace" >&2; exit 1; }
"$EVE" -C "$PROJECT" traces show "$TRACE" --json >"$ROOT/local-trace.json"
"$EVE" -C "$PROJECT" traces show "${TRACE:0:12}" >"$ROOT/local-trace.txt"

# A turn resumed by another process continues its trace: `eve run` parks on the approval and
# exits, `eve sessions approve` answers in a second process, `eve run --session` finishes the
# turn in a third.
"$EVE" -C "$PROJECT" run "Refund order A-2" </dev/null >"$ROOT/park.out" 2>&1 || true
PARKED=$("$EVE" -C "$PROJECT" sessions list --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
"$EVE" -C "$PROJECT" sessions approve "$PARKED" >/dev/null 2>&1
"$EVE" -C "$PROJECT" run --session "$PARKED" >"$ROOT/resume.out" 2>&1 ||
    { echo "error: eve run --session failed:" >&2; cat "$ROOT/park.out" "$ROOT/resume.out" >&2; exit 1; }
RESUMED=$("$EVE" -C "$PROJECT" traces list --session "$PARKED" --json |
    python3 -c 'import json,sys; t=json.load(sys.stdin); print(t[0]["traceId"] if len(t) == 1 else "")')
[ -n "$RESUMED" ] || { echo "error: the parked session's turn is not one trace" >&2;
    "$EVE" -C "$PROJECT" traces list --session "$PARKED" >&2; exit 1; }

# A caller's trace: `eve serve` joins the traceparent of the request that starts the turn.
SERVE_PORT=$(free_port)
CALLER_TRACE=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
CALLER_SPAN="00f067aa0ba902b7"
printf '[{"text": "Joined."}]' > "$ROOT/serve-script.json"
EVE_MOCK_SCRIPT="$ROOT/serve-script.json" "$EVE" -C "$PROJECT" serve --port "$SERVE_PORT" \
    >"$ROOT/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 200); do
    curl -fsS "http://127.0.0.1:$SERVE_PORT/eve/v1/health" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS -X POST "http://127.0.0.1:$SERVE_PORT/eve/v1/session" \
    -H 'content-type: application/json' \
    -H "traceparent: 00-$CALLER_TRACE-$CALLER_SPAN-01" \
    -d '{"message": "hello from a traced caller"}' >"$ROOT/serve-session.json" ||
    { echo "error: POST /eve/v1/session failed:" >&2; cat "$ROOT/serve.log" >&2; exit 1; }

"$VENV/bin/python" scripts/otel_check.py \
    --phoenix "http://127.0.0.1:$PORT" --secret "$SECRET" --agent otel-agent \
    --local-trace "$ROOT/local-trace.json" --local-text "$ROOT/local-trace.txt" \
    --caller-trace "$CALLER_TRACE" --caller-span "$CALLER_SPAN" --trace "$TRACE" \
    --resumed-trace "$RESUMED"
printf 'otel test: %ss\n' "$((SECONDS - start))" >&2
