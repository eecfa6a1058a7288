// Loaded first (`--import`) in every Node process eve (Rust) starts for a project's modules: it
// makes `eve` and `eve/*` resolve to the helpers shipped inside eve's binary (no npm `eve` is
// needed), and remembers every file Node loads so that `eve build` can carry the modules'
// dependencies (zod and the rest of `node_modules`) into the build.
import * as nodeModule from "node:module";

const SHIM = __EVE_SHIM_URL__;
const loaded = new Set();
globalThis[Symbol.for("eve.loaded")] = loaded;

// eve's built-in tools, as `eve/tools/<name>` modules: their default export (and the factory
// `sleep()`) names the built-in, which the build turns on.
const BUILTINS = ["bash", "read_file", "write_file", "glob", "grep", "web_fetch", "sleep", "agent"];
const builtinUrl = (name) =>
  "data:text/javascript," +
  encodeURIComponent(
    `import { builtinTool } from ${JSON.stringify(SHIM)};\n` +
      `export default builtinTool(${JSON.stringify(name)});\n` +
      (name === "sleep" ? `export const sleep = () => builtinTool("sleep");\n` : ""),
  );

function resolve(specifier, context, next) {
  if (specifier.startsWith("eve/tools/") && BUILTINS.includes(specifier.slice(10))) {
    return { url: builtinUrl(specifier.slice(10)), format: "module", shortCircuit: true };
  }
  if (specifier === "eve" || specifier.startsWith("eve/")) {
    return { url: SHIM, format: "module", shortCircuit: true };
  }
  try {
    return next(specifier, context);
  } catch (err) {
    // eve's projects import their own files without an extension (`../lib/budget`), as a
    // bundler resolves them; Node's ESM resolver wants the file's name. Try what a bundler does.
    if (!extensionless(specifier) || !err || err.code !== "ERR_MODULE_NOT_FOUND") throw err;
    for (const suffix of SUFFIXES) {
      try {
        return next(specifier + suffix, context);
      } catch {}
    }
    throw err;
  }
}
// A relative specifier whose last part names no extension (`./lib/budget`, `../lib`).
const extensionless = (s) => /^\.{1,2}\//.test(s) && !/\.[A-Za-z0-9]+$/.test(s.slice(s.lastIndexOf("/") + 1));
const SUFFIXES = [".ts", ".mts", ".js", ".mjs", "/index.ts", "/index.js"];
function load(url, context, next) {
  if (url.startsWith("file:")) loaded.add(url);
  return next(url, context);
}

if (typeof nodeModule.registerHooks === "function") {
  nodeModule.registerHooks({ resolve, load });
} else {
  // Node before 22.15: off-thread hooks, which cannot tell what they loaded.
  const hooks =
    "const SHIM = " + JSON.stringify(SHIM) + ";\n" +
    "export async function resolve(s, c, n) { if (s === 'eve' || s.startsWith('eve/')) " +
    "return { url: SHIM, format: 'module', shortCircuit: true }; return n(s, c); }\n";
  nodeModule.register("data:text/javascript," + encodeURIComponent(hooks));
}
