#!/usr/bin/env python3
"""Server benchmarks of eve: cold start of `eve serve` and `eve dev`, the first turn, and many
concurrent sessions. Driven by bench/serve.sh (which builds the release binary); prints a table
with each result's ratio to its target (below 1.00 meets it).

Everything runs on loopback against the real binary with the `mock/echo` model; the client is
plain Python (asyncio, raw HTTP/1.1) so nothing needs installing. Measurements:

- cold start: spawn → first `200` from `GET /eve/v1/health` (polled every 0.5 ms); RSS when
  healthy and the kernel's peak (`VmHWM`). `eve dev` starts from a clean `.eve/` (it builds).
- first turn: `POST /eve/v1/session` with a message → `session.waiting` on the NDJSON stream of
  `GET /eve/v1/session/:id/stream` (opened right after the 202).
- N concurrent sessions: N sessions that each ran a turn and keep a client's follow stream open
  (as `useChat` and `eve chat` do between turns), with background traffic spread over them; turns
  measured one at a time on fresh sessions. Added latency = p99 with the N sessions − p99 alone.
  The open streams and the background traffic are held by `bench/serve_hold.py` in its own
  process (one thread, raw sockets, `selectors`); measuring starts once every stream has its
  response headers, and the measured turns run here on their own connections, each timed in
  three phases (POST → 202, stream → first event, → `session.waiting`). The CPU of the server,
  the holder and this process over the measured turns is printed, with the load average.
"""

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1024 * 1024
TARGETS = {
    "cold_ms": 100.0,
    "cold_rss_mib": 30.0,
    "turn_ms": 10.0,
    "rss_1000_mib": 200.0,
    "rss_10000_mib": 400.0,
    "added_p99_ms": 20.0,
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def make_project(root):
    agent = os.path.join(root, "agent")
    os.makedirs(os.path.join(agent, "tools"), exist_ok=True)
    with open(os.path.join(agent, "instructions.md"), "w") as f:
        f.write("You are a benchmark agent.\n")
    with open(os.path.join(agent, "agent.yaml"), "w") as f:
        f.write("default_tools: false\n")
    tool = os.path.join(agent, "tools", "get_weather.sh")
    with open(tool, "w") as f:
        f.write(
            "#!/bin/sh\n# ---\n# description: Get the weather for a city.\n# effect: read\n"
            "# input:\n#   type: object\n#   properties:\n#     city: {type: string}\n# ---\n"
            "cat >/dev/null\necho '{\"sky\":\"clear\"}'\n"
        )
    os.chmod(tool, 0o755)


def env():
    e = dict(os.environ)
    for k in ("EVE_PROJECT", "EVE_AGENT_DIR", "EVE_MOCK_SCRIPT", "EVE_BASE_URL", "PORT",
              "EVE_SCHEDULE_CLOCK", "EVE_LOG"):
        e.pop(k, None)
    e["EVE_MODEL"] = "mock/echo"
    e["NO_COLOR"] = "1"
    return e


# ---- blocking HTTP (cold start, single turns) ---------------------------------------------------

def http_once(port, method, path, body=None, timeout=5.0):
    """One request with Connection: close; returns (status, body bytes)."""
    data = b"" if body is None else json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        raw = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, payload


def wait_healthy(port, proc, limit=20.0):
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"eve exited with {proc.returncode}")
        try:
            status, body = http_once(port, "GET", "/eve/v1/health", timeout=1.0)
            if status == 200 and b'"ok":true' in body:
                return
        except OSError:
            pass
        time.sleep(0.0005)
    raise RuntimeError("eve did not become healthy")


def start_server(eve, root, sub, port):
    cmd = [eve, sub, "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(cmd, cwd=root, env=env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_server(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cold_start(eve, root, sub, runs):
    """Median time to healthy, RSS when healthy, peak RSS; plus the first turn after each start."""
    times, rss, peak, first_turns = [], [], [], []
    for _ in range(runs):
        if sub == "dev":
            shutil.rmtree(os.path.join(root, ".eve"), ignore_errors=True)
        else:
            db = os.path.join(root, ".eve", "eve.db")
            for suffix in ("", "-wal", "-shm", ".mark"):
                try:
                    os.remove(db + suffix)
                except FileNotFoundError:
                    pass
        port = free_port()
        t0 = time.perf_counter()
        proc = start_server(eve, root, sub, port)
        try:
            wait_healthy(port, proc)
            times.append(time.perf_counter() - t0)
            rss.append(proc_kib(proc.pid, "VmRSS"))
            peak.append(proc_kib(proc.pid, "VmHWM"))
            first_turns.append(turn_blocking(port))
        finally:
            stop_server(proc)
    return {
        "ready_s": statistics.median(times),
        "rss": statistics.median(rss),
        "peak": max(peak),
        "first_turn_s": statistics.median(first_turns),
    }


def turn_blocking(port, message="hello"):
    """POST a new session with a message, follow its stream to `session.waiting`; seconds."""
    t0 = time.perf_counter()
    status, body = http_once(port, "POST", "/eve/v1/session", {"message": message})
    if status != 202:
        raise RuntimeError(f"POST /session: {status} {body[:200]!r}")
    sid = json.loads(body)["sessionId"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(
            f"GET /eve/v1/session/{sid}/stream?startIndex=0 HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            f"Connection: close\r\n\r\n".encode()
        )
        buf = b""
        while b'"session.waiting"' not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("stream ended before session.waiting")
            buf += chunk
    return time.perf_counter() - t0


# ---- asyncio HTTP (concurrency) -----------------------------------------------------------------

async def request(port, method, path, body=None):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = b"" if body is None else json.dumps(body).encode()
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
    )
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), payload


async def open_stream(port, sid, start):
    """Opens a follow stream; returns (reader, writer) positioned after the headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /eve/v1/session/{sid}/stream?startIndex={start} HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    )
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    return reader, writer


async def read_until(reader, needle):
    """Reads until `needle`; returns the bytes read, or None if the stream ended first."""
    buf = b""
    while needle not in buf:
        chunk = await reader.read(65536)
        if not chunk:
            return None
        buf += chunk
    return buf


async def run_turn(port, message):
    """A turn on a new session; returns (seconds, session id, events the stream carried)."""
    t0 = time.perf_counter()
    status, body = await request(port, "POST", "/eve/v1/session", {"message": message})
    if status != 202:
        raise RuntimeError(f"POST /session: {status}")
    sid = json.loads(body)["sessionId"]
    reader, writer = await open_stream(port, sid, 0)
    buf = await read_until(reader, b'"session.waiting"')
    writer.close()
    if buf is None:
        raise RuntimeError("stream ended early")
    # One `"meta":{"at":` per event in eve's envelope (as bench/serve_hold.py counts them).
    return time.perf_counter() - t0, sid, buf.count(b'"meta":{"at":"')


PHASES = ("accept", "first_event", "waiting")


def turn_phases(port, message):
    """One measured turn on its own connections (blocking sockets, this process only): POST a new
    session with a message → 202, open its stream → first event, → `session.waiting`. Returns the
    total and the three phases in seconds: (total, {accept, first_event, waiting})."""
    t0 = time.perf_counter()
    status, body = http_once(port, "POST", "/eve/v1/session", {"message": message}, timeout=30)
    t1 = time.perf_counter()
    if status != 202:
        raise RuntimeError(f"POST /session: {status} {body[:200]!r}")
    sid = json.loads(body)["sessionId"]
    t2 = None
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(
            f"GET /eve/v1/session/{sid}/stream?startIndex=0 HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        buf = b""
        while b'"session.waiting"' not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("stream ended before session.waiting")
            buf += chunk
            if t2 is None and b'{"type":' in buf:
                t2 = time.perf_counter()
    t3 = time.perf_counter()
    return t3 - t0, {"accept": t1 - t0, "first_event": t2 - t1, "waiting": t3 - t2}


def measure(port, turns, label=None):
    """`turns` measured turns one at a time; returns (totals, phases per turn). With a label, logs
    the slowest turns with their phases (which one stalls)."""
    lat, phases = [], []
    for i in range(turns):
        dt, ph = turn_phases(port, f"measured {i}")
        lat.append(dt)
        phases.append(ph)
    if label:
        slow = sorted(range(turns), key=lambda i: lat[i], reverse=True)[:3]
        parts = ", ".join(
            f"#{i} {lat[i] * 1000:.1f} ms (" + " / ".join(
                f"{k} {phases[i][k] * 1000:.1f}" for k in PHASES) + ")" for i in slow)
        log(f"  {label}: slowest turns: {parts}")
    return lat, phases


def p(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def settle(pid, window=0.5, share=0.10, limit=15.0):
    """Waits until the server has done the work the streams' opening left it (each new follow
    reads its session before it parks): until it uses under `share` of a core over `window`
    seconds, at most `limit` seconds. Returns the seconds waited."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        a = cpu_ticks(pid)
        time.sleep(window)
        if (cpu_ticks(pid) - a) / hz / window < share:
            break
    return time.perf_counter() - t0


class Background:
    """N sessions, each with a client's follow stream open; `rate` turns per second over them.

    The N first turns are run here (asyncio, 32 at a time); the open streams and the background
    traffic are then held by `bench/serve_hold.py` in its own process (one thread, raw sockets),
    so the measured turns run alone on this process's connections, and each side's CPU can be
    read apart."""

    def __init__(self, port, n, rate, pid):
        self.port, self.n, self.rate, self.pid = port, n, rate, pid
        self.rss_before_streams = None
        self.sessions = []
        self.holder = None
        self.open_s = None
        self.settle_s = None
        self.stats = {}

    async def setup(self):
        sem = asyncio.Semaphore(32)

        async def one(i):
            async with sem:
                _, sid, events = await run_turn(self.port, f"background {i}")
                self.sessions.append(f"{sid} {events}")

        await asyncio.gather(*(one(i) for i in range(self.n)))
        self.rss_before_streams = proc_kib(self.pid, "VmRSS")
        hold = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_hold.py")
        self.holder = subprocess.Popen(
            [sys.executable, hold, "--port", str(self.port), "--rate", str(self.rate)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.holder.stdin.write("\n".join(self.sessions) + "\n\n")
        self.holder.stdin.flush()
        # Every stream has its response headers before anything is measured.
        line = self.holder.stdout.readline().split()
        if not line or line[0] != "open":
            raise RuntimeError(f"the stream holder failed: {line!r}")
        self.open_s = float(line[2])
        self.settle_s = settle(self.pid)
        # Background traffic from now on.
        self.holder.stdin.write("go\n")
        self.holder.stdin.flush()

    async def close(self):
        if self.holder is None:
            return
        try:
            self.holder.stdin.write("stop\n")
            self.holder.stdin.flush()
            out = self.holder.stdout.readline()
            self.stats = json.loads(out) if out.strip() else {}
        finally:
            self.holder.stdin.close()
            try:
                self.holder.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()


async def concurrency(eve, root, counts, turns, rate):
    results = {}
    for n in counts:
        db = os.path.join(root, ".eve", "eve.db")
        for suffix in ("", "-wal", "-shm", ".mark"):
            try:
                os.remove(db + suffix)
            except FileNotFoundError:
                pass
        port = free_port()
        proc = start_server(eve, root, "serve", port)
        try:
            wait_healthy(port, proc)
            measure(port, 20)  # warm-up
            alone, alone_ph = measure(port, turns, f"{n} sessions, alone")
            bg = Background(port, n, rate, proc.pid)
            t0 = time.perf_counter()
            await bg.setup()
            setup_s = time.perf_counter() - t0
            hz = os.sysconf("SC_CLK_TCK")
            server0, self0, wall0 = cpu_ticks(proc.pid), os.times(), time.perf_counter()
            load = os.getloadavg()[0]
            loaded, loaded_ph = measure(port, turns, f"{n} sessions, with their streams open")
            wall = time.perf_counter() - wall0
            server_cpu = (cpu_ticks(proc.pid) - server0) / hz / wall
            self1 = os.times()
            client_cpu = ((self1.user - self0.user) + (self1.system - self0.system)) / wall
            rss = proc_kib(proc.pid, "VmRSS")
            peak = proc_kib(proc.pid, "VmHWM")
            cpu_idle = None
            if rate == 0:
                # Idle followers wait on the broadcast alone; give every task time to park.
                time.sleep(10.0)
                cpu_idle = idle_cpu(proc.pid, 2.0)
            await bg.close()
            hold = bg.stats
            holder_cpu = None
            if hold.get("wall_s"):
                holder_cpu = (hold["cpu_user_s"] + hold["cpu_sys_s"]) / hold["wall_s"]
            results[n] = {
                "alone_p50": p(alone, 0.5), "alone_p99": p(alone, 0.99),
                "loaded_p50": p(loaded, 0.5), "loaded_p99": p(loaded, 0.99),
                "alone_phase_p99": {k: p([x[k] for x in alone_ph], 0.99) for k in PHASES},
                "loaded_phase_p99": {k: p([x[k] for x in loaded_ph], 0.99) for k in PHASES},
                "rss": rss, "peak": peak, "setup_s": setup_s, "cpu_idle": cpu_idle,
                "rss_no_streams": bg.rss_before_streams, "open_s": bg.open_s,
                "settle_s": bg.settle_s,
                "background_turns": hold.get("background_answered"),
                "holder": hold, "holder_cpu": holder_cpu, "client_cpu": client_cpu,
                "server_cpu": server_cpu, "load": load,
            }
            log(f"  {n} sessions: holder {json.dumps(hold)}")
        finally:
            stop_server(proc)
    return results


def idle_cpu(pid, seconds):
    """CPU share the server uses over `seconds` (1.0 = one core)."""
    hz = os.sysconf("SC_CLK_TCK")
    a = cpu_ticks(pid)
    time.sleep(seconds)
    return (cpu_ticks(pid) - a) / hz / seconds


def fmt_ms(s):
    return f"{s * 1000:.1f} ms"


def fmt_mib(b):
    return "–" if b is None else f"{b / MIB:.1f} MiB"


def row(rows, name, value, shown, target, unit):
    ratio = "" if target is None else f"{value / target:.2f}"
    tgt = "" if target is None else f"< {target:g} {unit}"
    rows.append((name, shown, tgt, ratio))


def raise_fd_limit(sessions):
    """Raises this process's soft RLIMIT_NOFILE to the hard limit (the server raises its own):
    each session's stream is one socket here and one in the server."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = sessions + 512
    if hard != resource.RLIM_INFINITY and hard < need:
        log(f"warning: the file-descriptor hard limit is {hard}, {sessions} open streams need "
            f"about {need}: raise it (ulimit -Hn) or the run will fail")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eve", required=True, help="the eve binary to measure")
    ap.add_argument("--runs", type=int, default=10, help="cold starts per server (median)")
    ap.add_argument("--turns", type=int, default=100, help="measured turns per load level")
    ap.add_argument("--sessions", default="100,1000", help="concurrent session counts")
    ap.add_argument("--rate", type=float, default=20.0,
                    help="background turns per second spread over the sessions")
    a = ap.parse_args()
    eve = os.path.abspath(a.eve)
    root = tempfile.mkdtemp(prefix="eve-bench-serve-")
    try:
        make_project(root)
        subprocess.run([eve, "build"], cwd=root, env=env(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log(f"cold start: eve serve x{a.runs}")
        serve = cold_start(eve, root, "serve", a.runs)
        log(f"cold start: eve dev x{a.runs} (clean .eve/, so each start builds)")
        dev = cold_start(eve, root, "dev", a.runs)
        subprocess.run([eve, "build"], cwd=root, env=env(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts = [int(x) for x in a.sessions.split(",") if x.strip()]
        raise_fd_limit(max(counts, default=0))
        log(f"concurrent sessions: {counts}, {a.turns} measured turns each, "
            f"{a.rate:g} background turns/s")
        conc = asyncio.run(concurrency(eve, root, counts, a.turns, a.rate))
        log("idle streams only (no background traffic): CPU of the server")
        idle = asyncio.run(concurrency(eve, root, [max(counts)], 20, 0.0))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rows = []
    for name, r in (("serve", serve), ("dev", dev)):
        row(rows, f"{name}: cold start → healthy /health (median)", r["ready_s"] * 1000,
            fmt_ms(r["ready_s"]), TARGETS["cold_ms"], "ms")
        row(rows, f"{name}: RSS when healthy", r["rss"] / MIB, fmt_mib(r["rss"]),
            TARGETS["cold_rss_mib"], "MiB")
        row(rows, f"{name}: peak RSS (VmHWM) during start", r["peak"] / MIB, fmt_mib(r["peak"]),
            TARGETS["cold_rss_mib"], "MiB")
        row(rows, f"{name}: first turn after a cold start: POST → session.waiting",
            r["first_turn_s"] * 1000, fmt_ms(r["first_turn_s"]), TARGETS["turn_ms"], "ms")
    for n, r in conc.items():
        row(rows, f"{n} sessions: turn p50 / p99 alone", r["alone_p50"] * 1000,
            f"{fmt_ms(r['alone_p50'])} / {fmt_ms(r['alone_p99'])}", TARGETS["turn_ms"], "ms")
        row(rows, f"{n} sessions: turn p50 / p99 with them", r["loaded_p99"] * 1000,
            f"{fmt_ms(r['loaded_p50'])} / {fmt_ms(r['loaded_p99'])}", None, "")
        added = r["loaded_p99"] - r["alone_p99"]
        row(rows, f"{n} sessions: added p99 latency (with − alone)", max(0.0, added) * 1000,
            fmt_ms(added), TARGETS["added_p99_ms"], "ms")
        row(rows, f"{n} sessions: RSS (streams open)", r["rss"] / MIB, fmt_mib(r["rss"]),
            TARGETS["rss_10000_mib"] if n > 1000 else TARGETS["rss_1000_mib"], "MiB")
        row(rows, f"{n} sessions: RSS before their streams opened", 0,
            fmt_mib(r["rss_no_streams"]), None, "")
        row(rows, f"{n} sessions: setup (each ran a turn, 32 at a time; streams opened; settled)",
            0, f"{r['setup_s']:.2f} s ({r['open_s']:.2f} s; {r['settle_s']:.2f} s)", None, "")
        for k, what in (("accept", "POST → 202"), ("first_event", "stream → first event"),
                        ("waiting", "first event → session.waiting")):
            row(rows, f"{n} sessions: p99 of {what}, alone / with them", 0,
                f"{fmt_ms(r['alone_phase_p99'][k])} / {fmt_ms(r['loaded_phase_p99'][k])}",
                None, "")
        hc = "–" if r["holder_cpu"] is None else f"{r['holder_cpu'] * 100:.0f}"
        row(rows, f"{n} sessions: CPU while measured: server / holder / measuring client", 0,
            f"{r['server_cpu'] * 100:.0f} / {hc} / {r['client_cpu'] * 100:.0f} %", None, "")
        row(rows, f"{n} sessions: background turns answered; load average (1 min)", 0,
            f"{r['background_turns']}; {r['load']:.2f}", None, "")
    for n, r in idle.items():
        row(rows, f"{n} idle open streams: server CPU", 0,
            f"{r['cpu_idle'] * 100:.1f} % of a core", None, "")
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'ours':>20}  {'target':>12}  {'ratio':>6}")
    for name, shown, tgt, ratio in rows:
        print(f"{name:<{w}}  {shown:>20}  {tgt:>12}  {ratio:>6}")
    print("(ratio = ours ÷ target; below 1.00 meets the target; turn rows compare the median)")


if __name__ == "__main__":
    main()
