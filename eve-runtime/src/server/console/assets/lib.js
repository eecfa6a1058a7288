// The shared parts of the eve web console: small DOM helpers, the status line, and the client of
// the session API (/eve/v1) with its token, the agent of the current build, and the reader of a
// Server-Sent Events body. Every view module builds on these; none of them keeps state of a view.

export const main = document.getElementById("main");
const statusLine = document.getElementById("status");
const TOKEN_KEY = "eve.console.token";
let agentCache = null;

// ---- small DOM helpers -------------------------------------------------------------------

// A text-less child is left out: `null`, `undefined` and `false` stand for "nothing here", so a
// view can write `cond ? node : null` without the word "null" reaching the page.
function shown(children) {
  return children.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== false);
}

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of shown(children)) {
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// `node.replaceChildren(...)`, leaving out what `el` leaves out. The DOM's own replaceChildren
// writes `null` as the text "null": views use this instead.
export function fill(node, ...children) {
  node.replaceChildren(...shown(children));
  return node;
}

export function json(value) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return String(value);
  }
}

export function ago(iso) {
  if (!iso) return "-";
  const ms = Date.now() - Date.parse(iso);
  if (!isFinite(ms)) return iso;
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

export function ms(n) {
  if (n === null || n === undefined) return "";
  return n < 1000 ? n + " ms" : (n / 1000).toFixed(n < 10000 ? 2 : 1) + " s";
}

// `1 turn`, `2 turns`.
export function plural(n, what) {
  return n + " " + what + (n === 1 ? "" : "s");
}

export function say(text) {
  statusLine.textContent = text || "";
}

export function badge(status) {
  return el("span", { class: "badge badge-" + status, text: status });
}

// A capability delta (`{kind, subject, before, after, widening}` changes), widening ones marked.
export function deltaView(changes) {
  return changes.length
    ? el("ul", { class: "delta" }, changes.map((c) => el("li", { class: c.widening ? "widening" : "" },
        (c.widening ? "widens: " : "") + c.kind + " " + c.subject +
        (c.before && c.after ? ": " + c.before + " \u2192 " + c.after : c.after ? " (" + c.after + ")" : c.before ? " (was " + c.before + ")" : ""))))
    : el("p", { class: "muted", text: "No capability changes." });
}

export function sessionLink(id) {
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

export function headers(extra) {
  const h = Object.assign({}, extra || {});
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) h["authorization"] = "Bearer " + token;
  return h;
}

export async function api(path, options) {
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

// Asks for the API's token (a 401 answered); the current view is shown again with it.
export function askToken() {
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
      window.dispatchEvent(new HashChangeEvent("hashchange"));
    },
  },
    el("p", { text: "This server needs credentials. Paste a token of agent/channels/eve.yaml's auth:" }),
    input, el("button", { type: "submit", text: "Use token" }));
  main.prepend(form);
  input.focus();
}

export async function agentInfo(fresh) {
  if (!agentCache || fresh) agentCache = await api("/eve/v1/agent");
  return agentCache;
}

// Reads the SSE body of `response`, calling onEvent(index, envelope) per event.
export async function readSse(response, onEvent) {
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

// The header's agent and build (asked again after the active release changed).
export function showAgent(fresh) {
  agentInfo(fresh).then((a) => {
    document.getElementById("agent-name").textContent = a.agent.name + " · " + a.build.hash;
  }).catch(() => {});
}
