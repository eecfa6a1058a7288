// What `eve`, `eve/tools`, `eve/tools/approval`, `eve/hooks`, `eve/schedules`, `eve/skills` and
// `eve/instructions` are when eve (Rust) runs a project's modules: the definition helpers, each
// returning its argument marked with its kind, and the call site (file:line) that defined it, so
// that `eve build` can read definitions and point at them. Nothing here reaches the network.
const KIND = Symbol.for("eve.definition");
const SITE = Symbol.for("eve.site");
const APPROVAL = Symbol.for("eve.approval");

function site() {
  const stack = String(new Error().stack || "").split("\n").slice(3);
  for (const frame of stack) {
    const m = /(file:\/\/[^\s)]+?):(\d+):(\d+)/.exec(frame);
    if (m) return { url: m[1], line: Number(m[2]), column: Number(m[3]) };
  }
  return null;
}

function mark(kind, def) {
  if (def === null || typeof def !== "object") {
    throw new TypeError(`${kind}: expected a definition object, got ${def === null ? "null" : typeof def}`);
  }
  Object.defineProperty(def, KIND, { value: kind, enumerable: false });
  Object.defineProperty(def, SITE, { value: site(), enumerable: false });
  return def;
}

export const defineTool = (def) => mark("tool", def);
export const defineAgent = (def) => mark("agent", def);
export const defineInstructions = (def) => mark("instructions", def);
export const defineSkill = (def) => mark("skill", def);
export const defineSchedule = (def) => mark("schedule", def);
export const defineHook = (def) => mark("hook", def);
export const disableTool = () => mark("disabled-tool", {});
// One of eve's built-in tools, re-exported from `tools/<name>.ts` (`export { default } from
// "eve/tools/bash"`): the build turns the built-in on.
export const builtinTool = (name) => mark("builtin-tool", { name });
export const isDisabledToolSentinel = (v) => !!v && v[KIND] === "disabled-tool";

function policy(name) {
  const fn = () => (name === "never" ? "not-applicable" : "user-approval");
  Object.defineProperty(fn, APPROVAL, { value: name, enumerable: false });
  return fn;
}
export const never = () => policy("never");
export const once = () => policy("once");
export const always = () => policy("always");
export const auto = (options) => {
  if (options && Object.keys(options).length > 0) {
    throw new Error("auto(options) is not supported by eve (Rust): write auto() and set the reviewer model in agent.yaml");
  }
  return policy("auto");
};

export const toolOutput = {
  text: (value) => ({ type: "text", value }),
  json: (value) => ({ type: "json", value }),
  content: (value) => ({ type: "content", value }),
};
export const toolOutputPart = {
  text: (text) => ({ type: "text", text }),
  file: (data, options = {}) => ({ type: "file", data, ...options }),
};

function refused(what, instead) {
  return () => {
    throw new Error(`${what} is not taken over by eve (Rust): ${instead}`);
  };
}
export const defineWorkflowTool = refused("defineWorkflowTool", "write a defineTool tool, or a subagent for long work");
export const defineDynamic = refused("defineDynamic", "write a script tool with `dynamic:` (see docs/tools.md)");
export const defineSandbox = refused("defineSandbox", "configure the box in sandbox/sandbox.yaml");
export const defineChannel = refused("defineChannel", "write channels/NAME.yaml");
export const defineExtension = refused("defineExtension", "copy the tools and skills you need into the agent folder");
export const defineRemoteAgent = refused("defineRemoteAgent", "declare the remote agent in agent.yaml");
export const defineWorkspaceAgent = refused("defineWorkspaceAgent", "use the agents/<name>/ layout");
// `defineState(name, initial)`: a durable per-session slot (docs/typescript.md, State). At build,
// every slot a module defines is recorded (`eve build` calls `initial()` once for the value a
// session starts with, and declares the slot as `state:` in agent.yaml would); in a tool's call,
// the runner (tool.mjs) hands the session's values over `$state` and takes back what `update`
// changed. Outside a tool's `execute` there is no session to read: `get` and `update` throw.
const STATES = Symbol.for("eve.states");
const VALUES = Symbol.for("eve.state.values");
export function defineState(name, initial) {
  if (typeof name !== "string" || name === "") {
    throw new TypeError("defineState: the first argument is the slot's name, a non-empty string");
  }
  if (typeof initial !== "function") {
    throw new TypeError(`defineState(${JSON.stringify(name)}): the second argument is a function giving the initial value`);
  }
  const registry = (globalThis[STATES] ??= new Map());
  if (!registry.has(name)) registry.set(name, { initial, site: site() });
  const active = (what) => {
    const call = globalThis[VALUES];
    if (!call) {
      throw new Error(`state ${JSON.stringify(name)}: ${what}() works inside a tool's execute (eve (Rust) gives state to tools only)`);
    }
    return call;
  };
  return {
    name,
    get() {
      const call = active("get");
      if (!Object.hasOwn(call.values, name)) call.values[name] = initial();
      return call.values[name];
    },
    update(fn) {
      const call = active("update");
      const next = fn(this.get());
      call.values[name] = next;
      call.changed[name] = next;
    },
  };
}
export const defineDurableSchema = (schema) => schema;
export const defineDurableCallback = refused("defineDurableCallback", "use never(), once(), always() or auto()");
