//! `agent.yaml`, resolved: the model and how it is asked, memory, the environment probe, the
//! turn strategy and its critic, how a new build activates and rolls back, and the model
//! providers eve knows. The file's `limits:` and `compaction:` have their own module, `limits`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Approval, Compaction, Limits, Web};

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
    /// Model prices by model id (`provider/model`), over the built-in table (`agent.yaml`
    /// `prices:`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, super::ModelPrice>,
    /// Whether the built-in tools are offered: with [`AgentConfig::builtins`] absent, `true`
    /// offers those on by default ([`crate::DEFAULT_TOOL_EFFECTS`] but the opt-in ones). Use
    /// [`AgentConfig::builtins_on`] to know which are on.
    pub default_tools: bool,
    /// The built-in tools that are on, by name, when `default_tools` in `agent.yaml` is a list or
    /// a map; absent when it is a bool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtins: Option<Vec<String>>,
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
    /// Whether the agent is offered the built-in `ask_question` tool (`ask_question: true`): the
    /// turn parks on a question to the user and resumes with the answer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ask_question: bool,
    /// Whether the agent is offered the built-in `no_reply` tool (`no_reply: true`): it ends the
    /// turn without a reply.
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_reply: bool,
    /// `web:`: where the built-in `web_fetch` may go, its caps, and `web_search`'s provider.
    #[serde(default, skip_serializing_if = "Web::is_default")]
    pub web: Web,
    /// `retention:`: how long a session is kept after it expired (`limits.session_timeout`), in
    /// milliseconds, before a server prunes it with its workspace, blobs and notes; `0` prunes it
    /// as soon as it expires. Absent (`retention: default`): expired sessions are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<u64>,
    /// `state:`: durable per-session state slots by name (eve's `defineState`): every script
    /// and `run:` tool of the agent reads them on stdin and updates them in its result.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub state: BTreeMap<String, StateSlot>,
}

/// One durable state slot of a session (`state: {NAME: {initial, max_bytes}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateSlot {
    /// The value a session starts with (eve's `initial()`).
    pub initial: serde_json::Value,
    /// The largest the slot's JSON may be, in bytes: an update over it fails the call.
    pub max_bytes: u64,
}

/// The cap of a state slot's JSON unless `max_bytes` says otherwise (64 KiB).
pub const DEFAULT_STATE_MAX_BYTES: u64 = 64 * 1024;
/// The largest `max_bytes` a state slot may have (1 MiB).
pub const STATE_MAX_BYTES_LIMIT: u64 = 1024 * 1024;
/// The key of a script tool's stdin and result that carries state (see docs/tools.md).
pub const STATE_KEY: &str = "$state";

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

/// What a message that arrives while a turn runs does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TurnPolicy {
    /// Wait for the running turn to finish, then start a new one.
    Queue,
    /// Fold the message into the running turn at the next step boundary (eve's default).
    #[default]
    Steer,
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

impl AgentConfig {
    /// The built-in tools this agent is offered, in the order of [`crate::DEFAULT_TOOL_EFFECTS`];
    /// `web_search` only when `web.search` names a provider
    /// (an authored tool of the same name replaces one: see [`crate::Agent::replaced_builtin`]).
    pub fn builtins_on(&self) -> Vec<&'static str> {
        crate::DEFAULT_TOOL_EFFECTS
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| match &self.builtins {
                Some(on) => on.iter().any(|n| n == name),
                None => self.default_tools && !crate::OPT_IN_TOOLS.contains(name),
            })
            // `web_search` needs a provider to ask.
            .filter(|name| *name != crate::WEB_SEARCH || self.web.search.is_some())
            .collect()
    }

    /// Whether built-in `name` is on.
    pub fn builtin_on(&self, name: &str) -> bool {
        self.builtins_on().contains(&name)
    }
}
