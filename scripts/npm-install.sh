#!/usr/bin/env bash
# Installs a test's npm packages: FIXTURE's committed package.json and package-lock.json into DIR
# (under target/) with `npm ci`. Cached: nothing is installed when DIR's lock file is FIXTURE's and
# every REQUIRED path (relative to DIR) is there. An install that fails leaves no lock file behind,
# so the next run installs again. playwright-core downloads no browser (the tests use the system's
# chromium); engines are not enforced (npm itself may run on an older Node than the Node 24 the
# packages install).
#   usage: scripts/npm-install.sh FIXTURE DIR WHAT REQUIRED...
#   e.g.   scripts/npm-install.sh scripts/acp-client target/acp-client "the ACP SDK and Node" \
#              node_modules/@agentclientprotocol/sdk/package.json
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: scripts/npm-install.sh FIXTURE DIR WHAT REQUIRED..." >&2; exit 2; }
FIXTURE=$1 DIR=$2 WHAT=$3
shift 3

installed() {
    cmp -s "$FIXTURE/package-lock.json" "$DIR/package-lock.json" || return 1
    local path
    for path in "$@"; do
        [ -e "$DIR/$path" ] || return 1
    done
}

if ! installed "$@"; then
    printf 'setting up %s (%s, from %s)\n' "$DIR" "$WHAT" "$FIXTURE/package-lock.json" >&2
    mkdir -p "$DIR"
    cp "$FIXTURE/package.json" "$FIXTURE/package-lock.json" "$DIR/"
    (cd "$DIR" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error \
        --engine-strict=false >&2) || {
        rm -f "$DIR/package-lock.json"
        exit 1
    }
fi
