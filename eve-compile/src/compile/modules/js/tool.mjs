// The runner of one `defineTool` call, inside the box like every tool: imports the module named
// last on the command line, validates the input on stdin with the tool's own schema, calls
// `execute(input, ctx)` and prints the result as JSON on stdout (an error goes to stderr with a
// non-zero exit). `ctx` carries what means something here; what does not throws saying so.
import { pathToFileURL } from "node:url";

const KIND = Symbol.for("eve.definition");

function unsupported(name) {
  return () => {
    throw new Error(`ctx.${name} is not supported by eve (Rust): a tool runs in its own box, one process per call`);
  };
}

async function main() {
  let raw = "";
  for await (const chunk of process.stdin) raw += chunk;
  let input = raw.trim() === "" ? {} : JSON.parse(raw);
  // The session's state (`defineState`), when the agent has any: what `get` reads and `update`
  // changes; the changes go back with the result.
  let state = null;
  if (input && typeof input === "object" && Object.hasOwn(input, "$state")) {
    state = { values: { ...input["$state"] }, changed: {} };
    delete input["$state"];
    globalThis[Symbol.for("eve.state.values")] = state;
  }
  const path = process.argv[1];
  const mod = await import(pathToFileURL(path).href);
  const def = mod.default;
  if (!def || def[KIND] !== "tool" || typeof def.execute !== "function") {
    throw new Error(`${path} does not export a defineTool definition`);
  }
  const std = def.inputSchema && def.inputSchema["~standard"];
  if (std && typeof std.validate === "function") {
    const checked = await std.validate(input);
    if (checked.issues) {
      const issues = checked.issues
        .map((i) => `${(i.path || []).map((p) => (typeof p === "object" ? p.key : p)).join(".") || "input"}: ${i.message}`)
        .join("; ");
      throw new Error(`invalid input: ${issues}`);
    }
    input = checked.value;
  }
  const controller = new AbortController();
  for (const sig of ["SIGTERM", "SIGINT"]) {
    process.on(sig, () => controller.abort(new Error("the call was cancelled")));
  }
  const env = process.env;
  const ctx = {
    session: {
      id: env.EVE_SESSION_ID ?? null,
      turn: { id: env.EVE_TURN_ID ?? null, sequence: null },
      auth: { current: undefined, initiator: undefined },
      parent: undefined,
    },
    sessionId: env.EVE_SESSION_ID ?? null,
    callId: env.EVE_CALL_ID ?? null,
    toolName: env.EVE_TOOL_NAME ?? null,
    idempotencyKey: env.EVE_IDEMPOTENCY_KEY ?? null,
    workspace: env.EVE_WORKSPACE ?? process.cwd(),
    abortSignal: controller.signal,
    approver: env.EVE_APPROVER ? { id: env.EVE_APPROVER } : null,
  };
  for (const name of ["getSandbox", "ask", "requestInput"]) {
    Object.defineProperty(ctx, name, { get: () => unsupported(name), enumerable: false });
  }
  for (const name of ["messages", "agents", "agent", "auth"]) {
    Object.defineProperty(ctx, name, { get: unsupported(name), enumerable: false });
  }
  let result = def.execute(input, ctx);
  if (result && typeof result[Symbol.asyncIterator] === "function") {
    let last;
    for await (const value of result) {
      last = value;
    }
    result = last;
  } else {
    result = await result;
  }
  if (typeof def.toModelOutput === "function") {
    const shaped = await def.toModelOutput(result);
    if (shaped && shaped.type === "text") result = String(shaped.value);
    else if (shaped && shaped.type === "json") result = shaped.value;
  }
  const changed = state && Object.keys(state.changed).length > 0;
  const text = changed
    ? JSON.stringify({ $result: result ?? null, $state: state.changed })
    : typeof result === "string"
      ? result
      : JSON.stringify(result ?? null);
  await new Promise((done) => process.stdout.write(text, done));
}

try {
  await main();
  process.exit(0);
} catch (err) {
  const message = (err && err.message) || String(err);
  process.stderr.write(`${message}\n`);
  process.exit(1);
}
