#!/usr/bin/env python3
"""Throughput of a fleet on PostgreSQL with 1, 2 and 3 `eve serve` nodes, and of one node on
SQLite, in the same run.

Each configuration gets a fresh store, `--turns` sessions (default 120), one message each,
posted round-robin to the nodes by `--clients` concurrent clients; a turn calls the `mock`
model and a tool that takes `--tool-ms` (default 200 ms, a stand-in for real work). Measured:
wall time from the first POST until every turn completed (read back from the streams), as turns
per second. Needs scripts/postgres.sh (or EVE_TEST_POSTGRES_URL) and target/debug/eve.
"""
import argparse
import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "fleet", os.path.join(HERE, "..", "scripts", "test-fleet.py"))
fleet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fleet)

TOOL = '''# ---
# description: Works for a while.
# effect: read
# sandbox: host
# ---
import json, sys, time
time.sleep(MS / 1000)
print(json.dumps({"ok": True}))
'''


def run(label, store, nodes_n, turns, clients, tool_ms):
    project = tempfile.mkdtemp(prefix="eve-throughput-")
    subprocess.run([fleet.EVE, "init", project], check=True, capture_output=True)
    with open(os.path.join(project, "agent", "tools", "work.py"), "w") as f:
        f.write(TOOL.replace("MS", str(tool_ms)))
    env = dict(os.environ, EVE_LOG="warn")
    if store:
        env["EVE_STORE"] = store
    subprocess.run([fleet.EVE, "build"], cwd=project, env=env, check=True, capture_output=True)
    nodes = [fleet.Node(i, project, env) for i in range(nodes_n)]
    for n in nodes:
        n.start()
    for n in nodes:
        assert n.ready(time.time() + 30)

    def post(k):
        node = nodes[k % len(nodes)]
        _, body = fleet.http("POST", node.base + "/eve/v1/session",
                             {"message": "/tool work {}"}, timeout=30)
        return json.loads(body)["sessionId"]

    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        sids = list(pool.map(post, range(turns)))
    remaining = set(sids)
    while remaining and time.time() < start + 600:
        for sid in list(remaining):
            node = nodes[hash(sid) % len(nodes)]
            _, body = fleet.http("GET", f"{node.base}/eve/v1/session/{sid}/stream?follow=false")
            if b'"turn.completed"' in body:
                remaining.discard(sid)
        time.sleep(0.05)
    took = time.time() - start
    for n in nodes:
        n.kill()
    assert not remaining, f"{label}: {len(remaining)} turns never completed"
    print(f"{label:<24} {turns} turns in {took:6.2f} s: {turns / took:6.1f} turns/s", flush=True)
    return turns / took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=120)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--tool-ms", type=int, default=200)
    args = ap.parse_args()
    url = fleet.pg_url()
    results = {}
    results["sqlite, 1 node"] = run("sqlite, 1 node", None, 1, args.turns, args.clients,
                                    args.tool_ms)
    for n in (1, 2, 3):
        _, store = fleet.fresh_schema(url)
        label = f"postgres, {n} node{'s' if n > 1 else ''}"
        results[label] = run(label, store, n, args.turns, args.clients, args.tool_ms)
    base = results["postgres, 1 node"]
    for label, tps in results.items():
        print(f"{label:<24} {tps / base:5.2f}x of postgres with 1 node", file=sys.stderr)


if __name__ == "__main__":
    main()
