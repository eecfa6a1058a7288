"""Generates equivalent agents for eve (Rust) and eve 0.80.1 (npm).

Both sides get byte-identical instructions and skills. Tools are translated: our side uses
script tools (POSIX sh, front matter in the leading comment block), the npm side uses
TypeScript `defineTool` modules with the same description and an equivalent zod schema.

Sizes: "small" = the scaffold-sized agent (instructions, one tool, one skill);
       "large" = 200 tools + 50 skills.
"""
import json
import os
import shutil
import stat

INSTRUCTIONS = """You are a concise assistant used by a benchmark.

Answer briefly and plainly. When the user asks about the weather, call the `get_weather` tool
instead of guessing. When asked for a poem, load the `haiku` skill first and follow it.
"""

HAIKU = """---
description: How to write a haiku. Load it before writing any poem.
---
Write exactly three lines of 5, 7 and 5 syllables. Use one concrete image from nature and
no rhyme. Give no title and no explanation.
"""

WEATHER_DESCRIPTION = "Get the current weather for a city."

MODES = ["fast", "full", "none"]


def skill_text(i):
    body = "\n".join(
        f"{k + 1}. Step {k + 1} of procedure {i:03d}: check the inputs, act, then report what changed."
        for k in range(12)
    )
    return (
        "---\n"
        f"description: Procedure {i:03d}. Load it when the user asks for workflow {i:03d}.\n"
        "---\n"
        f"# Procedure {i:03d}\n\n{body}\n"
    )


def tool_specs(size):
    """[(name, description, kind)] where kind is 'weather' or 'generic'."""
    specs = [("get_weather", WEATHER_DESCRIPTION, "weather")]
    if size == "large":
        for i in range(1, 200):
            specs.append((f"tool_{i:03d}",
                          f"Look up records of kind {i:03d} matching a query; returns them as JSON.",
                          "generic"))
    return specs


def skill_specs(size):
    specs = [("haiku", HAIKU)]
    if size == "large":
        for i in range(1, 50):
            specs.append((f"skill_{i:03d}", skill_text(i)))
    return specs


def _write(path, text, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)


def _common(agent_dir, size):
    _write(os.path.join(agent_dir, "instructions.md"), INSTRUCTIONS)
    for name, text in skill_specs(size):
        _write(os.path.join(agent_dir, "skills", f"{name}.md"), text)


# ---------------------------------------------------------------- ours (script tools)

# POSIX sh: the cheapest process to start, so the turn measures the framework and not an
# interpreter's start-up (python3 adds ~15 ms, ~120 ms through a pyenv shim).
OURS_WEATHER = """#!/bin/sh
# ---
# description: Get the current weather for a city.
# effect: read
# timeout: 10s
# input:
#   type: object
#   properties:
#     city:
#       type: string
#       description: City name, e.g. Paris
#   required: [city]
# ---
input=
while IFS= read -r line || [ -n "$line" ]; do input="$input$line"; done
city=${input#*\\"city\\"*:*\\"}
city=${city%%\\"*}
printf '{"city":"%s","condition":"Sunny","temperatureF":72}\\n' "$city"
"""

OURS_GENERIC = """#!/bin/sh
# ---
# description: {description}
# effect: read
# input:
#   type: object
#   properties:
#     query:
#       type: string
#       description: What to look for.
#     limit:
#       type: integer
#       description: At most this many records.
#     mode:
#       type: string
#       enum: [fast, full, none]
#   required: [query]
# ---
printf '{{"tool":"{name}","input":%s}}\\n' "$(cat)"
"""


def write_ours(project_dir, size):
    agent_dir = os.path.join(project_dir, "agent")
    shutil.rmtree(agent_dir, ignore_errors=True)
    _common(agent_dir, size)
    _write(os.path.join(agent_dir, "agent.yaml"),
           "# The scripted OpenAI-compatible server; its URL comes from EVE_BASE_URL.\n"
           "model: openai-compatible/stub-model\n"
           "context_window: 64000\n")
    mode = stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    for name, description, kind in tool_specs(size):
        text = OURS_WEATHER if kind == "weather" else OURS_GENERIC.format(name=name,
                                                                          description=description)
        _write(os.path.join(agent_dir, "tools", f"{name}.sh"), text, mode)


# ---------------------------------------------------------------- eve 0.80.1 (npm)

REF_AGENT_TS = """import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { defineAgent } from "eve";

// The scripted OpenAI-compatible server (BENCH_MODEL_BASE_URL is read at run time).
const stub = createOpenAICompatible({
  name: "stub",
  baseURL: process.env.BENCH_MODEL_BASE_URL ?? "http://127.0.0.1:9/v1",
  apiKey: "bench",
  includeUsage: true,
});

export default defineAgent({
  model: stub("stub-model"),
  modelContextWindowTokens: 64_000,
});
"""

# The scaffold's channel asks for Vercel OIDC / localDev / a placeholder; `eve start` is a
# production server, so the benchmark opens the session API explicitly on loopback.
REF_CHANNEL_TS = """import { eveChannel } from "eve/channels/eve";
import { none } from "eve/channels/auth";

export default eveChannel({
  auth: [none()],
});
"""

REF_WEATHER = """import { defineTool } from "eve/tools";
import { z } from "zod";

export default defineTool({
  description: "Get the current weather for a city.",
  inputSchema: z.object({
    city: z.string().describe("City name, e.g. Paris"),
  }),
  async execute(input) {
    return { city: input.city, condition: "Sunny", temperatureF: 72 };
  },
});
"""

REF_GENERIC = """import {{ defineTool }} from "eve/tools";
import {{ z }} from "zod";

export default defineTool({{
  description: {description},
  inputSchema: z.object({{
    query: z.string().describe("What to look for."),
    limit: z.number().int().describe("At most this many records.").optional(),
    mode: z.enum(["fast", "full", "none"]).optional(),
  }}),
  async execute(input) {{
    return {{ tool: "{name}", input }};
  }},
}});
"""

REF_TSCONFIG = """{
  "compilerOptions": {
    "target": "ES2022",
    "module": "esnext",
    "moduleResolution": "bundler",
    "types": ["node", "eve/workflow-modules"],
    "strict": true,
    "esModuleInterop": true,
    "skipLibCheck": true,
    "noEmit": true
  },
  "include": ["agent/**/*.ts"]
}
"""


def ref_package_json(name, deps):
    return json.dumps({
        "name": name,
        "version": "0.0.0",
        "private": True,
        "type": "module",
        "imports": {"#*": "./agent/*"},
        "scripts": {"build": "eve build", "dev": "eve dev", "start": "eve start"},
        "dependencies": deps,
    }, indent=2) + "\n"


def write_ref(project_dir, size, deps):
    agent_dir = os.path.join(project_dir, "agent")
    shutil.rmtree(agent_dir, ignore_errors=True)
    _common(agent_dir, size)
    _write(os.path.join(project_dir, "package.json"),
           ref_package_json(os.path.basename(project_dir), deps))
    _write(os.path.join(project_dir, "tsconfig.json"), REF_TSCONFIG)
    _write(os.path.join(agent_dir, "agent.ts"), REF_AGENT_TS)
    _write(os.path.join(agent_dir, "channels", "eve.ts"), REF_CHANNEL_TS)
    for name, description, kind in tool_specs(size):
        text = REF_WEATHER if kind == "weather" else REF_GENERIC.format(
            name=name, description=json.dumps(description))
        _write(os.path.join(agent_dir, "tools", f"{name}.ts"), text)
