//! The manifest: what `eve build` produces and the runtime executes.
//!
//! These types are the contract between the compiler and the runtime. Their JSON Schema is generated
//! from them (`docs/manifest.schema.json`, checked by a test). Every collection is ordered, so the
//! same agent folder always serialises to the same bytes and so to the same build hash. A manifest
//! never holds a secret: `${VAR}` references are kept as written and resolved at run time.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the manifest format. Bumped on incompatible changes.
pub const MANIFEST_VERSION: u32 = 1;

/// A compiled agent project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Manifest format version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// Version of eve that built it.
    pub eve_version: String,
    /// The root agent.
    pub agent: Agent,
    /// Every runtime file the build carries (its pack), by path relative to the agent folder:
    /// SHA-256 and permission bits. The runtime checks a file against it before running it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileDigest>,
}

/// What a build file must hash to, recorded at `eve build`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    /// SHA-256 of the contents, lowercase hex.
    pub sha256: String,
    /// Permission bits.
    pub mode: u32,
}

/// One agent: the root, or a subagent (which has the same shape and nests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The agent's name: the project folder's name for the root, the folder name for a subagent.
    pub name: String,
    /// Folder of this agent relative to the root agent folder (`""` for the root).
    pub path: String,
    /// What the agent does (required for subagents: it becomes the subagent tool's description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The system prompt (`instructions.md` without front matter).
    pub instructions: String,
    /// Settings from `agent.yaml`, with defaults filled in.
    pub config: AgentConfig,
    /// Tools, sorted by name.
    pub tools: Vec<Tool>,
    /// Skills, sorted by name.
    pub skills: Vec<Skill>,
    /// Subagents, sorted by name.
    pub subagents: Vec<Agent>,
    /// Schedules, sorted by name.
    pub schedules: Vec<Schedule>,
    /// Hooks, sorted by name.
    pub hooks: Vec<Hook>,
    /// MCP server connections, sorted by name.
    pub connections: Vec<Connection>,
    /// Channels, sorted by name.
    pub channels: Vec<Channel>,
    /// Sandbox settings and seed files.
    pub sandbox: Sandbox,
}

/// `agent.yaml`, resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// `provider/model`, such as `openai/gpt-4.1`, `anthropic/claude-sonnet-4-5` or `mock/echo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Reasoning effort passed to models that support it (`low`, `medium`, `high`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Context window in tokens; when absent the provider is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// When and how to compact context.
    pub compaction: Compaction,
    /// Budgets per session and turn.
    pub limits: Limits,
    /// Whether the built-in `bash`, `read_file` and `write_file` tools are offered.
    pub default_tools: bool,
    /// Approval policy of built-in tools by name (`approvals: {write_file: always}`); unlisted
    /// built-ins need no approval.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals: BTreeMap<String, Approval>,
    /// What a message arriving mid-turn does.
    pub turn_policy: TurnPolicy,
}

/// Context compaction settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Compaction {
    /// Whether automatic compaction runs.
    pub enabled: bool,
    /// Fraction of the context window at which compaction starts (0 < x ≤ 1).
    pub threshold: f64,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 0.8,
        }
    }
}

/// Budgets. `None` means unlimited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Model calls per turn.
    pub max_steps_per_turn: u32,
    /// Total tokens (input + output) per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Total cost per session, in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Wall-clock seconds per turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turn_seconds: Option<u64>,
    /// Model prices in US dollars per million tokens, `(input, output)`, for `max_cost_usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_million: Option<Price>,
}

/// Model prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input: f64,
    /// Per million output (completion) tokens.
    pub output: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps_per_turn: 50,
            max_tokens: None,
            max_cost_usd: None,
            max_turn_seconds: None,
            price_per_million: None,
        }
    }
}

/// What a message that arrives while a turn runs does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TurnPolicy {
    /// Wait for the running turn to finish, then start a new one.
    #[default]
    Queue,
    /// Fold the message into the running turn at the next step boundary.
    Steer,
}

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
    /// How the tool runs.
    pub runner: Runner,
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

/// A skill: instructions the model can load on demand with `load_skill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    /// Name from the path.
    pub name: String,
    /// Source file, relative to the root agent folder.
    pub source: String,
    /// When to use it (listed in the system prompt).
    pub description: String,
    /// The markdown body (front matter removed).
    pub body: String,
    /// Not listed in the system prompt; only loadable by name.
    pub deferred: bool,
    /// License, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Free-form metadata, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// Other files of a packaged skill, relative to the root agent folder.
    pub files: Vec<String>,
}

/// What to do when a schedule fires while its previous run is still going.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Skip this fire.
    #[default]
    Skip,
    /// Run it after the previous one finishes.
    Queue,
}

/// What to do about fires missed while eve was down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Drop missed fires.
    #[default]
    None,
    /// Run once for the most recent missed fire.
    Latest,
}

/// A prompt run on a cron schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Name from the path.
    pub name: String,
    /// Source file.
    pub source: String,
    /// Five-field cron expression, as written.
    pub cron: String,
    /// IANA time zone the cron is read in.
    pub timezone: String,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Catch-up policy.
    pub catch_up: CatchUp,
    /// The prompt.
    pub prompt: String,
}

/// A script run on events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    /// Name from the path.
    pub name: String,
    /// Source file.
    pub source: String,
    /// Event types (or `*`); `tool.before` makes it a blocking hook.
    pub events: Vec<String>,
    /// Wall-clock limit in milliseconds.
    pub timeout_ms: u64,
    /// Environment variable names passed through.
    pub env: Vec<String>,
    /// How to run the script.
    pub runner: Runner,
}

/// Tool filters of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    /// Only these tools (empty = all).
    pub allow: Vec<String>,
    /// Never these tools.
    pub block: Vec<String>,
}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Transport {
    /// A child process speaking MCP on stdio.
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Environment (values may be `${VAR}` references).
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP server.
    Http {
        /// Endpoint URL.
        url: String,
        /// Headers (values may be `${VAR}` references).
        headers: BTreeMap<String, String>,
    },
}

/// An MCP server whose tools appear as `NAME__tool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// Name from the path; the tool prefix is `NAME__`.
    pub name: String,
    /// Source file.
    pub source: String,
    /// Transport.
    pub transport: Transport,
    /// Tool filters.
    pub tools: ToolFilter,
    /// Approval for every tool of this server.
    pub approval: Approval,
    /// Per-call timeout in milliseconds.
    pub timeout_ms: u64,
}

/// An inbound channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    /// Name from the path (`eve` configures the default session API).
    pub name: String,
    /// Source file.
    pub source: String,
    /// `http`, `slack`, `discord`, `telegram` or `webhook`.
    pub kind: ChannelKind,
    /// Authentication for `http` channels.
    pub auth: Auth,
    /// Other settings of the channel kind, with `${VAR}` references unresolved.
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// Channel kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// The session API.
    Http,
    /// Slack Events API.
    Slack,
    /// Discord interactions.
    Discord,
    /// Telegram bot webhook.
    Telegram,
    /// Generic signed webhook.
    Webhook,
}

/// Authentication of an HTTP channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Auth {
    /// No authentication (the default API then binds loopback only).
    #[default]
    None,
    /// `Authorization: Bearer <token>`; tokens are `${VAR}` references or literals.
    Bearer {
        /// Accepted tokens.
        tokens: Vec<String>,
    },
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password (a `${VAR}` reference).
        password: String,
    },
    /// JWT signed with HMAC (HS256).
    Jwt {
        /// Secret (a `${VAR}` reference).
        secret: String,
        /// Required `iss`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        issuer: Option<String>,
        /// Required `aud`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
    },
}

/// Sandbox settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// `local` (a folder per session under `.eve/sandboxes/`).
    pub provider: String,
    /// Files seeded into every session workspace, relative to the root agent folder.
    pub workspace: Vec<String>,
    /// Default tool timeout in milliseconds.
    pub timeout_ms: u64,
    /// Default output cap in bytes.
    pub output_limit: u64,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self {
            provider: "local".to_owned(),
            workspace: Vec::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }
}

/// Default tool timeout: 60 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Default output cap: 1 MiB.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 1024 * 1024;
/// Default MCP call timeout: 60 s.
pub const DEFAULT_MCP_TIMEOUT_MS: u64 = 60_000;

/// Names the runtime provides itself; tools cannot take them.
pub const RESERVED_TOOL_NAMES: &[&str] = &[
    "eve",
    "load_skill",
    "bash",
    "read_file",
    "write_file",
    "search_tools",
    "call_tool",
];

/// Event names a hook may subscribe to (`*` = all).
pub const HOOK_EVENTS: &[&str] = &[
    "*",
    "tool.before",
    "session.started",
    "turn.started",
    "message.received",
    "step.started",
    "message.appended",
    "message.completed",
    "actions.requested",
    "action.result",
    "input.requested",
    "input.resolved",
    "approval.settled",
    "turn.waiting",
    "step.completed",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "session.waiting",
    "compaction.completed",
    "context.cleared",
];

impl Agent {
    /// Looks up a tool by name.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Looks up a subagent by name.
    pub fn subagent(&self, name: &str) -> Option<&Agent> {
        self.subagents.iter().find(|a| a.name == name)
    }

    /// Looks up a skill by name.
    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}
