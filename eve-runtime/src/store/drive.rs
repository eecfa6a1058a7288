//! What the run loop needs to know about a session before it acts, in one read.
//!
//! The engine's run loop looks at a session before each turn (and resumes from it): the session
//! row (status, cancel flag, counters), its latest turn (is one open?), the accepted messages no
//! turn took yet, the requests it waits on, and for a subagent the link to its parent and the
//! budget passed down. Read separately, that is five to seven round trips per message, each on
//! its own snapshot; [`super::Store::drive_state`] returns all of it from one consistent read.

use super::composition::{Budget, DynamicToolRecord, SubagentLink};
use super::records::{
    InboxRecord, InputRequestRecord, MessageRecord, SessionRecord, TurnRecord, UsageTotals,
};

/// A session's state as the run loop reads it, from one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct DriveState {
    /// The session row.
    pub session: SessionRecord,
    /// Its latest turn (open when `Running` or `Waiting`).
    pub last_turn: Option<TurnRecord>,
    /// Accepted messages no turn has taken yet, oldest first (the inbox head is the first).
    pub inbox: Vec<InboxRecord>,
    /// The session's own pending input requests, oldest first.
    pub pending_requests: Vec<InputRequestRecord>,
    /// For a child (subagent) session, its link (the agent path it runs); `None` for a root.
    pub link: Option<SubagentLink>,
    /// For a child session, the budget its parent passed down with the message of
    /// `last_turn` (the turn's `inbox_id`); `None` otherwise.
    pub budget: Option<Budget>,
    /// Whether any call of this session created a child session.
    pub has_children: bool,
    /// Token totals and cost of every session below this one (zero without children).
    pub descendant_usage: (UsageTotals, f64),
    /// Whether dynamic tools were resolved for `last_turn`.
    pub dynamic_resolved: bool,
}

impl DriveState {
    /// The latest turn, when it is still open (running or parked on input).
    pub fn open_turn(&self) -> Option<&TurnRecord> {
        self.last_turn.as_ref().filter(|t| {
            matches!(
                t.status,
                super::records::TurnStatus::Running | super::records::TurnStatus::Waiting
            )
        })
    }

    /// The manifest path of the agent the session runs (`""`: the root agent).
    pub fn agent_path(&self) -> &str {
        self.link.as_ref().map_or("", |l| l.agent_path.as_str())
    }
}

/// What the first step of a new turn reads about its session before the model call, from one
/// snapshot ([`super::Store::turn_view`]): the model context and the session's dynamic tools.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnView {
    /// The model context, as [`super::Store::context`] reads it.
    pub context: Vec<MessageRecord>,
    /// The dynamic tools journaled with the session, as [`super::Store::dynamic_tools`] reads them.
    pub dynamic_tools: Vec<DynamicToolRecord>,
}
