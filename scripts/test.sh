#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every test of the workspace.
# Works offline once dependencies are fetched; installs nothing outside target/ (and pip's cache).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

# The llama.cpp server's install (compiled the first time on a machine) runs in the background
# while the workspace builds, and is waited for before its test at the end.
LLAMA_PREPARE=""
if [ "${EVE_SKIP_LLAMA:-}" != "1" ]; then
    mkdir -p target
    scripts/test-llama.sh --prepare >target/llama-prepare.log 2>&1 &
    LLAMA_PREPARE=$!
fi
suite_start=$(date +%s)

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
scripts/setup-test-deps.sh >/dev/null # Python venv with `mcp` (target/test-venv) for the MCP tests
# The store contract (and every PostgreSQL test) runs against a real server: a throwaway cluster
# under target/postgres (or EVE_TEST_POSTGRES_URL when given). EVE_SKIP_POSTGRES=1 skips, loudly.
if [ "${EVE_SKIP_POSTGRES:-}" = "1" ]; then
    step "SKIPPED: PostgreSQL tests (EVE_SKIP_POSTGRES=1)"
else
    pg_start=$SECONDS
    # A cluster this script starts is stopped when it ends, passed or failed; one that was
    # already running, or a server given through EVE_TEST_POSTGRES_URL, is left alone.
    if [ -z "${EVE_TEST_POSTGRES_URL:-}" ] && ! scripts/postgres.sh status; then
        trap 'EVE_TEST_POSTGRES_URL= scripts/postgres.sh stop >/dev/null 2>&1 || true; echo "postgres: stopped the cluster this run started" >&2' EXIT
    fi
    EVE_TEST_POSTGRES_URL="$(scripts/postgres.sh start)"
    export EVE_TEST_POSTGRES_URL
    printf 'postgres start: %ss\n' "$((SECONDS - pg_start))" >&2
fi
cargo test --workspace --locked

if [ "${EVE_SKIP_POSTGRES:-}" != "1" ]; then
    step "fleet chaos test: three eve serve nodes on PostgreSQL, killed and paused (scripts/test-fleet.py)"
    fleet_start=$SECONDS
    python3 scripts/test-fleet.py
    printf 'fleet chaos test: %ss\n' "$((SECONDS - fleet_start))" >&2
fi

step "TypeScript modules from eve's docs: build, schemas, calls, diagnostics (scripts/test-typescript.sh)"
ts_start=$SECONDS
scripts/test-typescript.sh
printf 'typescript test: %ss\n' "$((SECONDS - ts_start))" >&2

step "eve's npm client against eve serve (scripts/test-eve-client.sh)"
client_start=$SECONDS
scripts/test-eve-client.sh
printf 'eve client test: %ss\n' "$((SECONDS - client_start))" >&2

step "eve acp driven by the official ACP client library (scripts/test-acp.sh)"
acp_start=$SECONDS
scripts/test-acp.sh
printf 'acp client test: %ss\n' "$((SECONDS - acp_start))" >&2

step "traces reach a real Arize Phoenix (scripts/test-otel.sh)"
otel_start=$SECONDS
scripts/test-otel.sh
printf 'otel test: %ss\n' "$((SECONDS - otel_start))" >&2

step "MCP conformance suite: client mode against eve's MCP client, server mode against the MCP channel (scripts/mcp-conformance.sh)"
conformance_start=$SECONDS
scripts/mcp-conformance.sh
printf 'MCP conformance: %ss\n' "$((SECONDS - conformance_start))" >&2

step "HumanEval harness: canonical solutions 164/164, broken ones below (scripts/humaneval.sh)"
humaneval_start=$SECONDS
scripts/humaneval.sh
printf 'HumanEval harness: %ss\n' "$((SECONDS - humaneval_start))" >&2

step "eve eval throughput: 200 mock cases (bench/evals.sh)"
bench/evals.sh

# The browser tests run headless Chromium (Debian's chromium). EVE_SKIP_BROWSER=1 skips both,
# loudly.
if [ "${EVE_SKIP_BROWSER:-}" = "1" ]; then
    step "SKIPPED: browser tests, the web console and eve's React binding (EVE_SKIP_BROWSER=1)"
else
    step "the web console in headless Chromium (scripts/test-console.sh)"
    console_start=$SECONDS
    scripts/test-console.sh
    printf 'console test: %ss\n' "$((SECONDS - console_start))" >&2

    step "eve's React binding (useEveAgent) in headless Chromium against eve serve (scripts/test-browser.sh)"
    browser_start=$SECONDS
    scripts/test-browser.sh
    printf 'browser test: %ss\n' "$((SECONDS - browser_start))" >&2
fi

step "the eve binary links only against the C library (scripts/check-binary.sh)"
scripts/check-binary.sh target/debug/eve

# The real llama.cpp server: compiles llama-cpp-python the first time on a machine (minutes;
# cached under target/llama and in pip's wheel cache). EVE_SKIP_LLAMA=1 skips it, loudly.
if [ "${EVE_SKIP_LLAMA:-}" = "1" ]; then
    step "SKIPPED: llama.cpp end-to-end test (EVE_SKIP_LLAMA=1)"
else
    step "llama.cpp end to end (scripts/test-llama.sh)"
    if ! wait "$LLAMA_PREPARE"; then
        echo "error: installing the llama.cpp server failed; target/llama-prepare.log:" >&2
        tail -n 60 target/llama-prepare.log >&2
        exit 1
    fi
    cat target/llama-prepare.log >&2
    llama_start=$(date +%s)
    scripts/test-llama.sh
    printf 'llama.cpp end to end: %d s\n' "$(( $(date +%s) - llama_start ))" >&2
fi
printf 'whole suite: %d s\n' "$(( $(date +%s) - suite_start ))" >&2

step "all tests passed"
