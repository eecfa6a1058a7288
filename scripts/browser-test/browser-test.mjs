// eve's React binding (`useEveAgent` from eve@0.80.1) in headless Chromium against `eve serve`
// with a short stream lease (EVE_STREAM_LEASE_MS): a page built with the binding (page.jsx,
// bundled into SITE) sends messages, renders the streamed answer while the binding reconnects at
// each lease end (`?streamControlVersion=1`, eve's lease-end control line), shows an approval
// and answers it by its button while the approved tool outlives several leases. Each turn is
// checked against the session's stored stream: the answer rendered once and in order, every event
// once, each reconnect from the binding's cursor, and nothing on the page's console.
//
// Twins show the checks fail: a page that never asks for stream control (no lease end is seen),
// and a page whose reconnects start one event past the cursor (events are lost).
//
// Run by scripts/test-browser.sh as `node --test browser-test.mjs` with EVE (the binary),
// EVE_PROJECT_DIR (the agent: an `approval: always` refund tool that takes longer than the lease,
// `cors.origins` from EVE_BROWSER_ORIGIN), EVE_MOCK_SCRIPT, CHROMIUM and SITE (index.html and
// the bundled page.js).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { chromium } from "playwright-core";

const EVE = process.env.EVE;
const PROJECT = process.env.EVE_PROJECT_DIR;
const CHROMIUM = process.env.CHROMIUM;
const SITE = process.env.SITE;
const LEASE_MS = 400;
const DEADLINE_MS = 30_000;
// The mock model's script (EVE_MOCK_SCRIPT), read for the texts the page must show.
const SCRIPT = JSON.parse(readFileSync(process.env.EVE_MOCK_SCRIPT, "utf8"));
const STORY = SCRIPT[0].text;

// Longer than the binding's idle timeout (15 s), shorter than its heartbeat interval twice over.
const QUIET_TOOL_S = 17;

let site; // the page's origin
let eve; // eve serve's origin (the short lease, the mock script)
let quietEve; // a second eve serve: the default lease, the echo mock (its `/tool NAME` command)
let server;
let quietServer;
let browser;

// Serves index.html and page.js from SITE on 127.0.0.1:0: the page's own origin, not eve's.
function startSite() {
  const files = {
    "/": ["index.html", "text/html; charset=utf-8"],
    "/page.js": ["page.js", "text/javascript; charset=utf-8"],
  };
  const http = createServer((req, res) => {
    const file = files[new URL(req.url, "http://x").pathname];
    if (!file) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": file[1], "cache-control": "no-store" });
    res.end(readFileSync(join(SITE, file[0])));
  });
  return new Promise((resolve) => http.listen(0, "127.0.0.1", () => resolve(http)));
}

// Starts `eve serve --port 0` in `cwd` with the page's origin for `cors.origins` and `extraEnv`
// (a variable set to undefined is removed).
function startEve(cwd, origin, extraEnv) {
  const env = { ...process.env, NO_COLOR: "1", EVE_MODEL: "mock/echo", EVE_BROWSER_ORIGIN: origin, ...extraEnv };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  const child = spawn(EVE, ["serve", "--port", "0"], { cwd, env, stdio: ["ignore", "ignore", "pipe"] });
  let serverLog = "";
  const url = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("eve serve printed no serving line:\n" + serverLog)), DEADLINE_MS);
    child.stderr.on("data", (chunk) => {
      serverLog += chunk;
      const m = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(serverLog);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`eve serve exited (${code}):\n${serverLog}`)));
  });
  return { child, url };
}

let http;
before(async () => {
  assert.ok(EVE && PROJECT && CHROMIUM && SITE, "EVE, EVE_PROJECT_DIR, CHROMIUM and SITE must be set");
  http = await startSite();
  site = `http://127.0.0.1:${http.address().port}`;
  // The quiet server's own copy of the agent (its own store), made before either server runs.
  const quietProject = PROJECT + "-quiet";
  cpSync(PROJECT, quietProject, { recursive: true });
  server = startEve(PROJECT, site, { EVE_STREAM_LEASE_MS: String(LEASE_MS) });
  quietServer = startEve(quietProject, site, { EVE_MOCK_SCRIPT: undefined, EVE_STREAM_LEASE_MS: undefined });
  [eve, quietEve] = await Promise.all([server.url, quietServer.url]);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  server?.child.kill("SIGTERM");
  quietServer?.child.kill("SIGTERM");
  http?.close();
});

// A fresh page (its own browser context, so its own session), with the page's console errors
// and failed requests collected.
async function openPage(t, twin = "", host = eve) {
  const context = await browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(DEADLINE_MS);
  const errors = [];
  page.on("pageerror", (e) => errors.push("page error: " + String(e)));
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") errors.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on("requestfailed", (r) => {
    // A stream the binding closes itself (at a lease end, or when the page goes) is aborted.
    if (!/\/stream\b/.test(r.url()) || !/ERR_ABORTED/.test(r.failure()?.errorText ?? "")) {
      errors.push(`request failed: ${r.method()} ${r.url()}: ${r.failure()?.errorText}`);
    }
  });
  const query = new URLSearchParams({ eve: host });
  if (twin) query.set("twin", twin);
  await page.goto(`${site}/?${query}`);
  await page.waitForSelector("#status[data-status=ready]");
  return { page, errors };
}

// What the page saw so far: its stream requests, the assistant texts it rendered, the binding's
// events and status.
async function observe(page) {
  return page.evaluate(() => ({
    streams: structuredClone(window.__probe.streams),
    renders: structuredClone(window.__probe.renders),
    eve: structuredClone(window.__eve ?? null),
  }));
}

// The session's stored events, by a bounded read of its stream.
async function storedEvents(sessionId) {
  const r = await fetch(`${eve}/eve/v1/session/${encodeURIComponent(sessionId)}/stream?follow=false`);
  assert.equal(r.status, 200, await r.clone().text());
  return (await r.text())
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l))
    .map((e) => ({ id: e.meta.id, type: e.type, data: e.data }));
}

async function send(page, text) {
  await page.fill("#message", text);
  await page.click("#send");
}

// Waits until the binding is back to `ready` with the session's last stored event applied.
async function settle(page, timeout = DEADLINE_MS) {
  await page.waitForFunction(
    () => window.__eve?.status === "ready" && window.__eve.events.at(-1)?.type === "session.waiting",
    null,
    { timeout },
  );
}

// The problems of one turn, by name (an empty list when it passed): `before` is what the page had
// observed when the turn began, `after` when it ended, `stored` the session's stored events,
// `text` the assistant text the page must show at the end.
function problems({ before, after, stored, text, leaseEnds, errors }) {
  const found = [];
  const add = (name, detail) => found.push(`${name}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
  const streams = after.streams.slice(before.streams.length);
  const renders = after.renders.slice(before.renders.length);
  const final = after.renders.at(-1)?.text ?? "";

  // The answer, rendered once and in order: the final text, and every text rendered on the way
  // a beginning of it (a duplicated or lost delta shows as a text that is not).
  if (final !== text) add("text", { rendered: final, expected: text });
  const garbled = renders.filter((r) => !final.startsWith(r.text));
  if (garbled.length > 0) add("garbled", `${garbled.length} rendered texts are not a beginning of the answer, first: ${JSON.stringify(garbled[0].text)}`);
  // The answer streamed: it grew in steps, and kept growing after the first lease end.
  if (renders.length < 4) add("streamed", `the text was rendered ${renders.length} times`);
  const firstLeaseEnd = streams.find((s) => s.leaseEnded)?.closedAt;
  if (firstLeaseEnd !== undefined && leaseEnds > 0) {
    const grewAfter = renders.some((r) => r.at > firstLeaseEnd && r.text.length > 0);
    if (!grewAfter) add("after-lease", "nothing was rendered after the first lease end");
  }

  // Every stored event once, in order: the binding's events are the session's stream.
  const seen = after.eve.events.map((e) => e.id);
  const dup = seen.filter((id, i) => seen.indexOf(id) !== i);
  if (dup.length > 0) add("duplicates", dup);
  const want = stored.map((e) => e.id);
  if (JSON.stringify(seen) !== JSON.stringify(want)) {
    add("events", { missing: want.filter((id) => !seen.includes(id)).length, page: seen.length, stored: want.length });
  }

  // The binding asked for stream control, got lease ends and reconnected from its cursor.
  const uncontrolled = streams.filter((s) => s.follow && !s.control);
  if (uncontrolled.length > 0) add("control", uncontrolled.map((s) => s.url));
  const ended = streams.filter((s) => s.leaseEnded).length;
  if (ended < leaseEnds) add("leases", `${ended} of the turn's ${streams.length} streams ended at a lease end, expected at least ${leaseEnds}`);
  // A reconnect after a lease end starts where the ended stream left off.
  const all = after.streams;
  for (let i = Math.max(1, before.streams.length); i < all.length; i++) {
    const prev = all[i - 1];
    if (!prev.leaseEnded) continue;
    const cursor = prev.startIndex + prev.eventIds.length;
    if (all[i].startIndex !== cursor) add("cursor", `stream ${i} started at ${all[i].startIndex}, the cursor was ${cursor}`);
  }
  if (errors.length > 0) add("console", errors);
  return found;
}

// One line on what a turn's streams were: each as `startIndex+events`, `|` where a lease ended.
function summary(before, after) {
  const streams = after.streams.slice(before.streams.length);
  const shown = streams.map((s) => `${s.startIndex}+${s.eventIds.length}${s.leaseEnded ? "|" : ""}`).join(" ");
  const renders = after.renders.length - before.renders.length;
  return `${streams.length} streams (${shown}), ${streams.filter((s) => s.leaseEnded).length} lease ends, ${renders} renders`;
}

function assertClean(found) {
  assert.deepEqual(found, [], "the turn's checks:\n" + found.join("\n"));
}

test("useEveAgent: a streamed answer across lease ends, an approval answered from the page", async (t) => {
  const { page, errors } = await openPage(t);

  // The story streams word by word for several leases.
  const before = await observe(page);
  await send(page, "Tell me a story");
  await page.waitForSelector("#messages li[data-role=user]");
  await settle(page);
  let after = await observe(page);
  const sessionId = after.eve.session.sessionId;
  assert.match(sessionId, /\S/);
  let stored = await storedEvents(sessionId);
  assert.equal(stored.at(-1).type, "session.waiting");
  assert.equal(await page.locator("#messages li[data-role=assistant] p.text").innerText(), STORY);
  t.diagnostic("story: " + summary(before, after));
  assertClean(problems({ before, after, stored, text: STORY, leaseEnds: 2, errors }));
  const deltas = stored.filter((e) => e.type === "message.appended").length;
  assert.ok(deltas >= 10, `the story came as ${deltas} deltas`);

  // An approval: shown by the page with the tool's prompt, answered by its button; the tool then
  // runs for longer than several leases, with no event meanwhile, and the answer follows.
  const beforeRefund = after;
  await send(page, "Refund order 42");
  const request = page.locator("fieldset.input[data-kind=tool-approval]");
  await request.waitFor();
  assert.equal(await request.locator(".prompt").innerText(), "Refund 5 USD for order 42?");
  assert.equal(await page.locator(".tool[data-tool=refund]").getAttribute("data-state"), "approval-requested");
  const asked = await observe(page);
  await request.locator("button[data-option=approve]").click();
  await page.waitForSelector(".tool[data-tool=refund][data-state=output-available]");
  await settle(page);
  after = await observe(page);
  stored = await storedEvents(sessionId);
  assert.equal(await page.locator("fieldset.input").count(), 0, "no request is left open");
  assert.match(await page.locator(".tool[data-tool=refund] .output").innerText(), /"refunded":5/);
  const text = [STORY, SCRIPT[1].text, SCRIPT[2].text].join("\n");
  t.diagnostic("refund: " + summary(beforeRefund, after));
  assertClean(problems({ before: beforeRefund, after, stored, text, leaseEnds: 2, errors }));
  // The tool's second took several leases: the binding reconnected at lease ends that carried no
  // event (the follow after the answer), and none of them cost an event.
  const whileTool = after.streams.slice(asked.streams.length).filter((s) => s.leaseEnded && s.eventIds.length === 0);
  assert.ok(whileTool.length >= 1, "a lease ended with no event while the tool ran: " + JSON.stringify(after.streams.slice(asked.streams.length)));
  const settled = stored.filter((e) => e.type === "approval.settled" || e.type === "input.resolved");
  assert.ok(settled.length >= 1, "the approval was settled: " + stored.map((e) => e.type).join(","));
});

test("twin: a page that never asks for stream control sees no lease end", async (t) => {
  const { page, errors } = await openPage(t, "no-control");
  const before = await observe(page);
  await send(page, "Tell me a story");
  await settle(page);
  const after = await observe(page);
  const stored = await storedEvents(after.eve.session.sessionId);
  const found = problems({ before, after, stored, text: STORY, leaseEnds: 2, errors });
  t.diagnostic(summary(before, after) + "; found: " + found.join(" / "));
  const names = found.map((p) => p.split(":")[0]);
  // The answer still arrives (the server holds an uncontrolled follow open), but the checks see
  // that no lease ended and nothing asked for control.
  assert.ok(names.includes("leases") && names.includes("control"), found.join("\n"));
  assert.ok(!names.includes("text") && !names.includes("events"), found.join("\n"));
});

test("twin: reconnects one event past the cursor lose events, and the checks say so", async (t) => {
  const { page, errors } = await openPage(t, "skip");
  const before = await observe(page);
  await send(page, "Tell me a story");
  // The binding may never see the turn's end (the skipped event can be it): wait for the
  // server's, then give the page a moment.
  const sessionId = await page.waitForFunction(() => window.__eve?.session?.sessionId).then((h) => h.jsonValue());
  const deadline = Date.now() + DEADLINE_MS;
  let stored = [];
  while (Date.now() < deadline) {
    stored = await storedEvents(sessionId);
    if (stored.at(-1)?.type === "session.waiting") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, LEASE_MS * 2));
  const after = await observe(page);
  const found = problems({ before, after, stored, text: STORY, leaseEnds: 2, errors });
  t.diagnostic(summary(before, after) + "; found: " + found.join(" / "));
  const names = found.map((p) => p.split(":")[0]);
  assert.ok(names.includes("events") && names.includes("cursor"), found.join("\n"));
});

// A turn quiet for longer than the binding's idle timeout (a tool that runs 17 s), on a server with
// eve's default 60 s lease: the problems of the page's streams during it.
async function quietTurn(t, twin) {
  const { page, errors } = await openPage(t, twin, quietEve);
  const before = await observe(page);
  await send(page, "/tool quiet {}");
  await settle(page, (QUIET_TOOL_S + 30) * 1000);
  const after = await observe(page);
  const found = [];
  const streams = after.streams.slice(before.streams.length);
  const text = await page.locator("#messages li[data-role=assistant] p.text").last().innerText();
  if (!/^quiet returned: /.test(text)) found.push(`text: ${JSON.stringify(text)}`);
  const beats = streams.reduce((n, s) => n + s.heartbeats, 0);
  if (beats < 1) found.push("heartbeats: none arrived while the tool ran");
  // A stream that never reached its end, other than the one still open, was given up by the
  // binding (its idle timeout) and opened again.
  const cut = streams.slice(0, -1).filter((s) => s.closedAt === null);
  if (cut.length > 0) found.push(`idle: the binding gave up ${cut.length} quiet stream(s) and reconnected`);
  if (errors.length > 0) found.push(`console: ${JSON.stringify(errors)}`);
  t.diagnostic(`${twin || "quiet"}: ${summary(before, after)}, ${beats} heartbeats`);
  return found;
}

test("heartbeats hold a quiet stream open past the binding's idle timeout; twin: without control it gives up and reconnects", async (t) => {
  // The page and its twin run side by side (each waits on the 17 s tool).
  const [quiet, twin] = await Promise.all([quietTurn(t, ""), quietTurn(t, "no-control")]);
  assert.deepEqual(quiet, [], "the quiet turn's checks:\n" + quiet.join("\n"));
  const names = twin.map((p) => p.split(":")[0]);
  assert.ok(names.includes("heartbeats") && names.includes("idle"), twin.join("\n"));
  assert.ok(!names.includes("text"), twin.join("\n"));
});
