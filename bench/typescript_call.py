"""One tool call's latency, served: a TypeScript `defineTool` module run by eve (Rust) in its box,
the same tool as a Python script tool, and eve 0.80.1 running the same module in its own process.

Each side is served (`eve serve`; eve 0.80.1's `eve start`) against the scripted
OpenAI-compatible model server of bench/compare (a turn that calls `get_weather`), and each call is
timed by the server's own event clock, `actions.requested` to `action.result`, so HTTP and the model
are left out. Run by bench/typescript.sh: usage
    typescript_call.py EVE_BIN NODE_BIN_DIR ZOD_DIR REF_NODE_MODULES SCRATCH [TURNS]
Prints one line per side; REF_NODE_MODULES empty skips eve 0.80.1.
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare"))
import agents  # noqa: E402
import harness  # noqa: E402

PY_WEATHER = """# ---
# description: Get the current weather for a city.
# input:
#   type: object
#   properties:
#     city:
#       type: string
#       description: City name, e.g. Paris
#   required: [city]
# ---
import json, sys
city = json.load(sys.stdin)["city"]
print(json.dumps({"city": city, "condition": "Sunny", "temperatureF": 72}))
"""


def main():
    eve, node_bin, zod, ref_modules, scratch = sys.argv[1:6]
    turns = int(sys.argv[6]) if len(sys.argv) > 6 else 8
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    port_file = os.path.join(scratch, "model.port")
    model_log = open(os.path.join(scratch, "model.log"), "ab")
    here = os.path.dirname(os.path.abspath(__file__))
    model = subprocess.Popen([sys.executable, os.path.join(here, "compare", "model_server.py"),
                              "--port", "0", "--port-file", port_file],
                             stdout=model_log, stderr=model_log, start_new_session=True)
    try:
        for _ in range(500):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.01)
        base_url = f"http://127.0.0.1:{int(open(port_file).read())}/v1"
        path = node_bin + os.pathsep + os.environ.get("PATH", "")
        env_ours = dict(os.environ, EVE_BASE_URL=base_url, EVE_API_KEY="bench", NO_COLOR="1",
                        PATH=path)
        env_ours.pop("EVE_MODEL", None)
        sides = []
        for kind in ("py", "ts"):
            p = os.path.join(scratch, f"ours-{kind}")
            agents.write_ours(p, "small")
            os.remove(os.path.join(p, "agent", "tools", "get_weather.sh"))
            if kind == "ts":
                agents._write(os.path.join(p, "agent", "tools", "get_weather.ts"),
                              agents.REF_WEATHER)
                shutil.copytree(zod, os.path.join(p, "node_modules", "zod"))
            else:
                agents._write(os.path.join(p, "agent", "tools", "get_weather.py"), PY_WEATHER)
            subprocess.run([eve, "build"], cwd=p, env=env_ours, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            label = {"py": "eve (Rust), Python script tool, in the box",
                     "ts": "eve (Rust), TypeScript module tool, in the box"}[kind]
            sides.append((label, p, env_ours,
                          lambda port: [eve, "serve", "--host", "127.0.0.1", "--port", str(port)]))
        if ref_modules:
            p = os.path.join(scratch, "ref")
            os.makedirs(p)
            agents.write_ref(p, "small", {"eve": "0.80.1", "zod": "4.5.4",
                                          "@ai-sdk/openai-compatible": "3.0.92"})
            os.symlink(ref_modules, os.path.join(p, "node_modules"))
            env_ref = dict(os.environ, PATH=path, BENCH_MODEL_BASE_URL=base_url,
                           EVE_TELEMETRY_DISABLED="1", NO_COLOR="1", CI="1")
            ref_eve = [os.path.join(node_bin, "node"), "node_modules/eve/bin/eve.js"]
            with open(os.path.join(scratch, "ref-build.log"), "ab") as log:
                built = subprocess.run(ref_eve + ["build", "--skip-sandbox-prewarm"], cwd=p,
                                       env=env_ref, stdout=log, stderr=log)
            if built.returncode != 0:
                tail = open(os.path.join(scratch, "ref-build.log")).read().strip()[-300:]
                print(f"eve 0.80.1: its build failed, no figure: {tail}")
            else:
                sides.append(("eve 0.80.1, the same module, in its own process", p, env_ref,
                              lambda port: ref_eve + ["start", "--host", "127.0.0.1", "--port",
                                                      str(port)]))
        for label, p, env, cmd in sides:
            port = harness.free_port()
            r = harness.serve_once(cmd(port), p, env, port, os.path.join(scratch, "serve.log"),
                                   turns=turns)
            if "turn_error" in r:
                print(f"{label}: failed: {r['turn_error']}")
                continue
            spans = [s for s in r["tool_spans"][1:] if s is not None]  # the first one is cold
            print(f"{label}: tool call {harness.median(spans) * 1000:.0f} ms "
                  f"(median of {len(spans)}, the cold first {r['tool_spans'][0] * 1000:.0f} ms); "
                  f"whole turn {harness.median(r['turn_next']) * 1000:.0f} ms")
    finally:
        harness.kill_tree(model)


if __name__ == "__main__":
    main()
