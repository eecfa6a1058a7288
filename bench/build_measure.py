#!/usr/bin/env python3
"""Measures `eve build` on generated agents: median wall time and peak RSS. Used by bench/build.sh.

    bench/build_measure.py EVE_BIN WORK_DIR [--runs N] [--sizes 10:2,1000:200,10000:2000]

For each size TOOLS:SKILLS it generates WORK_DIR/tTOOLS-sSKILLS (bench/gen_agent.py; kept for
the next run), then:
- first builds: each run builds its own fresh copy of the project (no `.eve/` yet, as after a
  clone), so every artifact is written; N runs after one warm-up; median and best wall time,
  measured around the process (spawn to exit), and the median CPU time (user + system). These
  run for every size before anything is deleted;
- rebuilds after `rm -rf .eve`, with the time eve reports for itself (`eve build --json` →
  `elapsed_ms`: discover + compile + write, without process start and exit). Deleting and
  re-creating thousands of files right away is slower on ext4 than creating them once (its
  inode allocator skips recently freed inodes), so this column is the pessimistic one;
- rebuilds after one script tool is edited (as under `eve dev`): a new build that hard-links
  the files it shares with the previous one;
- unchanged rebuilds (the build already exists: discover + compile + hash, nothing written);
- peak RSS of a first build: GNU time's `%M` (maximum resident set size of the child) when
  `/usr/bin/time` is GNU time; otherwise `VmHWM` sampled from /proc while the build runs.
A process-start baseline (`eve --version`) is printed for scale. The target rows compare the
1,000 tools + 200 skills agent with the issue's budget: < 100 ms and < 50 MiB.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_agent  # noqa: E402

TARGET = {"tools": 1000, "skills": 200, "ms": 100.0, "mib": 50.0}


def gnu_time():
    try:
        r = subprocess.run(["/usr/bin/time", "-f", "%M", "true"], capture_output=True, text=True)
        return r.returncode == 0 and r.stderr.strip().isdigit()
    except OSError:
        return False


def timed(cmd, cwd):
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - start) * 1000
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{r.stderr.decode(errors='replace')}")
    return ms, r.stdout


def rss_kib_gnu(cmd, cwd):
    """(peak RSS in KiB, CPU ms) from GNU time."""
    with tempfile.NamedTemporaryFile("r") as out:
        r = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", out.name] + cmd, cwd=cwd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed in {cwd}")
        kib, user, system = out.read().strip().splitlines()[-1].split()
        return int(kib), (float(user) * 1000, float(system) * 1000)


def rss_kib_sampled(cmd, cwd):
    """VmHWM of the child, read from /proc every ~0.5 ms until it exits (a lower bound), and
    its CPU time from wait4."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    status = f"/proc/{p.pid}/status"
    while True:
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        pid, code, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.0005)
    if code != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}")
    return peak, (usage.ru_utime * 1000, usage.ru_stime * 1000)


def fmt_ms(ms):
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def fmt_cpu(ms):
    # GNU time counts CPU time in 10 ms steps.
    return "< 10 ms" if ms < 10 else fmt_ms(ms)


def prepare(project, tools, skills, runs):
    """Generates the agent (unless an identical one is there) and `runs + 4` fresh copies of it.
    Returns (copies, whether anything was deleted)."""
    deleted = False
    stamp = os.path.join(project, ".bench-stamp")
    with open(gen_agent.__file__, "rb") as f:
        want = f"{tools}:{skills}:{hashlib.sha256(f.read()).hexdigest()[:16]}"
    have = None
    if os.path.exists(stamp):
        with open(stamp) as f:
            have = f.read()
    if have != want:
        deleted = os.path.exists(project)
        gen_agent.generate(project, tools, skills)
        with open(stamp, "w") as f:
            f.write(want)
    state = os.path.join(project, ".eve")
    if os.path.exists(state):
        shutil.rmtree(state)
        deleted = True
    copies_root = project + ".copies"
    if os.path.exists(copies_root):
        shutil.rmtree(copies_root)
        deleted = True
    copies = []
    for k in range(runs + 4):
        dest = os.path.join(copies_root, str(k), os.path.basename(project))
        shutil.copytree(project, dest, symlinks=True)
        copies.append(dest)
    return copies, deleted


def first_builds(eve, copies, runs, rss):
    """Each run builds its own fresh copy: nothing is deleted while measuring."""
    build = [eve, "build"]
    timed(build, copies[0])  # warm-up (page cache, binary)
    first = [timed(build, c)[0] for c in copies[1:runs + 1]]
    peaks, cpu = [], []
    for c in copies[runs + 1:]:
        kib, ms = rss(build, c)
        peaks.append(kib)
        cpu.append(ms)
    return {
        "first_median": statistics.median(first),
        "first_best": min(first),
        "user_median": statistics.median(u for u, _ in cpu),
        "sys_median": statistics.median(s for _, s in cpu),
        "rss_mib": max(peaks) / 1024,
    }


def rebuilds(eve, project, runs):
    build = [eve, "build"]
    state = os.path.join(project, ".eve")
    again, inside = [], []
    for _ in range(runs):
        shutil.rmtree(state, ignore_errors=True)
        ms, out = timed(build + ["--json"], project)
        again.append(ms)
        inside.append(json.loads(out)["elapsed_ms"])
    unchanged = [timed(build, project)[0] for _ in range(runs)]
    # One script edited between builds (as `eve dev` sees it): a new build, sharing the other
    # files with the previous one.
    script = next(
        os.path.join(root, name)
        for root, _, names in sorted(os.walk(os.path.join(project, "agent", "tools")))
        for name in sorted(names)
        if name.endswith(".sh")
    )
    with open(script, encoding="utf-8") as f:
        original = f.read()
    edited = []
    try:
        for k in range(runs):
            with open(script, "w", encoding="utf-8") as f:
                f.write(original + f"# edit {k}\n")
            edited.append(timed(build, project)[0])
    finally:
        with open(script, "w", encoding="utf-8") as f:
            f.write(original)
    return {
        "again_median": statistics.median(again),
        "inside_median": statistics.median(inside),
        "unchanged_median": statistics.median(unchanged),
        "edited_median": statistics.median(edited),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("eve")
    p.add_argument("work")
    p.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", "10")))
    p.add_argument("--sizes", default=os.environ.get("SIZES", "10:2,1000:200,10000:2000"))
    a = p.parse_args()
    eve = os.path.abspath(a.eve)
    use_gnu = gnu_time()
    rss = rss_kib_gnu if use_gnu else rss_kib_sampled
    rss_how = "GNU time %M" if use_gnu else "VmHWM sampled from /proc (lower bound)"

    sizes = [tuple(int(x) for x in s.split(":")) for s in a.sizes.split(",")]
    os.makedirs(a.work, exist_ok=True)
    start_ms = statistics.median(timed([eve, "--version"], a.work)[0] for _ in range(a.runs))

    # Set-up first, for every size. ext4 skips inodes freed in the last 60 s (300 s more while
    # their inode table block is dirty) and pays for the search when it creates files, so after
    # any deletion: sync, then let them age past that window.
    plans, deleted = [], False
    for tools, skills in sizes:
        project = os.path.join(a.work, f"t{tools}-s{skills}")
        runs = a.runs if tools <= 1000 else max(3, a.runs // 2)
        copies, d = prepare(project, tools, skills, runs)
        deleted |= d
        plans.append((tools, skills, runs, project, copies))
    os.sync()
    if deleted:
        print("  letting deleted files age (65 s) …", file=sys.stderr, flush=True)
        time.sleep(65)
    results = {}
    for tools, skills, runs, project, copies in plans:
        print(f"  {tools} tools + {skills} skills: {runs} first builds …", file=sys.stderr,
              flush=True)
        results[(tools, skills)] = first_builds(eve, copies, runs, rss)
    # Then the runs that delete.
    rows = []
    for tools, skills, runs, project, copies in plans:
        print(f"  {tools} tools + {skills} skills: {runs} rebuilds …", file=sys.stderr, flush=True)
        m = results[(tools, skills)]
        m.update(rebuilds(eve, project, runs))
        rows.append((tools, skills, runs, m))
    for _, _, _, project, _ in plans:
        shutil.rmtree(project + ".copies", ignore_errors=True)

    print()
    print(f"eve build on generated agents ({eve})")
    print(f"  first build = fresh copy, no `.eve/`; after rm = `rm -rf .eve` then build "
          f"(eve-reported: `build --json` elapsed_ms); RSS = {rss_how}; "
          f"process start (`eve --version`) {fmt_ms(start_ms)}; "
          f"load {open('/proc/loadavg').read().split()[0]}")
    print()
    print("| agent | runs | first build (median) | best | CPU user / system | after rm (eve-reported) "
          "| one script edited | unchanged | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for tools, skills, runs, m in rows:
        print(f"| {tools:,} tools + {skills:,} skills | {runs} | {fmt_ms(m['first_median'])} | "
              f"{fmt_ms(m['first_best'])} | {fmt_cpu(m['user_median'])} / {fmt_cpu(m['sys_median'])} | "
              f"{fmt_ms(m['again_median'])} ({fmt_ms(m['inside_median'])}) | "
              f"{fmt_ms(m['edited_median'])} | {fmt_ms(m['unchanged_median'])} | "
              f"{m['rss_mib']:.1f} MiB |")
    target = [m for t, s, _, m in rows if (t, s) == (TARGET["tools"], TARGET["skills"])]
    failed = False
    if target:
        m = target[0]
        print()
        print(f"Target, {TARGET['tools']:,} tools + {TARGET['skills']} skills "
              "(ratio = measured ÷ budget; below 1 passes):")
        for what, value, budget, unit in [
            ("wall time (median first build)", m["first_median"], TARGET["ms"], "ms"),
            ("peak RSS", m["rss_mib"], TARGET["mib"], "MiB"),
        ]:
            ok = value < budget
            failed |= not ok
            print(f"  {what}: {value:.1f} {unit} / {budget:.0f} {unit} = {value / budget:.2f}  "
                  f"{'PASS' if ok else 'FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
