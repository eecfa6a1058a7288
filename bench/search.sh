#!/usr/bin/env bash
# The built-in `glob` and `grep` against `rg` itself (eve-runtime/examples/search_bench.rs): one
# generated workspace of 10,000 files in target/search-bench/ws (nested .gitignore files, hidden
# files, a .git folder, binary files), five queries each run RUNS times (default 10) in turn, the
# medians of the built-in (in process, as a turn calls it) and of an `rg` process (as eve's own
# tools start it), and their ratio (target: within 2x). rg is the Debian package
# scripts/setup-test-deps.sh unpacks into target/rg (or RG=path).
#
#   bench/search.sh                # release build
#   RUNS=30 bench/search.sh
#   PROFILE=dev bench/search.sh    # skip the release build (the walk's own code is then unoptimised)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PROFILE=${PROFILE:-release}
RUNS=${RUNS:-10}
RG=${RG:-target/rg/usr/bin/rg}
[ -x "$RG" ] || scripts/setup-test-deps.sh >/dev/null
WS=target/search-bench/ws
if [ ! -f "$WS/.generated" ]; then
    rm -rf "$WS"
    python3 - "$WS" <<'PY'
import os, random, sys
ws = sys.argv[1]
rng = random.Random(0x5eed)
words = ["alpha", "beta", "gamma", "delta", "needle", "Needle", "haystack", "fn", "let",
         "struct", "error", "Error", "log", "value", "é", "日本", "TODO", "x", "y", "z"]
dirs = ["", "src", "src/core", "src/core/deep", "src/util", "docs", "docs/guide", "build",
        "build/out", "target/debug", "node_modules/pkg", "logs", ".hidden", ".hidden/inner",
        "tests", "tests/fixtures", "vendor/lib", "a/b/c/d/e/f", "keep", "keep/sub"]
exts = ["rs", "md", "txt", "log", "json", "ts", "py"]
def write(rel, data):
    path = os.path.join(ws, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
write(".git/HEAD", "ref: refs/heads/main\n")
write(".gitignore", "*.log\n!keep.log\nbuild/\ntarget\n/node_modules\n")
write("src/.gitignore", "*.json\n!keep.json\ncore/deep/*.txt\n")
write("keep/.ignore", "sub/\n")
for i in range(10000):
    d = rng.choice(dirs)
    ext = rng.choice(exts)
    name = f"f{i}.{ext}" if rng.randrange(40) > 1 else f".dot{i}.{ext}"
    lines = []
    for _ in range(1 + rng.randrange(30)):
        line = [rng.choice(words) for _ in range(rng.randrange(12))]
        if rng.randrange(1000) == 0:
            line.append("fn spotted_7()")
        lines.append(" ".join(line))
    text = "\n".join(lines) + "\n"
    data = (b"\0\x01 needle\n" + text.encode()) if rng.randrange(100) == 0 else text
    write(os.path.join(d, name), data)
open(os.path.join(ws, ".generated"), "w").close()
PY
fi
cargo build -q --profile "$PROFILE" -p eve-runtime --example search_bench
dir=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
# Absolute: the bench starts rg with the workspace as its cwd.
exec "target/$dir/examples/search_bench" "$(realpath "$RG")" "$(realpath "$WS")" "$RUNS"
