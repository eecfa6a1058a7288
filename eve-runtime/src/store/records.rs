//! Rows of the store and the operations that write them.
//!
//! Plain data shared by every [`super::Store`] implementation. Times are milliseconds since the Unix
//! epoch; event times are rendered as RFC 3339 on the wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Renders epoch milliseconds as RFC 3339 with milliseconds (`2026-11-30T06:43:33.606Z`).
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }
        impl $name {
            /// The stored spelling.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
            /// Parses the stored spelling.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some(Self::$variant),)+ _ => None }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// Where a session is.
    SessionStatus {
        /// Waiting for the next user message.
        Idle = "idle",
        /// A turn is in progress (or was, when its process died: resume continues it).
        Running = "running",
        /// A turn is parked on input (approvals).
        Waiting = "waiting",
    }
}

string_enum! {
    /// Where a turn is.
    TurnStatus {
        /// Steps are being taken.
        Running = "running",
        /// Parked on input.
        Waiting = "waiting",
        /// Finished normally.
        Completed = "completed",
        /// Stopped by an error or a limit.
        Failed = "failed",
        /// Stopped by a cancel request.
        Cancelled = "cancelled",
    }
}

string_enum! {
    /// What a running turn does next.
    TurnPhase {
        /// Call the model for step `step_index`.
        Model = "model",
        /// Settle the tool calls the model asked for in step `step_index`, then complete the step.
        Tools = "tools",
        /// Parked on input for calls of an earlier step.
        Waiting = "waiting",
        /// Input answered: settle the parked calls at the start of step `step_index`, then call the
        /// model in the same step.
        Resume = "resume",
        /// Nothing left to do.
        Done = "done",
    }
}

string_enum! {
    /// Where one tool call is.
    CallStatus {
        /// Recorded, not started.
        Pending = "pending",
        /// Started; if the process dies now, resume decides by the tool's effect.
        Running = "running",
        /// Finished successfully; its output is journaled and never re-run.
        Completed = "completed",
        /// Finished with an error (including invalid input, refused by a breaker, unknown tool).
        Failed = "failed",
        /// Interrupted while running; outcome unknown (a `write` tool is not re-run).
        Interrupted = "interrupted",
        /// A person denied it.
        Denied = "denied",
        /// The turn was cancelled before it finished.
        Cancelled = "cancelled",
    }
}

impl CallStatus {
    /// Whether the call is settled (its result is in the context).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }
}

string_enum! {
    /// Approval state of one tool call.
    ApprovalState {
        /// No approval needed (or not decided yet).
        None = "none",
        /// Waiting for an answer.
        Pending = "pending",
        /// Approved.
        Approved = "approved",
        /// Denied.
        Denied = "denied",
        /// Judged safe by the reviewer of an `approval: auto` tool: runs without asking.
        Reviewed = "reviewed",
    }
}

string_enum! {
    /// Where one input request is.
    RequestStatus {
        /// Waiting for an answer.
        Pending = "pending",
        /// Approved.
        Approved = "approved",
        /// Denied.
        Denied = "denied",
        /// Withdrawn (the turn was cancelled or reset).
        Cancelled = "cancelled",
    }
}

/// Token totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// What the tokens cost in US dollars, where the models' prices are known (a turn's; a
    /// session's cost is [`SessionRecord::cost_usd`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Prompt tokens served from cache.
    pub(crate) cache_read_tokens: u64,
    /// Prompt tokens written to cache.
    pub(crate) cache_write_tokens: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl UsageTotals {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// A session row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// `wrun_<ULID>`.
    pub id: String,
    /// Where it is.
    pub status: SessionStatus,
    /// The build it is pinned to.
    pub build_hash: String,
    /// The agent's name.
    pub agent_name: String,
    /// Parent session (subagents).
    pub parent_id: Option<String>,
    /// Parent call (subagents).
    pub parent_call_id: Option<String>,
    /// Schedule that started it.
    pub schedule: Option<String>,
    /// Turns started so far (the next turn's sequence number).
    pub turn_count: u64,
    /// Events stored so far (the next event's index). Maintained by the store.
    pub event_count: u64,
    /// Messages stored so far (the next message's sequence). Maintained by the store.
    pub message_count: u64,
    /// First message of the model context. Maintained by the store (checkpoints, clears).
    pub context_start: u64,
    /// Token totals.
    pub usage: UsageTotals,
    /// Cost so far in US dollars (0 when the price is unknown).
    pub cost_usd: f64,
    /// Skills loaded in this context (pinned across compaction).
    pub loaded_skills: Vec<String>,
    /// Tools with `approval: once` already approved in this session.
    pub approved_tools: Vec<String>,
    /// A cancel was requested for the running turn.
    pub cancel_requested: bool,
    /// Creation time.
    pub created_at: i64,
    /// Last change.
    pub updated_at: i64,
    /// The principal that started it (`jwt:<sub>`, `token:NAME`, `basic:user`, `slack:U…`,
    /// `local`…); a subagent's session has its root's. `None`: no principal started it (a
    /// schedule, a signed webhook, or a session stored before owners were recorded), so only
    /// operators reach it. Written once, when the session is inserted.
    #[serde(default)]
    pub owner: Option<String>,
}

impl SessionRecord {
    /// A new idle session on a build, with nothing in it yet.
    pub fn new(
        id: String,
        build_hash: String,
        agent_name: String,
        schedule: Option<String>,
        now: i64,
    ) -> Self {
        Self {
            id,
            status: SessionStatus::Idle,
            build_hash,
            agent_name,
            parent_id: None,
            parent_call_id: None,
            schedule,
            turn_count: 0,
            event_count: 0,
            message_count: 0,
            context_start: 0,
            usage: UsageTotals::default(),
            cost_usd: 0.0,
            loaded_skills: Vec::new(),
            approved_tools: Vec::new(),
            cancel_requested: false,
            created_at: now,
            updated_at: now,
            owner: None,
        }
    }
}

/// Which sessions to list.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only sessions started by this schedule.
    pub schedule: Option<String>,
    /// Only sessions in this status.
    pub status: Option<SessionStatus>,
    /// At most this many (0 = no limit).
    pub limit: usize,
    /// Only sessions started by this principal (see [`SessionRecord::owner`]).
    pub owner: Option<String>,
}

/// A turn row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Session.
    pub session_id: String,
    /// Sequence within the session (`turn_<seq>`).
    pub seq: u64,
    /// Where it is.
    pub status: TurnStatus,
    /// What it does next.
    pub phase: TurnPhase,
    /// Current step.
    pub step_index: u64,
    /// Whether `step.started` was emitted for `step_index`.
    pub step_started: bool,
    /// Build it runs on.
    pub build_hash: String,
    /// The inbox message that started it.
    pub inbox_id: Option<String>,
    /// Start time.
    pub started_at: i64,
    /// End time.
    pub ended_at: Option<i64>,
    /// Why it stopped early (`max_steps_per_turn`, `max_tokens`, `cancelled`, an error).
    pub stop_reason: Option<String>,
    /// Tokens used by this turn.
    pub usage: UsageTotals,
}

impl TurnRecord {
    /// `turn_<seq>`.
    pub(crate) fn turn_id(&self) -> String {
        format!("turn_{}", self.seq)
    }
}

/// A journaled model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Session.
    pub session_id: String,
    /// Turn.
    pub turn_seq: u64,
    /// Step within the turn.
    pub step_index: u64,
    /// `provider/model`.
    pub model_id: String,
    /// The assembled response (JSON of the model module's `ModelResponse`).
    pub response: Value,
    /// When it completed.
    pub at: i64,
}

/// A journaled tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// Session.
    pub session_id: String,
    /// The model's call id.
    pub call_id: String,
    /// Turn.
    pub turn_seq: u64,
    /// Step that asked for it.
    pub step_index: u64,
    /// Order within the step.
    pub position: u64,
    /// `tool-call` or `load-skill`.
    pub kind: String,
    /// Tool name.
    pub name: String,
    /// Input as the model gave it.
    pub input: Value,
    /// `EVE_IDEMPOTENCY_KEY`: stable across retries.
    pub idempotency_key: String,
    /// `read`, `idempotent` or `write`.
    pub effect: String,
    /// Where it is.
    pub status: CallStatus,
    /// Approval state.
    pub approval: ApprovalState,
    /// Result shown to the model (and in `action.result`).
    pub output: Option<Value>,
    /// Whether the result is an error.
    pub is_error: bool,
    /// Times it was started.
    pub attempts: u32,
    /// Last start.
    pub started_at: Option<i64>,
    /// End.
    pub ended_at: Option<i64>,
}

/// A durable question to a person (tool approvals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequestRecord {
    /// Request id.
    pub id: String,
    /// Session.
    pub session_id: String,
    /// Turn.
    pub turn_seq: u64,
    /// Step it was asked in.
    pub step_index: u64,
    /// Call it is about.
    pub call_id: String,
    /// Tool it is about.
    pub tool_name: String,
    /// `tool-approval`.
    pub kind: String,
    /// The question.
    pub prompt: String,
    /// The action as shown (`{callId, input, kind, toolName}`).
    pub action: Value,
    /// Where it is.
    pub status: RequestStatus,
    /// Reason given with the answer.
    pub reason: Option<String>,
    /// Asked at.
    pub created_at: i64,
    /// Answered at.
    pub answered_at: Option<i64>,
    /// The principal that answered (`token:EVE_API_TOKEN`, `jwt:<sub>`, `slack:U…`, `local`…).
    #[serde(default)]
    pub responder: Option<String>,
}

/// An accepted message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxRecord {
    /// `msg_<ULID>`.
    pub id: String,
    /// Session.
    pub session_id: String,
    /// Text.
    pub text: String,
    /// Accepted at.
    pub accepted_at: i64,
    /// Turn that took it.
    pub consumed_turn: Option<u64>,
    /// What the message asks of the turn that takes it (`outputSchema`, `clientContext`,
    /// `turnPolicy`: [`crate::features::turn_input`]); `None` for a plain message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

impl InboxRecord {
    /// A message accepted into `session` at `at`, with a new `msg_<ULID>` id, not yet taken.
    pub fn new(session: &str, text: &str, at: i64) -> Self {
        Self {
            id: format!("msg_{}", ulid::Ulid::new()),
            session_id: session.to_owned(),
            text: text.to_owned(),
            accepted_at: at,
            consumed_turn: None,
            input: None,
        }
    }
}

/// What kind of message row this is.
pub const MESSAGE_KIND_MESSAGE: &str = "message";
/// A compaction checkpoint: the context starts here.
pub const MESSAGE_KIND_CHECKPOINT: &str = "checkpoint";

/// One row of the append-only message log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// Session.
    pub(crate) session_id: String,
    /// Sequence.
    pub seq: u64,
    /// Turn it belongs to.
    pub turn_seq: Option<u64>,
    /// [`MESSAGE_KIND_MESSAGE`] or [`MESSAGE_KIND_CHECKPOINT`].
    pub kind: String,
    /// The message (JSON of the model module's `Message`, or a checkpoint body).
    pub body: Value,
    /// Stored at.
    pub at: i64,
}

/// A stored event. Its wire form (the NDJSON envelope) is [`crate::wire`]'s.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Session.
    pub session_id: String,
    /// Per-session index, from 0.
    pub index: u64,
    /// `evt_<ULID>`.
    pub id: String,
    /// Event type (`turn.started`, …).
    pub kind: String,
    /// Event data.
    pub data: Value,
    /// Time, epoch milliseconds.
    pub at: i64,
}

/// A tool's circuit breaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerRecord {
    /// Tool name.
    pub tool: String,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Refused until (epoch ms; 0 = closed).
    pub open_until: i64,
    /// Next open period.
    pub backoff_ms: i64,
}

/// Who wants a session's lease.
#[derive(Debug, Clone)]
pub struct LeaseClaim {
    /// Session.
    pub session_id: String,
    /// Unique id of the claiming process (and runtime).
    pub holder: String,
    /// Its pid.
    pub pid: u32,
    /// Its host.
    pub host: String,
    /// How long the lease lasts without renewal.
    pub ttl_ms: i64,
}

/// A session's lease as stored: who drives it, until when, under which fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Session.
    pub(crate) session_id: String,
    /// Holder id (empty once released, where the backend keeps the row).
    pub holder: String,
    /// Its pid.
    pub pid: u32,
    /// Its host.
    pub host: String,
    /// Expiry, epoch milliseconds.
    pub expires_at: i64,
    /// The fencing token: larger for every new holder of this session, never reused. A commit
    /// carrying an older token is refused ([`super::StoreError::Fenced`]).
    pub token: u64,
}

/// A commit's claim to speak for a session: the fencing token of the lease its writer holds.
/// The store refuses the whole batch when the session's lease has moved to a newer holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// Session.
    pub session_id: String,
    /// Token of the lease the writer holds.
    pub token: u64,
}

/// Result of a lease claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// It is ours.
    Acquired,
    /// Another live process drives the session.
    HeldBy {
        /// Its pid.
        pid: u32,
        /// Its host.
        host: String,
    },
}

/// Result of a lease claim on a session that answers with its fencing token
/// ([`super::Store::take_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseTaken {
    /// It is ours, under this fencing token.
    Acquired {
        /// The fencing token every commit of the session carries while we hold it.
        token: u64,
    },
    /// Another live process drives the session.
    HeldBy {
        /// Its pid.
        pid: u32,
        /// Its host.
        host: String,
    },
    /// There is no such session: nothing was written.
    NoSession,
}

/// One write.
#[derive(Debug, Clone)]
pub enum Op {
    /// A new session.
    InsertSession(SessionRecord),
    /// Writes the fields the engine owns (status, build, turn count, usage, cost, skills,
    /// approvals); counters the store owns are left alone.
    UpdateSession(SessionRecord),
    /// Marks (or clears) a cancel request.
    SetCancel {
        /// Session.
        session_id: String,
        /// Requested.
        requested: bool,
    },
    /// Empties the model context (the next message starts it).
    ClearContext {
        /// Session.
        session_id: String,
    },
    /// An accepted message.
    InsertInbox(InboxRecord),
    /// A turn took the message.
    ConsumeInbox {
        /// Message id.
        id: String,
        /// Turn.
        turn_seq: u64,
    },
    /// Appends a message (a checkpoint also moves the context start to it).
    AppendMessage {
        /// Session.
        session_id: String,
        /// Turn.
        turn_seq: Option<u64>,
        /// Kind.
        kind: String,
        /// Body.
        body: Value,
    },
    /// Inserts or replaces a turn.
    PutTurn(TurnRecord),
    /// Journals a model response.
    PutStep(StepRecord),
    /// Inserts or replaces a tool call.
    PutToolCall(ToolCallRecord),
    /// Inserts or replaces an input request (asking it, or withdrawing it).
    PutInputRequest(InputRequestRecord),
    /// Settles a pending input request with its answer (status, reason, time, responder), as a
    /// compare-and-set in the commit: the batch is refused whole with
    /// [`super::StoreError::AlreadyAnswered`] (carrying the stored answer) when the request is no
    /// longer pending, so of two answers racing, across processes or nodes, exactly one commits;
    /// and with [`super::StoreError::InputsMoved`] when the other requests of its turn that are
    /// still pending are not exactly `others_pending` (another answer settled one of them since
    /// the caller read them: read again and retry, so exactly one answer sees the wait resolved).
    AnswerInputRequest {
        /// The request as answered.
        request: InputRequestRecord,
        /// Ids of the other requests of the same session and turn the caller saw pending.
        others_pending: Vec<String>,
    },
    /// Inserts or replaces a breaker.
    PutBreaker(BreakerRecord),
    /// Subagent links and waits, dynamic tools, hook cursors.
    Composition(super::composition::CompositionOp),
    /// Memory notes and session facts.
    Note(super::notes::NoteOp),
    /// Releases and their audit events.
    Release(super::releases::ReleaseOp),
    /// Appends an event.
    Event {
        /// Session.
        session_id: String,
        /// Type.
        kind: String,
        /// Data.
        data: Value,
    },
}

impl Op {
    /// The session this operation writes, when it writes one session's rows.
    pub fn session_id(&self) -> Option<&str> {
        use super::composition::CompositionOp as C;
        Some(match self {
            Op::InsertSession(s) | Op::UpdateSession(s) => &s.id,
            Op::SetCancel { session_id, .. }
            | Op::ClearContext { session_id }
            | Op::AppendMessage { session_id, .. }
            | Op::Event { session_id, .. } => session_id,
            Op::InsertInbox(m) => &m.session_id,
            Op::PutTurn(t) => &t.session_id,
            Op::PutStep(s) => &s.session_id,
            Op::PutToolCall(c) => &c.session_id,
            Op::PutInputRequest(r) | Op::AnswerInputRequest { request: r, .. } => &r.session_id,
            Op::Composition(C::InsertLink(l)) => &l.session_id,
            Op::Composition(C::PutSubagentCall(c)) => &c.parent_id,
            Op::Composition(C::PutDynamicTools { session_id, .. })
            | Op::Composition(C::HookCursor { session_id, .. }) => session_id,
            Op::ConsumeInbox { .. } | Op::PutBreaker(_) | Op::Note(_) | Op::Release(_) => {
                return None;
            }
        })
    }
}

/// Operations committed together.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// In order.
    pub ops: Vec<Op>,
    /// Sync to disk before returning (accepted messages and answers: what an API promised).
    pub(crate) durable: bool,
    /// Leases the writer holds: the batch is refused whole ([`super::StoreError::Fenced`]) if
    /// any of these sessions has a newer lease holder.
    pub fences: Vec<Fence>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch that is synced to disk at commit.
    pub fn durable() -> Self {
        Self {
            ops: Vec::new(),
            durable: true,
            fences: Vec::new(),
        }
    }

    /// Adds an operation.
    pub fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Adds an event.
    pub fn event(&mut self, session_id: &str, kind: &str, data: Value) -> &mut Self {
        self.ops.push(Op::Event {
            session_id: session_id.to_owned(),
            kind: kind.to_owned(),
            data,
        });
        self
    }

    /// Whether there is nothing to write.
    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// What a commit assigned.
#[derive(Debug, Clone, Default)]
pub struct Committed {
    /// Stored events, in order, with their indexes.
    pub events: Vec<StoredEvent>,
    /// Sequence numbers of appended messages, in order.
    pub message_seqs: Vec<u64>,
}
