#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every test of the workspace.
# Works offline once dependencies are fetched; installs nothing outside target/ (and pip's cache).
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

step "the eve binary links only against the C library (scripts/check-binary.sh)"
scripts/check-binary.sh target/debug/eve

# The real llama.cpp server: compiles llama-cpp-python the first time on a machine (minutes;
# cached under target/llama and in pip's wheel cache). EVE_SKIP_LLAMA=1 skips it, loudly.
if [ "${EVE_SKIP_LLAMA:-}" = "1" ]; then
    step "SKIPPED: llama.cpp end-to-end test (EVE_SKIP_LLAMA=1)"
else
    step "llama.cpp end to end (scripts/test-llama.sh)"
    scripts/test-llama.sh
fi

step "all tests passed"
