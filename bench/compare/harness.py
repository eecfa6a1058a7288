#!/usr/bin/env python3
"""Side-by-side benchmark: eve (Rust) vs eve 0.80.1 (npm). Driven by bench/compare-eve.

Measures build time and peak RSS (scaffold-sized agent, 200 tools + 50 skills), server cold
start to a healthy /eve/v1/health and its RSS, and first-turn latency (POST a session with a
message -> the stream shows `session.waiting`), against one scripted OpenAI-compatible server.
Progress goes to stderr; the table to stdout (and bench/RESULTS.md unless --no-write).
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import re
import signal
import socket
import shutil
import statistics
import tempfile
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


T_START = time.monotonic()


def log(msg):
    sys.stderr.write(f"[compare-eve {time.monotonic() - T_START:6.1f}s] {msg}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------ process-tree RSS


def _children(pid):
    """Direct children of pid, from /proc/PID/task/*/children (a child hangs off the thread
    that forked it). Cheap: reads only the tree, not all of /proc."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def _children_by_scan():
    """{ppid: [pid]} from every /proc/PID/stat (fallback where the children files are missing)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # comm may hold spaces and parens: the fields after the last ')' are fixed.
        rest = data[data.rfind(b")") + 2:].split()
        children.setdefault(int(rest[1]), []).append(int(name))
    return children


HAVE_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def tree_pids(root):
    if HAVE_CHILDREN_FILES:
        get = _children
    else:
        table = _children_by_scan()
        get = lambda pid: table.get(pid, ())  # noqa: E731
    out, stack, seen = [], [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        stack.extend(get(pid))
    return out


def rss_of(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def rss_hwm_of(pid):
    """(VmRSS, VmHWM) in bytes; HWM is the kernel's exact peak RSS of that process so far."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return rss, hwm


def tree_rss(root):
    return sum(rss_of(p) for p in tree_pids(root))


class Sampler(threading.Thread):
    """Samples the summed RSS of a process tree every `interval` seconds; keeps the peak of the
    sum and the largest per-process high-water mark (VmHWM) seen. With `skip_root`, the root
    (a measuring wrapper such as /usr/bin/time) is not counted."""

    def __init__(self, root, interval=0.005, skip_root=False):
        super().__init__(daemon=True)
        self.root, self.interval, self.skip_root = root, interval, skip_root
        self.peak = 0
        self.hwm = 0
        self._halt = threading.Event()

    def sample(self):
        total = 0
        for pid in tree_pids(self.root):
            if self.skip_root and pid == self.root:
                continue
            rss, hwm = rss_hwm_of(pid)
            total += rss
            self.hwm = max(self.hwm, hwm)
        self.peak = max(self.peak, total)

    def run(self):
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()
        return max(self.peak, self.hwm)


def kill_tree(proc, grace=5.0):
    """SIGTERM the process group (and any stray descendants), then SIGKILL after `grace`."""
    if proc.poll() is not None:
        return
    pids = tree_pids(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=grace)
            # descendants that left the group may still be dying
            deadline = time.time() + grace
            while time.time() < deadline and any(os.path.exists(f"/proc/{p}") and rss_of(p)
                                                 for p in pids):
                time.sleep(0.05)
            return
        except subprocess.TimeoutExpired:
            continue


# ------------------------------------------------------------------ measurement primitives


class Unavailable(Exception):
    """A measurement that cannot be taken; its message becomes the table cell."""


TIME_BIN = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def run_measured(cmd, cwd, env, log_path, timeout=600, sample=False):
    """Runs cmd to completion; returns (wall seconds, peak RSS bytes).

    Without `sample`, nothing runs beside the command, not even GNU time (its own fork, exec
    and wait were a millisecond and more of a 10 ms build): the wall time is clean and the peak
    is None. With `sample` (an untimed run), the peak is GNU time's %M when /usr/bin/time exists
    (the exact peak of the largest single process; a process forked straight from this Python
    would inherit Python's RSS in its ru_maxrss, so a small launcher is needed), and a thread
    also sums the RSS of the whole process tree from /proc every few ms and keeps the largest
    per-process VmHWM."""
    with open(log_path, "ab") as out:
        out.write(("\n$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        time_file = log_path + ".maxrss"
        timed_rss = TIME_BIN if sample else None
        full = [timed_rss, "-f", "%M", "-o", time_file, *cmd] if timed_rss else cmd
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        sampler = Sampler(proc.pid, interval=0.005, skip_root=bool(timed_rss)) if sample else None
        if sampler:
            sampler.start()
        # A blocking wait, with a timer for the timeout: `wait(timeout=…)` polls with sleeps
        # that double from 0.5 ms, which read every build between 7.5 and 15.5 ms as 15.5 ms.
        expired = threading.Event()

        def expire():
            expired.set()
            kill_tree(proc)

        timer = threading.Timer(timeout, expire)
        timer.start()
        try:
            proc.wait()
        finally:
            wall = time.perf_counter() - t0
            timer.cancel()
            peak = sampler.stop() if sampler else None
        if expired.is_set():
            raise Unavailable(f"timed out after {timeout}s")
    if timed_rss:
        try:
            with open(time_file) as f:
                last = f.read().strip().splitlines()[-1]
            peak = max(peak or 0, int(last) * 1024)
        except (OSError, ValueError, IndexError):
            pass
    if proc.returncode != 0:
        raise Unavailable(f"exit {proc.returncode} (see {os.path.relpath(log_path)})")
    return wall, peak


def measure_builds(cmd, cwd, env, log_path, runs, clean):
    """One untimed warm-up run that samples the process tree's RSS, then `runs` clean timed
    runs. Returns (median wall, peak RSS over all runs, [walls])."""
    clean()
    _, peak = run_measured(cmd, cwd, env, log_path, sample=True)
    walls = []
    for _ in range(runs):
        clean()
        t, m = run_measured(cmd, cwd, env, log_path)
        walls.append(t)
        peak = max(peak or 0, m or 0)
    return median(walls), peak, walls


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(port, method, path, body=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw or b"null")
        except ValueError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


def health_ok(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/eve/v1/health")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status != 200:
            return False
        try:
            return json.loads(body).get("ok") is True
        except (ValueError, AttributeError):
            return False
    except OSError:
        return False


def parse_at(at):
    try:
        return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


def tool_span(stamps):
    """Seconds from `actions.requested` to `action.result` by the server's own clock (ms)."""
    a, b = parse_at(stamps.get("actions.requested")), parse_at(stamps.get("action.result"))
    return b - a if a is not None and b is not None else None


def one_turn(port, message, timeout=60):
    """POST /eve/v1/session with a message, follow its NDJSON stream to `session.waiting`.

    Returns (seconds from POST to the session.waiting line, event types seen, seconds the
    tool call took by the events' own timestamps)."""
    t0 = time.perf_counter()
    status, body = http_json(port, "POST", "/eve/v1/session", {"message": message})
    if status != 202 or not isinstance(body, dict) or not body.get("sessionId"):
        raise Unavailable(f"POST /eve/v1/session -> {status} {str(body)[:120]}")
    sid = body["sessionId"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    seen, stamps = [], {}
    try:
        conn.request("GET", f"/eve/v1/session/{sid}/stream",
                     headers={"accept": "application/x-ndjson"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise Unavailable(f"GET stream -> {resp.status} {resp.read()[:120]!r}")
        while True:
            line = resp.readline()
            if not line:
                raise Unavailable(f"stream ended before session.waiting (saw {seen[-3:]})")
            line = line.strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            kind = ev.get("type")
            seen.append(kind)
            if kind in ("actions.requested", "action.result") and kind not in stamps:
                stamps[kind] = (ev.get("meta") or {}).get("at")
            if kind == "session.waiting":
                return time.perf_counter() - t0, seen, tool_span(stamps)
            if kind in ("turn.failed", "session.failed", "session.completed", "error"):
                raise Unavailable(f"turn ended with {kind}: {json.dumps(ev.get('data'))[:160]}")
    except socket.timeout:
        raise Unavailable(f"no session.waiting within {timeout}s (saw {seen[-3:]})")
    finally:
        conn.close()


TOOL_MESSAGES = ("What is the weather in Paris?", "And in Rome?")
# The scripted model answers a message saying "(no tools)" with text, tools offered or not.
TEXT_MESSAGES = ("Say hello (no tools)", "And once more (no tools)")


def serve_once(cmd, cwd, env, port, log_path, turns=0, ready_timeout=180, text=False):
    """Starts a server, waits for a healthy /health, optionally runs turns, stops it. The turns
    call the agent's tool (a model call, the tool call, a model call) or, with `text`, are one
    model call answered with text.

    Returns dict: ready_s, rss_ready, peak_start, turn_first, turn_next (list), rss_after."""
    res = {}
    with open(log_path, "ab") as out:
        out.write(("\n$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        # a slow sampler (cheap tree walk): it must not steal the CPU the start-up needs
        sampler = Sampler(proc.pid, interval=0.05)
        sampler.start()
        try:
            while True:
                if health_ok(port):
                    res["ready_s"] = time.perf_counter() - t0
                    break
                if proc.poll() is not None:
                    raise Unavailable(f"exited {proc.returncode} before healthy "
                                      f"(see {os.path.relpath(log_path)})")
                elapsed = time.perf_counter() - t0
                if elapsed > ready_timeout:
                    raise Unavailable(f"not healthy within {ready_timeout}s")
                # poll every 1 ms for the first 200 ms, then every 10 ms
                time.sleep(0.001 if elapsed < 0.2 else 0.01)
            res["rss_ready"] = tree_rss(proc.pid)
            res["peak_start"] = max(sampler.peak, res["rss_ready"])
            if turns:
                try:
                    first, later = TEXT_MESSAGES if text else TOOL_MESSAGES
                    res["turn_first"], res["events"], span = one_turn(port, first)
                    res["tool_spans"] = [span]
                    res["turn_next"] = []
                    for _ in range(turns - 1):
                        t, _, span = one_turn(port, later)
                        res["turn_next"].append(t)
                        res["tool_spans"].append(span)
                except Unavailable as e:
                    res["turn_error"] = str(e)
                time.sleep(0.3)  # let background work settle before the idle reading
                res["rss_after"] = tree_rss(proc.pid)
        finally:
            sampler.stop()
            kill_tree(proc)
    return res


# ------------------------------------------------------------------ the two products


class Side:
    def __init__(self, label):
        self.label = label
        self.results = {}  # metric -> value or Unavailable message


def ours_commands(eve_bin, wanted=("build", "serve", "start", "dev", "run")):
    """Which of our subcommands exist: `eve SUB --help` exits 0 only for a known one."""
    found = set()
    for sub in wanted:
        try:
            r = subprocess.run([eve_bin, sub, "--help"], capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            found.add(sub)
    return found


def subcommand_help(eve_bin, sub):
    try:
        return subprocess.run([eve_bin, sub, "--help"], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def fmt_time(s):
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.1f} ms" if s < 0.1 else f"{s * 1000:.0f} ms"
    return f"{s:.2f} s"


def fmt_mem(b):
    if b is None:
        return "–"
    if b >= 1024 * MIB:
        return f"{b / 1024 / MIB:.2f} GiB"
    return f"{b / MIB:.1f} MiB"


def median(xs):
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--eve", required=True, help="our release binary")
    ap.add_argument("--eve-rev", default="", help="what the binary was built from, if known")
    ap.add_argument("--node-bin", required=True, help="folder holding Node 24's `node`")
    ap.add_argument("--ref-modules", required=True, help="node_modules of eve 0.80.1")
    ap.add_argument("--ref-deps", required=True, help="JSON of the npm dependencies")
    ap.add_argument("--runs-ours", type=int, default=10)
    ap.add_argument("--runs-ref", type=int, default=3)
    ap.add_argument("--server-runs", type=int, default=3)
    ap.add_argument("--turns", type=int, default=6, help="sessions per server run (1 cold + rest)")
    ap.add_argument("--skip-ref", action="store_true")
    ap.add_argument("--no-dev", action="store_true", help="skip the `eve dev` rows")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/RESULTS.md")
    a = ap.parse_args()

    a.load_start = os.getloadavg()
    scratch = a.scratch
    logs = os.path.join(scratch, "logs")
    os.makedirs(logs, exist_ok=True)
    for f in os.listdir(logs):
        os.remove(os.path.join(logs, f))
    agents_root = os.path.join(scratch, "agents")
    ref_deps = json.loads(a.ref_deps)

    # --- the scripted model server
    port_file = os.path.join(scratch, "model.port")
    if os.path.exists(port_file):
        os.remove(port_file)
    model_log = open(os.path.join(logs, "model-server.log"), "ab")
    model = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__),
                                                           "model_server.py"),
                              "--port", "0", "--port-file", port_file, "--log"],
                             stdout=model_log, stderr=model_log, start_new_session=True)
    for _ in range(500):
        if os.path.exists(port_file):
            break
        time.sleep(0.01)
    model_port = int(open(port_file).read())
    base_url = f"http://127.0.0.1:{model_port}/v1"
    log(f"scripted model server on {base_url}")

    ours, ref = Side("eve (Rust)"), Side("eve 0.80.1 (npm)")
    R = {"ours": ours.results, "ref": ref.results}

    try:
        # --- generate agents
        projects = {}
        for size in ("small", "large"):
            p_ours = os.path.join(agents_root, f"ours-{size}")
            p_ref = os.path.join(agents_root, f"ref-{size}")
            os.makedirs(p_ours, exist_ok=True)
            os.makedirs(p_ref, exist_ok=True)
            agents.write_ours(p_ours, size)
            agents.write_ref(p_ref, size, ref_deps)
            nm = os.path.join(p_ref, "node_modules")
            stamp = os.path.join(a.ref_modules, ".bench-stamp")
            if not os.path.exists(os.path.join(nm, ".bench-stamp")) or \
                    open(stamp).read() != open(os.path.join(nm, ".bench-stamp")).read():
                subprocess.run(["rm", "-rf", nm], check=True)
                # hard links: a full node_modules per project, at no copy cost
                subprocess.run(["cp", "-al", a.ref_modules, nm], check=True)
            projects[size] = (p_ours, p_ref)
        log("generated agents: scaffold-sized (1 tool, 1 skill) and large (200 tools, 50 skills)")

        env_ours = dict(os.environ, EVE_BASE_URL=base_url, EVE_API_KEY="bench",
                        NO_COLOR="1", RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        env_ours.pop("EVE_MODEL", None)
        env_ref = dict(os.environ, PATH=a.node_bin + os.pathsep + os.environ.get("PATH", ""),
                       BENCH_MODEL_BASE_URL=base_url, EVE_TELEMETRY_DISABLED="1",
                       NO_COLOR="1", CI="1")
        ref_eve = [os.path.join(a.node_bin, "node"), "node_modules/eve/bin/eve.js"]
        cmds = ours_commands(a.eve)
        log(f"our binary offers: {' '.join(sorted(cmds)) or '(nothing?)'}")

        def clean(project, names):
            for n in names:
                subprocess.run(["rm", "-rf", os.path.join(project, n)], check=True)

        # --- builds
        for size in ("small", "large"):
            p_ours, p_ref = projects[size]
            key_t, key_m = f"build_{size}_time", f"build_{size}_rss"
            # one warm-up (sampled for the tree's RSS), then N clean timed builds
            try:
                if "build" not in cmds:
                    raise Unavailable("n/a: eve build not available")
                wall, peak, _ = measure_builds(
                    [a.eve, "build"], p_ours, env_ours,
                    os.path.join(logs, f"ours-build-{size}.log"), a.runs_ours,
                    lambda: clean(p_ours, [".eve"]))
                R["ours"][key_t], R["ours"][key_m] = wall, peak
                log(f"ours build {size}: median {fmt_time(wall)}, peak {fmt_mem(peak)} "
                    f"({a.runs_ours} runs)")
            except Unavailable as e:
                R["ours"][key_t] = R["ours"][key_m] = e
                log(f"ours build {size}: {e}")
            if size == "small" and "build" in cmds:
                # The same project where `eve init` leaves one, outside any git repository: the
                # projects above sit inside eve's own checkout, so each build also waits for the
                # `git status` its release records (the source revision).
                bare = tempfile.mkdtemp(prefix="eve-bench-nogit-")
                p_bare = os.path.join(bare, "ours-small")
                shutil.copytree(p_ours, p_bare, ignore=shutil.ignore_patterns(".eve"))
                try:
                    wall, _, _ = measure_builds(
                        [a.eve, "build"], p_bare, env_ours,
                        os.path.join(logs, "ours-build-small-nogit.log"), a.runs_ours,
                        lambda: clean(p_bare, [".eve"]))
                    R["ours"]["build_small_nogit_time"] = wall
                    log(f"ours build small outside git: median {fmt_time(wall)}")
                except Unavailable as e:
                    R["ours"]["build_small_nogit_time"] = e
                finally:
                    shutil.rmtree(bare, ignore_errors=True)
            if a.skip_ref:
                continue
            try:
                log(f"eve 0.80.1 build {size}: warm-up + {a.runs_ref} runs (seconds each)…")
                wall, peak, walls = measure_builds(
                    ref_eve + ["build", "--skip-sandbox-prewarm"], p_ref, env_ref,
                    os.path.join(logs, f"ref-build-{size}.log"), a.runs_ref,
                    lambda: clean(p_ref, [".eve", ".output"]))
                R["ref"][key_t], R["ref"][key_m] = wall, peak
                log(f"eve 0.80.1 build {size}: median {fmt_time(wall)} "
                    f"({', '.join(fmt_time(w) for w in walls)}), peak {fmt_mem(peak)}")
            except Unavailable as e:
                R["ref"][key_t] = R["ref"][key_m] = e
                log(f"eve 0.80.1 build {size}: {e}")

        # --- servers: production (ours `eve serve`, theirs `eve start`) and dev
        p_ours, p_ref = projects["small"]

        def server_rows(prefix, side, runs, make_cmd, cwd, env, prepare, before_each=None):
            out = R[side]
            ready, rss_ready, peak, after = [], [], [], []
            # per kind of turn: first turns, later turns, tool spans, errors
            turns = {kind: ([], [], [], []) for kind in ("tool", "text")}
            try:
                prepare()
                # `runs` servers whose turns call the tool, then `runs` whose turns are text
                for i, kind in enumerate(["tool"] * runs + ["text"] * runs):
                    if before_each:
                        before_each()
                    port = free_port()
                    cmd = make_cmd(port)
                    lp = os.path.join(logs, f"{side}-{prefix}.log")
                    r = serve_once(cmd, cwd, env, port, lp, turns=a.turns, text=kind == "text")
                    ready.append(r["ready_s"])
                    rss_ready.append(r["rss_ready"])
                    peak.append(r["peak_start"])
                    first, nxt, spans, errs = turns[kind]
                    if "turn_error" in r:
                        errs.append(r["turn_error"])
                    else:
                        first.append(r["turn_first"])
                        nxt.extend(r["turn_next"])
                        spans.extend(x for x in r["tool_spans"] if x is not None)
                    after.append(r["rss_after"])
                    log(f"  {side} {prefix} run {i + 1}: healthy in {fmt_time(r['ready_s'])}, "
                        f"RSS {fmt_mem(r['rss_ready'])}; first {kind} turn "
                        f"{fmt_time(r.get('turn_first')) if 'turn_first' in r else r.get('turn_error')}")
                out[f"{prefix}_ready"] = median(ready)
                out[f"{prefix}_rss"] = median(rss_ready)
                out[f"{prefix}_peak"] = max(peak)
                out[f"{prefix}_rss_after"] = median(after)
                for kind, (first, nxt, spans, errs) in turns.items():
                    keys = [f"{prefix}_{kind}_first", f"{prefix}_{kind}_next"]
                    if kind == "tool":
                        keys = [f"{prefix}_turn_first", f"{prefix}_turn_next",
                                f"{prefix}_tool_span"]
                    if first:
                        values = [median(first), median(nxt) if nxt else None,
                                  median(spans) if spans else None]
                    else:
                        values = [Unavailable(f"n/a: {errs[0]}")] * 3
                    out.update(zip(keys, values))
            except Unavailable as e:
                for k in ("ready", "rss", "peak", "rss_after", "turn_first", "turn_next",
                          "tool_span", "text_first", "text_next"):
                    out[f"{prefix}_{k}"] = e
                log(f"  {side} {prefix}: {e}")

        # ours: eve serve
        def ours_serve_prepare():
            if "serve" not in cmds:
                raise Unavailable("n/a: eve serve not available")
            clean(p_ours, [".eve"])
            subprocess.run([a.eve, "build"], cwd=p_ours, env=env_ours, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ours_dev_prepare():
            if "dev" not in cmds:
                raise Unavailable("n/a: eve dev not available")
            clean(p_ours, [".eve"])

        def ours_server_cmd(sub):
            def make(port):
                return [a.eve, sub, "--host", "127.0.0.1", "--port", str(port)]
            return make

        def ref_server_cmd(sub, extra=()):
            def make(port):
                return ref_eve + [sub, *extra, "--host", "127.0.0.1", "--port", str(port)]
            return make

        def ref_start_prepare():
            clean(p_ref, [".eve", ".output"])
            run_measured(ref_eve + ["build", "--skip-sandbox-prewarm"], p_ref, env_ref,
                         os.path.join(logs, "ref-serve.log"))

        log("server cold start: our `eve serve`")
        server_rows("serve", "ours", a.server_runs, ours_server_cmd("serve"), p_ours, env_ours,
                    ours_serve_prepare)
        if not a.skip_ref:
            log("server cold start: eve 0.80.1 `eve start`")
            server_rows("serve", "ref", a.server_runs, ref_server_cmd("start"), p_ref, env_ref,
                        ref_start_prepare)
        if not a.no_dev:
            log("dev server cold start: our `eve dev`")
            server_rows("dev", "ours", a.server_runs, ours_server_cmd("dev"), p_ours, env_ours,
                        ours_dev_prepare, lambda: clean(p_ours, [".eve"]))
            if not a.skip_ref:
                log("dev server cold start: eve 0.80.1 `eve dev --no-ui`")
                server_rows("dev", "ref", a.server_runs, ref_server_cmd("dev", ["--no-ui"]),
                            p_ref, env_ref, lambda: None,
                            lambda: clean(p_ref, [".eve", ".output"]))
    finally:
        kill_tree(model)
        model_log.close()

    table = render(a, R)
    print(table)
    if a.skip_ref or a.no_dev:
        log("partial run (--skip-ref/--no-dev): bench/RESULTS.md left as it is")
    elif not a.no_write:
        write_results(a, table)


ROWS = [
    # key, label, kind, target ratio (None = no ratio target), absolute target for ours
    ("build_small_time", "build, scaffold agent: wall time (median)", "time", 100, None),
    ("build_small_rss", "build, scaffold agent: peak RSS", "mem", 10, None),
    ("build_small_nogit_time", "… the same, outside any git repository (as `eve init` leaves it)",
     "time", None, 0.010),
    ("build_large_time", "build, 200 tools + 50 skills: wall time (median)", "time", 100, None),
    ("build_large_rss", "build, 200 tools + 50 skills: peak RSS", "mem", 10, None),
    ("serve_ready", "serve cold start → healthy `/health` (median)", "time", 20, None),
    ("serve_rss", "serve RSS when healthy", "mem", 10, None),
    ("serve_rss_after", "serve RSS after the turns", "mem", 10, None),
    ("serve_turn_first", "first turn: POST → `session.waiting` (first session)", "time", None,
     0.008),
    ("serve_turn_next", "turn: POST → `session.waiting` (later sessions, median)", "time", None,
     0.005),
    ("serve_tool_span", "… of which the tool call (`actions.requested` → `action.result`)",
     "time", None, None),
    ("serve_text_first", "first turn answered with text, no tool call (first session)", "time",
     None, 0.008),
    ("serve_text_next", "turn answered with text, no tool call (later sessions, median)", "time",
     None, 0.005),
    ("dev_ready", "dev cold start → healthy `/health` (median)", "time", 20, None),
    ("dev_rss", "dev RSS when healthy", "mem", 10, None),
    ("dev_peak", "dev peak RSS during start", "mem", 10, None),
    ("dev_turn_first", "dev first turn: POST → `session.waiting`", "time", None, None),
]


def render(a, R):
    ours, ref = R["ours"], R["ref"]
    lines = [
        "| measurement | eve (Rust) | eve 0.80.1 (npm) | ratio | target | |",
        "|---|---:|---:|---:|---|---|",
    ]
    for key, label, kind, target, absolute in ROWS:
        if a.no_dev and key.startswith("dev_"):
            continue
        fmt = fmt_time if kind == "time" else fmt_mem
        o, r = ours.get(key), ref.get(key)
        cell_o = str(o) if isinstance(o, Exception) else fmt(o)
        cell_r = str(r) if isinstance(r, Exception) else fmt(r)
        if a.skip_ref and r is None:
            cell_r = "skipped"
        ratio, verdict, tgt = "–", "", ""
        num_o = o if isinstance(o, (int, float)) else None
        num_r = r if isinstance(r, (int, float)) else None
        if num_o and num_r:
            ratio_v = num_r / num_o
            ratio = f"{ratio_v:,.0f}×" if ratio_v >= 10 else f"{ratio_v:.1f}×"
        if target:
            tgt = f"≥ {target}× {'faster' if kind == 'time' else 'smaller'}"
            if num_o and num_r:
                verdict = "PASS" if num_r / num_o >= target else "FAIL"
            else:
                verdict = "n/a"
        elif absolute:
            tgt = f"< {fmt_time(absolute)} (ours)"
            verdict = ("PASS" if num_o < absolute else "FAIL") if num_o is not None else "n/a"
        lines.append(f"| {label} | {cell_o} | {cell_r} | {ratio} | {tgt} | {verdict} |")
    return "\n".join(lines)


def machine_info():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "mem": mem, "cpu": cpu,
            "kernel": platform.release(), "os": platform.platform()}


def fmt_load(avg):
    return " / ".join(f"{x:.2f}" for x in avg)


def describe_build(a):
    if a.eve_rev:
        return a.eve_rev
    rev = subprocess.run(["git", "-C", a.repo, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", a.repo, "status", "--porcelain", "--untracked-files=no",
                            "--", "Cargo.toml", "Cargo.lock", "eve-discover", "eve-compile",
                            "eve-runtime", "eve-cli", "templates"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        rev += " plus uncommitted changes in the work tree"
    return rev


def write_results(a, table):
    m = machine_info()
    rev = describe_build(a)
    node_v = subprocess.run([os.path.join(a.node_bin, "node"), "--version"], capture_output=True,
                            text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"""# Side-by-side: eve (Rust) vs eve 0.80.1 (npm)

Written by `bench/compare-eve` (see `bench/README.md`, "Reference setup"). Do not edit by hand.

- date: {now}
- machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem']} RAM, Linux {m['kernel']}
- load average (1/5/15 min) at start {fmt_load(a.load_start)}, at end {fmt_load(os.getloadavg())}
  (other work on the machine makes both sides slower; ours, being short, shows it more)
- eve (Rust): commit {rev}, binary `{os.path.relpath(a.eve, a.repo)}`
- eve 0.80.1 (npm): Node {node_v}, `eve build --skip-sandbox-prewarm`, `eve start`, `eve dev --no-ui`
- runs: builds median of {a.runs_ours} (ours) / {a.runs_ref} (eve 0.80.1) clean builds (`.eve/`,
  `.output/` removed) after one warm-up; servers median of {a.server_runs} cold starts, each
  followed by {a.turns} sessions one after the other whose turns call the tool, then
  {a.server_runs} more whose turns are answered with text (the message says "(no tools)")
- RSS: summed over the whole process tree, sampled from /proc (builds: every 5 ms in the
  warm-up run, which is not timed; servers: every 50 ms, plus a reading when healthy and one
  after the turns); a build's peak is never below the largest single process's kernel
  high-water mark (`VmHWM`, GNU time `%M` in the warm-up run); timed runs are the command
  alone, waited for without polling
- model: one scripted OpenAI-compatible server on loopback (streaming SSE, usage chunk): first
  call `get_weather`, then a text reply. A turn = POST `/eve/v1/session` with a message →
  the NDJSON stream shows `session.waiting`.

{table}

Ratios are eve 0.80.1 ÷ eve (Rust): how many times faster or smaller ours is.
"""
    path = os.path.join(a.repo, "bench", "RESULTS.md")
    with open(path, "w") as f:
        f.write(text)
    log(f"wrote {os.path.relpath(path, a.repo)}")


if __name__ == "__main__":
    main()
