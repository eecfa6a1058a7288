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
    /// Tool choice at the first step of every turn: `auto` (default), `required`, `none`, or a
    /// tool's name to force that tool. A forced choice applies to the first step only (later
    /// steps are `auto`, so the model can answer with the result); `none` applies to every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
    /// The model that reviews `approval: auto` calls (`provider/name`); the agent's own model
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_model: Option<String>,
    /// Durable notes the agent writes with the built-in `memory` tool (`memory:`); off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// The environment probe (`probe:`): what the sandbox offers, in the system prompt from the
    /// session's start; off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
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
    /// Whether a final answer that claims work no tool call of the turn did gets one nudge
    /// (`hollow_check: true`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub hollow_check: bool,
    /// How many tools, tool specs and old tool outputs the model is sent (`lean_context:`).
    #[serde(default, skip_serializing_if = "LeanContext::is_default")]
    pub lean_context: LeanContext,
    /// How a turn is run: one tool loop (`react`), a plan of parallel steps (`plan`), or answers
    /// reviewed by a critic (`reflect`).
    #[serde(default, skip_serializing_if = "Strategy::is_react")]
    pub strategy: Strategy,
    /// The critic of `strategy: reflect` (from `critic:`, or the `critic` subagent's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic: Option<Critic>,
    /// How a new build of this agent becomes the active release (`activation:`; root agent
    /// only). The active release's policy decides the next activation.
    #[serde(default, skip_serializing_if = "Activation::is_auto")]
    pub activation: Activation,
    /// Eval tags run on a candidate build before it may activate (`gate:`); a failing case
    /// refuses the activation unless forced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate: Vec<String>,
    /// When the runtime re-activates the previous release by itself (`rollback:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackPolicy>,
    /// Whether the agent is offered the built-in `propose_change` tool (`self_change: true`): it
    /// may propose edits to its own folder, which a principal approves before anything changes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub self_change: bool,
}

/// How a new build becomes the active release (`activation:`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// A clean build activates (the default, and what `eve dev` wants).
    #[default]
    Auto,
    /// A build whose capability delta widens nothing activates; a widening one waits, pending,
    /// until a principal activates it.
    Review,
}

impl Activation {
    fn is_auto(&self) -> bool {
        *self == Activation::Auto
    }

    /// The name as written in `agent.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Activation::Auto => "auto",
            Activation::Review => "review",
        }
    }
}

/// `rollback: {failures, window}`: at `failures` failed turns on a release within `window_ms`
/// of its activation, the previous release is re-activated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackPolicy {
    /// Failed turns that trigger the rollback (at least 1).
    pub failures: u32,
    /// How long after activation failures count, in milliseconds.
    pub window_ms: u64,
}

/// How a turn is run (`strategy:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// One tool loop: the model calls tools until it answers.
    #[default]
    React,
    /// A planning step produces a plan of steps with dependencies; independent steps run in
    /// parallel as child sessions; a synthesis step answers from their results.
    Plan,
    /// After the answer, a critic reviews it and may send it back with objections.
    Reflect,
}

impl Strategy {
    fn is_react(&self) -> bool {
        *self == Strategy::React
    }

    /// The name as written in `agent.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::React => "react",
            Strategy::Plan => "plan",
            Strategy::Reflect => "reflect",
        }
    }
}

/// The critic of `strategy: reflect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Critic {
    /// `provider/model` of the critic (default: the agent's model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the critic checks, as its system prompt.
    pub instructions: String,
    /// Most reviews per turn that may send the answer back (default 2).
    pub max_rounds: u32,
}

/// What a critic checks when nothing says otherwise.
pub const DEFAULT_CRITIC_INSTRUCTIONS: &str = "You review an assistant's answer to a user's \
    request. Check that it does what was asked, is correct and complete, and claims nothing it \
    did not do.";

fn is_false(b: &bool) -> bool {
    !*b
}

/// `lean_context:`: keeping what is sent to the model small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeanContext {
    /// Above this many offered tools, the tools are offered through the deferred-tools catalogue
    /// (`search_tools`/`call_tool`), except the [`LeanContext::keep_inline`] most used (default 30;
    /// 0 turns the automatic catalogue off).
    pub max_inline_tools: u32,
    /// How many of the most used tools stay offered directly when the catalogue takes the rest
    /// (default 8).
    pub keep_inline: u32,
    /// A tool output from before the current turn longer than this many lines is cut to its head
    /// and tail with `[N lines cut]` (default 40; 0 keeps every output whole).
    pub cut_lines: u32,
}

impl Default for LeanContext {
    fn default() -> Self {
        Self {
            max_inline_tools: 30,
            keep_inline: 8,
            cut_lines: 40,
        }
    }
}

impl LeanContext {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `memory:` in `agent.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Which scopes the agent may write and sees pinned (default `[agent]`).
    pub scopes: Vec<MemoryScope>,
    /// Characters kept per scope; past it the oldest notes are trimmed (default 4000).
    pub max_chars: u64,
    /// Share of the context window at which the agent is first offered a step to save what
    /// matters, before compaction summarises (default 0.75).
    pub save_at: f64,
}

/// Who a memory note belongs to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    /// Every session of this agent.
    Agent,
    /// Every session of this agent with the same user (a channel identity, or the API principal).
    User,
    /// This session only.
    Session,
}

impl MemoryScope {
    /// The scope's name in `agent.yaml` and the `memory` tool.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::Agent => "agent",
            MemoryScope::User => "user",
            MemoryScope::Session => "session",
        }
    }
}

/// `probe:` in `agent.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// Programs whose presence and version are reported.
    pub programs: Vec<String>,
    /// Whether a bounded listing of the workspace is included.
    pub listing: bool,
}

/// Programs the probe looks for when `probe: true` names none.
pub const DEFAULT_PROBE_PROGRAMS: &[&str] = &[
    "git", "python3", "node", "npm", "cargo", "go", "java", "gcc", "make", "docker", "curl", "jq",
    "rg",
];

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
    /// Shares of the turn's budget spent exploring, executing and converging (`limits.phases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// Total seconds one model call may take, retries included (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_call_seconds: Option<u64>,
    /// Longest silence, in seconds, between two content-bearing chunks of a model's stream;
    /// keep-alive comments do not count (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_idle_seconds: Option<u64>,
    /// Largest model response body in bytes (default 8 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_response_bytes: Option<u64>,
    /// Seconds a reviewer of an `approval: auto` call may take before a principal is asked
    /// instead (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_seconds: Option<u64>,
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
            model_call_seconds: None,
            model_idle_seconds: None,
            model_response_bytes: None,
            review_seconds: None,
            phases: None,
        }
    }
}

/// `limits.phases`: a turn moves from `explore` to `execute` to `converge` as it spends its
/// budget (steps of `max_steps_per_turn`, or tokens of `max_tokens`, whichever is further
/// along). The shares add up to 1. Tools tagged `phase: explore` are withdrawn in `converge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phases {
    /// Share of the budget for exploring.
    pub explore: f64,
    /// Share of the budget for executing.
    pub execute: f64,
    /// Share of the budget for converging on the answer.
    pub converge: f64,
    /// More tools tagged `explore` by name: built-ins (`bash`, `read_file`), subagents, MCP tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explore_tools: Vec<String>,
}

/// The phase of a turn under `limits.phases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Looking around: every tool is offered.
    Explore,
    /// Doing the work: every tool is offered.
    Execute,
    /// Finishing: tools tagged `explore` are withdrawn.
    Converge,
}

impl Phase {
    /// The phase's name as written in `agent.yaml` and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Explore => "explore",
            Phase::Execute => "execute",
            Phase::Converge => "converge",
        }
    }
}

impl Phases {
    /// The phase at `progress` (0 = the turn's start, 1 = its budget spent).
    pub fn at(&self, progress: f64) -> Phase {
        if progress < self.explore {
            Phase::Explore
        } else if progress < self.explore + self.execute {
            Phase::Execute
        } else {
            Phase::Converge
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
    /// Longest wait for the server to start and answer `initialize`, in milliseconds (`None`:
    /// the runtime's default, 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_ms: Option<u64>,
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
        /// Whether a token must carry `exp` (default true: a token without one would be valid
        /// forever).
        #[serde(default = "yes")]
        require_exp: bool,
    },
}

fn yes() -> bool {
    true
}

/// Where a tool process runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Confined: the session workspace and a private `/tmp` writable, the system and build files
    /// read-only, its own PID and network namespaces, `limits` applied. (`local`, what older
    /// builds say, reads as this.)
    #[default]
    #[serde(alias = "local")]
    Isolated,
    /// Unconfined, with the server's authority: it can read the server's files and environment.
    Host,
}

impl Provider {
    /// The name as written in `sandbox.yaml` and front matter.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Isolated => "isolated",
            Provider::Host => "host",
        }
    }
}

/// Where an isolated process may connect. Written `none`, `all`, or a list of `host[:port]`,
/// `*.suffix[:port]`, IP literals and `[v6]:port` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No network at all, the host's loopback included.
    #[default]
    None,
    /// Any destination, through eve's egress proxy (never eve's own listeners, loopback,
    /// link-local or metadata addresses unless listed by name).
    All,
    /// Only these destinations, through eve's egress proxy. Entries are checked at build.
    #[serde(untagged)]
    Allow(Vec<String>),
}

impl Network {
    /// Whether `self` lets a process reach somewhere `base` does not.
    pub fn widens(&self, base: &Network) -> bool {
        match (self, base) {
            (Network::None, _) | (_, Network::All) => false,
            (Network::All, _) => true,
            (Network::Allow(list), Network::None) => !list.is_empty(),
            (Network::Allow(list), Network::Allow(allowed)) => {
                list.iter().any(|e| !allowed.contains(e))
            }
        }
    }

    /// A short human form: `none`, `all`, or the entries joined with `,`.
    pub fn describe(&self) -> String {
        match self {
            Network::None => "none".to_owned(),
            Network::All => "all".to_owned(),
            Network::Allow(list) if list.is_empty() => "none".to_owned(),
            Network::Allow(list) => list.join(","),
        }
    }
}

/// Resource limits of every process of an isolated call. Every field has a default that lets
/// ordinary work run (`pip install`, `git clone`, a Python script); see [`SandboxLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxLimits {
    /// Bytes of data memory per process.
    pub memory: u64,
    /// Processes (threads included).
    pub processes: u64,
    /// Largest file a process may write, in bytes.
    pub file_size: u64,
    /// CPU seconds per process.
    pub cpu_seconds: u64,
}

/// Default `limits.memory`: 4 GiB.
pub const DEFAULT_SANDBOX_MEMORY: u64 = 4 << 30;
/// Default `limits.processes`: 1024.
pub const DEFAULT_SANDBOX_PROCESSES: u64 = 1024;
/// Default `limits.file_size`: 8 GiB.
pub const DEFAULT_SANDBOX_FILE_SIZE: u64 = 8 << 30;
/// Default `limits.cpu_seconds`: 600.
pub const DEFAULT_SANDBOX_CPU_SECONDS: u64 = 600;

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory: DEFAULT_SANDBOX_MEMORY,
            processes: DEFAULT_SANDBOX_PROCESSES,
            file_size: DEFAULT_SANDBOX_FILE_SIZE,
            cpu_seconds: DEFAULT_SANDBOX_CPU_SECONDS,
        }
    }
}

/// What one tool, hook or connection says about its own sandbox (`sandbox:` and `network:` in
/// its front matter or file), as written; `None` = not said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxOverride {
    /// `sandbox:` as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// `network:` as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

impl SandboxOverride {
    /// Whether nothing is said.
    pub fn is_empty(&self) -> bool {
        self.provider.is_none() && self.network.is_none()
    }
}

/// Sandbox settings: `sandbox/sandbox.yaml`, and what each tool, hook and connection says about
/// its own sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// `isolated` (the default) or `host` (unconfined, opt-in).
    pub provider: Provider,
    /// Files seeded into every session workspace, relative to the root agent folder.
    pub workspace: Vec<String>,
    /// Default tool timeout in milliseconds.
    pub timeout_ms: u64,
    /// Default output cap in bytes.
    pub output_limit: u64,
    /// Default network of isolated processes.
    #[serde(default)]
    pub network: Network,
    /// Extra read-only paths inside the sandbox, as written (absolute, or `~/…` for the server's
    /// `HOME`).
    #[serde(default)]
    pub read: Vec<String>,
    /// Extra writable paths inside the sandbox, as written (absolute, or `~/…`).
    #[serde(default)]
    pub write: Vec<String>,
    /// Resource limits of isolated processes.
    #[serde(default)]
    pub limits: SandboxLimits,
    /// Tools (by name) whose front matter says `sandbox:` or `network:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, SandboxOverride>,
    /// Hooks (by name) whose front matter says `sandbox:` or `network:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: BTreeMap<String, SandboxOverride>,
    /// Connections (by name) whose file says `sandbox:` or `network:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connections: BTreeMap<String, SandboxOverride>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self {
            provider: Provider::Isolated,
            workspace: Vec::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            network: Network::None,
            read: Vec::new(),
            write: Vec::new(),
            limits: SandboxLimits::default(),
            tools: BTreeMap::new(),
            hooks: BTreeMap::new(),
            connections: BTreeMap::new(),
        }
    }
}

/// Where one process runs and what it may reach: the agent's settings with the tool's, hook's or
/// connection's own applied. Computed by [`Agent::effective_sandbox`] and its siblings, for the
/// runtime and for `eve info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EffectiveSandbox {
    /// `isolated` or `host`.
    pub provider: Provider,
    /// What an isolated process may reach; always [`Network::All`] under `host` (nothing
    /// confines it).
    pub network: Network,
}

impl EffectiveSandbox {
    fn new(provider: Provider, network: Network) -> Self {
        let network = match provider {
            Provider::Host => Network::All,
            Provider::Isolated => network,
        };
        Self { provider, network }
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

    /// The effective sandbox of a tool process: the tool's own `sandbox:`/`network:` over the
    /// agent's `sandbox.yaml` (a script, `run:` or dynamic-tool provider). The built-in `bash` is isolated unless the whole agent is `host`,
    /// with the agent's network. `None` for tools that start no process (HTTP tools, the other
    /// built-ins, subagents, MCP tools: see [`Agent::connection_sandbox`]).
    pub fn effective_sandbox(&self, tool: &Tool) -> Option<EffectiveSandbox> {
        match self.tool(&tool.name) {
            Some(own) => {
                if matches!(own.runner, Runner::Http(_)) {
                    return None;
                }
                let o = self.sandbox.tools.get(&own.name);
                Some(self.apply(o, self.sandbox.provider))
            }
            None if tool.name == "bash" => Some(self.bash_sandbox()),
            None => None,
        }
    }

    /// The effective sandbox of the built-in `bash` tool (model-written commands).
    pub fn bash_sandbox(&self) -> EffectiveSandbox {
        EffectiveSandbox::new(self.sandbox.provider, self.sandbox.network.clone())
    }

    /// The effective sandbox of a hook script: its own `sandbox:`, else the agent's provider.
    pub fn hook_sandbox(&self, hook: &Hook) -> EffectiveSandbox {
        self.apply(self.sandbox.hooks.get(&hook.name), self.sandbox.provider)
    }

    /// The effective sandbox of an MCP stdio server: `host` unless its connection says
    /// `sandbox: isolated` (whatever the agent's provider); `None` for servers over HTTP (no
    /// process).
    pub fn connection_sandbox(&self, connection: &Connection) -> Option<EffectiveSandbox> {
        if !matches!(connection.transport, Transport::Stdio { .. }) {
            return None;
        }
        let o = self.sandbox.connections.get(&connection.name);
        Some(self.apply(o, Provider::Host))
    }

    fn apply(&self, own: Option<&SandboxOverride>, default: Provider) -> EffectiveSandbox {
        // What the tool, hook or connection says wins, narrowing (`isolated` in a `host` agent)
        // as well as widening.
        let provider = own.and_then(|o| o.provider).unwrap_or(default);
        let network = own
            .and_then(|o| o.network.clone())
            .unwrap_or_else(|| self.sandbox.network.clone());
        EffectiveSandbox::new(provider, network)
    }
}

/// The model providers eve has a client for, by canonical name (the runtime's `Provider` list;
/// a runtime test keeps the two in step).
pub const KNOWN_PROVIDERS: [&str; 8] = [
    "openai",
    "openai-compatible",
    "anthropic",
    "mock",
    "deepseek",
    "ollama",
    "vllm",
    "llamacpp",
];

/// Whether `name` is a provider eve knows, in any spelling the runtime accepts
/// (case-insensitive; `llama.cpp`, `openai_compatible`, …).
pub fn is_known_provider(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    KNOWN_PROVIDERS.contains(&name.as_str())
        || matches!(
            name.as_str(),
            "openai_compatible" | "openai-compat" | "llama.cpp" | "llama-cpp" | "llama_cpp"
        )
}
