// `eve build`'s one Node process over a project's modules: imports each module named on stdin
// (`{modules: [{kind, path}]}`), reads its default export and writes, as one JSON line on stdout,
// what each defines (descriptions, JSON Schemas as the module's own schema library converts them,
// approval policies, events) or why it cannot be read (with the line to point at), and every file
// Node loaded. Execution is never started here.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const KIND = Symbol.for("eve.definition");
const SITE = Symbol.for("eve.site");
const APPROVAL = Symbol.for("eve.approval");

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const request = JSON.parse(raw);

function where(err, url) {
  const stack = String((err && err.stack) || "");
  for (const line of stack.split("\n")) {
    const i = line.indexOf(url);
    if (i >= 0) {
      const m = /^:(\d+):(\d+)/.exec(line.slice(i + url.length));
      if (m) return { line: Number(m[1]), column: Number(m[2]) };
    }
  }
  // A syntax error names the file and line on the stack's first lines.
  const m = new RegExp(url.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") + ":(\\d+)").exec(stack);
  if (m) return { line: Number(m[1]), column: 1 };
  return { line: 1, column: 1 };
}

function exportLine(path) {
  try {
    const lines = readFileSync(path, "utf8").split("\n");
    const i = lines.findIndex((l) => /^\s*export\s+default\b/.test(l));
    if (i >= 0) return { line: i + 1, column: lines[i].indexOf("export") + 1 };
  } catch {}
  return { line: 1, column: 1 };
}

function siteOf(def, url, path) {
  const s = def && def[SITE];
  if (s && s.url === url) return { line: s.line, column: s.column };
  return exportLine(path);
}

async function schemaOf(schema, io) {
  if (schema === null || typeof schema !== "object") return { error: "is not a schema" };
  const std = schema["~standard"];
  if (std && typeof std === "object") {
    const convert = std.jsonSchema && std.jsonSchema[io];
    if (typeof convert !== "function") {
      return {
        error: `is a ${std.vendor || "Standard Schema"} schema that cannot give its JSON Schema (zod 4.2 or later can)`,
      };
    }
    const out = await convert({ target: "draft-2020-12" });
    return { schema: out };
  }
  return { schema: structuredClone(schema) };
}

function describe(value) {
  if (value === null) return "null";
  if (value === undefined) return "nothing (no default export)";
  if (typeof value === "function") return "a function";
  if (typeof value === "object") return value[KIND] ? `a ${value[KIND]} definition` : "an object that no define… helper made";
  return `a ${typeof value}`;
}

const HELPER = { tool: "defineTool", agent: "defineAgent", instructions: "defineInstructions", skill: "defineSkill", schedule: "defineSchedule", hook: "defineHook" };

async function readTool(def, url, path) {
  const out = { description: typeof def.description === "string" ? def.description : "" };
  const site = siteOf(def, url, path);
  const problems = [];
  if (def.inputSchema === undefined) {
    problems.push({ code: "no-input-schema", ...site, message: "tool has no `inputSchema`" });
  } else {
    const s = await schemaOf(def.inputSchema, "input");
    if (s.error) problems.push({ code: "unfit", ...site, message: `\`inputSchema\` ${s.error}` });
    else out.input = s.schema;
  }
  if (typeof def.execute !== "function") {
    problems.push({ code: "unfit", ...site, message: "tool has no `execute` function" });
  }
  if (def.approval !== undefined) {
    const name = def.approval && def.approval[APPROVAL];
    if (name) out.approval = name;
    else problems.push({ code: "unfit", ...site, message: "`approval` is a custom policy; eve (Rust) takes never(), once(), always() and auto() from eve/tools/approval" });
  }
  if (def.endsTurn !== undefined) {
    if (typeof def.endsTurn === "boolean") out.endsTurn = def.endsTurn;
    else problems.push({ code: "unfit", ...site, message: "`endsTurn` is a function; eve (Rust) takes `endsTurn: true` or `false`" });
  }
  if (def.deferred !== undefined) out.deferred = !!def.deferred;
  if (def.outputSchema !== undefined) {
    const s = await schemaOf(def.outputSchema, "output");
    if (!s.error) out.output = s.schema;
  }
  return { out, problems };
}

function readHook(def, url, path) {
  const site = siteOf(def, url, path);
  const events = def.events;
  if (!events || typeof events !== "object") {
    return { out: {}, problems: [{ code: "unfit", ...site, message: "hook has no `events` object" }] };
  }
  const names = Object.keys(events);
  const bad = names.filter((n) => typeof events[n] !== "function");
  if (names.length === 0 || bad.length > 0) {
    return { out: {}, problems: [{ code: "unfit", ...site, message: names.length === 0 ? "hook listens to no event" : `\`events\` entries are functions; ${bad.join(", ")} is not` }] };
  }
  return { out: { events: names }, problems: [] };
}

function readSchedule(def, url, path) {
  const site = siteOf(def, url, path);
  const problems = [];
  if (typeof def.cron !== "string") problems.push({ code: "unfit", ...site, message: "schedule has no `cron` string" });
  if (typeof def.run === "function") {
    problems.push({ code: "unfit", ...site, message: "a schedule's `run` handler is not taken over by eve (Rust): write `markdown`, the prompt the schedule sends" });
  } else if (typeof def.markdown !== "string" || def.markdown.trim() === "") {
    problems.push({ code: "unfit", ...site, message: "schedule has no `markdown` prompt" });
  }
  const out = { cron: def.cron, markdown: def.markdown };
  if (typeof def.timezone === "string") out.timezone = def.timezone;
  return { out, problems };
}

const AGENT_FIELDS = new Set(["model", "reasoning", "modelContextWindowTokens", "compaction", "defaultTools"]);

function readAgent(def, url, path) {
  const site = siteOf(def, url, path);
  const problems = [];
  const out = { ignored: [], line: site.line };
  if (def.model !== undefined) {
    if (typeof def.model === "string") out.model = def.model;
    else problems.push({ code: "unfit", ...site, message: "`model` is not a model id string; eve (Rust) takes `model: \"provider/model\"` (or `model:` in agent.yaml)" });
  }
  if (typeof def.reasoning === "string") out.reasoning = def.reasoning;
  if (typeof def.defaultTools === "boolean") out.defaultTools = def.defaultTools;
  else if (def.defaultTools !== undefined) problems.push({ code: "unfit", ...site, message: "`defaultTools` is not a boolean; eve (Rust) takes `defaultTools: false` (or `default_tools:` in agent.yaml)" });
  if (typeof def.modelContextWindowTokens === "number") out.contextWindow = def.modelContextWindowTokens;
  if (def.compaction && typeof def.compaction.thresholdPercent === "number") out.compactionThreshold = def.compaction.thresholdPercent;
  for (const key of Object.keys(def)) if (!AGENT_FIELDS.has(key)) out.ignored.push(key);
  return { out, problems };
}

function readInstructions(def, url, path) {
  const site = siteOf(def, url, path);
  if (typeof def.content !== "string") {
    return { out: null, problems: [{ code: "unfit", ...site, message: "`content` is not a string" }] };
  }
  if (def.role !== undefined && def.role !== "system") {
    return { out: null, problems: [{ code: "unfit", ...site, message: `instructions with role \`${def.role}\` are not taken over by eve (Rust): the instructions are the system prompt` }] };
  }
  return { out: def.content, problems: [] };
}

function readSkill(def, url, path) {
  const site = siteOf(def, url, path);
  const problems = [];
  if (typeof def.markdown !== "string" || def.markdown.trim() === "") {
    problems.push({ code: "unfit", ...site, message: "skill has no `markdown`" });
  }
  if (def.description !== undefined && typeof def.description !== "string") {
    problems.push({ code: "unfit", ...site, message: "`description` is not a string" });
  }
  const out = { description: def.description || "", markdown: def.markdown, deferred: def.deferred === true };
  if (typeof def.license === "string") out.license = def.license;
  if (def.metadata && typeof def.metadata === "object") out.metadata = def.metadata;
  if (def.files && typeof def.files === "object") {
    out.files = {};
    for (const [name, content] of Object.entries(def.files)) {
      if (typeof content !== "string") {
        problems.push({ code: "unfit", ...site, message: `skill file \`${name}\` is not a string` });
      } else {
        out.files[name] = content;
      }
    }
  }
  return { out, problems };
}

const results = [];
for (const m of request.modules) {
  const url = pathToFileURL(m.path).href;
  let mod;
  try {
    mod = await import(url);
  } catch (err) {
    results.push({ path: m.path, problems: [{ code: "throws", ...where(err, url), message: `importing the module threw: ${String((err && err.message) || err).split("\n")[0]}` }] });
    continue;
  }
  const def = mod.default;
  const kind = def && def[KIND];
  if (m.kind === "tool" && (kind === "disabled-tool" || kind === "builtin-tool")) {
    results.push({ path: m.path, kind, builtin: kind === "builtin-tool" ? def.name : undefined, problems: [] });
    continue;
  }
  if (kind !== m.kind) {
    results.push({ path: m.path, problems: [{ code: "not-definition", ...exportLine(m.path), message: `the default export is ${describe(def)}, not a ${m.kind} definition (write \`export default ${HELPER[m.kind]}({…})\`)` }] });
    continue;
  }
  try {
    if (kind === "tool") {
      const { out, problems } = await readTool(def, url, m.path);
      results.push({ path: m.path, kind, tool: out, problems });
    } else if (kind === "agent") {
      const { out, problems } = readAgent(def, url, m.path);
      results.push({ path: m.path, kind, agent: out, problems });
    } else if (kind === "instructions") {
      const { out, problems } = readInstructions(def, url, m.path);
      results.push({ path: m.path, kind, instructions: out, problems });
    } else if (kind === "hook") {
      const { out, problems } = readHook(def, url, m.path);
      results.push({ path: m.path, kind, hook: out, problems });
    } else if (kind === "skill") {
      const { out, problems } = readSkill(def, url, m.path);
      results.push({ path: m.path, kind, skill: out, problems });
    } else if (kind === "schedule") {
      const { out, problems } = readSchedule(def, url, m.path);
      results.push({ path: m.path, kind, schedule: out, problems });
    } else {
      results.push({ path: m.path, kind, problems: [] });
    }
  } catch (err) {
    results.push({ path: m.path, problems: [{ code: "throws", ...siteOf(def, url, m.path), message: `reading the definition threw: ${String((err && err.message) || err).split("\n")[0]}` }] });
  }
}
// The state slots the modules (and what they import) define with `defineState`: each slot's
// initial value, from its `initial()` once, and where it was defined.
const states = [];
for (const [name, { initial, site }] of globalThis[Symbol.for("eve.states")] || []) {
  const at = site ? { file: site.url, line: site.line, column: site.column } : {};
  try {
    const value = initial();
    const json = JSON.stringify(value === undefined ? null : value);
    if (json === undefined) throw new Error("it is not JSON");
    states.push({ name, initial: JSON.parse(json), ...at });
  } catch (err) {
    states.push({ name, error: `its initial value cannot be stored: ${String((err && err.message) || err).split("\n")[0]}`, ...at });
  }
}
const loaded = [...(globalThis[Symbol.for("eve.loaded")] || [])];
process.stdout.write(JSON.stringify({ node: process.version, results, loaded, states }) + "\n");
process.exit(0);
