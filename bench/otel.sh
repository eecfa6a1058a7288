#!/usr/bin/env bash
# What tracing adds to `eve serve` (release build): turn latency and RSS at 1,000 sessions with
# tracing off, and on exporting over OTLP to a real collector (Arize Phoenix, installed into
# target/phoenix-venv as scripts/test-otel.sh does). Prints both against their targets
# (< 5 % latency, < 10 MiB RSS): the latency ratio on/off and the RSS added.
#
#   bench/otel.sh                                  # --sessions 1000 --rounds 2
#   bench/otel.sh --sessions 200 --rounds 1        # quicker
#   EVE_BENCH_BIN=target/release/eve bench/otel.sh # measure this binary instead of building one
#   EVE_BENCH_BIN=target/debug/eve bench/otel.sh --sessions 20 --rounds 1 --warmup 2  # a smoke run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${EVE_BENCH_BIN:-}" ]; then
  bin=$EVE_BENCH_BIN
else
  echo "== cargo build --release -p eve-cli" >&2
  cargo build --release -q -p eve-cli
  bin=target/release/eve
fi
VENV="target/phoenix-venv"
if [ ! -x "$VENV/bin/phoenix" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "arize-phoenix==20.26.1"
fi
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/eve-otel-bench.XXXXXX")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GRPC=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PHOENIX_WORKING_DIR="$ROOT" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$PORT" PHOENIX_GRPC_PORT="$GRPC" \
  PHOENIX_TELEMETRY_ENABLED=false "$VENV/bin/phoenix" serve >"$ROOT/phoenix.log" 2>&1 &
PHOENIX=$!
trap 'kill $PHOENIX 2>/dev/null; wait $PHOENIX 2>/dev/null; rm -rf "$ROOT"' EXIT
for _ in $(seq 1 600); do
  curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.5
done
python3 bench/otel.py --eve "$bin" --endpoint "http://127.0.0.1:$PORT" "$@"
