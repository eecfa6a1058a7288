// The releases (#/releases): every release, newest first, with its status, build, who made it and
// its capability delta; Activate and Roll back.

import { ago, api, badge, deltaView, el, fill, json, main, say, showAgent } from "./lib.js";

// Every release, newest first, with its status, build, who made it and its capability delta;
// activate one, or roll back to the one before the active release. Both are an operator's
// acts: the server refuses them to a JWT principal, and says so here. Refreshed every few
// seconds, so a rebuild under `eve dev` or a change from the terminal shows up.
export function releasesView() {
  let stopped = false;
  let timer = null;
  let busy = false;
  const list = el("div", { id: "releases" }, el("p", { class: "muted", text: "loading the releases…" }));
  const rollback = el("button", {
    type: "button", class: "rollback", disabled: true,
    onclick: () => act("roll back", "/eve/v1/rollback", { reason: "rolled back in the console" },
      "Roll back to the release before the active one? Sessions move to it at their next turn."),
  }, "Roll back");
  fill(main,
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
      if (!stopped) fill(list, el("p", { class: "error", text: "cannot read the releases: " + e.message }));
      return;
    }
    if (stopped) return;
    const all = r.releases.slice().reverse();
    // A refresh keeps open what the reader opened.
    const open = new Set([...list.querySelectorAll("details.release[open]")].map((d) => d.dataset.release));
    rollback.disabled = !r.active || all.length < 2;
    fill(list, ...(all.length ? all.map((rel) => {
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
