//! The SQLite store's write connection: group commit on the writer thread, commits on the
//! caller's own thread while the writer is idle, checkpoints off the commit path, and the
//! foreign-commit watch.
//!
//! One connection writes; it sits behind a mutex shared by the writer thread and the callers.
//! A caller whose batch need not reach the disk (`synchronous=NORMAL`, the steps of a turn)
//! commits on its own thread when nothing is queued for the writer and the connection is free
//! ([`commit_here`]): one lock, no hand-off to another thread and back, which on a busy 2-core
//! machine is most of what a step costs. Everything else (durable batches, which wait for
//! `fsync`; any commit while the connection is busy or requests are queued; one that would have
//! to wait for another process's write lock) goes to the writer thread, which drains whatever is
//! queued and commits it in one `BEGIN IMMEDIATE` transaction (group commit), each request in its
//! own savepoint (a group of one needs none) so one failure does not sink the others. Either way
//! a commit is one transaction on the one connection, answered only once it is committed, and
//! requests queued by one caller keep their order: a caller never commits on its own thread while
//! anything is queued. With a single writing connection per process, concurrent sessions never
//! contend for the write lock inside a process; `busy_timeout` covers other processes sharing the
//! file.
//!
//! The write connection does not checkpoint the WAL itself (`wal_autocheckpoint=0`, set by the
//! store when it opens): the commit that crossed the threshold would copy a thousand pages and
//! `fsync` twice on its caller's thread. The writer thread checkpoints (`PASSIVE`, on a
//! connection of its own, so commits go on meanwhile) every [`CHECKPOINT_EVERY`] commits, told by
//! the commits made on callers' threads, and holds the write connection for it only when commits
//! kept the WAL from starting over for too long ([`checkpoint`]). Durability is unchanged: a commit is in the WAL when it
//! is answered, and checkpoints only move committed pages into the database file.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};
use std::time::Duration;

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use super::schema::{BUSY_TIMEOUT, open_connection};
use crate::store::{StoreError, StoreResult};

/// The last write's fault, shared with readiness: set when a commit fails because the file
/// cannot be written (disk full, read-only, I/O error), cleared by the next commit that works.
pub(super) type WriteFault = std::sync::Arc<std::sync::Mutex<Option<String>>>;

fn is_storage_fault(message: &str) -> bool {
    StoreError::Commit(message.to_owned()).is_storage_fault()
}

/// Where the writer keeps the store's high-water mark.
pub(super) struct MarkTarget {
    pub(super) db: std::path::PathBuf,
    pub(super) identity: String,
}

fn refresh_mark(conn: &Connection, target: &MarkTarget) {
    let written = super::integrity::current_mark(conn, &target.identity)
        .map_err(|e| e.to_string())
        .and_then(|mark| {
            super::integrity::write_mark(&target.db, &mark).map_err(|e| e.to_string())
        });
    if let Err(error) = written {
        tracing::warn!(%error, "cannot refresh the store's mark");
    }
}

fn note(fault: &WriteFault, outcome: Result<(), &str>) {
    if let Ok(mut slot) = fault.lock() {
        match outcome {
            Ok(()) => *slot = None,
            Err(message) if is_storage_fault(message) => *slot = Some(message.to_owned()),
            Err(_) => {}
        }
    }
}

/// Most requests folded into one transaction.
const GROUP_LIMIT: usize = 256;
/// Least time between two refreshes of the store's mark (see `integrity.rs`).
const MARK_INTERVAL: Duration = Duration::from_secs(2);
/// How often an idle writer looks for commits of other processes.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// Commits between two checkpoints of the WAL (a step's commit writes 10–20 pages, so about
/// the 1,000 pages of SQLite's own automatic checkpoint).
pub(super) const CHECKPOINT_EVERY: usize = 64;
/// Commits since the last checkpoint past which callers stop committing on their own threads:
/// the writer thread was asked for a checkpoint long ago and has not run (a starved thread on a
/// loaded machine), so commits go to it, and wait for it, until it has checkpointed; otherwise
/// back-to-back commits on callers' threads would grow the WAL without bound.
const CHECKPOINT_OVERDUE: usize = 4 * CHECKPOINT_EVERY;

pub(super) type AnyBox = Box<dyn Any + Send>;
pub(super) type Job = Box<dyn FnOnce(&Connection) -> StoreResult<AnyBox> + Send>;

pub(super) struct Request {
    pub(super) durable: bool,
    pub(super) job: Job,
    pub(super) reply: oneshot::Sender<StoreResult<AnyBox>>,
}

/// What the writer thread is sent.
pub(super) enum Message {
    /// A commit to run.
    Commit(Request),
    /// Commits made on callers' threads have added [`CHECKPOINT_EVERY`] commits to the WAL.
    Checkpoint,
}

/// The write connection with the `synchronous` mode it is set to.
pub(super) struct WriteConn {
    conn: Connection,
    full_sync: bool,
}

impl WriteConn {
    fn sync(&mut self, durable: bool) -> bool {
        if durable != self.full_sync {
            let mode = if durable { "FULL" } else { "NORMAL" };
            if self.conn.pragma_update(None, "synchronous", mode).is_err() {
                return false;
            }
            self.full_sync = durable;
        }
        true
    }
}

/// What the writer thread and the callers committing on their own threads share.
pub(super) struct Shared {
    /// The write connection (`None` once the writer has stopped).
    conn: Mutex<Option<WriteConn>>,
    /// Requests sent to the writer thread and not yet answered.
    queued: AtomicUsize,
    /// Something was committed since the store's mark was last refreshed.
    dirty: AtomicBool,
    /// Commits since the last checkpoint.
    since_checkpoint: AtomicUsize,
    fault: WriteFault,
}

impl Shared {
    pub(super) fn new(conn: Connection, fault: WriteFault) -> Self {
        Self {
            conn: Mutex::new(Some(WriteConn {
                conn,
                full_sync: false,
            })),
            queued: AtomicUsize::new(0),
            dirty: AtomicBool::new(false),
            since_checkpoint: AtomicUsize::new(0),
            fault,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<WriteConn>> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a request about to be sent to the writer thread (see [`Self::unqueue`]).
    pub(super) fn queue(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes back a request [`Self::queue`] counted that could not be sent.
    pub(super) fn unqueue(&self) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }

    /// Notes one commit; `true` when it is the one that makes a checkpoint due.
    fn committed(&self) -> bool {
        self.dirty.store(true, Ordering::Release);
        self.since_checkpoint.fetch_add(1, Ordering::AcqRel) + 1 == CHECKPOINT_EVERY
    }
}

/// What [`commit_here`] did.
pub(super) enum Here<R, F> {
    /// Committed (or failed) on this thread; `true` when a checkpoint is now due.
    Done(StoreResult<R>, bool),
    /// Not run: the connection is busy, requests are queued, or another process holds the write
    /// lock. The job goes to the writer thread.
    Declined(F),
}

/// Commits `job` on the calling thread if the write connection is free and nothing is queued
/// for the writer thread (see the module header). Never waits: not for the connection, not for
/// another process's write lock.
pub(super) fn commit_here<R, F>(shared: &Shared, job: F) -> Here<R, F>
where
    F: FnOnce(&Connection) -> StoreResult<R>,
{
    if shared.queued.load(Ordering::Acquire) != 0
        || shared.since_checkpoint.load(Ordering::Acquire) >= CHECKPOINT_OVERDUE
    {
        return Here::Declined(job);
    }
    let mut guard = match shared.conn.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return Here::Declined(job),
    };
    // Queued while this thread took the lock: it goes after them.
    if shared.queued.load(Ordering::Acquire) != 0 {
        return Here::Declined(job);
    }
    let Some(w) = guard.as_mut() else {
        return Here::Declined(job);
    };
    if !w.sync(false) || w.conn.busy_timeout(Duration::ZERO).is_err() {
        return Here::Declined(job);
    }
    let begun = w.conn.execute_batch("BEGIN IMMEDIATE");
    let _ = w.conn.busy_timeout(BUSY_TIMEOUT);
    if begun.is_err() {
        // The writer thread waits for the lock (and reports what fails).
        return Here::Declined(job);
    }
    let conn = &w.conn;
    let outcome = match job(conn) {
        Ok(value) => match conn.execute_batch("COMMIT") {
            Ok(()) => {
                note(&shared.fault, Ok(()));
                Ok(value)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(StoreError::Commit(e.to_string()))
            }
        },
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    };
    if let Err(e) = &outcome {
        note(&shared.fault, Err(&e.to_string()));
    }
    drop(guard);
    let due = shared.committed();
    Here::Done(outcome, due)
}

/// Runs `job` in `tx` and commits it (the transaction itself stands for the job's savepoint).
fn run_in<R>(
    tx: Transaction<'_>,
    job: impl FnOnce(&Connection) -> StoreResult<R>,
    fault: &WriteFault,
) -> StoreResult<R> {
    let outcome = match job(&tx) {
        Ok(value) => match tx.commit() {
            Ok(()) => {
                note(fault, Ok(()));
                Ok(value)
            }
            Err(e) => Err(StoreError::Commit(e.to_string())),
        },
        Err(e) => {
            let _ = tx.rollback();
            Err(e)
        }
    };
    if let Err(e) = &outcome {
        note(fault, Err(&e.to_string()));
    }
    outcome
}

/// WAL frames past which a checkpoint holds the write connection (about 16 MiB of WAL).
const WAL_FRAMES_MAX: i64 = 4096;

/// `PRAGMA wal_checkpoint(PASSIVE)` on `conn`: the WAL's frames and how many are now in the
/// database file.
fn passive(conn: &Connection) -> Option<(i64, i64)> {
    match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    }) {
        Ok(frames) => Some(frames),
        Err(error) => {
            tracing::debug!(%error, "cannot checkpoint the WAL");
            None
        }
    }
}

/// Moves the WAL's committed pages into the database file (`PASSIVE`, on the writer thread's
/// checkpoint connection, opened on first need), while commits go on. SQLite starts the WAL
/// over only when a commit begins with every frame already in the database file, which commits
/// arriving during the checkpoint prevent for as long as they keep coming; so once the WAL has
/// grown past [`WAL_FRAMES_MAX`] frames, the checkpoint runs once more holding the write
/// connection (commits queue for the writer meanwhile, as they did behind SQLite's own
/// checkpoint; little is left to copy), and the next commit starts the WAL over.
fn checkpoint(shared: &Shared, own: &mut Option<Connection>, db: &std::path::Path) {
    shared.since_checkpoint.store(0, Ordering::Release);
    if own.is_none() {
        match open_connection(db) {
            Ok(conn) => *own = Some(conn),
            Err(error) => tracing::debug!(%error, "cannot open the checkpoint connection"),
        }
    }
    // Frames of a WAL that started over are counted from its start again.
    let behind = match own.as_ref().and_then(passive) {
        Some((frames, _)) => frames >= WAL_FRAMES_MAX,
        None => true,
    };
    if behind && let Some(w) = shared.lock().as_ref() {
        passive(&w.conn);
    }
}

/// `PRAGMA data_version` of `conn`: changes only when another connection commits.
pub(super) fn data_version(conn: &Connection) -> Option<i64> {
    conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0))
        .ok()
}

/// The writer thread: commits queued requests in groups, and checkpoints. Between groups (and
/// every [`WATCH_INTERVAL`] when idle) it reads `PRAGMA data_version`, which changes on this
/// connection only when another connection commits; as this is the process's only writing
/// connection, a change means another process wrote, and `foreign` is bumped. `version` is the
/// connection's [`data_version`] read when the store opened, before anything read through it:
/// read later, on this thread, a commit made in between would be taken as the baseline and never
/// reported.
pub(super) fn writer_loop(
    shared: &Shared,
    rx: mpsc::Receiver<Message>,
    foreign: &tokio::sync::watch::Sender<u64>,
    mark: &MarkTarget,
    mut version: Option<i64>,
) {
    let mut marked_at = std::time::Instant::now();
    let mut checkpointer: Option<Connection> = None;
    loop {
        let first = match rx.recv_timeout(WATCH_INTERVAL) {
            Ok(Message::Commit(first)) => Some(first),
            Ok(Message::Checkpoint) => {
                checkpoint(shared, &mut checkpointer, &mark.db);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut guard = shared.lock();
        let Some(w) = guard.as_mut() else { break };
        if marked_at.elapsed() >= MARK_INTERVAL && shared.dirty.swap(false, Ordering::AcqRel) {
            refresh_mark(&w.conn, mark);
            marked_at = std::time::Instant::now();
        }
        let now = data_version(&w.conn);
        if now != version {
            version = now;
            foreign.send_modify(|n| *n = n.wrapping_add(1));
        }
        let Some(first) = first else { continue };
        let mut group = vec![first];
        let mut checkpoint_asked = false;
        while group.len() < GROUP_LIMIT {
            match rx.try_recv() {
                Ok(Message::Commit(r)) => group.push(r),
                Ok(Message::Checkpoint) => checkpoint_asked = true,
                Err(_) => break,
            }
        }
        let durable = group.iter().any(|r| r.durable);
        w.sync(durable);
        let n = group.len();
        run_group(&mut w.conn, group, shared);
        drop(guard);
        let due = (0..n).fold(false, |due, _| shared.committed() | due);
        if checkpoint_asked
            || due
            || shared.since_checkpoint.load(Ordering::Acquire) >= CHECKPOINT_EVERY
        {
            checkpoint(shared, &mut checkpointer, &mark.db);
        }
    }
    // Stopped: the last mark, and the connection closes.
    let mut guard = shared.lock();
    if let Some(w) = guard.as_ref()
        && shared.dirty.swap(false, Ordering::AcqRel)
    {
        refresh_mark(&w.conn, mark);
    }
    drop(checkpointer);
    guard.take();
}

/// Answers a request of the group (after the queue count is taken back, so the caller may
/// commit on its own thread next).
fn answer(
    shared: &Shared,
    reply: oneshot::Sender<StoreResult<AnyBox>>,
    outcome: StoreResult<AnyBox>,
) {
    shared.queued.fetch_sub(1, Ordering::AcqRel);
    let _ = reply.send(outcome);
}

fn run_group(conn: &mut Connection, mut group: Vec<Request>, shared: &Shared) {
    let fault = &shared.fault;
    if group.len() == 1
        && let Some(request) = group.pop()
    {
        return run_one(conn, request, shared);
    }
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let message = e.to_string();
            note(fault, Err(&message));
            for r in group {
                answer(shared, r.reply, Err(StoreError::Commit(message.clone())));
            }
            return;
        }
    };
    let mut results = Vec::with_capacity(group.len());
    for request in group {
        let outcome = match tx.savepoint() {
            Ok(mut sp) => {
                let result = (request.job)(&sp);
                match result {
                    Ok(value) => match sp.commit() {
                        Ok(()) => Ok(value),
                        Err(e) => Err(StoreError::from(e)),
                    },
                    Err(e) => {
                        let _ = sp.rollback();
                        Err(e)
                    }
                }
            }
            Err(e) => Err(StoreError::from(e)),
        };
        results.push((request.reply, outcome));
    }
    match tx.commit() {
        Ok(()) => {
            note(fault, Ok(()));
            for (reply, outcome) in results {
                if let Err(e) = &outcome {
                    note(fault, Err(&e.to_string()));
                }
                answer(shared, reply, outcome);
            }
        }
        Err(e) => {
            let message = e.to_string();
            note(fault, Err(&message));
            for (reply, _) in results {
                answer(shared, reply, Err(StoreError::Commit(message.clone())));
            }
        }
    }
}

/// A group of one (the common case on the writer thread): the transaction itself stands for the
/// savepoint, which saves two statements per commit.
fn run_one(conn: &mut Connection, request: Request, shared: &Shared) {
    let outcome = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => run_in(tx, request.job, &shared.fault),
        Err(e) => {
            note(&shared.fault, Err(&e.to_string()));
            Err(StoreError::Commit(e.to_string()))
        }
    };
    answer(shared, request.reply, outcome);
}
