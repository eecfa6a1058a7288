"""Reads the spans eve sent to a running Arize Phoenix back from its REST API and checks them
(run by scripts/test-otel.sh): the span names of a turn with a tool call, an approval and a
subagent, their parent/child links, the GenAI attributes, the tool's TRACEPARENT, the caller's
trace joined by `eve serve`, the local trace store's copy, and that the planted secret appears
nowhere. Exits non-zero with what failed."""

import argparse
import json
import sys
import time
import urllib.request


def flatten(value, prefix=""):
    """Phoenix may nest dotted attribute names; flatten them back."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def fetch_spans(base):
    spans, cursor = [], None
    while True:
        url = f"{base}/v1/projects/default/spans?limit=1000"
        if cursor:
            url += f"&cursor={cursor}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:  # no project yet: nothing arrived
                return []
            raise
        spans.extend(body.get("data", []))
        cursor = body.get("next_cursor")
        if not cursor:
            return spans


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--phoenix", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--agent", required=True)
    p.add_argument("--local-trace", required=True)
    p.add_argument("--local-text", required=True)
    p.add_argument("--caller-trace", required=True)
    p.add_argument("--caller-span", required=True)
    p.add_argument("--trace", required=True, help="the trace of the `eve run` turn")
    p.add_argument("--resumed-trace", required=True, help="the trace of the turn three processes ran")
    a = p.parse_args()
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    want = [
        f"invoke_agent {a.agent}",
        "invoke_agent helper",
        "agent.step",
        "execute_tool lookup",
        "execute_tool refund",
        "execute_tool helper",
        "await_approval refund",
    ]
    deadline = time.time() + 60
    while True:
        spans = [s for s in fetch_spans(a.phoenix)
                 if s["context"]["trace_id"] in (a.trace, a.caller_trace, a.resumed_trace)]
        names = {s["name"] for s in spans}
        joined = [s for s in spans if s["context"]["trace_id"] == a.caller_trace]
        if (all(n in names for n in want) and any(n.startswith("chat ") for n in names)
                and any(s["name"].startswith("invoke_agent") for s in joined)
                and any(s["context"]["trace_id"] == a.resumed_trace
                        and s["name"] == f"invoke_agent {a.agent}" for s in spans)) \
                or time.time() > deadline:
            break
        time.sleep(1)
    print(f"{len(spans)} spans in Phoenix")
    for n in want:
        check(n in names, f"span {n!r} arrived")
    by_id = {s["context"]["span_id"]: s for s in spans}
    for s in spans:
        s["attrs"] = flatten(s.get("attributes") or {})

    def one(name):
        found = [s for s in spans if s["name"] == name and s["context"]["trace_id"] == a.trace]
        return found[0] if found else None

    root = next((s for s in spans if s["name"] == f"invoke_agent {a.agent}"
                 and s["context"]["trace_id"] == a.trace), None)
    if root is None:
        print("\n".join(sorted(names)))
        sys.exit(f"{len(failures)} checks failed")
    trace = root["context"]["trace_id"]
    tree = [s for s in spans if s["context"]["trace_id"] == trace]
    check(root["parent_id"] is None, "the turn's span is the trace's root")
    steps = [s for s in tree if s["name"] == "agent.step"
             and s["attrs"].get("gen_ai.agent.name") == a.agent]
    check(len(steps) >= 4, f"the turn has its steps ({len(steps)})")
    check(all(s["parent_id"] == root["context"]["span_id"] for s in steps),
          "every step is a child of the turn")
    step_ids = {s["context"]["span_id"] for s in steps}
    chats = [s for s in tree if s["name"].startswith("chat ")]
    check(len(chats) >= 4, f"model calls traced ({len(chats)})")
    check(all(c["parent_id"] in step_ids for c in chats if c["attrs"].get("gen_ai.agent.name") == a.agent),
          "every model call of the turn is a child of a step")
    for tool in ("lookup", "refund", "helper"):
        s = one(f"execute_tool {tool}")
        check(s is not None and s["parent_id"] in step_ids, f"execute_tool {tool} is a child of a step")
        if s:
            check(s["attrs"].get("gen_ai.tool.name") == tool
                  and s["attrs"].get("gen_ai.operation.name") == "execute_tool"
                  and bool(s["attrs"].get("gen_ai.tool.call.id")),
                  f"execute_tool {tool} carries gen_ai.tool.name, .call.id, operation")
            check(s["attrs"].get("eve.tool.outcome") == "completed", f"{tool} completed")
    approval = one("await_approval refund")
    check(approval is not None and approval["attrs"].get("eve.approval.outcome") == "approved",
          "the approval wait is traced, approved")
    check(approval is not None and approval["parent_id"] in step_ids, "the approval wait is in a step")
    chat = chats[0] if chats else {"attrs": {}}
    attrs = chat["attrs"]
    check(attrs.get("gen_ai.operation.name") == "chat", "chat: gen_ai.operation.name")
    check(attrs.get("gen_ai.provider.name") == "mock", "chat: gen_ai.provider.name")
    check(bool(attrs.get("gen_ai.request.model")), "chat: gen_ai.request.model")
    check(isinstance(attrs.get("gen_ai.usage.input_tokens"), int)
          and attrs["gen_ai.usage.input_tokens"] > 0, "chat: gen_ai.usage.input_tokens")
    check(isinstance(attrs.get("gen_ai.usage.output_tokens"), int), "chat: gen_ai.usage.output_tokens")
    check(bool(attrs.get("gen_ai.response.finish_reasons")), "chat: gen_ai.response.finish_reasons")
    # The subagent's turn runs beneath the parent's call, in the same trace.
    helper_call = one("execute_tool helper")
    helper_turn = one("invoke_agent helper")
    check(helper_turn is not None and helper_call is not None
          and helper_turn["parent_id"] == helper_call["context"]["span_id"]
          and helper_turn["context"]["trace_id"] == trace,
          "the subagent's turn is a child of the call that started it")
    check(helper_turn is not None and helper_turn["attrs"].get("eve.parent_session.id")
          == root["attrs"].get("eve.session.id"), "the subagent's turn names its parent session")
    # The tool's process got its call's span as TRACEPARENT (it printed it; content is on).
    lookup = one("execute_tool lookup")
    result = (lookup or {"attrs": {}})["attrs"].get("gen_ai.tool.call.result", "")
    check(f"00-{trace}-{(lookup or {'context': {'span_id': '?'}})['context']['span_id']}-01" in result,
          "the tool's TRACEPARENT is its call's span")
    # Content is captured (opted in) and redacted.
    dump = json.dumps(spans)
    check(a.secret not in dump, "the planted secret is in no span")
    check("${OTEL_TEST_SECRET}" in dump, "content was captured, the secret redacted")
    check(root["attrs"].get("gen_ai.conversation.id", "").startswith("ses_")
          or bool(root["attrs"].get("gen_ai.conversation.id")), "the session is gen_ai.conversation.id")
    # The caller's trace, joined by `eve serve`.
    joined = [s for s in spans if s["context"]["trace_id"] == a.caller_trace]
    turn = [s for s in joined if s["name"] == f"invoke_agent {a.agent}"]
    check(len(turn) == 1 and turn[0]["parent_id"] == a.caller_span,
          "a turn started with a traceparent is a child of the caller's span")
    check(any(s["name"].startswith("chat ") for s in joined), "its model call is in the caller's trace")
    # A turn three processes ran is one trace: one turn span, the steps of all three beneath it.
    resumed = [s for s in spans if s["context"]["trace_id"] == a.resumed_trace
               and s["attrs"].get("gen_ai.agent.name") == a.agent]
    turns = [s for s in resumed if s["name"] == f"invoke_agent {a.agent}"]
    check(len(turns) == 1 and turns[0]["parent_id"] is None,
          f"the resumed turn has one span, the root ({len(turns)})")
    if turns:
        rsteps = [s for s in resumed if s["name"] == "agent.step"]
        check(len(rsteps) >= 4 and all(s["parent_id"] == turns[0]["context"]["span_id"] for s in rsteps),
              f"the steps of every process are the turn's children ({len(rsteps)})")
        rids = {s["context"]["span_id"] for s in rsteps}
        refund = [s for s in resumed if s["name"] == "execute_tool refund"]
        check(len(refund) == 1 and refund[0]["parent_id"] in rids,
              "the call run after the restart is in the resumed trace, under its step")
    # The local trace store holds the same trace.
    local = json.load(open(a.local_trace))
    check({s["name"] for s in local} >= set(want[:1] + want[2:]) and all(s["traceId"] == trace for s in local),
          "the local trace store has the turn's trace")
    check(a.secret not in json.dumps(local), "the planted secret is not in the local trace store")
    text = open(a.local_text).read()
    check(f"invoke_agent {a.agent}" in text and "  agent.step" in text, "eve traces show prints the tree")
    if failures:
        sys.exit(f"{len(failures)} checks failed")
    print(f"all checks passed ({len(spans)} spans)")


if __name__ == "__main__":
    main()
