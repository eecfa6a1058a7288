#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every test of the workspace.
# Works offline once dependencies are fetched; installs nothing outside target/.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
scripts/setup-test-deps.sh >/dev/null # Python venv with `mcp` (target/test-venv) for the MCP tests
cargo test --workspace --locked

step "eve's npm client against eve serve (scripts/test-eve-client.sh)"
client_start=$SECONDS
scripts/test-eve-client.sh
printf 'eve client test: %ss\n' "$((SECONDS - client_start))" >&2

step "all tests passed"
