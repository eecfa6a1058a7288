//! Hooks: scripts run on runtime events, and the events there are to subscribe to.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Runner;

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
