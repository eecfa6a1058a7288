// The runner of one `defineHook` event, inside the box like every hook: imports the module named
// last on the command line, and calls its handler for the event on stdin (the handler named by
// the event's type, else `"*"`) with `(event, ctx)`. A `tool.before` handler's answer
// (`{decision, …}`) is printed on stdout as the hook protocol has it.
import { pathToFileURL } from "node:url";

const KIND = Symbol.for("eve.definition");

async function main() {
  let raw = "";
  for await (const chunk of process.stdin) raw += chunk;
  const event = JSON.parse(raw);
  const path = process.argv[1];
  const mod = await import(pathToFileURL(path).href);
  const def = mod.default;
  if (!def || def[KIND] !== "hook" || !def.events) {
    throw new Error(`${path} does not export a defineHook definition`);
  }
  const type = event.type ?? event.event;
  const handler = def.events[type] ?? def.events["*"];
  if (typeof handler !== "function") return;
  const env = process.env;
  const ctx = {
    session: {
      id: env.EVE_SESSION_ID ?? event.sessionId ?? event.session_id ?? null,
      turn: { id: env.EVE_TURN_ID ?? null, sequence: null },
      auth: { current: undefined, initiator: undefined },
      parent: undefined,
    },
  };
  for (const name of ["getSandbox", "cancel", "waitUntil"]) {
    Object.defineProperty(ctx, name, {
      get: () => () => {
        throw new Error(`ctx.${name} is not supported by eve (Rust) in hooks`);
      },
      enumerable: false,
    });
  }
  const answer = await handler(event, ctx);
  if (answer && typeof answer === "object" && "decision" in answer) {
    await new Promise((done) => process.stdout.write(JSON.stringify(answer), done));
  }
}

try {
  await main();
  process.exit(0);
} catch (err) {
  process.stderr.write(`${(err && err.message) || err}\n`);
  process.exit(1);
}
