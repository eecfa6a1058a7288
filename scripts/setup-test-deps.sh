#!/usr/bin/env bash
# Installs what the test suite needs beyond cargo: a Python venv with the `mcp` package, used by the
# MCP connection tests to run real MCP servers (stdio and Streamable HTTP).
# Idempotent: does nothing when the venv already has the pinned version. Installs nothing outside
# target/. Prints the venv's python on stdout; the tests find it there (or via EVE_TEST_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."

MCP_VERSION="2.3.0"
VENV="target/test-venv"
PYTHON="${PYTHON:-python3}"

have() {
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION')" 2>/dev/null
}

if ! have; then
    printf 'setting up %s (mcp==%s)\n' "$VENV" "$MCP_VERSION" >&2
    mkdir -p target
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
    have || { echo "error: mcp==$MCP_VERSION did not install into $VENV" >&2; exit 1; }
fi

printf '%s\n' "$(cd "$VENV" && pwd)/bin/python"
