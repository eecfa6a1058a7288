// The turns of one session as waterfalls of their spans (the session view's Trace pane). The
// spans come from the runtime's local trace store (GET /eve/v1/traces?session=ID, operators only):
// each turn is a trace whose root is the turn's span (`invoke_agent …`), with its steps, model
// calls, tool calls and approval waits beneath. A row is one span: its name indented by its depth,
// a bar placed at its start and as long as its duration within the turn, and the duration.
// A turn shows once it has ended (its own span is written when it ends, shortly after); the view
// asks again, a few times, while the session has turns the store does not show yet.

import { api, el, fill, ms } from "./lib.js";

// Asks at most this many times in a row for turns not in the store yet, a second apart.
const RETRIES = 20;

// `spans` in tree order (each after its parent, siblings by start), with their depth.
function ordered(spans) {
  const ids = new Set(spans.map((s) => s.spanId));
  const children = new Map();
  const roots = [];
  for (const s of spans) {
    if (s.parentId && ids.has(s.parentId) && s.parentId !== s.spanId) {
      if (!children.has(s.parentId)) children.set(s.parentId, []);
      children.get(s.parentId).push(s);
    } else {
      roots.push(s);
    }
  }
  const out = [];
  const seen = new Set();
  const walk = (span, depth) => {
    if (seen.has(span.spanId)) return;
    seen.add(span.spanId);
    out.push({ span, depth });
    for (const c of (children.get(span.spanId) || []).sort((a, b) => a.startUs - b.startUs)) walk(c, depth + 1);
  };
  for (const r of roots.sort((a, b) => a.startUs - b.startUs)) walk(r, 0);
  return out;
}

function durationText(us) {
  const n = Math.round(us / 1000);
  return n === 0 && us > 0 ? "<1 ms" : ms(n);
}

function rows(trace) {
  const spans = trace.spans || [];
  const start = Math.min(...spans.map((s) => s.startUs));
  const end = Math.max(...spans.map((s) => s.endUs));
  const total = Math.max(1, end - start);
  return ordered(spans).map(({ span, depth }) => {
    const failed = String(span.status || "").startsWith("error");
    const bar = el("span", { class: "span-bar" + (failed ? " failed" : "") });
    bar.style.left = ((span.startUs - start) / total * 100).toFixed(2) + "%";
    bar.style.width = ((span.endUs - span.startUs) / total * 100).toFixed(2) + "%";
    const name = el("span", { class: "span-name", title: span.name, text: span.name });
    name.style.paddingLeft = depth * 12 + "px";
    return el("li", {
      class: "span-row", dataset: { name: span.name, depth: String(depth), spanId: span.spanId },
      title: failed ? span.status : null,
    }, name, el("span", { class: "span-track" }, bar),
    el("span", { class: "span-dur", text: durationText(span.endUs - span.startUs) }));
  });
}

// The pane, and `refresh(turns)`: reads the session's traces again (`turns`: how many turns the
// session has run, to know whether the store is behind).
export function traceView(id) {
  const none = () => el("p", { class: "muted", text: "No finished turn yet." });
  const list = el("div", { class: "traces", id: "traces" }, none());
  const node = el("section", { class: "pane trace-pane", "aria-label": "Trace" },
    el("div", { class: "bar small" }, el("h2", { text: "Trace" })), list);
  const toggled = new Map(); // traceId -> open, as the person left it
  let timer = null;
  let seq = 0;
  let tries = 0;
  let stopped = false;

  function render(traces) {
    if (!traces.length) {
      fill(list, none());
      return;
    }
    fill(list, traces.map((t, i) => {
      const root = ordered(t.spans || [])[0];
      const turn = root && root.span.attributes && root.span.attributes["eve.turn"];
      const details = el("details", { class: "trace", dataset: { traceId: t.traceId } },
        el("summary", {},
          el("span", { class: "trace-name", text: t.name }),
          el("span", { class: "muted trace-info", text: (typeof turn === "number" ? " · turn " + (turn + 1) : "") + " · " + durationText(t.durationUs) + (t.errors ? " · " + t.errors + " failed" : "") })),
        el("ol", { class: "waterfall" }, rows(t)));
      details.open = toggled.has(t.traceId) ? toggled.get(t.traceId) : i === 0;
      details.addEventListener("toggle", () => toggled.set(t.traceId, details.open));
      return details;
    }));
  }

  async function load(turns) {
    const mine = ++seq;
    let r;
    try {
      r = await api("/eve/v1/traces?session=" + encodeURIComponent(id));
    } catch (e) {
      if (mine !== seq || stopped) return;
      fill(list, el("p", { class: "muted", text: e.status === 403 ? "Spans are shown to operators." : "No spans: " + e.message }));
      return;
    }
    if (mine !== seq || stopped) return;
    if (!r.enabled) {
      fill(list, el("p", { class: "muted", text: "The local trace store is off (EVE_TRACES=off)." }));
      return;
    }
    // The traces of this session's ended turns (each has the turn's own span).
    const ended = r.traces.filter((t) => (t.spans || []).some((s) => s.name.startsWith("invoke_agent") && s.sessionId === id));
    render(ended);
    if (ended.length < turns && tries < RETRIES) {
      tries += 1;
      clearTimeout(timer);
      timer = setTimeout(() => load(turns), 1000);
    }
  }

  return {
    node,
    refresh(turns) {
      tries = 0;
      clearTimeout(timer);
      load(turns || 0);
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
