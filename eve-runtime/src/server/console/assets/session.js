// One session (#/s/<id>): the conversation and the raw event timeline, both live. The session's
// event stream is read as Server-Sent Events over fetch (so a bearer token can be sent); every
// event is rendered into the chat and the timeline, and the view keeps its cursor (the last event
// index seen): when the stream ends (the session came to rest) or breaks, it asks again from
// cursor + 1, and a reloaded page reads from 0. Events are keyed by index, so nothing is shown
// twice and a gap would be visible in the timeline's numbering. Tool calls are cards; a call that
// needs approval has Approve and Deny, and a self-change proposal its delta and diff. Beneath the
// events, the Trace pane shows each turn as a waterfall of its spans (waterfall.js).

import {
  agentInfo, api, askToken, ago, badge, deltaView, el, fill, headers, json, main, ms, plural, readSse, say, sessionLink,
} from "./lib.js";
import { traceView } from "./waterfall.js";

export function sessionView(id) {
  const abort = new AbortController();
  let cursor = -1; // last event index rendered
  let stopped = false;
  let detailTimer = null;
  const cards = new Map(); // callId -> card parts
  const requests = new Map(); // requestId -> approval box
  let current = null; // {bubble, text, reasoning, reasoningText} of the streaming step
  let sessionStatus = "idle";

  const title = el("h1", { class: "mono", text: id });
  const state = el("span", { id: "session-status" }, badge("…"));
  const meta = el("div", { class: "meta muted", id: "session-meta" });
  const control = (name, label) => el("button", {
    type: "button", id: name, onclick: async (e) => {
      e.target.disabled = true;
      try {
        const r = await api("/eve/v1/session/" + encodeURIComponent(id) + "/" + name,
          { method: "POST", body: {} });
        say(name + ": " + r.status);
      } catch (err) {
        say(name + " refused: " + err.message);
      } finally {
        e.target.disabled = false;
      }
    },
  }, label);
  const chat = el("ol", { class: "chat", id: "chat", "aria-label": "Conversation", "aria-live": "polite" });
  const timeline = el("ol", { class: "timeline", id: "timeline", "aria-label": "Event timeline" });
  const follow = el("input", { type: "checkbox", id: "follow", checked: true });
  const trace = traceView(id);
  const box = el("textarea", {
    id: "message", rows: 2, placeholder: "Message the agent (Enter sends, Shift+Enter new line)",
    "aria-label": "Message",
  });
  const send = el("button", { type: "submit", class: "primary", id: "send" }, "Send");
  const form = el("form", {
    class: "composer", onsubmit: async (e) => {
      e.preventDefault();
      const text = box.value;
      if (!text.trim()) return;
      send.disabled = true;
      try {
        await api("/eve/v1/session/" + encodeURIComponent(id), { method: "POST", body: { message: text } });
        box.value = "";
      } catch (err) {
        say("not sent: " + err.message);
      } finally {
        send.disabled = false;
        box.focus();
      }
    },
  }, box, send);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });

  fill(main,
    el("section", { class: "bar" }, el("a", { href: "#/", text: "← Sessions" }), title, state,
      el("span", { class: "spacer" }),
      control("cancel", "Cancel"), control("compact", "Compact"), control("clear", "Clear")),
    meta,
    el("div", { class: "split" },
      el("section", { class: "pane chat-pane", "aria-label": "Chat" }, chat, form),
      el("div", { class: "side" },
        el("section", { class: "pane timeline-pane", "aria-label": "Events" },
          el("div", { class: "bar small" }, el("h2", { text: "Events" }),
            el("label", {}, follow, " follow")),
          timeline),
        trace.node)));

  function scroll(list) {
    if (list === timeline && !follow.checked) return;
    list.scrollTop = list.scrollHeight;
  }

  function addChat(node) {
    chat.append(node);
    scroll(chat);
    return node;
  }

  function assistantBubble() {
    if (!current) {
      const text = el("div", { class: "text" });
      const bubble = el("li", { class: "msg assistant" }, el("span", { class: "who", text: "agent" }), text);
      current = { bubble, text, reasoning: null, reasoningText: null };
      addChat(bubble);
    }
    return current;
  }

  function card(callId, toolName, input, kind) {
    if (cards.has(callId)) return cards.get(callId);
    const status = el("span", { class: "badge badge-running", text: "requested" });
    const info = el("span", { class: "muted card-info" });
    const output = el("pre", { class: "output", hidden: true });
    const approval = el("div", { class: "approval" });
    const node = el("li", { class: "card", dataset: { callId, tool: toolName } },
      el("div", { class: "card-head" }, el("strong", { text: kind === "load-skill" ? "skill " + toolName : toolName }), status, info),
      el("details", { class: "card-input" }, el("summary", { text: "input" }), el("pre", { text: json(input) })),
      approval, output);
    const parts = { node, status, info, output, approval };
    cards.set(callId, parts);
    current = null;
    addChat(node);
    return parts;
  }

  function setStatus(s) {
    sessionStatus = s;
    fill(state, badge(s));
  }

  // A self-change proposal: summary, rationale, checks, the capability delta (widening
  // changes marked) and the unified diff.
  function proposalView(p) {
    const deltaList = deltaView((p.delta && p.delta.changes) || []);
    const evals = p.evals
      ? (p.evals.passed || 0) + " passed, " + (p.evals.failed || 0) + " failed" + (p.evals.tags && p.evals.tags.length ? " (tags: " + p.evals.tags.join(", ") + ")" : "")
      : "no gate configured";
    const diag = p.diagnostics || {};
    const diff = el("pre", { class: "diff" }, String(p.diff || "").split("\n").map((line) =>
      el("span", { class: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "" }, line + "\n")));
    return el("div", { class: "proposal" + (p.widens ? " widens" : "") },
      el("p", {}, el("strong", { text: p.summary || "" })),
      el("p", { class: "muted", text: p.rationale || "" }),
      el("p", { text: "Build " + (p.build || "?") + ": " + (diag.errors || 0) + " errors, " + (diag.warnings || 0) + " warnings. Evals: " + evals + "." }),
      el("p", { class: p.widens ? "widens-note" : "", text: p.widens ? "Capability delta: this change WIDENS what the agent may do." : "Capability delta:" }),
      deltaList,
      el("details", { class: "diff-box", open: true }, el("summary", { text: "diff" + (p.diffTruncated ? " (cut)" : "") }), diff));
  }

  function approvalBox(req) {
    const action = req.action || {};
    const c = card(action.callId || req.requestId, action.toolName || "tool", action.input);
    const reason = el("input", {
      type: "text", class: "reason", placeholder: "reason (sent to the model)",
      "aria-label": "Reason for " + (action.toolName || "the call"),
    });
    const answer = async (approve) => {
      for (const b of c.approval.querySelectorAll("button")) b.disabled = true;
      const response = { requestId: req.requestId, optionId: approve ? "approve" : "cancel" };
      if (reason.value.trim()) response.text = reason.value.trim();
      try {
        await api("/eve/v1/session/" + encodeURIComponent(id), { method: "POST", body: { inputResponses: [response] } });
      } catch (err) {
        say("answer refused: " + err.message);
        for (const b of c.approval.querySelectorAll("button")) b.disabled = false;
      }
    };
    c.status.className = "badge badge-waiting";
    c.status.textContent = "needs approval";
    fill(c.approval, 
      el("p", { text: req.prompt || "Run this call?" }),
      req.kind === "change-approval" ? proposalView(action.proposal || {}) : null,
      el("div", { class: "row" },
        el("button", { type: "button", class: "approve", onclick: () => answer(true) }, "Approve"),
        el("button", { type: "button", class: "deny", onclick: () => answer(false) }, "Deny"),
        reason));
    requests.set(req.requestId, c);
    c.approval.querySelector(".approve").focus({ preventScroll: true });
  }

  function onEvent(index, ev) {
    if (index === null || index <= cursor) return; // already shown
    cursor = index;
    const d = ev.data || {};
    const at = (ev.meta && ev.meta.at) || "";
    const item = el("li", { dataset: { index: String(index), type: ev.type } },
      el("details", {},
        el("summary", {}, el("span", { class: "idx", text: String(index) }), " ",
          el("span", { class: "etype", text: ev.type }), " ",
          el("time", { class: "muted", datetime: at, text: at.slice(11, 23) })),
        el("pre", { text: json(d) })));
    timeline.append(item);
    scroll(timeline);
    switch (ev.type) {
      case "message.received":
        current = null;
        addChat(el("li", { class: "msg user" }, el("span", { class: "who", text: "you" }),
          el("div", { class: "text", text: d.message || "" })));
        break;
      case "turn.started":
        setStatus("running");
        break;
      case "step.started":
        current = null;
        break;
      case "reasoning.appended": {
        const c = assistantBubble();
        if (!c.reasoning) {
          c.reasoningText = el("div", { class: "reasoning-text" });
          c.reasoning = el("details", { class: "reasoning" }, el("summary", { text: "reasoning" }), c.reasoningText);
          c.bubble.insertBefore(c.reasoning, c.text);
        }
        c.reasoningText.textContent += d.reasoningDelta || "";
        break;
      }
      case "message.appended":
        assistantBubble().text.textContent += d.messageDelta || "";
        scroll(chat);
        break;
      case "message.completed":
        if (d.message) assistantBubble().text.textContent = d.message;
        current = null;
        break;
      case "actions.requested":
        for (const a of d.actions || []) card(a.callId, a.toolName || a.name, a.input, a.kind);
        break;
      case "input.requested":
        for (const r of d.requests || []) approvalBox(r);
        setStatus("waiting");
        break;
      case "approval.settled": {
        const c = requests.get(d.requestId);
        if (c) {
          fill(c.approval, el("p", { class: "settled " + d.outcome },
            d.outcome + " by " + (d.responderPrincipalId || "?") + (d.reason ? ": " + d.reason : "")));
          c.status.className = "badge badge-" + (d.outcome === "approved" ? "running" : "failed");
          c.status.textContent = d.outcome === "approved" ? "running" : "denied";
        }
        break;
      }
      case "action.result": {
        const r = d.result || {};
        const c = card(r.callId, r.toolName || r.name, undefined, r.kind);
        c.status.className = "badge badge-" + (d.status === "completed" ? "completed" : "failed");
        c.status.textContent = d.status || "done";
        c.output.hidden = false;
        c.output.textContent = json(r.output);
        c.output.classList.toggle("error", !!r.isError);
        c.approval.querySelectorAll("button").forEach((b) => { b.disabled = true; });
        scheduleDetail();
        break;
      }
      case "turn.completed": {
        // The turn's usage and cost under its last answer.
        const u = d.usage || {};
        const answers = chat.querySelectorAll("li.msg.assistant");
        if ((u.inputTokens || u.outputTokens) && answers.length) {
          let text = "usage: " + (u.inputTokens || 0).toLocaleString("en-US") + " in";
          if (u.cacheReadTokens) text += " (" + u.cacheReadTokens.toLocaleString("en-US") + " cached)";
          text += " · " + (u.outputTokens || 0).toLocaleString("en-US") + " out";
          if (typeof u.costUsd === "number") text += " · $" + u.costUsd.toFixed(u.costUsd < 1 ? 4 : 2);
          answers[answers.length - 1].append(el("span", { class: "card-info muted", dataset: { usage: d.turnId || "" }, text }));
        }
        break;
      }
      case "turn.failed":
        addChat(el("li", { class: "msg error" }, el("span", { class: "who", text: "failed" }),
          el("div", { class: "text", text: ((d.error && d.error.message) || "the turn failed") + (d.stopReason ? " (" + d.stopReason + ")" : "") })));
        setStatus("failed");
        break;
      case "turn.cancelled":
        addChat(el("li", { class: "msg note", text: "turn cancelled" }));
        break;
      case "turn.waiting":
        setStatus("waiting");
        scheduleDetail();
        break;
      case "input.resolved":
        setStatus("running");
        break;
      case "session.waiting":
        if (sessionStatus !== "failed") setStatus("idle");
        scheduleDetail();
        break;
      case "compaction.completed":
        addChat(el("li", { class: "msg note", text: "── context compacted ──" }));
        break;
      case "context.cleared":
        addChat(el("li", { class: "msg note", text: "── context cleared ──" }));
        break;
      case "session.reset":
        addChat(el("li", { class: "msg note", text: "── session reset ──" }));
        break;
      default:
        break;
    }
  }

  // Tool call rows: duration, effect and sandbox, which the events do not carry.
  function scheduleDetail() {
    clearTimeout(detailTimer);
    detailTimer = setTimeout(loadDetail, 100);
  }

  let detailSeq = 0;
  async function loadDetail() {
    const seq = ++detailSeq;
    try {
      const r = await api("/eve/v1/sessions/" + encodeURIComponent(id));
      // An older answer that arrives after a newer one is stale.
      if (stopped || seq !== detailSeq) return;
      const s = r.session;
      // The events say where the session is; the row adds what they cannot (failed, at rest).
      if (cursor < 0 || (s.status === "failed" && sessionStatus === "idle")) setStatus(s.status);
      fill(meta,
        el("span", { text: "build " }), el("span", { class: "mono", text: s.build }),
        el("span", { text: " · " + plural(s.turns, "turn") + " · " + plural((s.usage && (s.usage.inputTokens + s.usage.outputTokens)) || 0, "token") + (s.costUsd > 0 ? " · $" + s.costUsd.toFixed(s.costUsd < 1 ? 4 : 2) : "") + " · updated " + ago(s.updatedAt) }),
        s.parent ? el("span", {}, " · parent ", sessionLink(s.parent)) : null,
        r.children.length ? el("span", {}, " · children ", r.children.map((c) => sessionLink(c.id))) : null,
        s.failure ? el("span", { class: "error", text: " · last turn failed: " + (s.failure.reason || "error") }) : null,
      );
      trace.refresh(s.turns);
      const agent = await agentInfo().catch(() => null);
      for (const call of r.toolCalls) {
        const c = cards.get(call.callId);
        if (!c) continue;
        const tool = agent && agent.tools.find((t) => t.name === call.tool);
        const sandbox = call.sandbox || (tool && tool.sandbox);
        const bits = [];
        if (call.durationMs !== null && call.durationMs !== undefined) bits.push(ms(call.durationMs));
        if (call.effect) bits.push("effect " + call.effect);
        bits.push(sandbox ? "sandbox " + sandbox.provider + (sandbox.network ? ", network " + json(sandbox.network) : "") : "no sandbox");
        if (call.approval && call.approval !== "none" && call.approval !== "not_required") bits.push("approval " + call.approval);
        c.info.textContent = bits.join(" · ");
      }
    } catch (e) {
      if (e.status === 404) say("no session " + id);
    }
  }

  async function stream() {
    let delay = 250;
    while (!stopped) {
      try {
        const response = await fetch("/eve/v1/session/" + encodeURIComponent(id) + "/stream?startIndex=" + (cursor + 1), {
          headers: headers({ accept: "text/event-stream" }), signal: abort.signal,
        });
        if (response.status === 401) { askToken(); return; }
        if (response.status === 404) { say("no session " + id); return; }
        if (!response.ok) throw new Error("HTTP " + response.status);
        say("");
        await readSse(response, onEvent);
        delay = 250;
      } catch (e) {
        if (stopped) return;
        say("stream interrupted, reconnecting…");
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  loadDetail();
  stream();
  box.focus();
  return () => { stopped = true; abort.abort(); clearTimeout(detailTimer); trace.stop(); };
}
