// The sessions list (#/): every session of the store, most recent activity first, with its
// status, build, parent and children and first message; an id-prefix search and a status filter;
// "New session". Refreshed every few seconds.

import { ago, api, badge, el, fill, main, say, sessionLink } from "./lib.js";

export function sessionsView() {
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
  fill(main,
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
      fill(tbody, ...r.sessions.map((s) => el("tr", { dataset: { id: s.id } },
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
