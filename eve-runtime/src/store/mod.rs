//! The durable store: every accepted message, model response, tool call, approval and event.
//!
//! The engine never keeps state that only lives in memory: it writes a [`Batch`] of operations (state
//! changes plus the events that announce them) through [`Store::commit`], atomically, and a resumed
//! process reads the current state back (session row, open turn, its calls) instead of replaying
//! history. [`Store`] has two backends: [`SqliteStore`], the embedded default at `.eve/eve.db`,
//! and [`PgStore`], PostgreSQL shared by a fleet of nodes (one contract suite runs against both).
//!
//! This module and the record types are backend-neutral: no driver type appears here. Each
//! record's columns and their conversions are described once, in `rows/`, for both backends;
//! everything SQLite lives under `sqlite/`, which maps its driver's errors into [`StoreError`]
//! (keeping their message). Who counts as a dead lease holder is a [`Liveness`] policy the
//! store is given, not SQL; the run loop's combined read is [`Store::drive_state`].

mod builds;
mod channels;
mod check;
mod composition;
mod drive;
mod liveness;
mod notes;
mod postgres;
mod records;
mod releases;
mod rows;
mod schedules;
mod sqlite;
mod workspaces;

pub use builds::{BuildInfo, StoredBuild};
pub use channels::{
    CHANNEL_ROWS_KEPT_MS, ChannelAccept, ChannelDelivery, ChannelReplyRecord, ChannelReplyUpdate,
    FIRST_REPLY_TOKEN, ReplyClaim, ReplyHeld, Sending,
};
pub use check::{CheckCounts, CheckItem, CheckStatus, StoreCheck};
pub use composition::{Budget, CompositionOp, DynamicToolRecord, SubagentCall, SubagentLink};
pub use drive::{DriveState, TurnView};
pub use liveness::{ExpiryOnly, Liveness, LocalHost, ProcessRef, lease_is_live, pid_alive};
pub use notes::{NoteOp, NoteRecord};
pub use postgres::{
    ImportReport, PgOptions, PgStore, SpotCheck, TableImport, import_sqlite, redact_url,
};
pub use records::*;
pub use releases::{
    Checks, GateCase, GateReport, RELEASE_STREAM, ReleaseOp, ReleaseRecord, ReleaseStatus,
    SourceRevision,
};
pub use schedules::*;
pub use sqlite::SqliteStore;
pub use workspaces::{BlobsCollected, WorkspaceCheckpoint, WorkspaceEntry, WorkspacePut};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error (the backend's message).
    #[error("database error: {0}")]
    Backend(String),
    /// A JSON column could not be encoded or decoded.
    #[error("stored JSON is invalid: {0}")]
    Json(#[from] serde_json::Error),
    /// Opening the database folder failed.
    #[error("cannot open the store: {0}")]
    Io(#[from] std::io::Error),
    /// The store's writer is gone (the store is shutting down).
    #[error("the store's writer has stopped")]
    WriterGone,
    /// A transaction could not be committed; every write in it was rolled back.
    #[error("commit failed: {0}")]
    Commit(String),
    /// The database was written by a newer eve.
    #[error(
        "the database schema version {found} is newer than this eve supports ({supported}); upgrade eve"
    )]
    TooNew {
        /// Version found in the file.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
    /// A row that must exist does not (for example an operation on an unknown session).
    #[error("{0} not found")]
    NotFound(String),
    /// The store is not the one this project wrote, is missing history, or is damaged: refused
    /// at start (the message names the file and how to restore it).
    #[error("{0}")]
    Integrity(String),
    /// A commit was refused because another holder took the session's lease after the writer
    /// got it (the writer was paused or cut off past its lease): nothing of the batch was
    /// written. The writer must stop driving the session.
    #[error(
        "session {session}: the lease moved to a newer holder (token {current}, ours {ours}); the commit was refused"
    )]
    Fenced {
        /// Session.
        session: String,
        /// Our token.
        ours: u64,
        /// The current holder's token.
        current: u64,
    },
    /// The database server cannot be reached or refused the connection (the URL is shown with
    /// its password redacted).
    #[error("cannot connect to the store at {url}: {cause}")]
    Unreachable {
        /// The URL, password redacted.
        url: String,
        /// Why.
        cause: String,
    },
    /// A value in the database is not one this version understands.
    #[error("unexpected stored value: {0}")]
    Corrupt(String),
    /// A read hit damaged storage: a page SQLite cannot decode (`SQLITE_CORRUPT`), a stored
    /// value that is not of its column's type, or PostgreSQL's
    /// `data_corrupted`/`index_corrupted`. `eve store check` says where; restore a backup.
    #[error("the store is damaged: {0}")]
    Damaged(String),
    /// An answer to an input request that was answered (or withdrawn) first: the batch was
    /// refused whole. Carries the request as stored, with the answer that won.
    #[error("input request {} was already answered ({})", .0.id, .0.status)]
    AlreadyAnswered(Box<InputRequestRecord>),
    /// An answer's view of its turn's pending requests is stale (another answer settled one of
    /// them first): the batch was refused whole; read them again and retry.
    #[error("the pending requests of session {session} turn {turn} changed during the answer")]
    InputsMoved {
        /// Session.
        session: String,
        /// Turn.
        turn: u64,
    },
}

impl StoreError {
    /// Whether this error means stored data cannot be read back as it was written (damaged
    /// pages, a value that is not its column's type, stored JSON that does not parse): the
    /// reader must say so, never treat it as "nothing there".
    pub(crate) fn is_damage(&self) -> bool {
        match self {
            Self::Damaged(_) | Self::Json(_) | Self::Corrupt(_) => true,
            // A write that read a damaged page (the writer's error keeps SQLite's text).
            Self::Commit(m) => m.contains("disk image is malformed"),
            _ => false,
        }
    }

    /// Whether this error means the storage cannot be written now (disk full, read-only file
    /// system, I/O errors) rather than a problem with the request: the caller should answer
    /// "unavailable, try later", never claim the write happened.
    pub(crate) fn is_storage_fault(&self) -> bool {
        match self {
            Self::Backend(m) | Self::Commit(m) => {
                let m = m.to_ascii_lowercase();
                [
                    "full",
                    "readonly",
                    "read-only",
                    "disk i/o",
                    "i/o error",
                    "unable to open",
                ]
                .iter()
                .any(|needle| m.contains(needle))
            }
            Self::Io(_) => true,
            _ => false,
        }
    }
}

/// Tables whose rows belong to one session, by their session column (what pruning deletes,
/// in both backends).
pub(crate) const SESSION_TABLES: &[(&str, &str)] = &[
    ("inbox", "session_id"),
    ("messages", "session_id"),
    ("turns", "session_id"),
    ("steps", "session_id"),
    ("tool_calls", "session_id"),
    ("input_requests", "session_id"),
    ("events", "session_id"),
    ("leases", "session_id"),
    ("subagent_sessions", "session_id"),
    ("subagent_calls", "parent_id"),
    ("dynamic_tools", "session_id"),
    ("dynamic_resolutions", "session_id"),
    ("hook_cursors", "session_id"),
    ("channel_replies", "session_id"),
    ("workspace_checkpoints", "session_id"),
    ("sessions", "id"),
];

/// Namespaces of the notes a session owns (its probe, its senders, its session memory, what its
/// turns were asked, its tool stubs, its turns' trace contexts, its granted budgets, its tools'
/// state, its owner's attributes).
pub(crate) fn session_note_namespaces(session: &str) -> [String; 10] {
    [
        format!("probe:{session}"),
        format!("sender:{session}"),
        format!("memory:session:{session}"),
        format!("memory-offer:{session}"),
        crate::features::turn_input::namespace(session),
        crate::features::stubs::namespace(session),
        crate::telemetry::namespace(session),
        crate::features::session_limit::namespace(session),
        crate::features::state::namespace_of(session),
        crate::tenancy::owner_namespace(session),
    ]
}

/// Result alias of the store.
pub type StoreResult<T> = Result<T, StoreError>;

/// A durable store of sessions. Implementations must make [`Store::commit`] atomic: either every
/// operation of the batch (and every event in it) is stored, or none is.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Whether other hosts share this store (a fleet's PostgreSQL): then a build handed to the
    /// runtime is also written into it, so every node can load the release it follows.
    fn shared(&self) -> bool {
        false
    }

    /// Applies a batch atomically; assigns message sequence numbers and event indexes.
    async fn commit(&self, batch: Batch) -> StoreResult<Committed>;

    /// Commits `batch` and reads the session `id`, together; the read sees the store no earlier
    /// than this call. The default runs the two at once; a backend may read in the commit's own
    /// transaction instead, which saves a round trip (the run loop does this after every step).
    async fn commit_reading(
        &self,
        batch: Batch,
        id: &str,
    ) -> StoreResult<(Committed, Option<SessionRecord>)> {
        let (committed, session) = tokio::join!(self.commit(batch), self.session(id));
        Ok((committed?, session?))
    }

    /// One session.
    async fn session(&self, id: &str) -> StoreResult<Option<SessionRecord>>;
    /// Sessions, newest first.
    async fn sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<SessionRecord>>;
    /// One turn.
    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>>;
    /// The session's latest turn, if any.
    async fn last_turn(&self, session: &str) -> StoreResult<Option<TurnRecord>>;
    /// Steps of one turn, in order.
    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>>;
    /// Tool calls of one turn, in the order the model asked for them.
    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>>;
    /// Input requests of a session (only pending ones when `pending_only`), oldest first.
    async fn input_requests(
        &self,
        session: &str,
        pending_only: bool,
    ) -> StoreResult<Vec<InputRequestRecord>>;
    /// One input request.
    async fn input_request(&self, id: &str) -> StoreResult<Option<InputRequestRecord>>;
    /// Accepted messages no turn has taken yet, oldest first.
    async fn pending_inbox(&self, session: &str) -> StoreResult<Vec<InboxRecord>>;
    /// The model context: messages from the session's context start (the last compaction
    /// checkpoint or clear) on.
    async fn context(&self, session: &str) -> StoreResult<Vec<MessageRecord>>;
    /// Messages with `seq >= from`, at most `limit`.
    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>>;
    /// Events with `index >= from`, at most `limit`.
    async fn events(&self, session: &str, from: u64, limit: usize)
    -> StoreResult<Vec<StoredEvent>>;
    /// A tool's circuit breaker, if it ever failed.
    async fn breaker(&self, tool: &str) -> StoreResult<Option<BreakerRecord>>;
    /// Sessions with work left (a turn that is running, a wait whose input is all answered, or an
    /// accepted message not yet taken) that no live lease holds (see [`lease_is_live`]: an
    /// unexpired lease whose holder the store's [`Liveness`] policy does not call dead), so
    /// nodes and processes sharing the store do not queue on each other's sessions.
    async fn sessions_with_work(&self) -> StoreResult<Vec<String>>;
    /// Everything the run loop reads about a session before it acts (see [`DriveState`]), from
    /// one consistent snapshot; `None` for an unknown session. Called once per message and per
    /// resume, so a backend answers it in one read transaction (one round trip where it can).
    async fn drive_state(&self, session: &str) -> StoreResult<Option<DriveState>>;
    /// The model context and the dynamic tools of a session (see [`TurnView`]), from one
    /// consistent snapshot, in one round trip where the backend can: what a new turn's first
    /// step reads before it calls the model.
    async fn turn_view(&self, session: &str) -> StoreResult<TurnView>;

    /// A counter bumped whenever another process is seen to commit to the store (an approval
    /// answered by `eve sessions approve`, a message posted by `eve run`), for servers to pick up
    /// work they did not start. `None` when the store cannot tell.
    fn foreign_commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// Why the store cannot be written now (disk full, read-only, I/O errors), or `None` when
    /// it can. Reported by readiness; a store that cannot tell says `None`.
    async fn write_fault(&self) -> Option<String> {
        None
    }

    /// Does now what a server's first turn would otherwise do on the way: opens read
    /// connections, makes the first durable write, prepares the statements a turn runs (SQLite:
    /// see `sqlite/warm.rs`; nothing is left written but the readiness probe's row). Servers
    /// call it before they answer `/health`; a store with nothing to warm does nothing.
    async fn warm(&self) {}

    /// Takes the lease of a session for `claim.holder`, if it is free, expired, already ours, or
    /// held by a process the store's [`Liveness`] policy calls dead. At most one holder at a time.
    async fn acquire_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseOutcome>;
    /// Takes the lease of the session `claim.session_id` as [`Store::acquire_lease`] does, and
    /// answers in the same round trip with the fencing token it is held under; when the session
    /// does not exist, writes nothing and says so.
    async fn take_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseTaken>;
    /// Extends our lease; `false` when it is no longer ours.
    async fn renew_lease(&self, claim: &LeaseClaim) -> StoreResult<bool>;
    /// Gives the lease up (only if it is ours).
    async fn release_lease(&self, session: &str, holder: &str) -> StoreResult<()>;
    /// The session's lease as stored (its holder, expiry and fencing token), if any.
    async fn lease(&self, session: &str) -> StoreResult<Option<LeaseRecord>>;

    /// Stored state of every schedule ever seen.
    async fn schedule_states(&self) -> StoreResult<Vec<ScheduleState>>;
    /// Fires of one schedule, newest first (at most `limit`, 0 = all); only those in `status`
    /// when given.
    async fn schedule_fires(
        &self,
        schedule: &str,
        status: Option<FireStatus>,
        limit: usize,
    ) -> StoreResult<Vec<ScheduleFire>>;
    /// Applies `claim` and `batch` (the session a fire starts) in one durable transaction, if
    /// every condition of the claim holds; `None` (and nothing written) when one does not.
    async fn claim_schedule(
        &self,
        claim: ScheduleClaim,
        batch: Batch,
    ) -> StoreResult<Option<Committed>>;

    /// The link of a child (subagent) session; `None` for a root session.
    async fn subagent_link(&self, session: &str) -> StoreResult<Option<SubagentLink>>;
    /// The child session a continuation token (`<parent>:<call>`) names.
    async fn subagent_by_token(
        &self,
        parent: &str,
        call_id: &str,
    ) -> StoreResult<Option<SubagentLink>>;
    /// The child turn a parent call waits on.
    async fn subagent_call(
        &self,
        parent: &str,
        turn: u64,
        call_id: &str,
    ) -> StoreResult<Option<SubagentCall>>;
    /// The parent call that sent the inbox message `inbox_id` to a child.
    async fn subagent_call_by_inbox(&self, inbox_id: &str) -> StoreResult<Option<SubagentCall>>;
    /// The turn that took an inbox message (`Some(None)`: not taken yet; `None`: no such message).
    async fn inbox_turn(&self, inbox_id: &str) -> StoreResult<Option<Option<u64>>>;
    /// The ids of the inbox messages turn `seq` of `session` took, in the order they were
    /// accepted: the message that started it, then any steered into it while it ran.
    async fn turn_inbox(&self, session: &str, seq: u64) -> StoreResult<Vec<String>>;
    /// Pending input requests of every session below `session`.
    async fn descendant_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>>;
    /// Token totals and cost of every session below `session`.
    async fn descendant_usage(&self, session: &str) -> StoreResult<(UsageTotals, f64)>;
    /// Dynamic tools journaled with a session.
    async fn dynamic_tools(&self, session: &str) -> StoreResult<Vec<DynamicToolRecord>>;
    /// Whether dynamic tools were resolved for a turn.
    async fn dynamic_resolved(&self, session: &str, turn: u64) -> StoreResult<bool>;
    /// Delivery cursors of a session's observe hooks: `(hook, next event index)`.
    async fn hook_cursors(&self, session: &str) -> StoreResult<Vec<(String, u64)>>;
    /// Sessions whose events some observe hook may not have acknowledged yet.
    async fn sessions_behind_hooks(&self) -> StoreResult<Vec<String>>;

    /// Deletes the idle root sessions last updated before `cutoff_ms` that no live lease holds
    /// and no message waits in, with their subagent sessions and every row they own (events,
    /// messages, turns, calls, requests, inbox, session notes); returns every deleted id. The
    /// store's record of what it ever held (its integrity mark) still only grows.
    async fn prune_sessions(&self, cutoff_ms: i64) -> StoreResult<Vec<String>>;
    /// One note.
    async fn note(&self, namespace: &str, key: &str) -> StoreResult<Option<NoteRecord>>;
    /// The notes of one namespace (memory, a session's probe), oldest first.
    async fn notes(&self, namespace: &str) -> StoreResult<Vec<NoteRecord>>;
    /// The notes of every namespace starting with `prefix`, by namespace, oldest first.
    async fn notes_under(&self, prefix: &str) -> StoreResult<Vec<NoteRecord>>;

    /// Accepts a platform message: remembers its delivery id and writes the reply owed for it
    /// with `batch` (the inbox message), in one durable transaction. `None`, and nothing written,
    /// when the delivery was already accepted.
    async fn accept_channel_message(
        &self,
        accept: ChannelAccept,
        batch: Batch,
    ) -> StoreResult<Option<Committed>>;
    /// Replies owed to platforms (every reply when `pending_only` is false), oldest first.
    async fn channel_replies(&self, pending_only: bool) -> StoreResult<Vec<ChannelReplyRecord>>;
    /// One reply, by the inbox id of its message.
    async fn channel_reply(&self, inbox_id: &str) -> StoreResult<Option<ChannelReplyRecord>>;
    /// Takes for `claim`'s process the owed replies not in `claim.skip` whose hold has lapsed
    /// (and, unless `claim.expired_only`, whose owner the store's [`Liveness`] policy calls gone,
    /// this process included), each with a new fencing token and a hold of `claim.ttl_ms`;
    /// returns them. Rows another process is claiming at the same moment are skipped, so each
    /// reply is taken by one claimant.
    async fn claim_channel_replies(
        &self,
        claim: ReplyClaim,
    ) -> StoreResult<Vec<ChannelReplyRecord>>;
    /// Pushes the hold of the owed replies in `held` (those still held with these tokens) to
    /// `ttl_ms` from now; returns how many were renewed.
    async fn renew_channel_replies(&self, held: Vec<ReplyHeld>, ttl_ms: i64) -> StoreResult<usize>;
    /// Records that the owner holding `held` starts sending `sending` (and renews its hold):
    /// `false`, and nothing written, when the reply is done or a newer owner holds it; the
    /// message must then not be sent.
    async fn start_channel_reply_send(
        &self,
        held: ReplyHeld,
        sending: Sending,
        ttl_ms: i64,
    ) -> StoreResult<bool>;
    /// Records a reply's progress (announced requests, done); clears what was being sent.
    async fn update_channel_reply(&self, update: ChannelReplyUpdate) -> StoreResult<()>;

    /// Every release, oldest first.
    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>>;
    /// Audit events of the releases' stream with `index >= from`, at most `limit` (their
    /// `session_id` is [`RELEASE_STREAM`]).
    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>>;
    /// Writes a build. Builds are content-addressed: writing one already stored changes
    /// nothing. `true` when it was not stored before; a different build under the same hash is
    /// refused ([`StoreError::Integrity`]).
    async fn put_build(&self, build: StoredBuild) -> StoreResult<bool>;
    /// One stored build.
    async fn build(&self, hash: &str) -> StoreResult<Option<StoredBuild>>;
    /// Every stored build without its contents, newest first.
    async fn builds(&self) -> StoreResult<Vec<BuildInfo>>;
    /// Stores a checkpoint of a session's workspace with the blobs the store lacks, in one
    /// transaction, and returns its version (the session's previous one plus one). Refused
    /// ([`StoreError::Fenced`]) when the put's fence is older than the session's lease, and
    /// ([`StoreError::NotFound`]) when an entry's blob is neither given nor stored.
    async fn put_workspace(&self, put: WorkspacePut) -> StoreResult<u64>;
    /// The latest checkpoint of a session's workspace.
    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>>;
    /// Of these blob hashes, the ones the store does not hold.
    async fn missing_blobs(&self, hashes: &[String]) -> StoreResult<Vec<String>>;
    /// The contents of one blob.
    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Deletes the workspace blobs no stored checkpoint references (those of pruned sessions,
    /// and contents no session's latest checkpoint holds any more); returns what went. A put
    /// racing with it either sees its blobs kept or is refused ([`StoreError::NotFound`]) and
    /// can be tried again.
    async fn collect_workspace_blobs(&self) -> StoreResult<BlobsCollected>;
}
