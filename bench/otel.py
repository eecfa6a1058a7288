"""What tracing costs a server: `eve serve` with tracing off (`OTEL_SDK_DISABLED=true`) and on
(OTLP export to a running collector, plus the local trace store), the same turns against each:
the median turn latency over N sessions (one turn each) and the RSS once N sessions exist.
Prints the added latency (target < 5 %) and the added RSS (target < 10 MiB at 1,000 sessions).

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


def run(eve, endpoint, traced, sessions, warmup):
    root = tempfile.mkdtemp(prefix="eve-otel-bench.")
    S.make_project(root)
    env = S.env()
    for k in list(env):
        if k.startswith("OTEL_") or k.startswith("EVE_TRACES"):
            env.pop(k)
    if traced:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        env["OTEL_SERVICE_NAME"] = "eve-bench"
    else:
        env["OTEL_SDK_DISABLED"] = "true"
    subprocess.run([eve, "build"], cwd=root, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = S.free_port()
    proc = subprocess.Popen([eve, "serve", "--host", "127.0.0.1", "--port", str(port)], cwd=root,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        S.wait_healthy(port, proc)
        for i in range(warmup):
            S.turn_blocking(port, f"warm {i}")
        lat = [S.turn_blocking(port, f"turn {i}") for i in range(sessions)]
        time.sleep(1.0)  # the batch exporter's last round
        rss = S.proc_kib(proc.pid, "VmRSS")
        peak = S.proc_kib(proc.pid, "VmHWM")
    finally:
        S.stop_server(proc)
        subprocess.run(["rm", "-rf", root], check=False)
    return lat, rss, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eve", required=True)
    ap.add_argument("--endpoint", required=True, help="the collector's OTLP HTTP base URL")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="off/on pairs (interleaved)")
    a = ap.parse_args()
    a.eve = os.path.abspath(a.eve)
    off_lat, on_lat, off_rss, on_rss = [], [], [], []
    for r in range(a.rounds):
        for traced in (False, True):
            lat, rss, peak = run(a.eve, a.endpoint, traced, a.sessions, a.warmup)
            med = statistics.median(lat)
            S.log(f"round {r + 1} tracing {'on ' if traced else 'off'}: median turn "
                  f"{med * 1000:.2f} ms, RSS {rss / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB) "
                  f"after {a.sessions} sessions")
            (on_lat if traced else off_lat).append(med)
            (on_rss if traced else off_rss).append(rss)
    off, on = statistics.median(off_lat), statistics.median(on_lat)
    added = (on - off) / off * 100
    rss_added = (statistics.median(on_rss) - statistics.median(off_rss)) / 2**20
    print(f"turn latency, tracing off: {off * 1000:.2f} ms; on: {on * 1000:.2f} ms; "
          f"ratio on/off {on / off:.3f}, added: {added:+.1f} % (target < 5 %) "
          f"{'ok' if added < 5 else 'OVER'}")
    print(f"RSS at {a.sessions} sessions, added by tracing: {rss_added:+.1f} MiB "
          f"(target < 10 MiB) {'ok' if rss_added < 10 else 'OVER'}")


if __name__ == "__main__":
    main()
