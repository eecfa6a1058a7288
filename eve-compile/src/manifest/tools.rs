//! Tools the model can call: their schema, approval and effect, how each one runs (a script, a
//! command line or an HTTP request), and the names the runtime keeps for its built-ins.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Phase;

/// When a tool call needs a human's approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Never ask.
    #[default]
    Never,
    /// Ask the first time in a session; later calls are approved.
    Once,
    /// Ask every time.
    Always,
    /// A reviewer model decides each call: one it judges safe runs unasked, anything else (or a
    /// reviewer that fails, times out or answers garbage) is asked as `always`, with its reason.
    Auto,
}

/// What a tool does to the world; decides what a resume may re-run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Only reads: safe to re-run.
    Read,
    /// Writes, but running it twice with the same idempotency key is the same as once.
    Idempotent,
    /// Writes: an interrupted call is never silently re-run.
    #[default]
    Write,
}

/// A tool the model can call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Name derived from the path (`tools/gh/issues.sh` → `gh-issues`).
    pub name: String,
    /// Source file, relative to the root agent folder.
    pub source: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the input (always an object schema).
    pub input_schema: serde_json::Value,
    /// SHA-256 (hex) of the canonical input schema.
    pub schema_hash: String,
    /// When a call needs approval.
    pub approval: Approval,
    /// What the tool does to the world.
    pub effect: Effect,
    /// Wall-clock limit of one call, in milliseconds.
    pub timeout_ms: u64,
    /// Cap on captured output, in bytes.
    pub output_limit: u64,
    /// Listed by name only until the model asks for it.
    pub deferred: bool,
    /// Environment variable names passed through to the process.
    pub env: Vec<String>,
    /// Events at which the tool is asked for dynamic tool definitions (empty = a plain tool).
    pub dynamic: Vec<String>,
    /// The phase the tool belongs to (`phase: explore`: withdrawn in `converge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// How the tool runs.
    pub runner: Runner,
    /// A successful call ends the turn (`ends_turn: true`): no reply is asked of the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ends_turn: bool,
    /// The prompt a principal is shown when a call needs approval (`approval_prompt:`), with
    /// `{{input.<field>}}` filled in from the call's input as inert text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_prompt: Option<String>,
}

/// How a tool runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Runner {
    /// A script file: run directly when executable, else through `interpreter`.
    Script {
        /// Path of the script, relative to the root agent folder (also under `files/` in the build).
        path: String,
        /// Interpreter argv prefix (e.g. `["python3"]`); empty when the file is executed directly.
        interpreter: Vec<String>,
    },
    /// A command line (`run:` in a YAML tool); input JSON on stdin; cwd is the workspace.
    Command {
        /// argv; `${VAR}` references are resolved at run time.
        argv: Vec<String>,
    },
    /// An HTTP request (`http:` in a YAML tool).
    Http(HttpRequest),
    /// An operation of an OpenAPI connection (`connections/NAME.yaml` with `openapi:`).
    #[serde(rename = "openapi")]
    OpenApi(super::OpenApiCall),
}

/// A declarative HTTP tool call. Strings are templates: `{{input.city}}`, `${ENV_VAR}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// HTTP method, upper case.
    pub method: String,
    /// URL template.
    pub url: String,
    /// Header templates.
    pub headers: BTreeMap<String, String>,
    /// Body template: a string, or JSON whose strings are templates. `None` sends the input as JSON
    /// for methods with a body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}

/// Every built-in tool `default_tools` can offer, with the effect the runtime gives each: the one
/// table the runtime builds them from and the capability delta compares them with.
/// `default_tools: true` offers them all but [`OPT_IN_TOOLS`].
pub const DEFAULT_TOOL_EFFECTS: &[(&str, Effect)] = &[
    ("bash", Effect::Write),
    ("read_file", Effect::Read),
    ("write_file", Effect::Idempotent),
    ("glob", Effect::Read),
    ("grep", Effect::Read),
    ("web_fetch", Effect::Read),
    // On only when `web.search` names a provider.
    (WEB_SEARCH, WEB_SEARCH_EFFECT),
    // A durable, bounded wait (answered by the runtime: the turn parks until its timer fires).
    (SLEEP_TOOL, Effect::Read),
    // A fresh copy of the root agent, called as a subagent (`{message, task_id?}`).
    (AGENT_TOOL, Effect::Idempotent),
];

/// Name of the built-in that calls a fresh copy of the root agent as a subagent; offered to the
/// root agent only, never inside its own children.
pub const AGENT_TOOL: &str = "agent";

/// The built-in tools `default_tools: true` leaves off: an agent names them to have them
/// (`default_tools: [bash, read_file, write_file, glob, grep]`, or `{glob: true, grep: true}`).
pub const OPT_IN_TOOLS: &[&str] = &["glob", "grep", SLEEP_TOOL];

/// Name of the built-in durable wait (opt-in).
pub const SLEEP_TOOL: &str = "sleep";

/// Name of the built-in web search tool.
pub const WEB_SEARCH: &str = "web_search";

/// The effect of the built-in `web_search` (offered when `web.search` names a provider).
pub const WEB_SEARCH_EFFECT: Effect = Effect::Read;

/// The effect of the built-in `propose_change` (`self_change: true`): it writes the agent folder
/// once a principal approves.
pub const PROPOSE_CHANGE_EFFECT: Effect = Effect::Write;

/// The effect the runtime gives the built-in tool `name` of [`DEFAULT_TOOL_EFFECTS`].
pub fn default_tool_effect(name: &str) -> Option<Effect> {
    DEFAULT_TOOL_EFFECTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, e)| *e)
}

/// Names the runtime provides itself; tools cannot take them. (A tool may take a built-in tool's
/// name: it replaces that built-in.)
pub const RESERVED_TOOL_NAMES: &[&str] = &[
    "eve",
    "load_skill",
    "search_tools",
    "call_tool",
    "task_wait",
    "task_cancel",
];

impl super::Agent {
    /// The authored tool that replaces the built-in `name`: one of the agent's tools with its
    /// name, when that built-in is on.
    pub fn replaced_builtin(&self, name: &str) -> Option<&Tool> {
        if !self.config.builtin_on(name) {
            return None;
        }
        self.tools.iter().find(|t| t.name == name)
    }

    /// Whether the built-in `name` runs for this agent: on, and not replaced.
    pub fn runs_builtin(&self, name: &str) -> bool {
        self.config.builtin_on(name) && self.replaced_builtin(name).is_none()
    }
}
