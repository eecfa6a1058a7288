//! TypeScript and JavaScript modules as eve writes them: `tools/*.{ts,mts,js,mjs}` whose default
//! export is `defineTool({…})`, with no front matter.
//!
//! `eve build` cannot read a definition without running its module, so the modules of an agent
//! folder are evaluated by Node once, together (only when there are any): `js/evaluate.mjs`
//! imports each one and reports what it defines (the description, the input schema as the
//! module's own schema library converts it, the approval policy) or why it cannot be read, with
//! the line to point at. The imports `eve`, `eve/tools`, `eve/tools/approval`, … resolve to
//! `js/eve.mjs`, shipped inside the binary and handed to Node through its module hooks
//! (`js/setup.mjs`), so no npm `eve` is needed. Every file Node loaded from the project's
//! `node_modules` is carried in the build, so the module finds zod in the box at run time.
//!
//! `hooks/*` and `schedules/*` modules (`defineHook({events})`, `defineSchedule({cron,
//! markdown})`) are read the same way; a hook runs like a tool, through `js/hook.mjs`.
//!
//! At run time a module tool is a script tool whose interpreter is Node with [`NODE_RUNNER`]: the
//! runtime replaces that marker with [`runner_import`], the shipped runner (`js/tool.mjs`), which
//! validates the input with the tool's own schema and calls `execute(input, ctx)`, one process per
//! call, in the box like every tool.

mod cache;
mod loaded;
mod node;
mod read;
mod state;

use std::sync::OnceLock;

use eve_discover::{AgentDir, SourceFile, ToolFile};

pub use node::{NODE_MIN, NodeFound, find_node, use_node};
pub(super) use read::Evaluated;

/// The interpreter argument the runtime replaces with [`runner_import`].
pub const NODE_RUNNER: &str = "eve:node-runner";
/// The interpreter argument the runtime replaces with [`hook_runner_import`].
pub const NODE_HOOK_RUNNER: &str = "eve:node-hook-runner";

const SHIM: &str = include_str!("js/eve.mjs");
const SETUP: &str = include_str!("js/setup.mjs");
const EVALUATE: &str = include_str!("js/evaluate.mjs");
const TOOL: &str = include_str!("js/tool.mjs");
const HOOK: &str = include_str!("js/hook.mjs");

/// The extensions a module tool may have.
pub const MODULE_EXTENSIONS: &[&str] = &["ts", "mts", "js", "mjs"];

/// Whether a tool file is a module (`export default defineTool(…)`, no front matter) rather
/// than a script tool that reads JSON on stdin.
pub fn is_module(file: &SourceFile) -> bool {
    let name = file.path.rsplit('/').next().unwrap_or(&file.path);
    let (_, ext) = eve_discover::split_ext(name);
    ext.is_some_and(|e| MODULE_EXTENSIONS.contains(&e))
        && matches!(crate::frontmatter::script(&file.text), Ok(None))
}

/// A `data:` URL of JavaScript source, as Node's `import` takes it.
fn data_url(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 32);
    out.push_str("data:text/javascript,");
    for b in source.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~!*'();:@&=+$,/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `js/setup.mjs` with the shim's URL filled in.
fn setup_source() -> &'static str {
    static SETUP_SOURCE: OnceLock<String> = OnceLock::new();
    SETUP_SOURCE.get_or_init(|| {
        let shim = serde_json::Value::String(data_url(SHIM)).to_string();
        SETUP.replace("__EVE_SHIM_URL__", &shim)
    })
}

/// The `--import=…` argument that makes Node run one tool call: what the runtime puts in place
/// of [`NODE_RUNNER`] in a module tool's interpreter.
pub fn runner_import() -> &'static str {
    static RUNNER: OnceLock<String> = OnceLock::new();
    RUNNER.get_or_init(|| {
        format!(
            "--import={}",
            data_url(&format!("{}\n{TOOL}", setup_source()))
        )
    })
}

/// The `--import=…` argument that makes Node deliver one event to a `defineHook` module: what the
/// runtime puts in place of [`NODE_HOOK_RUNNER`] in a module hook's interpreter.
pub fn hook_runner_import() -> &'static str {
    static RUNNER: OnceLock<String> = OnceLock::new();
    RUNNER.get_or_init(|| {
        format!(
            "--import={}",
            data_url(&format!("{}\n{HOOK}", setup_source()))
        )
    })
}

/// What the runtime puts in place of an interpreter argument: a runner's `--import=…` for the
/// markers of module tools and hooks, `None` for any other argument.
pub fn runner_for(arg: &str) -> Option<&'static str> {
    match arg {
        NODE_RUNNER => Some(runner_import()),
        NODE_HOOK_RUNNER => Some(hook_runner_import()),
        _ => None,
    }
}

/// The argv (after the program) of the build's evaluation.
fn evaluate_args() -> Vec<String> {
    vec![
        "--experimental-strip-types".to_owned(),
        "--no-warnings".to_owned(),
        format!("--import={}", data_url(setup_source())),
        "--input-type=module".to_owned(),
        "-e".to_owned(),
        EVALUATE.to_owned(),
    ]
}

/// The module tools of `dir`, and the rest of its tools.
pub(super) fn split_tools(dir: &AgentDir) -> (Vec<&ToolFile>, Vec<&ToolFile>) {
    dir.tools
        .iter()
        .partition(|t| !t.yaml && is_module(&t.file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_escape_what_a_url_cannot_hold() {
        let url = data_url("a b%#\n\u{e9}");
        assert_eq!(url, "data:text/javascript,a%20b%25%23%0A%C3%A9");
    }
}
