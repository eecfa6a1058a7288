//! The SQLite store: WAL, one writer thread, pooled readers.
//!
//! This module is the backend's front: [`SqliteStore`] opens the file, hands writes to the writer
//! thread (`actor.rs`: group commit, foreign-commit watch) and reads to pooled connections, and
//! implements [`Store`] by delegating to the per-feature SQL (`apply.rs` for batches, `reads.rs`,
//! `leases.rs`, `schedules.rs`, `composition.rs`, `channels.rs`; `schema.rs` for migrations).
//! rusqlite errors become the neutral [`StoreError::Backend`] here, keeping their message.
//!
//! Durability: the database runs with `synchronous=NORMAL`, which in WAL mode survives any process
//! crash (SIGKILL included: committed frames are in the OS page cache) and costs no fsync per commit,
//! which is what keeps a step's checkpoint well under a millisecond. A power loss could drop the last
//! commits of the journal; resume then redoes that work from the previous checkpoint. What an API
//! promised (an accepted message, an approval answer, the start of a `write` tool) goes in a
//! [`Batch::durable`] batch, committed with `synchronous=FULL`, so it reaches the disk before the
//! caller is answered.

mod actor;
mod answers;
mod apply;
mod builds;
mod channels;
mod check;
mod composition;
mod integrity;
mod leases;
mod notes;
mod prune;
mod reads;
mod recorded;
mod releases;
mod rows;
mod schedules;
mod schema;
mod warm;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

use rusqlite::Connection;
use tokio::sync::oneshot;

use self::actor::{
    AnyBox, Here, MarkTarget, Message, Request, Shared, WriteFault, commit_here, data_version,
    writer_loop,
};
use self::apply::apply;
use self::schema::{migrate, open_connection};
use super::*;

/// Reader connections kept open.
const READERS_KEPT: usize = 8;
/// Read connections a server opens at start ([`Store::warm`]): a turn's reads and a client's
/// stream at the same time.
const READERS_WARMED: usize = 2;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match &e {
            // A file that is not a database at all is a wrong path more often than damage:
            // it keeps the backend's message.
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::DatabaseCorrupt =>
            {
                StoreError::Damaged(e.to_string())
            }
            // A stored value that is not what its column holds (invalid UTF-8 in a text
            // column, a blob where an integer belongs): the bytes were changed under SQLite.
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::Utf8Error(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => StoreError::Damaged(e.to_string()),
            _ => StoreError::Backend(e.to_string()),
        }
    }
}

/// The embedded SQLite store.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Mutex<Option<mpsc::Sender<Message>>>,
    /// The writer thread, joined by [`SqliteStore::close_and_wait`].
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The write connection, shared by the writer thread and callers committing on their own
    /// thread while it is idle (`actor.rs`).
    shared: Arc<Shared>,
    readers: Mutex<Vec<Connection>>,
    /// Counts the times another process was seen to commit (see [`Store::foreign_commits`]).
    foreign: tokio::sync::watch::Sender<u64>,
    /// Decides when an unexpired lease holder (or a reply's owner) is gone.
    liveness: Arc<dyn Liveness>,
    /// Why the last write failed for want of writable storage (see [`Store::write_fault`]).
    fault: WriteFault,
}

impl Inner {
    /// Puts a read connection back in the pool unless the pool is full; whether it went back.
    fn give_back(&self, conn: Connection) -> bool {
        match self.readers.lock() {
            Ok(mut readers) if readers.len() < READERS_KEPT => {
                readers.push(conn);
                true
            }
            _ => false,
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// The probe's write: one row, replaced.
const PROBE: &str = "CREATE TABLE IF NOT EXISTS health_probe (id INTEGER PRIMARY KEY, at INTEGER);
     INSERT OR REPLACE INTO health_probe (id, at) VALUES (1, unixepoch('subsec') * 1000);";

impl SqliteStore {
    /// One small durable write (the `health_probe` row): readiness's check that the storage
    /// takes writes again, and the start-up write of [`Store::warm`].
    async fn probe_write(&self) -> StoreResult<()> {
        self.write(true, |c| Ok(c.execute_batch(PROBE)?)).await
    }

    /// Opens (creating and migrating as needed) the database at `path`, shared by processes of
    /// this host ([`LocalHost`] liveness).
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(path, Arc::new(LocalHost))
    }

    /// [`Self::open`], except that a missing (or 0-byte) database beside signs that a store was
    /// there (session workspaces, checkpoint indexes) but no mark is started empty instead of
    /// refused: what `EVE_NEW_STORE=1` asks for, once, on purpose.
    pub fn open_new_ok(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_checked(path.as_ref(), Arc::new(LocalHost), true)
    }

    /// Opens the database at `path` with a chosen lease liveness policy.
    pub fn open_with(path: impl AsRef<Path>, liveness: Arc<dyn Liveness>) -> StoreResult<Self> {
        Self::open_checked(path.as_ref(), liveness, false)
    }

    fn open_checked(path: &Path, liveness: Arc<dyn Liveness>, new_ok: bool) -> StoreResult<Self> {
        let path = path.to_path_buf();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)?;
        }
        integrity::check_files(&path, new_ok)?;
        let opened = open_connection(&path).and_then(|mut conn| migrate(&mut conn).map(|()| conn));
        let mut conn = integrity::damage_refused(&path, opened)?;
        let identity = integrity::check_open(&conn, &path)?;
        // A release recorded before the store existed (`recorded.rs`): stored before any read.
        if recorded::take_in(&mut conn, &path)? {
            integrity::write_mark(&path, &integrity::current_mark(&conn, &identity)?)?;
        }
        // The writer thread checkpoints, off the commit path (`actor.rs`).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        let marked = MarkTarget {
            db: path.clone(),
            identity,
        };
        let (tx, rx) = mpsc::channel::<Message>();
        let (foreign, _) = tokio::sync::watch::channel(0u64);
        let seen = foreign.clone();
        let fault = WriteFault::default();
        // Read before any read of the store: a commit of another process after this is seen.
        let version = data_version(&conn);
        let shared = Arc::new(Shared::new(conn, fault.clone()));
        let writing = shared.clone();
        let thread = std::thread::Builder::new()
            .name("eve-store-writer".to_owned())
            .spawn(move || writer_loop(&writing, rx, &seen, &marked, version))?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                writer: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
                shared,
                readers: Mutex::new(Vec::new()),
                foreign,
                liveness,
                fault,
            }),
        })
    }

    /// Checks the store at `path` in full, on demand (`eve store check`): its files, SQLite's
    /// `PRAGMA integrity_check`, every stored text, its mark, and eve's consistency checks. Opens
    /// the file without creating, migrating or writing it, so a store the start-up check refuses
    /// can be checked, also while a server runs on it. (A store not created yet, whose first
    /// release is recorded beside it, is created first: see `recorded.rs`.)
    pub async fn check_file(path: impl AsRef<Path>) -> StoreCheck {
        // A store not created yet but with a release recorded beside it is created first.
        if let Err(e) = Self::create_if_recorded(path.as_ref()) {
            tracing::warn!(error = %e, "cannot take in the release recorded beside the store");
        }
        check::check_file(path.as_ref()).await
    }

    /// Runs `job` inside a transaction on the write connection: on this thread when the
    /// connection is free and the batch need not wait for the disk, else on the writer thread.
    async fn write<R, F>(&self, durable: bool, job: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    {
        let shared = &self.inner.shared;
        let job = if durable {
            job
        } else {
            let open = self
                .inner
                .writer
                .lock()
                .map_err(|_| StoreError::WriterGone)?
                .is_some();
            if !open {
                return Err(StoreError::WriterGone);
            }
            match commit_here(shared, job) {
                Here::Done(outcome, checkpoint_due) => {
                    if checkpoint_due
                        && let Ok(guard) = self.inner.writer.lock()
                        && let Some(sender) = guard.as_ref()
                    {
                        let _ = sender.send(Message::Checkpoint);
                    }
                    return outcome;
                }
                Here::Declined(job) => job,
            }
        };
        let (reply, rx) = oneshot::channel();
        let request = Request {
            durable,
            job: Box::new(move |conn| job(conn).map(|r| Box::new(r) as AnyBox)),
            reply,
        };
        {
            let guard = self
                .inner
                .writer
                .lock()
                .map_err(|_| StoreError::WriterGone)?;
            let sender = guard.as_ref().ok_or(StoreError::WriterGone)?;
            shared.queue();
            if sender.send(Message::Commit(request)).is_err() {
                shared.unqueue();
                return Err(StoreError::WriterGone);
            }
        }
        let boxed = rx.await.map_err(|_| StoreError::WriterGone)??;
        boxed
            .downcast::<R>()
            .map(|b| *b)
            .map_err(|_| StoreError::Corrupt("writer returned an unexpected type".to_owned()))
    }

    /// Runs `job`, a read of a few rows by key, on this thread when a pooled read connection is
    /// free (the read takes microseconds, a hop to the blocking pool and back costs more and
    /// wakes two threads), else as [`Self::read`]. Reads whose size grows with a session (its
    /// events, messages, context) or with the store go through [`Self::read`]: they must not
    /// hold an async thread that other sessions' turns are waiting for.
    async fn read_here<R, F>(&self, job: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    {
        let pooled = self.inner.readers.lock().ok().and_then(|mut v| v.pop());
        let Some(conn) = pooled else {
            return self.read(job).await;
        };
        let result = job(&conn);
        self.inner.give_back(conn);
        result
    }

    /// Runs `job` on a pooled read connection, off the async threads.
    async fn read<R, F>(&self, job: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = inner.readers.lock().ok().and_then(|mut v| v.pop());
            let conn = match pooled {
                Some(c) => c,
                None => open_connection(&inner.path)?,
            };
            let result = job(&conn);
            inner.give_back(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Commit(format!("read task failed: {e}")))?
    }

    /// Stops the writer after the queued requests are done.
    pub(crate) fn close(&self) {
        if let Ok(mut guard) = self.inner.writer.lock() {
            guard.take();
        }
    }

    /// [`Self::close`], then waits (blocking) until the writer thread has written its last mark
    /// and closed the file: after this, nothing of this store writes to the folder (restoring a
    /// backup over it, say, is safe).
    pub fn close_and_wait(&self) {
        self.close();
        let thread = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn commit(&self, batch: Batch) -> StoreResult<Committed> {
        if batch.is_empty() {
            return Ok(Committed::default());
        }
        let durable = batch.durable;
        self.write(durable, move |conn| apply(conn, batch)).await
    }

    async fn commit_reading(
        &self,
        batch: Batch,
        id: &str,
    ) -> StoreResult<(Committed, Option<SessionRecord>)> {
        // The read runs in the writer's transaction, after the batch: one round trip.
        let id = id.to_owned();
        let durable = batch.durable;
        self.write(durable, move |conn| {
            let committed = if batch.is_empty() {
                Committed::default()
            } else {
                apply(conn, batch)?
            };
            Ok((committed, reads::session(conn, &id)?))
        })
        .await
    }

    async fn session(&self, id: &str) -> StoreResult<Option<SessionRecord>> {
        let id = id.to_owned();
        self.read_here(move |c| reads::session(c, &id)).await
    }

    async fn sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<SessionRecord>> {
        let filter = filter.clone();
        self.read(move |c| reads::sessions(c, &filter)).await
    }

    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
        let session = session.to_owned();
        self.read_here(move |c| reads::turn(c, &session, seq)).await
    }

    async fn last_turn(&self, session: &str) -> StoreResult<Option<TurnRecord>> {
        let session = session.to_owned();
        self.read_here(move |c| reads::last_turn(c, &session)).await
    }

    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
        let session = session.to_owned();
        self.read(move |c| reads::steps(c, &session, turn)).await
    }

    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>> {
        let session = session.to_owned();
        self.read(move |c| reads::tool_calls(c, &session, turn))
            .await
    }

    async fn input_requests(
        &self,
        session: &str,
        pending_only: bool,
    ) -> StoreResult<Vec<InputRequestRecord>> {
        let session = session.to_owned();
        self.read_here(move |c| reads::input_requests(c, &session, pending_only))
            .await
    }

    async fn input_request(&self, id: &str) -> StoreResult<Option<InputRequestRecord>> {
        let id = id.to_owned();
        self.read_here(move |c| reads::input_request(c, &id)).await
    }

    async fn pending_inbox(&self, session: &str) -> StoreResult<Vec<InboxRecord>> {
        let session = session.to_owned();
        self.read_here(move |c| reads::pending_inbox(c, &session))
            .await
    }

    async fn context(&self, session: &str) -> StoreResult<Vec<MessageRecord>> {
        let session = session.to_owned();
        self.read(move |c| reads::context(c, &session)).await
    }

    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>> {
        let session = session.to_owned();
        self.read(move |c| reads::messages(c, &session, from, limit))
            .await
    }

    async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<StoredEvent>> {
        let session = session.to_owned();
        self.read(move |c| reads::events(c, &session, from, limit))
            .await
    }

    async fn breaker(&self, tool: &str) -> StoreResult<Option<BreakerRecord>> {
        let tool = tool.to_owned();
        self.read_here(move |c| reads::breaker(c, &tool)).await
    }

    fn foreign_commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.inner.foreign.subscribe())
    }

    async fn warm(&self) {
        // A durable write now: the first commit after opening the file restarts the WAL (its
        // header written and synced) and syncs the folder once, three syncs a client's first
        // message would otherwise wait for. A store that cannot be written is also known now.
        // The same transaction rehearses a turn's writes on the write connection (rolled back), so
        // their statements are prepared before the first turn needs them.
        let wrote = self
            .write(true, |c| {
                c.execute_batch(PROBE)?;
                if let Err(e) = warm::rehearse_writes(c) {
                    tracing::debug!(error = %e, "a turn's statements were not prepared at start");
                }
                Ok(())
            })
            .await;
        if let Err(e) = wrote {
            tracing::warn!(error = %e, "the store did not take a write at start");
        }
        let inner = self.inner.clone();
        let _ = tokio::task::spawn_blocking(move || warm::open_readers(&inner)).await;
    }

    async fn write_fault(&self) -> Option<String> {
        let known = self.inner.fault.lock().ok().and_then(|f| f.clone());
        known.as_ref()?;
        // Faulted: try a small write, so readiness sees the storage come back without waiting
        // for the next real write.
        match self.probe_write().await {
            Ok(()) => None,
            Err(e) => Some(
                self.inner
                    .fault
                    .lock()
                    .ok()
                    .and_then(|f| f.clone())
                    .unwrap_or_else(|| e.to_string()),
            ),
        }
    }

    async fn sessions_with_work(&self) -> StoreResult<Vec<String>> {
        let liveness = self.inner.liveness.clone();
        self.read(move |c| reads::sessions_with_work(c, liveness.as_ref()))
            .await
    }

    async fn drive_state(&self, session: &str) -> StoreResult<Option<DriveState>> {
        let session = session.to_owned();
        self.read_here(move |c| reads::drive_state(c, &session))
            .await
    }

    async fn turn_view(&self, session: &str) -> StoreResult<TurnView> {
        let session = session.to_owned();
        self.read(move |c| reads::turn_view(c, &session)).await
    }

    async fn acquire_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseOutcome> {
        let claim = claim.clone();
        let liveness = self.inner.liveness.clone();
        self.write(false, move |conn| {
            leases::acquire(conn, &claim, liveness.as_ref())
        })
        .await
    }

    async fn take_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseTaken> {
        let claim = claim.clone();
        let liveness = self.inner.liveness.clone();
        self.write(false, move |conn| {
            leases::take(conn, &claim, liveness.as_ref(), true)
        })
        .await
    }

    async fn renew_lease(&self, claim: &LeaseClaim) -> StoreResult<bool> {
        let claim = claim.clone();
        self.write(false, move |conn| leases::renew(conn, &claim))
            .await
    }

    async fn release_lease(&self, session: &str, holder: &str) -> StoreResult<()> {
        let (session, holder) = (session.to_owned(), holder.to_owned());
        self.write(false, move |conn| leases::release(conn, &session, &holder))
            .await
    }

    async fn lease(&self, session: &str) -> StoreResult<Option<LeaseRecord>> {
        let session = session.to_owned();
        self.read_here(move |conn| leases::lease(conn, &session))
            .await
    }

    async fn schedule_states(&self) -> StoreResult<Vec<ScheduleState>> {
        self.read(schedules::states).await
    }

    async fn schedule_fires(
        &self,
        schedule: &str,
        status: Option<FireStatus>,
        limit: usize,
    ) -> StoreResult<Vec<ScheduleFire>> {
        let schedule = schedule.to_owned();
        self.read(move |c| schedules::fires(c, &schedule, status, limit))
            .await
    }

    async fn claim_schedule(
        &self,
        claim: ScheduleClaim,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        self.write(true, move |conn| schedules::claim(conn, &claim, batch))
            .await
    }

    async fn subagent_link(&self, session: &str) -> StoreResult<Option<SubagentLink>> {
        let session = session.to_owned();
        self.read_here(move |conn| composition::link(conn, &session))
            .await
    }

    async fn subagent_by_token(
        &self,
        parent: &str,
        call_id: &str,
    ) -> StoreResult<Option<SubagentLink>> {
        let (parent, call_id) = (parent.to_owned(), call_id.to_owned());
        self.read_here(move |conn| composition::link_by_token(conn, &parent, &call_id))
            .await
    }

    async fn subagent_call(
        &self,
        parent: &str,
        turn: u64,
        call_id: &str,
    ) -> StoreResult<Option<SubagentCall>> {
        let (parent, call_id) = (parent.to_owned(), call_id.to_owned());
        self.read_here(move |conn| composition::subagent_call(conn, &parent, turn, &call_id))
            .await
    }

    async fn subagent_call_by_inbox(&self, inbox_id: &str) -> StoreResult<Option<SubagentCall>> {
        let inbox_id = inbox_id.to_owned();
        self.read_here(move |conn| composition::subagent_call_by_inbox(conn, &inbox_id))
            .await
    }

    async fn turn_inbox(&self, session: &str, seq: u64) -> StoreResult<Vec<String>> {
        let session = session.to_owned();
        self.read_here(move |conn| composition::turn_inbox(conn, &session, seq))
            .await
    }

    async fn inbox_turn(&self, inbox_id: &str) -> StoreResult<Option<Option<u64>>> {
        let inbox_id = inbox_id.to_owned();
        self.read_here(move |conn| composition::inbox_turn(conn, &inbox_id))
            .await
    }

    async fn descendant_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>> {
        let session = session.to_owned();
        self.read(move |conn| composition::descendant_requests(conn, &session))
            .await
    }

    async fn descendant_usage(&self, session: &str) -> StoreResult<(UsageTotals, f64)> {
        let session = session.to_owned();
        self.read(move |conn| composition::descendant_usage(conn, &session))
            .await
    }

    async fn dynamic_tools(&self, session: &str) -> StoreResult<Vec<DynamicToolRecord>> {
        let session = session.to_owned();
        self.read_here(move |conn| composition::dynamic_tools(conn, &session))
            .await
    }

    async fn dynamic_resolved(&self, session: &str, turn: u64) -> StoreResult<bool> {
        let session = session.to_owned();
        self.read_here(move |conn| composition::dynamic_resolved(conn, &session, turn))
            .await
    }

    async fn hook_cursors(&self, session: &str) -> StoreResult<Vec<(String, u64)>> {
        let session = session.to_owned();
        self.read_here(move |conn| composition::hook_cursors(conn, &session))
            .await
    }

    async fn sessions_behind_hooks(&self) -> StoreResult<Vec<String>> {
        self.read(composition::sessions_behind_hooks).await
    }

    async fn prune_sessions(&self, cutoff_ms: i64) -> StoreResult<Vec<String>> {
        let now = now_ms();
        self.write(true, move |conn| prune::prune(conn, cutoff_ms, now))
            .await
    }

    async fn note(&self, namespace: &str, key: &str) -> StoreResult<Option<NoteRecord>> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        self.read_here(move |conn| notes::note(conn, &namespace, &key))
            .await
    }

    async fn notes(&self, namespace: &str) -> StoreResult<Vec<NoteRecord>> {
        let namespace = namespace.to_owned();
        self.read(move |conn| notes::notes(conn, &namespace)).await
    }

    async fn notes_under(&self, prefix: &str) -> StoreResult<Vec<NoteRecord>> {
        let prefix = prefix.to_owned();
        self.read(move |conn| notes::notes_under(conn, &prefix))
            .await
    }

    async fn accept_channel_message(
        &self,
        accept: ChannelAccept,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        self.write(true, move |conn| {
            let now = now_ms();
            if !channels::claim_delivery(conn, &accept, now)? {
                return Ok(None);
            }
            let committed = apply(conn, batch)?;
            channels::insert_reply(conn, &accept, now)?;
            Ok(Some(committed))
        })
        .await
    }

    async fn channel_replies(&self, pending_only: bool) -> StoreResult<Vec<ChannelReplyRecord>> {
        self.read(move |conn| channels::replies(conn, pending_only))
            .await
    }

    async fn channel_reply(&self, inbox_id: &str) -> StoreResult<Option<ChannelReplyRecord>> {
        let inbox_id = inbox_id.to_owned();
        self.read(move |conn| channels::reply(conn, &inbox_id))
            .await
    }

    async fn claim_channel_replies(
        &self,
        claim: ReplyClaim,
    ) -> StoreResult<Vec<ChannelReplyRecord>> {
        let liveness = self.inner.liveness.clone();
        self.write(false, move |conn| {
            channels::claim_replies(conn, &claim, liveness.as_ref(), now_ms())
        })
        .await
    }

    async fn renew_channel_replies(&self, held: Vec<ReplyHeld>, ttl_ms: i64) -> StoreResult<usize> {
        if held.is_empty() {
            return Ok(0);
        }
        self.write(false, move |conn| {
            channels::renew_replies(conn, &held, ttl_ms, now_ms())
        })
        .await
    }

    async fn start_channel_reply_send(
        &self,
        held: ReplyHeld,
        sending: Sending,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        self.write(true, move |conn| {
            channels::start_send(conn, &held, &sending, ttl_ms, now_ms())
        })
        .await
    }

    async fn update_channel_reply(&self, update: ChannelReplyUpdate) -> StoreResult<()> {
        let durable = update.done;
        self.write(durable, move |conn| {
            channels::update_reply(conn, &update, now_ms())
        })
        .await
    }

    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>> {
        self.read(releases::releases).await
    }

    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        self.read(move |conn| releases::events(conn, from, limit))
            .await
    }

    async fn put_build(&self, build: StoredBuild) -> StoreResult<bool> {
        self.write(true, move |conn| builds::put_build(conn, &build))
            .await
    }

    async fn build(&self, hash: &str) -> StoreResult<Option<StoredBuild>> {
        let hash = hash.to_owned();
        self.read(move |conn| builds::build(conn, &hash)).await
    }

    async fn builds(&self) -> StoreResult<Vec<BuildInfo>> {
        self.read(builds::builds).await
    }

    async fn put_workspace(&self, put: WorkspacePut) -> StoreResult<u64> {
        self.write(false, move |conn| {
            builds::put_workspace(conn, &put, now_ms())
        })
        .await
    }

    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>> {
        let session = session.to_owned();
        self.read_here(move |conn| builds::workspace(conn, &session))
            .await
    }

    async fn missing_blobs(&self, hashes: &[String]) -> StoreResult<Vec<String>> {
        let hashes = hashes.to_vec();
        self.read(move |conn| builds::missing_blobs(conn, &hashes))
            .await
    }

    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        let hash = hash.to_owned();
        self.read(move |conn| builds::blob(conn, &hash)).await
    }

    async fn collect_workspace_blobs(&self) -> StoreResult<BlobsCollected> {
        self.write(true, builds::collect_blobs).await
    }
}
