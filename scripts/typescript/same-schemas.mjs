// Checks that each tool's input schema in a build's manifest is what zod itself produces for the
// module's schema (`z.toJSONSchema(schema, {io: "input"})`, without `$schema`). The modules are
// imported with `eve` stubbed out (only their schemas are read). Run from the project folder:
// node same-schemas.mjs .eve/current/manifest.json
import { readFileSync } from "node:fs";
import { registerHooks } from "node:module";
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";

const stub =
  "data:text/javascript," +
  encodeURIComponent(
    "const id = (d) => d; const policy = () => () => null;" +
      "export { id as defineTool, id as defineHook, id as defineSchedule, policy as never, policy as once, policy as always, policy as auto };",
  );
registerHooks({
  resolve: (s, c, next) => (s === "eve" || s.startsWith("eve/") ? { url: stub, shortCircuit: true } : next(s, c)),
});
const { z } = await import(pathToFileURL(resolve("node_modules/zod/index.js")).href);
const canon = (v) =>
  Array.isArray(v)
    ? v.map(canon)
    : v && typeof v === "object"
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]))
      : v;
const manifest = JSON.parse(readFileSync(process.argv[2], "utf8"));
let n = 0;
for (const tool of manifest.agent.tools) {
  if (!/\.(m?ts|m?js)$/.test(tool.source)) continue;
  const mod = await import(pathToFileURL(resolve("agent", tool.source)).href);
  const schema = mod.default.inputSchema;
  if (!schema || !schema["~standard"]) continue; // a plain JSON Schema is taken as written
  const want = z.toJSONSchema(schema, { io: "input" });
  delete want.$schema;
  const got = JSON.stringify(canon(tool.input_schema));
  const exp = JSON.stringify(canon(want));
  if (got !== exp) {
    console.error(`${tool.name}: the manifest has ${got}\n  zod gives ${exp}`);
    process.exit(1);
  }
  n++;
}
if (n === 0) {
  console.error("no zod schema was compared");
  process.exit(1);
}
console.log(`${n} input schemas equal to what zod produces`);
