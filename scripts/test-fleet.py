#!/usr/bin/env python3
"""Fleet chaos test: several `eve serve` nodes on one PostgreSQL, nodes killed and paused.

Three nodes (`--nodes`) share one PostgreSQL schema. Thirty sessions (`--sessions`) each get a
message that makes the `mock` model call `ledger`, a `write`-effect tool that appends a line to a
file outside the store (so a second run of one call is countable) and answers slowly. While the
messages are accepted and the turns run, for `--seconds` seconds a random node is SIGKILLed and
restarted every couple of seconds, and one node is SIGSTOPped past its lease TTL, then resumed.

Then it asserts what a user relies on:
- every accepted message (a 202) was taken by a turn, and every such turn completed;
- no write call ran twice (each call id appears at most once in the ledger);
- no event index was published twice: each session's stream has indexes 0..n-1, unique ids;
- streams read from every surviving node are identical, event for event (same ids, same order).

Uses the debug binary (target/debug/eve, built if missing) and scripts/postgres.sh (or
EVE_TEST_POSTGRES_URL). Prints its time. Exit status 0 when every check holds.
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVE = os.path.join(ROOT, "target", "debug", "eve")


def log(msg):
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pg_url():
    url = os.environ.get("EVE_TEST_POSTGRES_URL")
    if url:
        return url
    out = subprocess.run([os.path.join(ROOT, "scripts", "postgres.sh"), "start"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def fresh_schema(url):
    schema = "fleet_" + uuid.uuid4().hex[:12]
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", f"CREATE SCHEMA {schema}"],
                   check=True)
    sep = "&" if "?" in url else "?"
    return schema, f"{url}{sep}options=-csearch_path%3D{schema}"


def http(method, url, body=None, timeout=5):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


class Node:
    def __init__(self, i, project, env):
        self.i = i
        self.port = free_port()
        self.project = project
        self.env = env
        self.proc = None
        self.stopped = False
        self.log = open(os.path.join(project, f"node{i}.log"), "ab")

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen([EVE, "serve", "--port", str(self.port)], cwd=self.project,
                                     env=self.env, stdout=self.log, stderr=self.log)
        self.stopped = False

    def ready(self, deadline):
        while time.time() < deadline:
            try:
                if http("GET", self.base + "/eve/v1/health", timeout=1)[0] == 200:
                    return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None and not self.stopped

    def kill(self):
        if self.proc and self.proc.poll() is None:
            if self.stopped:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.stopped = False


TOOL = '''# ---
# description: Appends a line to the ledger (a side effect outside the store), slowly.
# effect: write
# sandbox: host
# timeout: 30s
# input:
#   type: object
#   properties:
#     n: {type: integer}
# ---
import json, os, sys, time
args = json.load(sys.stdin)
time.sleep(0.4)
with open(LEDGER, "a") as f:
    f.write(os.environ.get("EVE_SESSION_ID", "?") + " " + os.environ.get("EVE_CALL_ID", "?")
            + " " + os.environ.get("EVE_IDEMPOTENCY_KEY", "?") + "\\n")
time.sleep(0.8)
print(json.dumps({"written": args.get("n")}))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--ttl-ms", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    started = time.time()
    random.seed(args.seed)
    if not os.path.exists(EVE):
        subprocess.run(["cargo", "build", "--bin", "eve"], cwd=ROOT, check=True)
    url = pg_url()
    schema, store = fresh_schema(url)
    project = tempfile.mkdtemp(prefix="eve-fleet-")
    ledger = os.path.join(project, "ledger.txt")
    subprocess.run([EVE, "init", project], check=True, capture_output=True)
    with open(os.path.join(project, "agent", "tools", "ledger.py"), "w") as f:
        f.write(TOOL.replace("LEDGER", repr(ledger)))
    env = dict(os.environ, EVE_STORE=store, EVE_LEASE_TTL_MS=str(args.ttl_ms), EVE_LOG="warn")
    subprocess.run([EVE, "build"], cwd=project, env=env, check=True, capture_output=True)
    log(f"seed {args.seed}; project {project}; schema {schema}; TTL {args.ttl_ms} ms")

    nodes = [Node(i, project, env) for i in range(args.nodes)]
    for n in nodes:
        n.start()
    for n in nodes:
        if not n.ready(time.time() + 30):
            sys.exit(f"node {n.i} did not start; see {n.log.name}")

    accepted = {}  # session id -> message text
    pending = [f'/tool ledger {{"n": {k}}}' for k in range(args.sessions)]
    chaos_end = time.time() + args.seconds
    next_kill = time.time() + 1.0
    paused_once = False
    kills = 0
    next_accept = time.time()
    while time.time() < chaos_end or pending:
        # Messages arrive all through the chaos (one every seconds/sessions), on any live node;
        # a 202 is a promise.
        for _ in range(3):
            if not pending or time.time() < next_accept:
                break
            live = [n for n in nodes if n.alive()]
            if not live:
                break
            node = random.choice(live)
            text = pending[0]
            try:
                status, body = http("POST", node.base + "/eve/v1/session", {"message": text})
                if status == 202:
                    accepted[json.loads(body)["sessionId"]] = text
                    pending.pop(0)
                    next_accept = time.time() + args.seconds / max(args.sessions, 1) * 0.8
            except (urllib.error.URLError, OSError, ValueError):
                pass  # not accepted: try again on another node
        now = time.time()
        if now >= next_kill and now < chaos_end:
            # The paused node is left alone until it is resumed: it must come back as a zombie.
            node = random.choice([n for n in nodes if not n.stopped])
            if not paused_once and now > chaos_end - args.seconds * 2 / 3 and node.alive():
                paused_once = True
                log(f"SIGSTOP node {node.i} for {args.ttl_ms * 2 / 1000:.1f} s (past its lease)")
                node.proc.send_signal(signal.SIGSTOP)
                node.stopped = True
                pause_until = now + args.ttl_ms * 2 / 1000
                node.resume_at = pause_until
            else:
                node.kill()
                kills += 1
                node.start()
            next_kill = now + random.uniform(1.0, 3.0)
        for n in nodes:
            if n.stopped and time.time() >= getattr(n, "resume_at", 0):
                log(f"SIGCONT node {n.i}")
                n.proc.send_signal(signal.SIGCONT)
                n.stopped = False
        time.sleep(0.1)
    log(f"chaos over: {kills} kills, {len(accepted)} messages accepted; waiting for the turns")
    for n in nodes:
        if n.stopped:
            log(f"SIGCONT node {n.i}")
            n.proc.send_signal(signal.SIGCONT)
            n.stopped = False
    if not paused_once:
        failures_early = "the chaos was too short to pause a node"
        sys.exit(failures_early)
    for n in nodes:
        if n.proc.poll() is not None:
            n.start()
    for n in nodes:
        n.ready(time.time() + 30)

    failures = []
    deadline = time.time() + 120
    streams = {}
    remaining = set(accepted)
    while remaining and time.time() < deadline:
        for sid in list(remaining):
            try:
                _, body = http("GET", f"{nodes[0].base}/eve/v1/session/{sid}/stream?follow=false")
            except (urllib.error.URLError, OSError):
                continue
            events = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            if any(e["type"] == "turn.completed" for e in events):
                remaining.discard(sid)
        time.sleep(0.5)
    for sid in sorted(remaining):
        failures.append(f"{sid}: its turn never completed")

    for sid, text in accepted.items():
        per_node = []
        for n in nodes:
            _, body = http("GET", f"{n.base}/eve/v1/session/{sid}/stream?follow=false")
            per_node.append([json.loads(line) for line in body.decode().splitlines() if line.strip()])
        events = per_node[0]
        streams[sid] = events
        for k, other in enumerate(per_node[1:], 1):
            if other != events:
                failures.append(f"{sid}: node {k}'s stream differs from node 0's")
        ids = [e["meta"]["id"] for e in events]
        if len(set(ids)) != len(ids):
            failures.append(f"{sid}: an event id repeats")
        got = [e["data"].get("message") for e in events if e["type"] == "message.received"]
        if text not in got:
            failures.append(f"{sid}: the accepted message {text!r} was never taken by a turn")
    with open(ledger) if os.path.exists(ledger) else open(os.devnull) as f:
        lines = [line.split() for line in f if line.strip()]
    seen = {}
    for sid, call, _key in lines:
        seen[(sid, call)] = seen.get((sid, call), 0) + 1
    twice = {k: v for k, v in seen.items() if v > 1}
    for (sid, call), count in twice.items():
        failures.append(f"{sid}: write call {call} ran {count} times")
    # Event indexes: the stream gives them by position; the store's primary key must match.
    check = subprocess.run(
        ["psql", "-At", url, "-c",
         f"SELECT count(*) FROM (SELECT session_id FROM {schema}.events GROUP BY session_id "
         f"HAVING count(*) <> max(idx) + 1 OR min(idx) <> 0) gaps"],
        capture_output=True, text=True, check=True)
    if check.stdout.strip() != "0":
        failures.append(f"{check.stdout.strip()} sessions have gaps or repeats in their event indexes")
    for sid, events in streams.items():
        row = subprocess.run(["psql", "-At", url, "-c",
                              f"SELECT count(*) FROM {schema}.events WHERE session_id='{sid}'"],
                             capture_output=True, text=True, check=True)
        if int(row.stdout.strip() or 0) != len(events):
            failures.append(f"{sid}: the stream shows {len(events)} events, the store has {row.stdout.strip()}")
    for n in nodes:
        n.kill()
    refused = 0
    for n in nodes:
        with open(n.log.name, "rb") as f:
            refused += f.read().count(b"the lease moved to a newer holder")
    log(f"commits refused by fencing (a paused node coming back): {refused}")
    ran = len(lines)
    log(f"{len(accepted)} sessions, {ran} write calls ran (each at most once: {not twice}), "
        f"{kills} kills, one pause")
    print(f"fleet chaos test: {time.time() - started:.1f} s", file=sys.stderr)
    if failures:
        for f in failures:
            print("FAIL:", f, file=sys.stderr)
        print(f"node logs: {project}/node*.log", file=sys.stderr)
        sys.exit(1)
    log("every check held")


if __name__ == "__main__":
    main()
