#!/usr/bin/env python3
"""Where a turn's milliseconds go, read from the kernel's own clock: one `eve serve` with the
scaffold-sized agent of `bench/compare-eve` (its scripted model, its `get_weather` tool in the
isolated sandbox), N turns one after the other as compare-eve sends them, recorded with `perf
record -a` on a few syscall tracepoints (entries only, a few microseconds a turn), then each turn
cut at the syscalls that mark its parts:

  accept      the POST read → its durable commit's `fsync` → the `202` written
  model       a request written to the model server → the model server's first answer bytes
              (each call: the scripted server's own time and the wake-ups)
  prepare     the stream's last write before the sandbox gets the call (`actions.requested`) →
              the call's spec handed to a warm box (`sendmsg`)
  box setup   spec → the tool's `execve` inside the box (the view, confinement, the command)
  tool        the tool's `execve` → its `exit_group`
  box end     the tool's exit → the runtime reads the box's status report
  result      the status read → the stream's next write (`action.result`)

Needs root (tracepoints) and `perf`. Usage:
  bench/turn_parts.py [--eve target/release/eve] [--turns 200] [--text]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare"))
import agents  # noqa: E402
import harness  # noqa: E402

CALLS = [
    "accept4", "recvfrom", "writev", "sendto", "sendmsg", "execve", "exit_group", "fsync", "fdatasync",
]
LINE = re.compile(r"\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+syscalls:sys_enter_(\w+):\s*(.*)")


def parse(data):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            comm, pid, tid, t, call, args = m.groups()
            fd = re.search(r"fd: 0x([0-9a-f]+)", args)
            rows.append((comm.strip(), int(pid), int(tid), float(t) * 1e3, call,
                         int(fd.group(1), 16) if fd else None, args))
    return rows


def cut(rows, server, model_pid):
    """Per-turn parts, in ms. A turn starts at the server's read of a POST (the first `recvfrom`
    after an `accept4` on the listener) and ends at the next such read."""
    box = ("exe", "eve-sandbox-hel", "get_weather.sh")
    ours = [r for r in rows if r[1] in (server, model_pid) or r[0] in box]
    starts = []
    accepted = False
    for i, r in enumerate(ours):
        comm, pid, _, _, call, _, _ = r
        if pid == server and call == "accept4":
            accepted = True
        elif accepted and pid == server and call == "recvfrom" and comm == "tokio-rt-worker":
            starts.append(i)
            accepted = False
    # A POST's connection gets one write (the `202`) before the next connection is read; the
    # stream's GET gets the turn's events, several writes.
    bounds = dict(zip(starts, starts[1:] + [len(ours)]))

    def is_post(i):
        fd = ours[i][5]
        writes = sum(1 for r in ours[i + 1:bounds[i]]
                     if r[1] == server and r[4] == "writev" and r[5] == fd)
        return writes == 1

    starts = [i for i in starts if is_post(i)]
    parts = {}

    def add(k, v):
        if v is not None and v >= 0:
            parts.setdefault(k, []).append(v)

    def first(seq, test):
        return next((r for r in seq if test(r)), None)

    for a, b in zip(starts, starts[1:]):
        turn = ours[a:b]
        srv = [r for r in turn if r[1] == server]
        t0, client_fd = turn[0][3], turn[0][5]
        sync = first(srv, lambda r: r[4] in ("fsync", "fdatasync"))
        accepted_202 = first(srv, lambda r: r[4] == "writev" and r[5] == client_fd)
        if sync and accepted_202 and sync[3] < accepted_202[3]:
            add("accept: POST read → its commit's fsync", sync[3] - t0)
        if accepted_202:
            add("accept: POST read → 202 written", accepted_202[3] - t0)
        # The model calls: the server's writes on a connection that is neither the POST's nor
        # the stream's (the second connection read), each answered by the model server's first
        # `sendto` after it.
        reads = []
        for r in srv:
            if r[4] == "recvfrom" and r[5] not in reads:
                reads.append(r[5])
        clients = set(reads[:2])
        asked = None
        for r in turn:
            if r[1] == server and r[4] == "writev" and r[5] not in clients and asked is None:
                asked = r[3]
            elif r[1] == model_pid and r[4] == "sendto" and asked is not None:
                add("model call (request written → the model's first bytes)", r[3] - asked)
                asked = None
        spec_i = next((i for i, r in enumerate(turn) if r[1] == server and r[4] == "sendmsg"
                       and r[0] == "tokio-rt-worker"), None)
        if spec_i is not None:
            spec = turn[spec_i][3]
            after = turn[spec_i:]
            before = [r[3] for r in turn[:spec_i] if r[1] == server and r[4] == "writev"]
            run = first(after, lambda r: r[4] == "execve" and r[0] == "exe")
            done = first(after, lambda r: r[4] == "exit_group" and r[0] == "get_weather.sh")
            report_i = next((i for i, r in enumerate(after) if r[1] == server
                             and r[4] == "recvfrom" and "size: 0x00000040" in r[6]), None)
            report = after[report_i] if report_i is not None else None
            result = first(after[report_i:], lambda r: r[1] == server and r[4] == "writev") \
                if report else None
            if before:
                add("tool call: prepare (actions.requested → spec to the box)", spec - before[-1])
            if run:
                add("tool call: box setup (spec → the tool's execve)", run[3] - spec)
            if run and done:
                add("tool call: the tool (execve → exit)", done[3] - run[3])
            if done and report:
                add("tool call: box end (the tool's exit → status read)", report[3] - done[3])
            if report and result:
                add("tool call: result (status read → action.result written)",
                    result[3] - report[3])
        last = [r[3] for r in srv if r[4] == "writev"]
        if last:
            add("turn on the server (POST read → its last write)", max(last) - t0)
    return parts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eve", default=os.path.join(os.path.dirname(__file__), "..", "target",
                                                  "release", "eve"))
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--text", action="store_true", help="turns answered with text (no tool call)")
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("perf"):
        sys.exit("turn_parts.py: needs root and `perf` (syscall tracepoints)")
    eve = os.path.abspath(a.eve)
    work = tempfile.mkdtemp(prefix="eve-turn-parts-")
    procs = []
    try:
        proj = os.path.join(work, "agent")
        agents.write_ours(proj, "small")
        mport = harness.free_port()
        model = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "compare",
                                                               "model_server.py"), "--port", str(mport)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(model)
        env = dict(os.environ, EVE_BASE_URL=f"http://127.0.0.1:{mport}/v1", EVE_API_KEY="bench",
                   NO_COLOR="1", RUST_LOG="warn")
        env.pop("EVE_MODEL", None)
        time.sleep(0.3)
        subprocess.run([eve, "build"], cwd=proj, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = harness.free_port()
        server = subprocess.Popen([eve, "serve", "--host", "127.0.0.1", "--port", str(port)],
                                  cwd=proj, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        procs.append(server)
        deadline = time.time() + 30
        while not harness.health_ok(port):
            if time.time() > deadline or server.poll() is not None:
                sys.exit("turn_parts.py: the server did not become healthy")
            time.sleep(0.005)
        message = harness.TEXT_MESSAGES[1] if a.text else harness.TOOL_MESSAGES[1]
        for _ in range(20):
            harness.one_turn(port, message)
        data = os.path.join(work, "perf.data")
        events = ",".join(f"syscalls:sys_enter_{c}" for c in CALLS)
        rec = subprocess.Popen(["perf", "record", "-a", "-e", events, "-o", data],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        walls = [harness.one_turn(port, message)[0] for _ in range(a.turns)]
        rec.send_signal(2)
        rec.wait()
        parts = cut(parse(data), server.pid, model.pid)
        kind = "text" if a.text else "tool"
        print(f"{a.turns} {kind} turns, one server, `perf record` running: client's POST → "
              f"`session.waiting` median {statistics.median(walls) * 1e3:.2f} ms")
        for k, v in parts.items():
            print(f"  {k:62} median {statistics.median(v):5.2f} ms  (n={len(v)})")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
