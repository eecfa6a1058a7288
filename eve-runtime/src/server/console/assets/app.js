// eve web console: a client of the session API (/eve/v1), in plain JavaScript modules served by
// the binary (no build step).
//
// Views (hash routes): #/ the sessions (sessions.js), #/s/<id> one session (session.js), #/agent
// the agent of the current build (agent.js), #/releases the releases (releases.js); lib.js holds
// what they share (DOM helpers, the API client). This module routes between them, and owns the
// keyboard shortcuts and the header.

import { main, say, showAgent } from "./lib.js";
import { agentView } from "./agent.js";
import { releasesView } from "./releases.js";
import { sessionView } from "./session.js";
import { sessionsView } from "./sessions.js";

let viewCleanup = null;

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
  else if (current === "agent") viewCleanup = agentView();
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
// The header: the agent and its build.
showAgent(false);
route();
