// The official ACP client library (@agentclientprotocol/sdk, protocol v1) drives `eve acp` as an
// editor would: a prompt with a tool call (its locations), a permission request answered allow
// once, reject and allow always, embedded resources, cancellation of a running tool, a loaded
// session after the `eve acp` process was killed with SIGKILL while a permission request was
// open, and a `strategy: plan` turn's plan and reasoning. Run by scripts/test-acp.sh with the
// eve binary and the projects it laid out; prints each case's time; exits non-zero on failure.
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [eve, project, planProject, remoteProject] = process.argv.slice(2);
const failures = [];
const check = (cond, what) => {
  if (!cond) {
    failures.push(what);
    console.error(`FAIL: ${what}`);
  }
};

/** One `eve acp` process and a client connected to it. */
class Editor {
  constructor(dir, env = {}, args = ["acp"]) {
    this.updates = []; // every session/update's params, in order
    this.permissions = []; // every permission request's params
    this.decide = () => ({ outcome: { outcome: "selected", optionId: "allow-once" } });
    this.stdout = [];
    this.child = spawn(eve, args, {
      cwd: dir,
      env: { ...process.env, ...env },
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.stderr = "";
    this.child.stderr.on("data", (d) => (this.stderr += d));
    // Every line on stdout must be a JSON-RPC frame.
    this.child.stdout.on("data", (d) => this.stdout.push(d));
    const app = acp
      .client({ name: "eve-acp-test" })
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        this.updates.push(params);
      })
      .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
        this.permissions.push(params);
        return await this.decide(params);
      });
    this.connection = app.connect(
      acp.ndJsonStream(Writable.toWeb(this.child.stdin), Readable.toWeb(this.child.stdout)),
    );
    this.agent = this.connection.agent;
  }
  async initialize() {
    return await this.agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name: "eve-acp-test", version: "1" },
    });
  }
  async newSession(cwd) {
    const r = await this.agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
    return r.sessionId;
  }
  async prompt(sessionId, prompt) {
    const blocks = typeof prompt === "string" ? [{ type: "text", text: prompt }] : prompt;
    return await this.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: blocks });
  }
  of(sessionId, from = 0) {
    return this.updates.slice(from).filter((u) => u.sessionId === sessionId).map((u) => u.update);
  }
  async waitFor(pred, what, ms = 30000) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (pred()) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`timed out waiting for ${what}`);
  }
  stdoutLines() {
    return Buffer.concat(this.stdout).toString("utf8").split("\n").filter((l) => l.length > 0);
  }
  async close() {
    this.child.stdin.end();
    await new Promise((r) => (this.child.exitCode !== null ? r() : this.child.on("exit", r)));
  }
}

const text = (updates, kind = "agent_message_chunk") =>
  updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text).join("");
const calls = (updates, name) =>
  updates.filter((u) => u.sessionUpdate === "tool_call" && u.title.startsWith(name));
const statuses = (updates, id) =>
  updates.filter((u) => u.toolCallId === id && u.status).map((u) => u.status);

async function timed(name, body) {
  const start = Date.now();
  try {
    await body();
  } catch (e) {
    failures.push(`${name}: ${e.stack || e}`);
    console.error(`FAIL: ${name}: ${e.stack || e}`);
  }
  console.log(`acp ${name}: ${Date.now() - start} ms`);
}

const editor = new Editor(project);
let session;
await timed("initialize and session/new", async () => {
  const init = await editor.initialize();
  check(init.protocolVersion === 1, "protocol version 1 negotiated");
  check(init.agentCapabilities.loadSession === true, "loadSession advertised");
  check(init.agentCapabilities.promptCapabilities.embeddedContext === true, "embedded context advertised");
  session = await editor.newSession(project);
  check(typeof session === "string" && session.length > 0, "session/new gives a session id");
});

await timed("prompt with a tool call", async () => {
  const from = editor.updates.length;
  const r = await editor.prompt(session, '/tool get_weather {"city": "Paris"}');
  check(r.stopReason === "end_turn", `stop reason end_turn (got ${r.stopReason})`);
  const u = editor.of(session, from);
  const [call] = calls(u, "get_weather");
  check(call && call.kind === "other" && call.status === "pending", "tool_call announced pending");
  check(call && call.rawInput.city === "Paris", "tool_call carries its input");
  const seen = call ? statuses(u, call.toolCallId) : [];
  check(seen.join(",") === "pending,in_progress,completed", `statuses pending→in_progress→completed (${seen})`);
  check(text(u).includes("get_weather returned"), "the reply streams as agent_message_chunk");
  check(editor.permissions.length === 0, "a tool without approval asks nothing");
});

await timed("prompt with embedded resources", async () => {
  const from = editor.updates.length;
  const r = await editor.prompt(session, [
    { type: "text", text: "Look at this file" },
    { type: "resource", resource: { uri: "file:///work/src/lib.rs", mimeType: "text/x-rust", text: "fn answer() -> u32 { 42 }" } },
    { type: "resource_link", uri: "file:///work/README.md", name: "README.md" },
  ]);
  check(r.stopReason === "end_turn", "resource prompt ends its turn");
  const reply = text(editor.of(session, from));
  check(reply.includes("fn answer() -> u32 { 42 }"), "the embedded resource reaches the model");
  check(reply.includes("README.md"), "the resource link reaches the model");
});

await timed("permission allowed once", async () => {
  const from = editor.updates.length;
  editor.decide = () => ({ outcome: { outcome: "selected", optionId: "allow-once" } });
  const r = await editor.prompt(session, '/tool write_note {"path": "notes/allowed.txt", "text": "yes"}');
  check(r.stopReason === "end_turn", "approved turn ends");
  const asked = editor.permissions.at(-1);
  check(asked && asked.sessionId === session, "session/request_permission names the session");
  const kinds = asked ? asked.options.map((o) => o.kind).join(",") : "";
  check(kinds === "allow_once,allow_always,reject_once", `options allow once/always, reject (${kinds})`);
  const u = editor.of(session, from);
  const [call] = calls(u, "write_note");
  const loc = call && call.locations && call.locations[0];
  check(loc && loc.path.startsWith("/") && loc.path.endsWith("/notes/allowed.txt"), `the call reports its file (${JSON.stringify(loc)})`);
  check(asked && asked.toolCall.toolCallId === call?.toolCallId, "the permission is about that call");
  check(call && statuses(u, call.toolCallId).join(",") === "pending,in_progress,completed", "approved call runs");
  check(loc && existsSync(loc.path) && readFileSync(loc.path, "utf8") === "yes", "the file is at the reported location");
});

await timed("permission rejected", async () => {
  const from = editor.updates.length;
  const before = editor.permissions.length;
  editor.decide = () => ({ outcome: { outcome: "selected", optionId: "reject-once" } });
  const r = await editor.prompt(session, '/tool write_note {"path": "notes/rejected.txt", "text": "no"}');
  check(r.stopReason === "end_turn", "denied turn ends");
  check(editor.permissions.length === before + 1, "one permission asked");
  const u = editor.of(session, from);
  const [call] = calls(u, "write_note");
  check(call && statuses(u, call.toolCallId).join(",") === "pending,failed", `a denied call fails without running (${call && statuses(u, call.toolCallId)})`);
  const loc = call && call.locations[0];
  check(loc && !existsSync(loc.path), "the denied tool wrote nothing");
  check(/denied/i.test(text(u)), "the model is told it was denied");
});

await timed("permission allowed always", async () => {
  editor.decide = () => ({ outcome: { outcome: "selected", optionId: "allow-always" } });
  const before = editor.permissions.length;
  await editor.prompt(session, '/tool write_note {"path": "notes/a.txt", "text": "1"}');
  editor.decide = () => ({ outcome: { outcome: "selected", optionId: "reject-once" } });
  const from = editor.updates.length;
  const r = await editor.prompt(session, '/tool write_note {"path": "notes/b.txt", "text": "2"}');
  check(r.stopReason === "end_turn", "second call's turn ends");
  check(editor.permissions.length === before + 1, "allow always: the second call is not asked about");
  const [call] = calls(editor.of(session, from), "write_note");
  check(call && statuses(editor.of(session, from), call.toolCallId).at(-1) === "completed", "the second call ran");
});

await timed("cancel a running tool", async () => {
  const from = editor.updates.length;
  const prompt = editor.prompt(session, "/tool wait {}");
  await editor.waitFor(
    () => editor.of(session, from).some((u) => u.sessionUpdate === "tool_call_update" && u.status === "in_progress"),
    "the wait tool to run",
  );
  const pid = Number(readFileSync(`${project}/wait.pid`, "utf8"));
  await editor.agent.notify(acp.methods.agent.session.cancel, { sessionId: session });
  const r = await prompt;
  check(r.stopReason === "cancelled", `stop reason cancelled (got ${r.stopReason})`);
  let alive = true;
  for (let i = 0; i < 100 && alive; i++) {
    try { process.kill(pid, 0); await new Promise((res) => setTimeout(res, 50)); } catch { alive = false; }
  }
  check(!alive, "the cancelled tool's process is gone");
  const after = await editor.prompt(session, "still there?");
  check(after.stopReason === "end_turn", "the session takes prompts after a cancel");
});

await timed("cancel while a permission is asked", async () => {
  const from = editor.updates.length;
  editor.decide = async (params) => {
    await editor.agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
    return { outcome: { outcome: "cancelled" } };
  };
  const r = await editor.prompt(session, '/tool refund {"amount": 5}');
  check(r.stopReason === "cancelled", `stop reason cancelled (got ${r.stopReason})`);
  const [call] = calls(editor.of(session, from), "refund");
  check(call && !statuses(editor.of(session, from), call.toolCallId).includes("completed"), "the call never ran");
});

const lines = editor.stdoutLines();
check(lines.length > 0 && lines.every((l) => { try { return JSON.parse(l).jsonrpc === "2.0"; } catch { return false; } }), "stdout carries JSON-RPC frames only");
await editor.close();

await timed("session/load after kill -9", async () => {
  const first = new Editor(project);
  await first.initialize();
  const id = await first.newSession(project);
  first.decide = () => new Promise(() => {}); // the editor never answers: the process dies first
  first.prompt(id, '/tool refund {"amount": 7}').catch(() => {});
  await first.waitFor(() => first.permissions.length === 1, "the permission request");
  first.child.kill("SIGKILL");
  await new Promise((r) => (first.child.exitCode !== null || first.child.signalCode ? r() : first.child.on("exit", r)));

  const second = new Editor(project);
  await second.initialize();
  second.decide = () => ({ outcome: { outcome: "selected", optionId: "allow-once" } });
  await second.agent.request(acp.methods.agent.session.load, { sessionId: id, cwd: project, mcpServers: [] });
  const replay = second.of(id);
  check(text(replay, "user_message_chunk").includes('/tool refund {"amount": 7}'), "the history is replayed: the user's message");
  check(calls(replay, "refund").length === 1, "the history is replayed: the tool call");
  // The loaded session is the same eve session, parked on the same approval: asked again here.
  await second.waitFor(() => second.permissions.length === 1, "the parked approval asked again");
  check(second.permissions[0].toolCall.toolCallId === calls(replay, "refund")[0]?.toolCallId, "the same call is asked about");
  await second.waitFor(() => second.of(id).some((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed"), "the resumed call to complete");
  const from = second.updates.length;
  const r = await second.prompt(id, "and now?");
  check(r.stopReason === "end_turn", "the loaded session takes a prompt");
  check(text(second.of(id, from)).includes("and now?"), "the loaded session answers it");
  await second.close();

  const missing = new Editor(project);
  await missing.initialize();
  try {
    await missing.agent.request(acp.methods.agent.session.load, { sessionId: "no-such-session", cwd: project, mcpServers: [] });
    check(false, "loading an unknown session fails");
  } catch (e) {
    check(e.code === -32002, `an unknown session is resource-not-found (${e.code})`);
  }
  await missing.close();
});

await timed("strategy: plan and reasoning", async () => {
  const planner = new Editor(planProject, { EVE_MOCK_SCRIPT: process.env.EVE_PLAN_SCRIPT });
  await planner.initialize();
  const id = await planner.newSession(planProject);
  const r = await planner.prompt(id, "Find A, then B.");
  check(r.stopReason === "end_turn", `plan turn ends (${r.stopReason})`);
  const u = planner.of(id);
  const plans = u.filter((x) => x.sessionUpdate === "plan");
  check(plans.length >= 3, `the plan is sent and updated (${plans.length} updates)`);
  check(plans[0]?.entries.map((e) => `${e.content}:${e.status}`).join(",") === "Find A:pending,Find B:pending", "the plan's entries");
  check(plans.at(-1)?.entries.every((e) => e.status === "completed"), "every entry completes");
  check(text(u, "agent_thought_chunk").includes("plan this"), "reasoning streams as agent_thought_chunk");
  check(text(u).includes("All done"), "the synthesis streams");
  await planner.close();
});

await timed("--url: a server's agent, with a token from EVE_TOKEN", async () => {
  const token = "acp-test-token";
  const server = spawn(eve, ["serve", "--port", "0"], {
    cwd: remoteProject,
    env: { ...process.env, ACP_TEST_TOKEN: token },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const url = await new Promise((resolve, reject) => {
    server.stderr.on("data", (d) => {
      log += d;
      const m = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) resolve(m[1]);
    });
    server.on("exit", (code) => reject(new Error(`eve serve exited (${code}): ${log}`)));
  });
  try {
    // Run outside any project: the agent is the server's.
    const outside = process.env.TMPDIR || "/tmp";
    const remote = new Editor(outside, { EVE_TOKEN: token }, ["acp", "--url", url]);
    await remote.initialize();
    const id = await remote.newSession(outside);
    remote.decide = () => ({ outcome: { outcome: "selected", optionId: "allow-once" } });
    const r = await remote.prompt(id, '/tool refund {"amount": 3}');
    check(r.stopReason === "end_turn", `remote turn ends (${r.stopReason})`);
    check(remote.permissions.length === 1, "the server's approval is asked as a permission");
    const [call] = calls(remote.of(id), "refund");
    check(call && statuses(remote.of(id), call.toolCallId).join(",") === "pending,in_progress,completed", "the remote call runs once allowed");
    check(text(remote.of(id)).includes("refund returned"), "the remote reply streams");
    await remote.close();

    const again = new Editor(outside, { EVE_TOKEN: token }, ["acp", "--url", url]);
    await again.initialize();
    await again.agent.request(acp.methods.agent.session.load, { sessionId: id, cwd: outside, mcpServers: [] });
    check(text(again.of(id), "user_message_chunk").includes("refund"), "a remote session loads with its history");
    await again.close();

    const refused = spawn(eve, ["acp", "--url", url], { env: { ...process.env, EVE_TOKEN: "wrong" }, stdio: ["pipe", "pipe", "pipe"] });
    let err = "";
    let out = "";
    refused.stderr.on("data", (d) => (err += d));
    refused.stdout.on("data", (d) => (out += d));
    const code = await new Promise((r) => refused.on("exit", r));
    check(code === 2 && /401/.test(err) && out === "", `a refused token ends eve acp with exit 2 (${code}: ${err})`);
  } finally {
    server.kill("SIGTERM");
  }
});

if (failures.length > 0) {
  console.error(`${failures.length} check(s) failed`);
  process.exit(1);
}
console.log("acp client test: all checks passed");
process.exit(0);
