// The agent of the current build (#/agent): tools with their schema, approval, effect and
// sandbox, skills, subagents, schedules (with Fire now under `eve dev`), connections and the
// build's diagnostics. Under `eve dev`, a rebuild that failed is shown first, with its
// diagnostics and the build still served. Refreshed every few seconds, so an edit shows up.

import { agentInfo, api, badge, el, fill, json, main, plural, say, showAgent } from "./lib.js";

function section(title, rows, empty) {
  return el("section", { class: "panel" }, el("h2", { text: title }),
    rows.length ? rows : el("p", { class: "muted", text: empty }));
}

function diagnostic(d) {
  return el("div", { class: "item diag diag-" + d.severity },
    el("strong", { text: d.severity + " " + d.code }), " ",
    el("span", { class: "mono", text: (d.file || "") + (d.line ? ":" + d.line : "") }), " ",
    el("span", { text: d.message }), d.help ? el("p", { class: "muted", text: d.help }) : null);
}

// `eve dev`'s last rebuild, when it failed: its diagnostics, and the build still served.
function failedBuild(f, served) {
  const counts = plural(f.errors, "error") + (f.warnings ? ", " + plural(f.warnings, "warning") : "");
  return el("section", { class: "panel failed-build", id: "failed-build", role: "alert" },
    el("h2", { text: "The last build failed" }),
    el("p", {}, "The last edit did not build (" + counts + ", at ",
      el("time", { datetime: f.at, text: new Date(f.at).toLocaleTimeString() }),
      "): eve dev is still serving build ", el("span", { class: "mono", text: served }),
      ", the last good one. Fix what is below and save; the next good build is served at once."),
    f.diagnostics.map(diagnostic));
}

function render(a) {
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
    el("span", { text: s.description || "" }), el("span", { class: "muted", text: " · " + plural(s.tools, "tool") })));
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
    c.tools !== null && c.tools !== undefined ? el("span", { class: "muted", text: " " + plural(c.tools, "tool") }) : null,
    c.lastError ? el("p", { class: "error", text: c.lastError }) : null));
  const failed = a.failedBuild;
  fill(main,
    el("section", { class: "bar" }, el("h1", { text: a.agent.name }),
      el("span", { class: "muted", text: (a.agent.model || "") + " · build " + a.build.hash + (a.dev ? " · dev" : "") })),
    failed ? failedBuild(failed, a.build.hash) : null,
    a.agent.description ? el("p", { text: a.agent.description }) : null,
    section("Tools (" + a.tools.length + ")", tools, "no tools"),
    section("Skills", skills, "no skills"),
    section("Subagents", subagents, "no subagents"),
    section("Schedules", schedules, "no schedules"),
    section("Connections", connections, "no connections"),
    failed
      ? section("Diagnostics of the build served", a.diagnostics.map(diagnostic), "none")
      : section("Build diagnostics", a.diagnostics.map(diagnostic), "no diagnostics: the build is clean"));
}

// Shows the agent, and again whenever what the server says of it changes (a rebuild, a failed
// one, a release activated); a tool the reader opened stays open.
export function agentView() {
  let stopped = false;
  let timer = null;
  let shown = null;
  fill(main, el("p", { class: "muted", text: "loading the agent…" }));

  async function load() {
    clearTimeout(timer);
    try {
      const a = await agentInfo(true);
      const text = JSON.stringify(a);
      if (!stopped && text !== shown) {
        const open = new Set([...main.querySelectorAll("details[data-tool][open]")].map((d) => d.dataset.tool));
        render(a);
        for (const d of main.querySelectorAll("details[data-tool]")) d.open = open.has(d.dataset.tool);
        shown = text;
        showAgent(false); // the header's build, from the answer just read
      }
    } catch (e) {
      if (!stopped && shown === null) fill(main, el("p", { class: "error", text: "cannot read the agent: " + e.message }));
    }
    if (!stopped) timer = setTimeout(load, 2000);
  }

  load();
  return () => { stopped = true; clearTimeout(timer); };
}
