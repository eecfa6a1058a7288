#!/usr/bin/env python3
"""A clean `eve build` of the scaffold (`eve init`, then `eve build` with no `.eve/` yet), timed
for a baseline binary and this checkout's in the same run. Used by bench/build.sh.

    bench/clean_build.py CHECKOUT_EVE WORK_DIR [--base BASE_EVE] [--runs N]

The scaffold is written once per binary (`eve init`), then copied fresh for every run, so each
build finds no `.eve/` (as after `eve init` or a clone): it compiles, writes the build and
records the project's first release. Two places: inside this repository's git work tree (the
release records a source revision: `git rev-parse` and `git status` run, as for most real
projects and in `bench/compare-eve`) and outside any git repository (a temporary folder). Runs
alternate between the binaries so both see the same load; the wall time is measured around the
process (spawn to exit). Prints the medians, the best runs and the ratio checkout ÷ baseline,
against the target (≤ 10 ms); exits 1 when the checkout misses it in either place.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_MS = 10.0


def run(cmd, cwd):
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - start) * 1000
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{r.stderr.decode(errors='replace')}")
    return ms


def scaffold(eve, root, name):
    """`eve init` into ROOT/NAME.template (kept as the template of every copy)."""
    template = os.path.join(root, f"{name}.template")
    shutil.rmtree(template, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    run([eve, "init", os.path.basename(template)], root)
    return template


def measure(bins, root, runs):
    """{label: [ms, …]} of clean builds of fresh copies, the binaries taking turns."""
    templates = {label: scaffold(eve, root, label) for label, eve in bins}
    copies = os.path.join(root, "copies")
    shutil.rmtree(copies, ignore_errors=True)
    times = {label: [] for label, _ in bins}
    for k in range(runs + 1):
        for label, eve in bins:
            dest = os.path.join(copies, f"{label}-{k}", "demo")
            shutil.copytree(templates[label], dest, symlinks=True)
            ms = run([eve, "build"], dest)
            if k > 0:  # the first round warms the page cache and the binaries
                times[label].append(ms)
    shutil.rmtree(copies, ignore_errors=True)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("eve")
    p.add_argument("work")
    p.add_argument("--base")
    p.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", "20")))
    a = p.parse_args()
    bins = []
    if a.base:
        bins.append(("base", os.path.abspath(a.base)))
    bins.append(("checkout", os.path.abspath(a.eve)))
    places = [("in a git work tree", os.path.abspath(os.path.join(a.work, "scaffold")))]
    outside = tempfile.mkdtemp(prefix="eve-clean-build-")
    places.append(("outside git", outside))
    load = open("/proc/loadavg").read().split()[0]
    rows = []
    try:
        for where, root in places:
            print(f"  clean builds of the scaffold, {where}: {a.runs} per binary …",
                  file=sys.stderr, flush=True)
            rows.append((where, measure(bins, root, a.runs)))
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    print()
    print(f"Clean `eve build` of the scaffold (`eve init`, no `.eve/`), median of {a.runs} "
          f"(best), load {load} → {open('/proc/loadavg').read().split()[0]}")
    for label, eve in bins:
        print(f"  {label}: {eve}")
    print()
    head = "| where | " + " | ".join(label for label, _ in bins)
    head += " | checkout ÷ base | target |" if a.base else " | target |"
    print(head)
    print("|---" * (len(bins) + (3 if a.base else 2)) + "|")
    failed = False
    for where, times in rows:
        cells = [f"{statistics.median(times[label]):.1f} ms ({min(times[label]):.1f})"
                 for label, _ in bins]
        mine = statistics.median(times["checkout"])
        ok = mine <= TARGET_MS
        failed |= not ok
        line = f"| {where} | " + " | ".join(cells)
        if a.base:
            line += f" | {mine / statistics.median(times['base']):.2f}"
        line += f" | ≤ {TARGET_MS:.0f} ms: {'PASS' if ok else 'FAIL'} |"
        print(line)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
