// eve web console: a client of the session API (/eve/v1), in plain JavaScript.
//
// Views (hash routes): #/ sessions, #/s/<id> one session, #/agent the agent of the current build.
// A session view reads the session's event stream as Server-Sent Events over fetch (so a bearer
// token can be sent), renders every event into the chat and the raw timeline, and keeps its cursor
// (the last event index seen): when the stream ends (the session came to rest) or breaks, it asks
// again from cursor + 1, and a reloaded page reads from 0. Events are keyed by index, so nothing
// is shown twice and a gap would be visible in the timeline's numbering.
"use strict";

(function () {
  const main = document.getElementById("main");
  const statusLine = document.getElementById("status");
  const TOKEN_KEY = "eve.console.token";
  let viewCleanup = null;
  let agentCache = null;

  // ---- small DOM helpers -------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function json(value) {
    if (value === undefined) return "";
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (_) {
      return String(value);
    }
  }

  function ago(iso) {
    if (!iso) return "-";
    const ms = Date.now() - Date.parse(iso);
    if (!isFinite(ms)) return iso;
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.round(s / 60) + "m ago";
    if (s < 86400) return Math.round(s / 3600) + "h ago";
    return Math.round(s / 86400) + "d ago";
  }

  function ms(n) {
    if (n === null || n === undefined) return "";
    return n < 1000 ? n + " ms" : (n / 1000).toFixed(n < 10000 ? 2 : 1) + " s";
  }

  function say(text) {
    statusLine.textContent = text || "";
  }

  function badge(status) {
    return el("span", { class: "badge badge-" + status, text: status });
  }

  // A capability delta (`{kind, subject, before, after, widening}` changes), widening ones marked.
  function deltaView(changes) {
    return changes.length
      ? el("ul", { class: "delta" }, changes.map((c) => el("li", { class: c.widening ? "widening" : "" },
          (c.widening ? "widens: " : "") + c.kind + " " + c.subject +
          (c.before && c.after ? ": " + c.before + " \u2192 " + c.after : c.after ? " (" + c.after + ")" : c.before ? " (was " + c.before + ")" : ""))))
      : el("p", { class: "muted", text: "No capability changes." });
  }

  function sessionLink(id) {
    return el("a", { href: "#/s/" + encodeURIComponent(id), class: "mono", text: id });
  }

  // ---- the API -----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error) || "HTTP " + status);
      this.status = status;
      this.body = body;
    }
  }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const token = localStorage.getItem(TOKEN_KEY);
    if (token) h["authorization"] = "Bearer " + token;
    return h;
  }

  async function api(path, options) {
    const opts = Object.assign({ method: "GET" }, options || {});
    const init = { method: opts.method, headers: headers({ accept: "application/json" }) };
    if (opts.body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const response = await fetch(path, init);
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      if (response.status === 401) askToken();
      throw new ApiError(response.status, body);
    }
    return body;
  }

  function askToken() {
    if (document.getElementById("token-form")) return;
    const input = el("input", {
      id: "token-input", type: "password", autocomplete: "off",
      "aria-label": "API token", placeholder: "bearer token",
    });
    const form = el("form", {
      id: "token-form", class: "panel",
      onsubmit: (e) => {
        e.preventDefault();
        localStorage.setItem(TOKEN_KEY, input.value.trim());
        form.remove();
        route();
      },
    },
      el("p", { text: "This server needs credentials. Paste a token of agent/channels/eve.yaml's auth:" }),
      input, el("button", { type: "submit", text: "Use token" }));
    main.prepend(form);
    input.focus();
  }

  async function agentInfo(fresh) {
    if (!agentCache || fresh) agentCache = await api("/eve/v1/agent");
    return agentCache;
  }

  // ---- sessions list -----------------------------------------------------------------------

  function sessionsView() {
    const search = el("input", {
      id: "search", type: "search", placeholder: "id prefix (wrun_01…)",
      "aria-label": "Search sessions by id prefix", autocomplete: "off",
    });
    const status = el("select", { id: "status-filter", "aria-label": "Filter by status" },
      ["", "idle", "running", "waiting", "failed"].map((s) =>
        el("option", { value: s, text: s || "any status" })));
    const start = el("button", {
      id: "new-session", type: "button", class: "primary",
      onclick: async () => {
        try {
          const r = await api("/eve/v1/session", { method: "POST", body: {} });
          location.hash = "#/s/" + encodeURIComponent(r.sessionId);
        } catch (e) {
          say("cannot start a session: " + e.message);
        }
      },
    }, "New session");
    const tbody = el("tbody");
    const count = el("p", { class: "muted", id: "session-count" });
    const table = el("table", { class: "sessions", id: "sessions" },
      el("thead", {}, el("tr", {}, ["Session", "Status", "Build", "Last activity", "Parent",
        "Children", "First message"].map((h) => el("th", { scope: "col", text: h })))),
      tbody);
    main.replaceChildren(
      el("section", { class: "bar" }, el("h1", { text: "Sessions" }), search, status, start),
      count, el("div", { class: "scroll" }, table));

    let stopped = false;
    let timer = null;
    async function load() {
      const q = new URLSearchParams();
      if (search.value.trim()) q.set("prefix", search.value.trim());
      if (status.value) q.set("status", status.value);
      q.set("limit", "200");
      try {
        const r = await api("/eve/v1/sessions?" + q.toString());
        if (stopped) return;
        tbody.replaceChildren(...r.sessions.map((s) => el("tr", { dataset: { id: s.id } },
          el("td", {}, sessionLink(s.id), s.schedule ? el("span", { class: "muted", text: " ⏱ " + s.schedule }) : null),
          el("td", {}, badge(s.status)),
          el("td", { class: "mono", text: s.build }),
          el("td", { title: s.updatedAt, text: ago(s.updatedAt) }),
          el("td", {}, s.parent ? sessionLink(s.parent) : "-"),
          el("td", {}, s.children.length ? s.children.map((c) => sessionLink(c)) : "-"),
          el("td", { class: "first", text: s.firstMessage || "" }))));
        count.textContent = r.total === 0
          ? "No sessions match. Start one with “New session”."
          : r.sessions.length + " of " + r.total + " sessions";
        say("");
      } catch (e) {
        say("cannot list sessions: " + e.message);
      }
      if (!stopped) timer = setTimeout(load, 3000);
    }
    let debounce = null;
    search.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => { clearTimeout(timer); load(); }, 150);
    });
    search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        const first = tbody.querySelector("a");
        if (first) first.click();
      }
    });
    status.addEventListener("change", () => { clearTimeout(timer); load(); });
    load();
    search.focus();
    return () => { stopped = true; clearTimeout(timer); clearTimeout(debounce); };
  }

  // ---- one session -------------------------------------------------------------------------

  // Reads the SSE body of `response`, calling onEvent(index, envelope) per event.
  async function readSse(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let id = null;
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (data.length) {
            try {
              onEvent(id === null ? null : Number(id), JSON.parse(data.join("\n")));
            } catch (e) {
              console.error("bad event", e);
            }
          }
          id = null;
          data = [];
        } else if (line.startsWith("id:")) {
          id = line.slice(3).trim();
        } else if (line.startsWith("data:")) {
          data.push(line.slice(5).replace(/^ /, ""));
        }
      }
    }
  }

  function sessionView(id) {
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

    main.replaceChildren(
      el("section", { class: "bar" }, el("a", { href: "#/", text: "← Sessions" }), title, state,
        el("span", { class: "spacer" }),
        control("cancel", "Cancel"), control("compact", "Compact"), control("clear", "Clear")),
      meta,
      el("div", { class: "split" },
        el("section", { class: "pane chat-pane", "aria-label": "Chat" }, chat, form),
        el("section", { class: "pane timeline-pane", "aria-label": "Events" },
          el("div", { class: "bar small" }, el("h2", { text: "Events" }),
            el("label", {}, follow, " follow")),
          timeline)));

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
      state.replaceChildren(badge(s));
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
      c.approval.replaceChildren(
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
            c.approval.replaceChildren(el("p", { class: "settled " + d.outcome },
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
        meta.replaceChildren(...[
          el("span", { text: "build " }), el("span", { class: "mono", text: s.build }),
          el("span", { text: " · " + s.turns + " turns · " + ((s.usage && (s.usage.inputTokens + s.usage.outputTokens)) || 0) + " tokens · updated " + ago(s.updatedAt) }),
          s.parent ? el("span", {}, " · parent ", sessionLink(s.parent)) : null,
          r.children.length ? el("span", {}, " · children ", r.children.map((c) => sessionLink(c.id))) : null,
          s.failure ? el("span", { class: "error", text: " · last turn failed: " + (s.failure.reason || "error") }) : null,
        ].filter(Boolean));
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
    return () => { stopped = true; abort.abort(); clearTimeout(detailTimer); };
  }

  // ---- the agent ---------------------------------------------------------------------------

  function section(title, rows, empty) {
    return el("section", { class: "panel" }, el("h2", { text: title }),
      rows.length ? rows : el("p", { class: "muted", text: empty }));
  }

  async function agentView() {
    main.replaceChildren(el("p", { class: "muted", text: "loading the agent…" }));
    let a;
    try {
      a = await agentInfo(true);
    } catch (e) {
      main.replaceChildren(el("p", { class: "error", text: "cannot read the agent: " + e.message }));
      return null;
    }
    const tools = a.tools.map((t) => el("details", { class: "item", dataset: { tool: t.name } },
      el("summary", {}, el("strong", { text: t.name }), " ",
        el("span", { class: "muted", text: [
          "approval " + t.approval, "effect " + t.effect,
          t.sandbox ? "sandbox " + t.sandbox.provider : "no sandbox",
          t.deferred ? "deferred" : null,
        ].filter(Boolean).join(" · ") })),
      el("p", { text: t.description }),
      t.source ? el("p", { class: "muted mono", text: t.source }) : null,
      el("pre", { text: json(t.inputSchema) })));
    const skills = a.skills.map((s) => el("div", { class: "item" }, el("strong", { text: s.name }), " ",
      el("span", { text: s.description }), s.deferred ? el("span", { class: "muted", text: " (deferred)" }) : null));
    const subagents = a.subagents.map((s) => el("div", { class: "item" }, el("strong", { text: s.name }), " ",
      el("span", { text: s.description || "" }), el("span", { class: "muted", text: " · " + s.tools + " tools" })));
    const schedules = a.schedules.map((s) => el("div", { class: "item", dataset: { schedule: s.name } },
      el("strong", { text: s.name }), " ", el("code", { text: s.cron + " " + s.timezone }),
      el("span", { class: "muted", text: " · next " + (s.nextFire || "never") }),
      a.dev ? el("button", {
        type: "button", class: "fire", onclick: async () => {
          try {
            const r = await api("/eve/v1/dev/schedules/" + encodeURIComponent(s.name), { method: "POST", body: {} });
            location.hash = "#/s/" + encodeURIComponent(r.sessionId);
          } catch (e) {
            say("cannot fire " + s.name + ": " + e.message);
          }
        },
      }, "Fire now") : null));
    const connections = a.connections.map((c) => el("div", { class: "item" },
      el("strong", { text: c.name }), " ", badge(c.state),
      c.tools !== null && c.tools !== undefined ? el("span", { class: "muted", text: " " + c.tools + " tools" }) : null,
      c.lastError ? el("p", { class: "error", text: c.lastError }) : null));
    const diagnostics = a.diagnostics.map((d) => el("div", { class: "item diag diag-" + d.severity },
      el("strong", { text: d.severity + " " + d.code }), " ",
      el("span", { class: "mono", text: (d.file || "") + (d.line ? ":" + d.line : "") }), " ",
      el("span", { text: d.message }), d.help ? el("p", { class: "muted", text: d.help }) : null));
    main.replaceChildren(...[
      el("section", { class: "bar" }, el("h1", { text: a.agent.name }),
        el("span", { class: "muted", text: (a.agent.model || "") + " · build " + a.build.hash + (a.dev ? " · dev" : "") })),
      a.agent.description ? el("p", { text: a.agent.description }) : null,
      section("Tools (" + a.tools.length + ")", tools, "no tools"),
      section("Skills", skills, "no skills"),
      section("Subagents", subagents, "no subagents"),
      section("Schedules", schedules, "no schedules"),
      section("Connections", connections, "no connections"),
      section("Build diagnostics", diagnostics, "no diagnostics: the build is clean"),
    ].filter(Boolean));
    return null;
  }

  // ---- releases ----------------------------------------------------------------------------

  // Every release, newest first, with its status, build, who made it and its capability delta;
  // activate one, or roll back to the one before the active release. Both are an operator's
  // acts: the server refuses them to a JWT principal, and says so here. Refreshed every few
  // seconds, so a rebuild under `eve dev` or a change from the terminal shows up.
  function releasesView() {
    let stopped = false;
    let timer = null;
    let busy = false;
    const list = el("div", { id: "releases" }, el("p", { class: "muted", text: "loading the releases…" }));
    const rollback = el("button", {
      type: "button", class: "rollback", disabled: true,
      onclick: () => act("roll back", "/eve/v1/rollback", { reason: "rolled back in the console" },
        "Roll back to the release before the active one? Sessions move to it at their next turn."),
    }, "Roll back");
    main.replaceChildren(
      el("section", { class: "bar" }, el("h1", { text: "Releases" }), rollback),
      el("p", { class: "muted", text: "Each build is a release. The active one is what new turns run on; a session's running turn finishes on its own build." }),
      list);

    async function act(what, path, body, question) {
      if (busy) return;
      if (question && !window.confirm(question)) return;
      busy = true;
      try {
        const out = await api(path, { method: "POST", body });
        say(what + ": " + out.release.id + " (build " + out.release.build_hash + ") is active");
        showAgent(true);
      } catch (e) {
        say("cannot " + what + ": " + e.message);
      } finally {
        busy = false;
        await load();
      }
    }

    async function load() {
      clearTimeout(timer);
      let r;
      try {
        r = await api("/eve/v1/releases");
      } catch (e) {
        if (!stopped) list.replaceChildren(el("p", { class: "error", text: "cannot read the releases: " + e.message }));
        return;
      }
      if (stopped) return;
      const all = r.releases.slice().reverse();
      // A refresh keeps open what the reader opened.
      const open = new Set([...list.querySelectorAll("details.release[open]")].map((d) => d.dataset.release));
      rollback.disabled = !r.active || all.length < 2;
      list.replaceChildren(...(all.length ? all.map((rel) => {
        const changes = (rel.delta && rel.delta.changes) || [];
        const widening = changes.filter((c) => c.widening).length;
        const checks = rel.checks || {};
        const activatable = rel.status !== "active" && rel.status !== "rejected";
        return el("details", { class: "item release", open: open.has(rel.id), dataset: { release: rel.id, status: rel.status } },
          el("summary", {}, badge(rel.status), " ", el("strong", { class: "mono", text: rel.id }), " ",
            el("span", { class: "muted", text: [
              "build " + rel.build_hash,
              ago(new Date(rel.created_at).toISOString()),
              rel.principal,
              changes.length + (changes.length === 1 ? " change" : " changes") + (widening ? ", " + widening + " widening" : ""),
              checks.forced ? "gate forced" : null,
            ].filter(Boolean).join(" · ") }),
            activatable ? el("button", {
              type: "button", class: "activate",
              onclick: (e) => {
                e.preventDefault();
                act("activate", "/eve/v1/releases/" + encodeURIComponent(rel.id) + "/activate", {},
                  rel.widens ? "This release WIDENS what the agent may do (see its delta). Activate it?" : null);
              },
            }, "Activate") : null),
          rel.activated_by ? el("p", { class: "muted", text: "activated by " + rel.activated_by + " " + ago(new Date(rel.activated_at).toISOString()) }) : null,
          rel.reason ? el("p", { class: rel.status === "rejected" || rel.status === "rolled_back" ? "error" : "muted", text: rel.reason }) : null,
          rel.source ? el("p", { class: "muted mono", text: "source " + json(rel.source) }) : null,
          el("p", { class: widening ? "widens-note" : "", text: widening ? "Capability delta (WIDENS what the agent may do):" : "Capability delta:" }),
          deltaView(changes));
      }) : [el("p", { class: "muted", text: "no releases yet: run `eve build`" })]));
      timer = setTimeout(load, 3000);
    }

    load();
    return () => { stopped = true; clearTimeout(timer); };
  }

  // ---- routing -----------------------------------------------------------------------------

  function route() {
    if (viewCleanup) viewCleanup();
    viewCleanup = null;
    say("");
    const hash = location.hash || "#/";
    const m = hash.match(/^#\/s\/(.+)$/);
    const current = m ? null : hash.startsWith("#/agent") ? "agent" : hash.startsWith("#/releases") ? "releases" : "sessions";
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.dataset.nav === current);
    }
    if (m) viewCleanup = sessionView(decodeURIComponent(m[1]));
    else if (current === "agent") agentView();
    else if (current === "releases") viewCleanup = releasesView();
    else viewCleanup = sessionsView();
    main.focus({ preventScroll: true });
  }

  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement) return;
    if (e.key === "/") {
      const s = document.getElementById("search") || document.getElementById("message");
      if (s) { e.preventDefault(); s.focus(); }
    } else if (e.key === "g") {
      location.hash = "#/";
    } else if (e.key === "a") {
      location.hash = "#/agent";
    } else if (e.key === "r") {
      location.hash = "#/releases";
    }
  });
  // The header's agent and build (asked again after the active release changed).
  function showAgent(fresh) {
    agentInfo(fresh).then((a) => {
      document.getElementById("agent-name").textContent = a.agent.name + " · " + a.build.hash;
    }).catch(() => {});
  }
  showAgent(false);
  route();
})();
