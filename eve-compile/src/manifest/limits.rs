//! What bounds a turn and a session: `limits:` (steps, tokens, cost, time, model-call budgets),
//! the phases a turn moves through as it spends its budget, and `compaction:`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Longest wait, in seconds, one call of the built-in `sleep` may ask for (default
    /// [`DEFAULT_MAX_SLEEP_SECONDS`]); a longer one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sleep_seconds: Option<u64>,
    /// `session_timeout`: milliseconds a session may stay idle before it expires (answers
    /// `410 session_expired`). `eve build` fills in the default, [`DEFAULT_SESSION_TIMEOUT_MS`];
    /// absent (`session_timeout: false`): sessions never expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_timeout_ms: Option<u64>,
}

/// `limits.session_timeout` when `agent.yaml` sets none: 30 days, as eve's.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 30 * 24 * 3_600_000;

/// The longest `sleep` when `limits.max_sleep_seconds` is absent: one hour.
pub const DEFAULT_MAX_SLEEP_SECONDS: u64 = 3_600;

/// Model prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input: f64,
    /// Per million output (completion) tokens.
    pub output: f64,
}

/// A model's prices in US dollars per million tokens (`agent.yaml` `prices:`), for the usage
/// line, the costs `eve sessions show` and the console show, and `max_cost_usd`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Per million input (prompt) tokens not read from the provider's cache.
    pub input: f64,
    /// Per million output (completion) tokens.
    pub output: f64,
    /// Per million input tokens read from the provider's cache (absent: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<f64>,
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
            max_sleep_seconds: None,
            session_timeout_ms: None,
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
