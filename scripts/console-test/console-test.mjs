// The web console of `eve dev`, driven in headless Chromium as a person would use it.
//
// Run by scripts/test-console.sh as `node --test console-test.mjs` with EVE (the binary),
// EVE_PROJECT_DIR (an agent with the approval-gated `refund` tool and the `slow` tool that runs
// until a gate file exists), EVE_MOCK_SCRIPT, CHROMIUM (the browser), SHOTS (where the
// screenshots go) and DOCS_SHOTS (docs/console: the screenshots the docs show). It starts
// `eve dev` on 127.0.0.1:0, opens the console, starts a session, sends a message, watches the
// reply stream, approves the tool by its button, sees its output card, reloads the page while a
// tool runs, and checks the timeline continues with every event index once, from 0, with no gap,
// and that the finished turn shows as a waterfall of its spans in the Trace pane.
//
// At each screenshot it checks the page shows no stray `null`, `undefined`, `NaN` or
// `[object Object]` outside code, and compares the view's structure (every element shown, by
// tag, id and classes, with the labels of buttons, headings, columns and links, numbers left
// out) with the structure recorded in DOCS_SHOTS/shots.json when the docs' screenshot was
// taken: a console that changed since its documented screenshot fails the test until the
// screenshots are taken again (`scripts/test-console.sh --screenshots docs/console`, which
// records the structures anew).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const EVE = process.env.EVE;
const PROJECT = process.env.EVE_PROJECT_DIR;
const CHROMIUM = process.env.CHROMIUM;
const SHOTS = process.env.SHOTS;
const DOCS_SHOTS = process.env.DOCS_SHOTS;
const GATE = join(PROJECT, "slow.gate");
const DEADLINE_MS = 30_000;
// Taking the docs' screenshots: the structures are recorded, not compared.
const RECORDING = Boolean(SHOTS && DOCS_SHOTS && resolve(SHOTS) === resolve(DOCS_SHOTS));
const STRUCTURES = DOCS_SHOTS ? join(DOCS_SHOTS, "shots.json") : null;
const recorded = STRUCTURES && existsSync(STRUCTURES) && !RECORDING ? JSON.parse(readFileSync(STRUCTURES, "utf8")) : {};
// The structure of every view a screenshot was taken of in this run.
const taken = {};

// Starts `eve dev --port 0` (in `cwd`, with `extraEnv`) and resolves with its URL once it prints
// the serving line.
function startDev(cwd = PROJECT, extraEnv = {}) {
  const env = { ...process.env, NO_COLOR: "1", EVE_MODEL: "mock/echo", ...extraEnv };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  const child = spawn(EVE, ["dev", "--port", "0"], {
    cwd,
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  const lines = [];
  const url = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("eve dev printed no serving line:\n" + lines.join("\n"))), DEADLINE_MS);
    let buffer = "";
    child.stderr.on("data", (chunk) => {
      buffer += chunk.toString();
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        lines.push(line);
        const m = line.match(/^eve serving .* on (http:\/\/127\.0\.0\.1:\d+)/);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      }
    });
    child.on("exit", (code) => reject(new Error("eve dev exited with " + code + ":\n" + lines.join("\n"))));
  });
  return { child, url, lines };
}

// A fresh project `name` (its instructions and agent.yaml) under a temp folder, built, with
// `eve dev` serving it (no mock script); both are removed when the test ends.
async function devProject(t, name, instructions, agentYaml) {
  const root = mkdtempSync(join(tmpdir(), "eve-console-" + name + "-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const project = join(root, name);
  mkdirSync(join(project, "agent"), { recursive: true });
  writeFileSync(join(project, "agent", "instructions.md"), instructions);
  writeFileSync(join(project, "agent", "agent.yaml"), agentYaml);
  const built = spawnSync(EVE, ["build"], { cwd: project, env: { ...process.env, NO_COLOR: "1" } });
  assert.equal(built.status, 0, String(built.stderr));
  const dev = startDev(project, { EVE_MOCK_SCRIPT: undefined });
  t.after(() => dev.child.kill("SIGTERM"));
  return { project, dev, base: await dev.url };
}

// The event indexes the timeline shows, in order.
async function timelineIndexes(page) {
  return page.$$eval("#timeline > li", (items) => items.map((li) => Number(li.dataset.index)));
}

function assertContiguous(indexes, what) {
  assert.ok(indexes.length > 0, what + ": the timeline is empty");
  indexes.forEach((index, i) => {
    assert.equal(index, i, `${what}: timeline position ${i} shows event ${index} (gap or repeat): ${indexes.join(",")}`);
  });
}

// Text the page shows outside code that is a value rendered by mistake (`null`, `undefined`...).
async function strayText(page) {
  return page.evaluate(() => {
    const found = [];
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (n.parentElement.closest("pre, code, textarea, .mono")) continue;
      if (/\b(null|undefined|NaN)\b|\[object Object\]/.test(n.textContent)) {
        found.push(n.parentElement.tagName.toLowerCase() + "." + n.parentElement.className + ": " + n.textContent.trim());
      }
    }
    return found;
  });
}

// The view's structure: each element shown (outside code), as `tag#id.classes`, with the own text
// of buttons, headings, column heads, links of the navigation, labels and summaries (numbers as
// `#`); sorted, each once.
async function structure(page) {
  return page.evaluate(() => {
    const labelled = "button, h1, h2, th, nav a, label, summary";
    const seen = new Set();
    for (const node of document.body.querySelectorAll("*")) {
      if (!node.checkVisibility() || node.closest("pre")) continue;
      let sig = node.tagName.toLowerCase() + (node.id ? "#" + node.id : "");
      const classes = [...node.classList].sort();
      if (classes.length) sig += "." + classes.join(".");
      if (node.matches(labelled) && !node.matches(".mono")) {
        const own = [...node.childNodes].filter((c) => c.nodeType === Node.TEXT_NODE)
          .map((c) => c.textContent).join("").trim().replace(/\d+/g, "#");
        if (own) sig += ' "' + own + '"';
      }
      seen.add(sig);
    }
    return [...seen].sort();
  });
}

// A main view as the docs show it: no stray values, the same structure as when the docs'
// screenshot `name` was taken, and the screenshot itself (into SHOTS).
async function shot(page, name) {
  assert.deepEqual(await strayText(page), [], `the ${name} view shows stray text`);
  const now = await structure(page);
  taken[name] = now;
  const documented = DOCS_SHOTS && existsSync(join(DOCS_SHOTS, name + ".png"));
  if (!RECORDING && documented) {
    const then = recorded[name];
    assert.ok(then, `docs/console/${name}.png has no recorded structure in docs/console/shots.json: ` +
      "take the screenshots again with scripts/test-console.sh --screenshots docs/console");
    const added = now.filter((s) => !then.includes(s));
    const gone = then.filter((s) => !now.includes(s));
    assert.ok(added.length === 0 && gone.length === 0,
      `the ${name} view changed since docs/console/${name}.png was taken ` +
      `(new: ${JSON.stringify(added)}; gone: ${JSON.stringify(gone)}): ` +
      "take the screenshots again with scripts/test-console.sh --screenshots docs/console");
  }
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, name + ".png"), fullPage: false });
}

// Taking the docs' screenshots records the structure each one shows.
after(() => {
  if (RECORDING) writeFileSync(STRUCTURES, JSON.stringify(taken, null, 1) + "\n");
});

test("the console drives a session: streamed reply, approval by button, reload mid-turn", async (t) => {
  assert.ok(EVE && PROJECT && CHROMIUM, "EVE, EVE_PROJECT_DIR and CHROMIUM must be set");
  const dev = startDev();
  t.after(() => dev.child.kill("SIGTERM"));
  const base = await dev.url;

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  t.after(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light" });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.setDefaultTimeout(DEADLINE_MS);

  // The page and its assets come from the binary; nothing else is requested.
  const foreign = [];
  page.on("request", (r) => {
    if (!r.url().startsWith(base)) foreign.push(r.url());
  });
  await page.goto(base + "/");
  await page.waitForSelector("#sessions");
  await page.waitForFunction(() => document.getElementById("agent-name").textContent.includes("console-agent"));

  // A new session, by the button.
  await page.click("#new-session");
  await page.waitForURL(/#\/s\/wrun_/);
  const id = decodeURIComponent(new URL(page.url()).hash.slice("#/s/".length));
  // An empty session has no events yet: the composer is there, the timeline empty.
  await page.waitForSelector("#message");
  assert.equal(await page.locator("#timeline > li").count(), 0);

  // Record every length the reply bubble's text had, to see it stream.
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const bubbles = document.querySelectorAll("#chat .msg.assistant .text");
      for (const b of bubbles) window.__lengths.push(b.textContent.length);
    }).observe(document.getElementById("chat"), { subtree: true, childList: true, characterData: true });
  });
  await page.fill("#message", "Please refund my order.");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#chat .msg.user >> text=Please refund my order.");
  await page.waitForSelector("#timeline > li[data-type='session.started']");

  // The model's reasoning is there, collapsed; its text streamed in several pieces.
  await page.waitForSelector("#chat .msg.assistant >> text=Let me refund that for you right away.");
  const reasoning = page.locator("#chat .msg.assistant details.reasoning").first();
  assert.equal(await reasoning.getAttribute("open"), null, "reasoning starts collapsed");
  assert.match(await reasoning.textContent(), /I should call the refund tool/);
  const lengths = await page.evaluate(() => window.__lengths);
  const partial = new Set(lengths.filter((n) => n > 0 && n < "Let me refund that for you right away.".length));
  assert.ok(partial.size >= 2, "the reply streamed in pieces: lengths seen " + JSON.stringify(lengths));

  // The tool asks for approval: a card with its input and the two buttons.
  const refund = page.locator(".card[data-tool='refund']");
  await refund.locator("button.approve").waitFor();
  assert.match(await refund.locator(".card-input pre").textContent(), /"amount": 5/);
  const asked = await refund.locator(".approval").textContent();
  assert.match(asked, /^Approve refund\?\s*Approve\s*Deny$/, "the approval card says only its question and buttons");
  assert.doesNotMatch(asked, /null|undefined/);
  await page.waitForFunction(() => document.querySelector("#session-status").textContent === "waiting");
  await shot(page, "approval");
  await refund.locator("button.approve").click();
  await refund.locator(".settled.approved").waitFor();
  await refund.locator("pre.output >> text=refunded").waitFor();
  assert.equal(await refund.locator(".badge").first().textContent(), "completed");
  // Duration, effect and sandbox come from the session's call rows.
  await page.waitForFunction(() => /^\d+(\.\d+)? m?s · effect write · sandbox host/.test(document.querySelector(".card[data-tool='refund'] .card-info").textContent));
  assert.match(await refund.locator(".card-info").textContent(), /approval approved/);

  // The slow tool runs: reload now, mid-turn.
  await page.waitForSelector(".card[data-tool='slow']");
  await page.waitForSelector("#timeline > li[data-type='actions.requested'] >> nth=1");
  const before = await timelineIndexes(page);
  assertContiguous(before, "before the reload");
  assert.ok(!existsSync(GATE));
  await page.reload();
  await page.waitForSelector(".card[data-tool='slow']");
  await page.waitForFunction((n) => document.querySelectorAll("#timeline > li").length >= n, before.length);
  assertContiguous(await timelineIndexes(page), "after the reload, caught up");
  // The approved call and its output are rebuilt from the stream.
  await page.locator(".card[data-tool='refund'] pre.output >> text=refunded").waitFor();

  // Let the tool finish: the same page sees the rest of the turn live.
  writeFileSync(GATE, "go\n");
  await page.waitForSelector(".card[data-tool='slow'] pre.output >> text=done waiting");
  await page.waitForSelector("#chat .msg.assistant >> text=All done: refunded and waited.");
  await page.waitForSelector("#timeline > li[data-type='session.waiting']");
  const after = await timelineIndexes(page);
  assertContiguous(after, "after the turn");
  assert.ok(after.length > before.length, "events arrived after the reload");
  // What the page shows is exactly the stored stream.
  const stored = await (await fetch(`${base}/eve/v1/session/${id}/stream?follow=false`)).text();
  const types = stored.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).type);
  assert.deepEqual(await page.$$eval("#timeline > li", (items) => items.map((li) => li.dataset.type)), types);
  await page.waitForFunction(() => document.querySelector("#session-status").textContent === "idle");
  // The session's cost (agent.yaml prices the mock model) is in its header.
  await page.waitForFunction(() => /· \$\d+\.\d{2,4} ·/.test(document.querySelector("#session-meta").textContent));
  // And the turn's usage and cost under its answer.
  assert.match(await page.locator("#chat li.msg.assistant [data-usage]").last().textContent(), /^usage: [\d,]+ in · [\d,]+ out · \$\d+\.\d+$/);
  // The turn as a waterfall of its spans (from the local trace store, operators only): the
  // turn, its steps, the model calls, the approval wait and both tool calls, each beneath its
  // parent, with its duration and a bar within the turn.
  await page.waitForSelector("#traces details.trace[open] li.span-row[data-name='invoke_agent console-agent']");
  const waterfall = await page.$$eval("#traces details.trace[open] li.span-row", (items) => items.map((li) => ({
    name: li.dataset.name,
    depth: Number(li.dataset.depth),
    duration: li.querySelector(".span-dur").textContent,
    width: li.querySelector(".span-bar").getBoundingClientRect().width,
    track: li.querySelector(".span-track").getBoundingClientRect().width,
  })));
  const row = (name) => {
    const found = waterfall.find((r) => r.name === name || (name.endsWith("*") && r.name.startsWith(name.slice(0, -1))));
    assert.ok(found, `the waterfall has a row ${name}: ` + JSON.stringify(waterfall));
    return found;
  };
  const millis = (text) => {
    const m = /^(<1 ms|(\d+(?:\.\d+)?) (ms|s))$/.exec(text);
    assert.ok(m, "a duration: " + text);
    return m[1] === "<1 ms" ? 0.5 : Number(m[2]) * (m[3] === "s" ? 1000 : 1);
  };
  assert.equal(waterfall[0].name, "invoke_agent console-agent", "the turn's span comes first");
  assert.equal(waterfall[0].depth, 0);
  assert.ok(Math.abs(waterfall[0].width - waterfall[0].track) <= 1, "the turn's bar spans the track");
  assert.equal(row("agent.step").depth, 1);
  assert.equal(row("chat *").depth, 2, "a model call sits under its step");
  assert.equal(row("execute_tool refund").depth, 2, "a tool call sits under its step");
  assert.ok(row("await_approval refund").depth >= 1, "the approval wait sits in the turn");
  const slowCall = row("execute_tool slow");
  assert.ok(millis(slowCall.duration) >= 50, "the slow call took as long as its gate stayed shut: " + slowCall.duration);
  assert.ok(slowCall.width > 0 && slowCall.width < waterfall[0].width, "its bar is part of the turn's");
  for (const r of waterfall) millis(r.duration);
  assert.ok(millis(waterfall[0].duration) >= millis(slowCall.duration), "the turn lasts at least as long as its calls");
  await shot(page, "session");

  // The sessions list shows it with its first message; the id prefix finds it.
  await page.goto(base + "/#/");
  await page.fill("#search", id.slice(0, 12));
  await page.waitForSelector(`#sessions tr[data-id='${id}'] >> text=Please refund my order.`);
  await page.fill("#search", "wrun_zzzz");
  await page.waitForSelector("#session-count >> text=No sessions match");
  await page.fill("#search", "");
  await page.waitForSelector(`#sessions tr[data-id='${id}']`);
  await shot(page, "sessions");

  // The agent: tools with schema, approval and sandbox; the schedule with next fire and fire-now.
  await page.goto(base + "/#/agent");
  const tool = page.locator("details[data-tool='refund']");
  await tool.waitFor();
  assert.match(await tool.locator("summary").textContent(), /approval always/);
  await tool.locator("summary").click();
  assert.match(await tool.locator("pre").textContent(), /"amount"/);
  const schedule = page.locator("[data-schedule='nightly']");
  assert.match(await schedule.textContent(), /next \d{4}-/);
  await shot(page, "agent");
  await schedule.locator("button.fire").click();
  await page.waitForURL(/#\/s\/wrun_/);
  await page.waitForSelector("#chat .msg.user >> text=Nightly report please.");

  // A phone-sized window reads the same session in one column.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, colorScheme: "light" });
  const small = await phone.newPage();
  await small.goto(`${base}/#/s/${encodeURIComponent(id)}`);
  await small.waitForSelector("#chat .msg.assistant >> text=All done: refunded and waited.");
  await small.waitForSelector("#traces details.trace[open] li.span-row");
  const overflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, "no sideways scrolling at phone width (" + overflow + "px)");
  await shot(small, "phone");
  await phone.close();

  // Keyboard: `/` focuses the search, Enter opens the first match.
  await page.goto(base + "/#/");
  await page.waitForSelector(`#sessions tr[data-id='${id}']`);
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  await page.keyboard.press("/");
  assert.equal(await page.evaluate(() => document.activeElement.id), "search");
  await page.keyboard.type(id.slice(0, 20));
  await page.waitForFunction(() => document.querySelectorAll("#sessions tbody tr").length === 1);
  await page.keyboard.press("Enter");
  await page.waitForURL(new RegExp("#/s/" + id));

  assert.deepEqual(foreign, [], "the console requested nothing but its own server");
  assert.deepEqual(errors, [], "no script errors in the page");
});

// A self-change proposal (`self_change: true`, `mock/echo` calling `propose_change`) shows its
// card in the approval: summary, the capability delta with the widening change marked, the
// diff; Deny answers it and the agent folder is unchanged.
test("a proposed change shows its delta and diff in the approval card", async (t) => {
  const { project, dev, base } = await devProject(t, "change-agent", "You improve yourself, carefully.\n",
    "self_change: true\ndefault_tools: false\n");

  const proposal = {
    summary: "Add a triage skill and the docs server",
    rationale: "Reports arrive without labels.",
    changes: [
      { path: "skills/triage.md", content: "---\ndescription: Triage bug reports.\n---\n# Triage\n" },
      { path: "connections/docs.yaml", content: "url: https://docs.example.com/mcp\n" },
    ],
  };
  const created = await fetch(base + "/eve/v1/session", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message: "/tool propose_change " + JSON.stringify(proposal) }),
  });
  assert.equal(created.status, 202);
  const id = (await created.json()).sessionId;

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  t.after(() => browser.close());
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.setDefaultTimeout(DEADLINE_MS);
  await page.goto(`${base}/#/s/${encodeURIComponent(id)}`);
  const card = page.locator(".card[data-tool='propose_change']");
  const view = card.locator(".proposal");
  await view.waitFor();
  assert.match(await view.textContent(), /Add a triage skill and the docs server/);
  assert.match(await view.textContent(), /Reports arrive without labels/);
  assert.equal(await view.evaluate((n) => n.classList.contains("widens")), true, "the card is marked widening");
  const widening = await view.locator(".delta li.widening").allTextContents();
  assert.ok(widening.some((t) => /connection_added/.test(t) && /docs/.test(t)), "the new connection is flagged: " + JSON.stringify(widening));
  const added = await view.locator(".diff .add").allTextContents();
  assert.ok(added.some((t) => t.startsWith("+# Triage")), "the diff shows the new skill: " + JSON.stringify(added));
  await shot(page, "change-approval");
  await card.locator("input.reason").fill("not today");
  await card.locator("button.deny").click();
  await card.locator(".settled.denied").waitFor();
  assert.equal(existsSync(join(project, "agent", "skills", "triage.md")), false, "a denial writes nothing");
  assert.equal(readFileSync(join(project, "agent", "agent.yaml"), "utf8"), "self_change: true\ndefault_tools: false\n");
  assert.deepEqual(errors, [], "no script errors in the page");
});

test("the releases view lists each build's release, rolls back and activates", async (t) => {
  const { project, dev, base } = await devProject(t, "release-agent", "You answer briefly.\n", "default_tools: false\n");
  const releases = async () => (await fetch(base + "/eve/v1/releases")).json();
  const first = await releases();
  assert.equal(first.releases.length, 1, JSON.stringify(first));

  // A new tool: `eve dev` rebuilds, and the build becomes the second release, active.
  mkdirSync(join(project, "agent", "tools"), { recursive: true });
  writeFileSync(join(project, "agent", "tools", "hello.sh"),
    "#!/bin/sh\n# ---\n# description: Say hello.\n# ---\necho hello\n", { mode: 0o755 });
  const deadline = Date.now() + DEADLINE_MS;
  let now = first;
  while (now.releases.length < 2 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    now = await releases();
  }
  assert.equal(now.releases.length, 2, "the rebuild is a release: " + dev.lines.join("\n"));
  const [v1, v2] = now.releases.map((r) => r.id);
  assert.equal(now.active, v2);

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  t.after(() => browser.close());
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const asked = [];
  page.on("dialog", (d) => { asked.push(d.message()); d.accept(); });
  page.setDefaultTimeout(DEADLINE_MS);
  await page.goto(`${base}/#/releases`);
  const item = (id) => page.locator(`.release[data-release='${id}']`);
  await item(v1).waitFor();
  assert.deepEqual(await page.$$eval(".release", (ns) => ns.map((n) => n.dataset.release)), [v2, v1], "newest first");
  assert.equal(await item(v2).getAttribute("data-status"), "active");
  await item(v2).locator("summary").click();
  const widened = await item(v2).locator(".delta li.widening").allTextContents();
  assert.ok(widened.some((s) => /tool_added hello/.test(s)), "the new tool is in the delta: " + JSON.stringify(widened));
  await shot(page, "releases");

  // Roll back (asked first), then activate the second again (it widens: asked again).
  await page.locator("button.rollback").click();
  await page.locator(`.release[data-release='${v1}'][data-status='active']`).waitFor();
  assert.equal((await releases()).active, v1, "the server rolled back");
  const v1Build = now.releases[0].build_hash;
  await page.waitForFunction((hash) => document.getElementById("agent-name").textContent.endsWith(hash), v1Build);
  assert.equal(await item(v2).getAttribute("data-status"), "rolled_back");
  await item(v2).locator("button.activate").click();
  await page.locator(`.release[data-release='${v2}'][data-status='active']`).waitFor();
  assert.equal((await releases()).active, v2, "the server activated it again");
  assert.equal(asked.length, 2, "each act was confirmed: " + JSON.stringify(asked));
  assert.match(asked[1], /WIDENS/);
  assert.match(await page.locator("#status").textContent(), new RegExp("activate: " + v2));
  assert.deepEqual(errors, [], "no script errors in the page");
});

test("the agent view shows a failed rebuild's diagnostics and the build it still serves", async (t) => {
  const { project, dev, base } = await devProject(t, "broken-agent", "You answer briefly.\n", "default_tools: false\n");
  const good = (await (await fetch(base + "/eve/v1/agent")).json()).build.hash;

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  t.after(() => browser.close());
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light" })).newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.setDefaultTimeout(DEADLINE_MS);
  await page.goto(`${base}/#/agent`);
  await page.waitForSelector("text=no diagnostics: the build is clean");

  // A broken edit, with the view open: it shows the failure by itself.
  writeFileSync(join(project, "agent", "agent.yaml"), "default_tools: false\nturn_policy: sideways\n");
  const failed = page.locator("#failed-build");
  await failed.waitFor();
  const said = await failed.textContent();
  assert.match(said, /The last build failed/);
  assert.match(said, /1 error/);
  assert.match(said, new RegExp("still serving build " + good + ", the last good one"));
  assert.match(await failed.locator(".diag-error").first().textContent(), /agent\.yaml/);
  assert.match(await failed.locator(".diag-error").first().textContent(), /turn_policy/);
  assert.ok(dev.lines.some((l) => l.startsWith("build failed: ")), dev.lines.join("\n"));
  assert.doesNotMatch(await page.locator("main").textContent(), /the build is clean/,
    "a failed build is not called clean");
  await shot(page, "failed-build");

  // Fixed: the failure goes away.
  writeFileSync(join(project, "agent", "agent.yaml"), "default_tools: false\n");
  await failed.waitFor({ state: "detached" });
  await page.waitForSelector("text=no diagnostics: the build is clean");
  assert.deepEqual(errors, [], "no script errors in the page");
});

// Last: every screenshot the docs show was taken, and checked, by the tests above.
test("every documented screenshot is of a view the tests show", () => {
  if (!DOCS_SHOTS || RECORDING) return;
  const documented = readdirSync(DOCS_SHOTS).filter((f) => f.endsWith(".png")).map((f) => f.slice(0, -4));
  const untaken = documented.filter((name) => !taken[name]);
  assert.deepEqual(untaken, [], "docs/console has screenshots of views no test shows: remove them or take them again");
  const stale = Object.keys(recorded).filter((name) => !documented.includes(name));
  assert.deepEqual(stale, [], "docs/console/shots.json records screenshots docs/console does not have");
});
