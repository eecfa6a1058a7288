#!/usr/bin/env python3
"""Generates an eve project with N tools and M skills for `bench/build.sh`.

    bench/gen_agent.py OUT_DIR --tools N --skills M

Writes OUT_DIR/agent/ (OUT_DIR is replaced). The mix is what a large real agent holds:
- tools: half YAML tools (`run:` argv), half script tools (POSIX sh, executable, front matter in
  the leading comment block); every fourth tool lives in a nested folder (`tools/groupK/…`);
  each has a description and an input schema with three to five typed properties;
- skills: half flat (`skills/NAME.md`), half packaged (`skills/NAME/SKILL.md` plus a
  reference file), a dozen lines of body each;
- agent.yaml, instructions.md and two schedules.
The output is deterministic: the same arguments give byte-identical folders.
"""
import argparse
import os
import shutil
import stat

TYPES = ["string", "integer", "number", "boolean"]


def properties(i):
    n = 3 + i % 3
    props = []
    for k in range(n):
        t = TYPES[(i + k) % len(TYPES)]
        props.append((f"field_{k}", t, f"Field {k} of request {i}."))
    return props


def yaml_tool(i):
    lines = [
        f"description: Look up records of kind {i:05d} matching a query; returns them as JSON.",
        "effect: read",
        "timeout: 20s",
        "input:",
        "  type: object",
        "  properties:",
    ]
    for name, t, desc in properties(i):
        lines += [f"    {name}:", f"      type: {t}", f"      description: {desc}"]
    lines += ["  required: [field_0]", f"run: [python3, -c, \"print({i})\"]", ""]
    return "\n".join(lines)


def script_tool(i):
    lines = [
        "#!/bin/sh",
        "# ---",
        f"# description: Update records of kind {i:05d}; returns what changed.",
        "# effect: idempotent",
        "# input:",
        "#   type: object",
        "#   properties:",
    ]
    for name, t, desc in properties(i):
        lines += [f"#     {name}:", f"#       type: {t}", f"#       description: {desc}"]
    lines += [
        "#   required: [field_0]",
        "# ---",
        "input=$(cat)",
        f"echo '{{\"updated\": {i}}}'",
        "",
    ]
    return "\n".join(lines)


def skill(i):
    body = "\n".join(
        f"{k + 1}. Step {k + 1} of procedure {i:05d}: check the inputs, act, then report what changed."
        for k in range(12)
    )
    return (
        "---\n"
        f"description: Procedure {i:05d}. Load it when the user asks for workflow {i:05d}.\n"
        "---\n"
        f"# Procedure {i:05d}\n\n{body}\n"
    )


def write(path, text, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def generate(out, tools, skills):
    shutil.rmtree(out, ignore_errors=True)
    agent = os.path.join(out, "agent")
    write(os.path.join(agent, "agent.yaml"), "model: mock/echo\nlimits:\n  max_steps_per_turn: 20\n")
    write(
        os.path.join(agent, "instructions.md"),
        "You are a benchmark agent.\n\nUse the tools when asked; load a skill before a procedure.\n",
    )
    for i in range(tools):
        folder = os.path.join(agent, "tools")
        if i % 4 == 3:
            folder = os.path.join(folder, f"group{i % 16}")
        if i % 2 == 0:
            write(os.path.join(folder, f"lookup_{i:05d}.yaml"), yaml_tool(i))
        else:
            write(os.path.join(folder, f"update_{i:05d}.sh"), script_tool(i), executable=True)
    for i in range(skills):
        if i % 2 == 0:
            write(os.path.join(agent, "skills", f"procedure_{i:05d}.md"), skill(i))
        else:
            base = os.path.join(agent, "skills", f"procedure_{i:05d}")
            write(os.path.join(base, "SKILL.md"), skill(i))
            write(os.path.join(base, "reference", "fields.md"), f"Fields of procedure {i:05d}.\n" * 8)
    write(
        os.path.join(agent, "schedules", "daily.md"),
        "---\ncron: \"0 9 * * 1-5\"\ntimezone: Europe/Paris\n---\nSummarise yesterday.\n",
    )
    write(
        os.path.join(agent, "schedules", "hourly.md"),
        "---\ncron: \"15 * * * *\"\noverlap: skip\n---\nCheck the queue.\n",
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--tools", type=int, required=True)
    p.add_argument("--skills", type=int, default=0)
    a = p.parse_args()
    generate(a.out, a.tools, a.skills)


if __name__ == "__main__":
    main()
