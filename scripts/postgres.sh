#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for eve's tests and benchmarks, under target/postgres/.
#
#   scripts/postgres.sh start   # initdb on first use, start if not running; prints the URL
#   scripts/postgres.sh url     # prints the URL (fails if the cluster is not running)
#   scripts/postgres.sh stop    # stops the cluster (the data stays until `cargo clean`)
#   scripts/postgres.sh status  # exit 0 when running
#
# It uses the Debian server binaries (/usr/lib/postgresql/*/bin), listens on loopback only, on a
# free port chosen at first start and kept in target/postgres/port, and trusts local connections
# (a test cluster: nothing in it matters). PostgreSQL refuses to run as root, so as root the
# cluster runs as the `postgres` user, which owns the data folder. When EVE_TEST_POSTGRES_URL is
# set, that server is used instead and this script starts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT="$(pwd)/target/postgres"
DATA="$ROOT/data"
SOCK="$ROOT/sock"
LOG="$ROOT/server.log"

die() { echo "postgres.sh: $*" >&2; exit 1; }

if [ -n "${EVE_TEST_POSTGRES_URL:-}" ]; then
    case "${1:-start}" in
        start|url|status) echo "$EVE_TEST_POSTGRES_URL"; exit 0 ;;
        stop) exit 0 ;;
    esac
fi

bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    done
    die "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (apt-get install postgresql), or set EVE_TEST_POSTGRES_URL"
}

# Runs a command as the cluster's owner (the `postgres` user when we are root).
as_owner() {
    if [ "$(id -u)" = "0" ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

url() {
    [ -f "$ROOT/port" ] || die "no cluster yet: run scripts/postgres.sh start"
    echo "postgres://postgres@127.0.0.1:$(cat "$ROOT/port")/postgres"
}

running() {
    [ -f "$ROOT/port" ] || return 1
    local bin; bin=$(bindir)
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$ROOT/port")" -U postgres >/dev/null 2>&1
}

start() {
    if running; then url; return 0; fi
    local bin; bin=$(bindir)
    mkdir -p "$ROOT" "$SOCK"
    if [ "$(id -u)" = "0" ]; then
        id postgres >/dev/null 2>&1 || die "running as root needs the \`postgres\` user (apt-get install postgresql creates it)"
        # Every folder above the data must be traversable by the owner.
        local d="$ROOT"
        while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
        chown postgres: "$ROOT" "$SOCK"
    fi
    if [ ! -f "$DATA/PG_VERSION" ]; then
        rm -rf "$DATA"
        mkdir -p "$DATA"
        [ "$(id -u)" = "0" ] && chown postgres: "$DATA"
        as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-sync >"$ROOT/initdb.log" 2>&1 \
            || { cat "$ROOT/initdb.log" >&2; die "initdb failed"; }
    fi
    [ -f "$ROOT/port" ] || free_port >"$ROOT/port"
    local port; port=$(cat "$ROOT/port")
    # A stale pid file of a killed server is removed by pg_ctl itself; fsync off: test data only.
    touch "$LOG"; [ "$(id -u)" = "0" ] && chown postgres: "$LOG"
    if ! as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -o \
        "-c listen_addresses=127.0.0.1 -p $port -k $SOCK -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 -c shared_buffers=64MB" \
        start >/dev/null 2>&1; then
        # The port may have been taken since it was chosen: choose again once.
        tail -n 20 "$LOG" >&2
        free_port >"$ROOT/port"; port=$(cat "$ROOT/port")
        as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -o \
            "-c listen_addresses=127.0.0.1 -p $port -k $SOCK -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 -c shared_buffers=64MB" \
            start >/dev/null || { tail -n 40 "$LOG" >&2; die "the server did not start (log: $LOG)"; }
    fi
    url
}

stop() {
    [ -f "$DATA/PG_VERSION" ] || return 0
    local bin; bin=$(bindir)
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    url) running || die "not running: run scripts/postgres.sh start"; url ;;
    status) running ;;
    *) die "usage: scripts/postgres.sh start|stop|url|status" ;;
esac
