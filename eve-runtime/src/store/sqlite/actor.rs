//! The SQLite store's writer thread: one connection, group commit, foreign-commit watch.
//!
//! All writes go through one dedicated thread that owns the only write connection. It drains
//! whatever requests are queued and commits them in one `BEGIN IMMEDIATE` transaction (group
//! commit), each request in its own savepoint (a group of one needs none) so one failure does not
//! sink the others. With a single writer per process, concurrent sessions never contend for the
//! write lock inside a process; `busy_timeout` covers other processes sharing the file.

use std::any::Any;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

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

pub(super) type AnyBox = Box<dyn Any + Send>;
pub(super) type Job = Box<dyn FnOnce(&Connection) -> StoreResult<AnyBox> + Send>;

pub(super) struct Request {
    pub(super) durable: bool,
    pub(super) job: Job,
    pub(super) reply: oneshot::Sender<StoreResult<AnyBox>>,
}

/// The writer thread: commits queued requests in groups. Between groups (and every
/// [`WATCH_INTERVAL`] when idle) it reads `PRAGMA data_version`, which changes on this connection
/// only when another connection commits; as this is the process's only writing connection, a
/// change means another process wrote, and `foreign` is bumped.
pub(super) fn writer_loop(
    mut conn: Connection,
    rx: mpsc::Receiver<Request>,
    foreign: &tokio::sync::watch::Sender<u64>,
    fault: &WriteFault,
    mark: &MarkTarget,
) {
    let mut dirty = false;
    let mut marked_at = std::time::Instant::now();
    let mut full_sync = false;
    let data_version = |conn: &Connection| {
        conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0))
            .ok()
    };
    let mut version = data_version(&conn);
    loop {
        let first = match rx.recv_timeout(WATCH_INTERVAL) {
            Ok(first) => Some(first),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if dirty {
                    refresh_mark(&conn, mark);
                }
                break;
            }
        };
        if dirty && marked_at.elapsed() >= MARK_INTERVAL {
            refresh_mark(&conn, mark);
            dirty = false;
            marked_at = std::time::Instant::now();
        }
        let now = data_version(&conn);
        if now != version {
            version = now;
            foreign.send_modify(|n| *n = n.wrapping_add(1));
        }
        let Some(first) = first else { continue };
        let mut group = vec![first];
        while group.len() < GROUP_LIMIT {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        let durable = group.iter().any(|r| r.durable);
        if durable != full_sync {
            let mode = if durable { "FULL" } else { "NORMAL" };
            if conn.pragma_update(None, "synchronous", mode).is_ok() {
                full_sync = durable;
            }
        }
        run_group(&mut conn, group, fault);
        dirty = true;
    }
}

fn run_group(conn: &mut Connection, mut group: Vec<Request>, fault: &WriteFault) {
    if group.len() == 1
        && let Some(request) = group.pop()
    {
        return run_one(conn, request, fault);
    }
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let message = e.to_string();
            note(fault, Err(&message));
            for r in group {
                let _ = r.reply.send(Err(StoreError::Commit(message.clone())));
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
                let _ = reply.send(outcome);
            }
        }
        Err(e) => {
            let message = e.to_string();
            note(fault, Err(&message));
            for (reply, _) in results {
                let _ = reply.send(Err(StoreError::Commit(message.clone())));
            }
        }
    }
}

/// A group of one (the common case): the transaction itself stands for the savepoint, which
/// saves two statements per commit.
fn run_one(conn: &mut Connection, request: Request, fault: &WriteFault) {
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            note(fault, Err(&e.to_string()));
            let _ = request.reply.send(Err(StoreError::Commit(e.to_string())));
            return;
        }
    };
    let outcome = match (request.job)(&tx) {
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
    let _ = request.reply.send(outcome);
}
