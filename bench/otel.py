"""What tracing costs a server: two `eve serve` processes side by side, one with tracing off
(`OTEL_SDK_DISABLED=true`) and one with it on (OTLP export to a running collector, plus the local
trace store), and the same turns against each, alternately: turn i runs on one server then on the
other (the order swapped every pair, and which server starts first swapped every round), so both
see the same machine load. Prints the median turn latency of each, the median paired difference
(what tracing adds, target < 5 %), the RSS each holds once N sessions exist and what tracing adds
(target < 10 MiB at 1,000 sessions), and the CPU per turn of each server and of the collector.

Why pairs: on a shared, loaded machine the latency of the same server swings by a factor of
several from one minute to the next, so two runs one after the other compare the load, not the
servers. And the collector (a Python process) spends several times eve's whole turn in CPU to
ingest a turn's spans; on the same cores that is the collector's cost, which a deployment pays on
its own host: it falls on both servers alike here, and is printed on its own line.

`--aa` runs both servers with tracing off: what the method reads when there is no difference
(its noise floor).

Run by bench/otel.sh, which starts the collector (a real Arize Phoenix) and builds the binary."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve as S  # noqa: E402  (the server bench's helpers)

HZ = os.sysconf("SC_CLK_TCK")
EXPORT_WAIT = 6.0


class Server:
    """One `eve serve` in a project of its own, traced or not."""

    def __init__(self, eve, endpoint, traced, export="both"):
        self.traced = traced
        self.root = tempfile.mkdtemp(prefix="eve-otel-bench.")
        S.make_project(self.root)
        env = S.env()
        for k in list(env):
            if k.startswith("OTEL_") or k.startswith("EVE_TRACES"):
                env.pop(k)
        if traced:
            if export != "local":
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
            if export == "otlp":
                env["EVE_TRACES"] = "off"
            env["OTEL_SERVICE_NAME"] = "eve-bench"
        else:
            env["OTEL_SDK_DISABLED"] = "true"
        subprocess.run([eve, "build"], cwd=self.root, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = S.free_port()
        self.proc = subprocess.Popen(
            [eve, "serve", "--host", "127.0.0.1", "--port", str(self.port)], cwd=self.root,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        S.wait_healthy(self.port, self.proc)
        self.lat = []

    def turn(self, message):
        self.lat.append(S.turn_blocking(self.port, message))

    def cpu(self):
        return S.cpu_ticks(self.proc.pid)

    def rss(self):
        return S.proc_kib(self.proc.pid, "VmRSS")

    def close(self):
        S.stop_server(self.proc)
        subprocess.run(["rm", "-rf", self.root], check=False)


def drain(collector_pid):
    """Waits for the OTLP batch exporter's round (every 5 s; the local store's every 0.5 s),
    then for the collector to finish ingesting it."""
    time.sleep(EXPORT_WAIT)
    if collector_pid:
        S.settle(collector_pid, window=0.5, share=0.05, limit=60.0)


def round_(a, collector_pid, on_first):
    """One round: a fresh pair of servers (the traced one started first when `on_first`),
    warmed up, then `a.sessions` turns on each, alternately. Returns (off, on) as dicts of
    latencies, RSS and CPU per turn, the collector's CPU per turn, and the paired differences."""
    made = []
    try:
        for traced in (True, False) if on_first else (False, True):
            made.append(Server(a.eve, a.endpoint, traced and not a.aa, a.export))
    except BaseException:
        for server in made:
            server.close()
        raise
    off, on = made[::-1] if on_first else made
    try:
        for i in range(a.warmup):
            off.turn(f"warm {i}")
            on.turn(f"warm {i}")
        off.lat.clear()
        on.lat.clear()
        drain(collector_pid)
        cpu0 = (off.cpu(), on.cpu(), S.cpu_ticks(collector_pid) if collector_pid else 0)
        for i in range(a.sessions):
            pair = (off, on) if i % 2 == 0 else (on, off)
            for server in pair:
                server.turn(f"turn {i}")
        drain(collector_pid)
        cpu1 = (off.cpu(), on.cpu(), S.cpu_ticks(collector_pid) if collector_pid else 0)
        per_turn = [(b - x) / HZ / a.sessions for x, b in zip(cpu0, cpu1)]
        out = []
        for k, server in enumerate((off, on)):
            out.append({
                "median": statistics.median(server.lat),
                "p90": S.p(server.lat, 0.9),
                "rss": server.rss(),
                "cpu": per_turn[k],
            })
        for k, server in enumerate((off, on)):
            out[k]["lat"] = list(server.lat)
        diffs = [b - x for x, b in zip(off.lat, on.lat)]
        return out[0], out[1], per_turn[2], diffs
    finally:
        off.close()
        on.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eve", required=True)
    ap.add_argument("--endpoint", required=True, help="the collector's OTLP HTTP base URL")
    ap.add_argument("--collector-pid", type=int, default=0,
                    help="the collector's process (for its CPU per turn)")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="fresh pairs of servers")
    ap.add_argument("--export", choices=("both", "otlp", "local"), default="both",
                    help="where the traced server's spans go: the collector and the local trace "
                         "store (the default, as `eve serve` does), or only one of them")
    ap.add_argument("--aa", action="store_true",
                    help="both servers with tracing off (the method's noise floor)")
    a = ap.parse_args()
    a.eve = os.path.abspath(a.eve)
    second = "off (A/A)" if a.aa else "on"
    rows = []
    for r in range(a.rounds):
        off, on, collector, diffs = round_(a, a.collector_pid, r % 2 == 1)
        rows.append((off, on, collector, diffs))
        diff = statistics.median(diffs)
        S.log(f"round {r + 1}: median turn off {off['median'] * 1000:.2f} ms, {second} "
              f"{on['median'] * 1000:.2f} ms (p90 {off['p90'] * 1000:.2f} / "
              f"{on['p90'] * 1000:.2f}; median paired difference {diff * 1000:+.3f} ms); RSS "
              f"{off['rss'] / 2**20:.1f} / {on['rss'] / 2**20:.1f} MiB after {a.sessions} "
              f"sessions; CPU per turn: eve {off['cpu'] * 1000:.2f} / {on['cpu'] * 1000:.2f} ms, "
              f"collector {collector * 1000:.2f} ms")
    med = statistics.median
    # Every round's turns together: each turn's pair ran under the same load.
    off = med(x for r in rows for x in r[0]["lat"])
    on = med(x for r in rows for x in r[1]["lat"])
    diff = med(d for r in rows for d in r[3])
    added = (on - off) / off * 100
    rss_added = (med(r[1]["rss"] for r in rows) - med(r[0]["rss"] for r in rows)) / 2**20
    cpu_off = med(r[0]["cpu"] for r in rows) * 1000
    cpu_on = med(r[1]["cpu"] for r in rows) * 1000
    collector = med(r[2] for r in rows) * 1000
    # The verdict reads the paired differences: the pooled medians mix rounds whose load
    # differed (their medians can sit between two modes); each pair ran under one load.
    paired = diff / off * 100
    print(f"turn latency (median of {len(rows) * a.sessions} turns each), tracing off: "
          f"{off * 1000:.2f} ms; {second}: {on * 1000:.2f} ms (ratio {on / off:.3f}, "
          f"{added:+.1f} %); median paired difference {diff * 1000:+.3f} ms: added "
          f"{paired:+.1f} % (target < 5 %) {'ok' if paired < 5 else 'OVER'}")
    print(f"RSS at {a.sessions} sessions, added by tracing: {rss_added:+.1f} MiB "
          f"(target < 10 MiB) {'ok' if rss_added < 10 else 'OVER'}")
    print(f"CPU per turn: eve off {cpu_off:.2f} ms, {second} {cpu_on:.2f} ms "
          f"({cpu_on - cpu_off:+.2f} ms); the collector {collector:.2f} ms")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
