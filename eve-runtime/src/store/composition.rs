//! Rows of composition: subagent sessions and the parent calls waiting on them, dynamic tool
//! definitions journaled with a session, and observe-hook delivery cursors.
//!
//! They are written through [`super::Op::Composition`] in the same batches as the engine's own rows
//! (a subagent call marks the parent call running, creates the child and puts the message in its
//! inbox in one durable commit), and read back by the engine on resume. The SQL is the SQLite
//! backend's (`sqlite/composition.rs`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A child session's link to the call that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentLink {
    /// The child session.
    pub session_id: String,
    /// Its parent session.
    pub parent_id: String,
    /// The parent's call that created it (the token is `<parent_id>:<call_id>`).
    pub call_id: String,
    /// The root of the session tree.
    pub root_id: String,
    /// `path` of the subagent in the manifest (`subagents/NAME`, nested `…/subagents/NAME`).
    pub agent_path: String,
    /// Creation time.
    pub created_at: i64,
}

impl SubagentLink {
    /// The continuation token: `<parentSessionId>:<callId>`.
    pub fn task_id(&self) -> String {
        format!("{}:{}", self.parent_id, self.call_id)
    }
}

/// What a child may still spend, passed down from its parent when a call starts a child turn.
/// Absolute caps: in the child's own session totals, and an epoch-millisecond deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// The child's session token total may not reach this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The child's session cost may not reach this (US dollars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// The child's turn must end by then (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
}

/// A parent call waiting on a child's turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentCall {
    /// Parent session.
    pub parent_id: String,
    /// Parent turn.
    pub turn_seq: u64,
    /// Parent call.
    pub call_id: String,
    /// Child session.
    pub child_id: String,
    /// The message put in the child's inbox; the turn that takes it holds the answer.
    pub inbox_id: String,
    /// Continuation token of the child.
    pub task_id: String,
    /// What the child's turn may spend.
    pub budget: Budget,
    /// Creation time.
    pub created_at: i64,
}

/// A tool definition a dynamic tool script returned, journaled with the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicToolRecord {
    /// Session.
    pub session_id: String,
    /// Tool name offered to the model.
    pub name: String,
    /// The script tool that defined it.
    pub provider: String,
    /// Description.
    pub description: String,
    /// Input schema.
    pub input_schema: Value,
    /// The provider's definition (runner, env, timeout, approval, effect), as in the manifest of
    /// `build_hash`: calls run it even after the session moved to a build without it.
    pub provider_tool: Value,
    /// The build the provider's script lives in.
    pub build_hash: String,
    /// Turn at which it was resolved.
    pub turn_seq: u64,
    /// When.
    pub resolved_at: i64,
}

/// Writes of composition rows.
#[derive(Debug, Clone)]
pub enum CompositionOp {
    /// A new child session's link.
    InsertLink(SubagentLink),
    /// A parent call now waits on a child's turn.
    PutSubagentCall(SubagentCall),
    /// Journals the tools one provider resolved (replacing that provider's earlier ones).
    PutDynamicTools {
        /// Session.
        session_id: String,
        /// Providers whose earlier definitions are replaced.
        providers: Vec<String>,
        /// New definitions.
        tools: Vec<DynamicToolRecord>,
        /// Turn the resolution is for.
        turn_seq: u64,
        /// What happened (errors of scripts that printed no usable map).
        detail: Value,
    },
    /// Moves a hook's delivery cursor.
    HookCursor {
        /// Session.
        session_id: String,
        /// Hook name.
        hook: String,
        /// Next event index to deliver.
        delivered: u64,
    },
}
