//! The SQLite store: WAL, one writer thread, pooled readers.
//!
//! All writes go through one dedicated thread (the writer actor) that owns the only write connection.
//! It drains whatever requests are queued and commits them in one `BEGIN IMMEDIATE` transaction
//! (group commit), each request in its own savepoint so one failure does not sink the others. With a
//! single writer per process, concurrent sessions never contend for the write lock inside a process;
//! `busy_timeout` covers other processes sharing the file (`eve serve` and an `eve run`).
//!
//! Durability: the database runs with `synchronous=NORMAL`, which in WAL mode survives any process
//! crash (SIGKILL included: committed frames are in the OS page cache) and costs no fsync per commit,
//! which is what keeps a step's checkpoint well under a millisecond. A power loss could drop the last
//! commits of the journal; resume then redoes that work from the previous checkpoint. What an API
//! promised (an accepted message, an approval answer, the start of a `write` tool) goes in a
//! [`Batch::durable`] batch, committed with `synchronous=FULL`, so it reaches the disk before the
//! caller is answered.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use tokio::sync::oneshot;

use super::channels;
use super::composition;
use super::records::*;
use super::schedules::*;
use super::schema::MIGRATIONS;
use super::{
    ChannelAccept, ChannelReplyRecord, ChannelReplyUpdate, DynamicToolRecord, Store, StoreError,
    StoreResult, SubagentCall, SubagentLink,
};

/// How long a connection waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most requests folded into one transaction.
const GROUP_LIMIT: usize = 256;
/// Reader connections kept open.
const READERS_KEPT: usize = 8;
/// How often an idle writer looks for commits of other processes.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

type AnyBox = Box<dyn Any + Send>;
type Job = Box<dyn FnOnce(&Connection) -> StoreResult<AnyBox> + Send>;

struct Request {
    durable: bool,
    job: Job,
    reply: oneshot::Sender<StoreResult<AnyBox>>,
}

/// The embedded SQLite store.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Mutex<Option<mpsc::Sender<Request>>>,
    readers: Mutex<Vec<Connection>>,
    /// Counts the times another process was seen to commit (see [`Store::foreign_commits`]).
    foreign: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

fn open_connection(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let supported = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > supported {
        return Err(StoreError::TooNew {
            found: version,
            supported,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )?;
    }
    tx.commit()?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating and migrating as needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)?;
        }
        let mut conn = open_connection(&path)?;
        migrate(&mut conn)?;
        let (tx, rx) = mpsc::channel::<Request>();
        let (foreign, _) = tokio::sync::watch::channel(0u64);
        let seen = foreign.clone();
        std::thread::Builder::new()
            .name("eve-store-writer".to_owned())
            .spawn(move || writer_loop(conn, rx, &seen))?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                writer: Mutex::new(Some(tx)),
                readers: Mutex::new(Vec::new()),
                foreign,
            }),
        })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `job` on the writer thread inside a transaction.
    async fn write<R, F>(&self, durable: bool, job: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    {
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
            sender.send(request).map_err(|_| StoreError::WriterGone)?;
        }
        let boxed = rx.await.map_err(|_| StoreError::WriterGone)??;
        boxed
            .downcast::<R>()
            .map(|b| *b)
            .map_err(|_| StoreError::Corrupt("writer returned an unexpected type".to_owned()))
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
            if let Ok(mut readers) = inner.readers.lock()
                && readers.len() < READERS_KEPT
            {
                readers.push(conn);
            }
            result
        })
        .await
        .map_err(|e| StoreError::Commit(format!("read task failed: {e}")))?
    }

    /// Stops the writer after the queued requests are done.
    pub fn close(&self) {
        if let Ok(mut guard) = self.inner.writer.lock() {
            guard.take();
        }
    }
}

/// The writer thread: commits queued requests in groups. Between groups (and every
/// [`WATCH_INTERVAL`] when idle) it reads `PRAGMA data_version`, which changes on this connection
/// only when another connection commits; as this is the process's only writing connection, a
/// change means another process wrote, and `foreign` is bumped.
fn writer_loop(
    mut conn: Connection,
    rx: mpsc::Receiver<Request>,
    foreign: &tokio::sync::watch::Sender<u64>,
) {
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
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
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
        run_group(&mut conn, group);
    }
}

fn run_group(conn: &mut Connection, group: Vec<Request>) {
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let message = e.to_string();
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
            for (reply, outcome) in results {
                let _ = reply.send(outcome);
            }
        }
        Err(e) => {
            let message = e.to_string();
            for (reply, _) in results {
                let _ = reply.send(Err(StoreError::Commit(message.clone())));
            }
        }
    }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn parse_enum<T>(text: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown state `{text}`")))
}

fn json_col(text: &str) -> StoreResult<Value> {
    Ok(serde_json::from_str(text)?)
}

const SESSION_COLS: &str = "id, status, build_hash, agent_name, parent_id, parent_call_id, schedule, \
    turn_count, event_count, message_count, context_start, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, cost_usd, loaded_skills, approved_tools, \
    cancel_requested, created_at, updated_at";

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<SessionRecord>> {
    let status: String = row.get(1)?;
    let skills: String = row.get(16)?;
    let approved: String = row.get(17)?;
    let build = || -> StoreResult<SessionRecord> {
        Ok(SessionRecord {
            id: row.get(0)?,
            status: parse_enum(&status, SessionStatus::parse)?,
            build_hash: row.get(2)?,
            agent_name: row.get(3)?,
            parent_id: row.get(4)?,
            parent_call_id: row.get(5)?,
            schedule: row.get(6)?,
            turn_count: to_u64(row.get(7)?),
            event_count: to_u64(row.get(8)?),
            message_count: to_u64(row.get(9)?),
            context_start: to_u64(row.get(10)?),
            usage: UsageTotals {
                input_tokens: to_u64(row.get(11)?),
                output_tokens: to_u64(row.get(12)?),
                cache_read_tokens: to_u64(row.get(13)?),
                cache_write_tokens: to_u64(row.get(14)?),
            },
            cost_usd: row.get(15)?,
            loaded_skills: serde_json::from_str(&skills)?,
            approved_tools: serde_json::from_str(&approved)?,
            cancel_requested: row.get::<_, i64>(18)? != 0,
            created_at: row.get(19)?,
            updated_at: row.get(20)?,
        })
    };
    Ok(build())
}

const TURN_COLS: &str = "session_id, seq, status, phase, step_index, step_started, build_hash, \
    inbox_id, started_at, ended_at, stop_reason, usage";

fn turn_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<TurnRecord>> {
    let status: String = row.get(2)?;
    let phase: String = row.get(3)?;
    let usage: String = row.get(11)?;
    let build = || -> StoreResult<TurnRecord> {
        Ok(TurnRecord {
            session_id: row.get(0)?,
            seq: to_u64(row.get(1)?),
            status: parse_enum(&status, TurnStatus::parse)?,
            phase: parse_enum(&phase, TurnPhase::parse)?,
            step_index: to_u64(row.get(4)?),
            step_started: row.get::<_, i64>(5)? != 0,
            build_hash: row.get(6)?,
            inbox_id: row.get(7)?,
            started_at: row.get(8)?,
            ended_at: row.get(9)?,
            stop_reason: row.get(10)?,
            usage: serde_json::from_str(&usage)?,
        })
    };
    Ok(build())
}

const CALL_COLS: &str = "session_id, call_id, turn_seq, step_index, position, kind, name, input, \
    idempotency_key, effect, status, approval, output, is_error, attempts, started_at, ended_at";

fn call_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<ToolCallRecord>> {
    let input: String = row.get(7)?;
    let status: String = row.get(10)?;
    let approval: String = row.get(11)?;
    let output: Option<String> = row.get(12)?;
    let build = || -> StoreResult<ToolCallRecord> {
        Ok(ToolCallRecord {
            session_id: row.get(0)?,
            call_id: row.get(1)?,
            turn_seq: to_u64(row.get(2)?),
            step_index: to_u64(row.get(3)?),
            position: to_u64(row.get(4)?),
            kind: row.get(5)?,
            name: row.get(6)?,
            input: json_col(&input)?,
            idempotency_key: row.get(8)?,
            effect: row.get(9)?,
            status: parse_enum(&status, CallStatus::parse)?,
            approval: parse_enum(&approval, ApprovalState::parse)?,
            output: output.as_deref().map(json_col).transpose()?,
            is_error: row.get::<_, i64>(13)? != 0,
            attempts: u32::try_from(row.get::<_, i64>(14)?).unwrap_or(0),
            started_at: row.get(15)?,
            ended_at: row.get(16)?,
        })
    };
    Ok(build())
}

const REQUEST_COLS: &str = "id, session_id, turn_seq, step_index, call_id, tool_name, kind, prompt, \
    action, status, reason, created_at, answered_at";

fn request_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<InputRequestRecord>> {
    let action: String = row.get(8)?;
    let status: String = row.get(9)?;
    let build = || -> StoreResult<InputRequestRecord> {
        Ok(InputRequestRecord {
            id: row.get(0)?,
            session_id: row.get(1)?,
            turn_seq: to_u64(row.get(2)?),
            step_index: to_u64(row.get(3)?),
            call_id: row.get(4)?,
            tool_name: row.get(5)?,
            kind: row.get(6)?,
            prompt: row.get(7)?,
            action: json_col(&action)?,
            status: parse_enum(&status, RequestStatus::parse)?,
            reason: row.get(10)?,
            created_at: row.get(11)?,
            answered_at: row.get(12)?,
        })
    };
    Ok(build())
}

fn collect<T>(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
    f: fn(&rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<T>>,
) -> StoreResult<Vec<T>> {
    let rows = stmt.query_map(params, f)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

fn apply(conn: &Connection, batch: Batch) -> StoreResult<Committed> {
    let mut committed = Committed::default();
    let now = now_ms();
    for op in batch.ops {
        match op {
            Op::InsertSession(s) => {
                conn.prepare_cached(&format!(
                    "INSERT INTO sessions ({SESSION_COLS}) VALUES \
                     (?1,?2,?3,?4,?5,?6,?7,?8,0,0,0,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)"
                ))?
                .execute(params![
                    s.id,
                    s.status.as_str(),
                    s.build_hash,
                    s.agent_name,
                    s.parent_id,
                    s.parent_call_id,
                    s.schedule,
                    to_i64(s.turn_count),
                    to_i64(s.usage.input_tokens),
                    to_i64(s.usage.output_tokens),
                    to_i64(s.usage.cache_read_tokens),
                    to_i64(s.usage.cache_write_tokens),
                    s.cost_usd,
                    serde_json::to_string(&s.loaded_skills)?,
                    serde_json::to_string(&s.approved_tools)?,
                    i64::from(s.cancel_requested),
                    s.created_at,
                    now,
                ])?;
            }
            Op::UpdateSession(s) => {
                let n = conn
                    .prepare_cached(
                        "UPDATE sessions SET status=?2, build_hash=?3, turn_count=?4, \
                         input_tokens=?5, output_tokens=?6, cache_read_tokens=?7, \
                         cache_write_tokens=?8, cost_usd=?9, loaded_skills=?10, approved_tools=?11, \
                         updated_at=?12 WHERE id=?1",
                    )?
                    .execute(params![
                        s.id,
                        s.status.as_str(),
                        s.build_hash,
                        to_i64(s.turn_count),
                        to_i64(s.usage.input_tokens),
                        to_i64(s.usage.output_tokens),
                        to_i64(s.usage.cache_read_tokens),
                        to_i64(s.usage.cache_write_tokens),
                        s.cost_usd,
                        serde_json::to_string(&s.loaded_skills)?,
                        serde_json::to_string(&s.approved_tools)?,
                        now,
                    ])?;
                if n == 0 {
                    return Err(StoreError::NotFound(format!("session {}", s.id)));
                }
            }
            Op::SetCancel {
                session_id,
                requested,
            } => {
                conn.prepare_cached(
                    "UPDATE sessions SET cancel_requested=?2, updated_at=?3 WHERE id=?1",
                )?
                .execute(params![session_id, i64::from(requested), now])?;
            }
            Op::ClearContext { session_id } => {
                conn.prepare_cached(
                    "UPDATE sessions SET context_start=message_count, updated_at=?2 WHERE id=?1",
                )?
                .execute(params![session_id, now])?;
            }
            Op::InsertInbox(m) => {
                conn.prepare_cached(
                    "INSERT INTO inbox (id, session_id, text, accepted_at, consumed_turn) \
                     VALUES (?1,?2,?3,?4,?5)",
                )?
                .execute(params![
                    m.id,
                    m.session_id,
                    m.text,
                    m.accepted_at,
                    m.consumed_turn.map(to_i64)
                ])?;
            }
            Op::ConsumeInbox { id, turn_seq } => {
                conn.prepare_cached("UPDATE inbox SET consumed_turn=?2 WHERE id=?1")?
                    .execute(params![id, to_i64(turn_seq)])?;
            }
            Op::AppendMessage {
                session_id,
                turn_seq,
                kind,
                body,
            } => {
                let seq: i64 = conn
                    .prepare_cached(
                        "UPDATE sessions SET message_count=message_count+1, \
                         context_start=CASE WHEN ?2 THEN message_count ELSE context_start END \
                         WHERE id=?1 RETURNING message_count-1",
                    )?
                    .query_row(params![session_id, kind == MESSAGE_KIND_CHECKPOINT], |r| {
                        r.get(0)
                    })
                    .optional()?
                    .ok_or_else(|| StoreError::NotFound(format!("session {session_id}")))?;
                conn.prepare_cached(
                    "INSERT INTO messages (session_id, seq, turn_seq, kind, body, at) \
                     VALUES (?1,?2,?3,?4,?5,?6)",
                )?
                .execute(params![
                    session_id,
                    seq,
                    turn_seq.map(to_i64),
                    kind,
                    serde_json::to_string(&body)?,
                    now
                ])?;
                committed.message_seqs.push(to_u64(seq));
            }
            Op::PutTurn(t) => {
                conn.prepare_cached(&format!(
                    "INSERT OR REPLACE INTO turns ({TURN_COLS}) VALUES \
                     (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)"
                ))?
                .execute(params![
                    t.session_id,
                    to_i64(t.seq),
                    t.status.as_str(),
                    t.phase.as_str(),
                    to_i64(t.step_index),
                    i64::from(t.step_started),
                    t.build_hash,
                    t.inbox_id,
                    t.started_at,
                    t.ended_at,
                    t.stop_reason,
                    serde_json::to_string(&t.usage)?,
                ])?;
            }
            Op::PutStep(s) => {
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO steps \
                     (session_id, turn_seq, step_index, model_id, response, at) \
                     VALUES (?1,?2,?3,?4,?5,?6)",
                )?
                .execute(params![
                    s.session_id,
                    to_i64(s.turn_seq),
                    to_i64(s.step_index),
                    s.model_id,
                    serde_json::to_string(&s.response)?,
                    s.at
                ])?;
            }
            Op::PutToolCall(c) => {
                conn.prepare_cached(&format!(
                    "INSERT OR REPLACE INTO tool_calls ({CALL_COLS}) VALUES \
                     (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)"
                ))?
                .execute(params![
                    c.session_id,
                    c.call_id,
                    to_i64(c.turn_seq),
                    to_i64(c.step_index),
                    to_i64(c.position),
                    c.kind,
                    c.name,
                    serde_json::to_string(&c.input)?,
                    c.idempotency_key,
                    c.effect,
                    c.status.as_str(),
                    c.approval.as_str(),
                    c.output.as_ref().map(serde_json::to_string).transpose()?,
                    i64::from(c.is_error),
                    i64::from(c.attempts),
                    c.started_at,
                    c.ended_at,
                ])?;
            }
            Op::PutInputRequest(r) => {
                conn.prepare_cached(&format!(
                    "INSERT INTO input_requests ({REQUEST_COLS}) VALUES \
                     (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13) \
                     ON CONFLICT(id) DO UPDATE SET status=excluded.status, \
                     reason=excluded.reason, answered_at=excluded.answered_at, \
                     prompt=excluded.prompt, action=excluded.action"
                ))?
                .execute(params![
                    r.id,
                    r.session_id,
                    to_i64(r.turn_seq),
                    to_i64(r.step_index),
                    r.call_id,
                    r.tool_name,
                    r.kind,
                    r.prompt,
                    serde_json::to_string(&r.action)?,
                    r.status.as_str(),
                    r.reason,
                    r.created_at,
                    r.answered_at,
                ])?;
            }
            Op::PutBreaker(b) => {
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO breakers \
                     (tool, consecutive_failures, open_until, backoff_ms, updated_at) \
                     VALUES (?1,?2,?3,?4,?5)",
                )?
                .execute(params![
                    b.tool,
                    i64::from(b.consecutive_failures),
                    b.open_until,
                    b.backoff_ms,
                    now
                ])?;
            }
            Op::Composition(op) => composition::apply(conn, op, now)?,
            Op::Event {
                session_id,
                kind,
                data,
            } => {
                let index: i64 = conn
                    .prepare_cached(
                        "UPDATE sessions SET event_count=event_count+1, updated_at=?2 WHERE id=?1 \
                         RETURNING event_count-1",
                    )?
                    .query_row(params![session_id, now], |r| r.get(0))
                    .optional()?
                    .ok_or_else(|| StoreError::NotFound(format!("session {session_id}")))?;
                let id = format!("evt_{}", ulid::Ulid::new());
                conn.prepare_cached(
                    "INSERT INTO events (session_id, idx, id, type, data, at) \
                     VALUES (?1,?2,?3,?4,?5,?6)",
                )?
                .execute(params![
                    session_id,
                    index,
                    id,
                    kind,
                    serde_json::to_string(&data)?,
                    now
                ])?;
                committed.events.push(StoredEvent {
                    session_id,
                    index: to_u64(index),
                    id,
                    kind,
                    data,
                    at: now,
                });
            }
        }
    }
    Ok(committed)
}

fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        Err(_) => true,
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

    async fn session(&self, id: &str) -> StoreResult<Option<SessionRecord>> {
        let id = id.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!("SELECT {SESSION_COLS} FROM sessions WHERE id=?1"))?
                .query_row([id], session_from_row)
                .optional()?
                .transpose()
        })
        .await
    }

    async fn sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<SessionRecord>> {
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = if filter.limit == 0 {
                -1
            } else {
                i64::try_from(filter.limit).unwrap_or(-1)
            };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SESSION_COLS} FROM sessions \
                 WHERE (?1 IS NULL OR schedule=?1) AND (?2 IS NULL OR status=?2) \
                 ORDER BY created_at DESC, id DESC LIMIT ?3"
            ))?;
            collect(
                &mut stmt,
                params![filter.schedule, filter.status.map(|s| s.as_str()), limit],
                session_from_row,
            )
        })
        .await
    }

    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_id=?1 AND seq=?2"
            ))?
            .query_row(params![session, to_i64(seq)], turn_from_row)
            .optional()?
            .transpose()
        })
        .await
    }

    async fn last_turn(&self, session: &str) -> StoreResult<Option<TurnRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_id=?1 ORDER BY seq DESC LIMIT 1"
            ))?
            .query_row([session], turn_from_row)
            .optional()?
            .transpose()
        })
        .await
    }

    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, turn_seq, step_index, model_id, response, at FROM steps \
                 WHERE session_id=?1 AND turn_seq=?2 ORDER BY step_index",
            )?;
            collect(&mut stmt, params![session, to_i64(turn)], |row| {
                let response: String = row.get(4)?;
                let build = || -> StoreResult<StepRecord> {
                    Ok(StepRecord {
                        session_id: row.get(0)?,
                        turn_seq: to_u64(row.get(1)?),
                        step_index: to_u64(row.get(2)?),
                        model_id: row.get(3)?,
                        response: json_col(&response)?,
                        at: row.get(5)?,
                    })
                };
                Ok(build())
            })
        })
        .await
    }

    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {CALL_COLS} FROM tool_calls WHERE session_id=?1 AND turn_seq=?2 \
                 ORDER BY step_index, position"
            ))?;
            collect(&mut stmt, params![session, to_i64(turn)], call_from_row)
        })
        .await
    }

    async fn input_requests(
        &self,
        session: &str,
        pending_only: bool,
    ) -> StoreResult<Vec<InputRequestRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {REQUEST_COLS} FROM input_requests \
                 WHERE session_id=?1 AND (?2 = 0 OR status='pending') ORDER BY rowid"
            ))?;
            collect(
                &mut stmt,
                params![session, i64::from(pending_only)],
                request_from_row,
            )
        })
        .await
    }

    async fn input_request(&self, id: &str) -> StoreResult<Option<InputRequestRecord>> {
        let id = id.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {REQUEST_COLS} FROM input_requests WHERE id=?1"
            ))?
            .query_row([id], request_from_row)
            .optional()?
            .transpose()
        })
        .await
    }

    async fn pending_inbox(&self, session: &str) -> StoreResult<Vec<InboxRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, session_id, text, accepted_at FROM inbox \
                 WHERE session_id=?1 AND consumed_turn IS NULL ORDER BY rowid",
            )?;
            collect(&mut stmt, [session], |row| {
                Ok(Ok(InboxRecord {
                    id: row.get(0)?,
                    session_id: row.get(1)?,
                    text: row.get(2)?,
                    accepted_at: row.get(3)?,
                    consumed_turn: None,
                }))
            })
        })
        .await
    }

    async fn context(&self, session: &str) -> StoreResult<Vec<MessageRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT m.session_id, m.seq, m.turn_seq, m.kind, m.body, m.at FROM messages m \
                 JOIN sessions s ON s.id = m.session_id \
                 WHERE m.session_id=?1 AND m.seq >= s.context_start ORDER BY m.seq",
            )?;
            collect(&mut stmt, [session], message_from_row)
        })
        .await
    }

    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, seq, turn_seq, kind, body, at FROM messages \
                 WHERE session_id=?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            )?;
            collect(
                &mut stmt,
                params![session, to_i64(from), i64::try_from(limit).unwrap_or(-1)],
                message_from_row,
            )
        })
        .await
    }

    async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<StoredEvent>> {
        let session = session.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, idx, id, type, data, at FROM events \
                 WHERE session_id=?1 AND idx >= ?2 ORDER BY idx LIMIT ?3",
            )?;
            collect(
                &mut stmt,
                params![session, to_i64(from), i64::try_from(limit).unwrap_or(-1)],
                |row| {
                    let data: String = row.get(4)?;
                    let build = || -> StoreResult<StoredEvent> {
                        Ok(StoredEvent {
                            session_id: row.get(0)?,
                            index: to_u64(row.get(1)?),
                            id: row.get(2)?,
                            kind: row.get(3)?,
                            data: json_col(&data)?,
                            at: row.get(5)?,
                        })
                    };
                    Ok(build())
                },
            )
        })
        .await
    }

    async fn breaker(&self, tool: &str) -> StoreResult<Option<BreakerRecord>> {
        let tool = tool.to_owned();
        self.read(move |conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT tool, consecutive_failures, open_until, backoff_ms FROM breakers \
                     WHERE tool=?1",
                )?
                .query_row([tool], |row| {
                    Ok(BreakerRecord {
                        tool: row.get(0)?,
                        consecutive_failures: u32::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                        open_until: row.get(2)?,
                        backoff_ms: row.get(3)?,
                    })
                })
                .optional()?)
        })
        .await
    }

    fn foreign_commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.inner.foreign.subscribe())
    }

    async fn sessions_with_work(&self) -> StoreResult<Vec<String>> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM sessions s WHERE s.status = 'running' \
                 OR (s.status = 'waiting' AND NOT EXISTS (SELECT 1 FROM input_requests r \
                     WHERE r.session_id = s.id AND r.status = 'pending')) \
                 OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
                     AND i.consumed_turn IS NULL) \
                 ORDER BY s.updated_at",
            )?;
            collect(&mut stmt, [], |row| Ok(Ok(row.get::<_, String>(0)?)))
        })
        .await
    }

    async fn acquire_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseOutcome> {
        let claim = claim.clone();
        self.write(false, move |conn| {
            let now = now_ms();
            let current: Option<(String, u32, String, i64)> = conn
                .prepare_cached(
                    "SELECT holder, pid, host, expires_at FROM leases WHERE session_id=?1",
                )?
                .query_row([&claim.session_id], |r| {
                    Ok((
                        r.get(0)?,
                        u32::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        r.get(2)?,
                        r.get(3)?,
                    ))
                })
                .optional()?;
            if let Some((holder, pid, host, expires_at)) = current {
                let ours = holder == claim.holder;
                let expired = expires_at < now;
                let dead = host == claim.host && (pid == claim.pid || !pid_alive(pid));
                if !ours && !expired && !dead {
                    return Ok(LeaseOutcome::HeldBy { pid, host });
                }
            }
            conn.prepare_cached(
                "INSERT OR REPLACE INTO leases (session_id, holder, pid, host, expires_at, \
                 acquired_at) VALUES (?1,?2,?3,?4,?5,?6)",
            )?
            .execute(params![
                claim.session_id,
                claim.holder,
                i64::from(claim.pid),
                claim.host,
                now.saturating_add(claim.ttl_ms),
                now
            ])?;
            Ok(LeaseOutcome::Acquired)
        })
        .await
    }

    async fn renew_lease(&self, claim: &LeaseClaim) -> StoreResult<bool> {
        let claim = claim.clone();
        self.write(false, move |conn| {
            let n = conn
                .prepare_cached(
                    "UPDATE leases SET expires_at=?3 WHERE session_id=?1 AND holder=?2",
                )?
                .execute(params![
                    claim.session_id,
                    claim.holder,
                    now_ms().saturating_add(claim.ttl_ms)
                ])?;
            Ok(n > 0)
        })
        .await
    }

    async fn release_lease(&self, session: &str, holder: &str) -> StoreResult<()> {
        let (session, holder) = (session.to_owned(), holder.to_owned());
        self.write(false, move |conn| {
            conn.prepare_cached("DELETE FROM leases WHERE session_id=?1 AND holder=?2")?
                .execute(params![session, holder])?;
            Ok(())
        })
        .await
    }

    async fn schedule_states(&self) -> StoreResult<Vec<ScheduleState>> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT name, spec, next_fire_at, updated_at FROM schedules ORDER BY name",
            )?;
            collect(&mut stmt, [], |row| {
                Ok(Ok(ScheduleState {
                    name: row.get(0)?,
                    spec: row.get(1)?,
                    next_fire_at: row.get(2)?,
                    updated_at: row.get(3)?,
                }))
            })
        })
        .await
    }

    async fn schedule_fires(
        &self,
        schedule: &str,
        status: Option<FireStatus>,
        limit: usize,
    ) -> StoreResult<Vec<ScheduleFire>> {
        let schedule = schedule.to_owned();
        self.read(move |conn| {
            let limit = if limit == 0 {
                -1
            } else {
                i64::try_from(limit).unwrap_or(-1)
            };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {FIRE_COLS} FROM schedule_fires WHERE schedule=?1 \
                 AND (?2 IS NULL OR status=?2) ORDER BY fire_at DESC, created_at DESC LIMIT ?3"
            ))?;
            collect(
                &mut stmt,
                params![schedule, status.map(FireStatus::as_str), limit],
                fire_from_row,
            )
        })
        .await
    }

    async fn claim_schedule(
        &self,
        claim: ScheduleClaim,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        self.write(true, move |conn| {
            if !claim_holds(conn, &claim)? {
                return Ok(None);
            }
            let now = now_ms();
            if let Some((next, spec)) = &claim.next {
                conn.prepare_cached(
                    "INSERT INTO schedules (name, spec, next_fire_at, updated_at) \
                     VALUES (?1,?2,?3,?4) ON CONFLICT(name) DO UPDATE SET \
                     spec=excluded.spec, next_fire_at=excluded.next_fire_at, \
                     updated_at=excluded.updated_at",
                )?
                .execute(params![claim.schedule, spec, next, now])?;
            }
            for write in &claim.fires {
                let fire = match write {
                    FireWrite::Insert(f) | FireWrite::Promote { to: f, .. } => f,
                };
                conn.prepare_cached(&format!(
                    "INSERT OR REPLACE INTO schedule_fires ({FIRE_COLS}) \
                     VALUES (?1,?2,?3,?4,?5,?6,?7,?8)"
                ))?
                .execute(params![
                    fire.schedule,
                    fire.fire_at,
                    fire.trigger.as_str(),
                    fire.status.as_str(),
                    fire.session_id,
                    fire.detail,
                    fire.created_at,
                    now
                ])?;
            }
            apply(conn, batch).map(Some)
        })
        .await
    }

    async fn subagent_link(&self, session: &str) -> StoreResult<Option<SubagentLink>> {
        let session = session.to_owned();
        self.read(move |conn| composition::link(conn, &session))
            .await
    }

    async fn subagent_by_token(
        &self,
        parent: &str,
        call_id: &str,
    ) -> StoreResult<Option<SubagentLink>> {
        let (parent, call_id) = (parent.to_owned(), call_id.to_owned());
        self.read(move |conn| composition::link_by_token(conn, &parent, &call_id))
            .await
    }

    async fn subagent_call(
        &self,
        parent: &str,
        turn: u64,
        call_id: &str,
    ) -> StoreResult<Option<SubagentCall>> {
        let (parent, call_id) = (parent.to_owned(), call_id.to_owned());
        self.read(move |conn| composition::subagent_call(conn, &parent, turn, &call_id))
            .await
    }

    async fn subagent_call_by_inbox(&self, inbox_id: &str) -> StoreResult<Option<SubagentCall>> {
        let inbox_id = inbox_id.to_owned();
        self.read(move |conn| composition::subagent_call_by_inbox(conn, &inbox_id))
            .await
    }

    async fn inbox_turn(&self, inbox_id: &str) -> StoreResult<Option<Option<u64>>> {
        let inbox_id = inbox_id.to_owned();
        self.read(move |conn| composition::inbox_turn(conn, &inbox_id))
            .await
    }

    async fn descendant_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>> {
        let session = session.to_owned();
        self.read(move |conn| {
            composition::descendant_requests(conn, &session, REQUEST_COLS, request_from_row)
        })
        .await
    }

    async fn descendant_usage(&self, session: &str) -> StoreResult<(UsageTotals, f64)> {
        let session = session.to_owned();
        self.read(move |conn| composition::descendant_usage(conn, &session))
            .await
    }

    async fn dynamic_tools(&self, session: &str) -> StoreResult<Vec<DynamicToolRecord>> {
        let session = session.to_owned();
        self.read(move |conn| composition::dynamic_tools(conn, &session))
            .await
    }

    async fn dynamic_resolved(&self, session: &str, turn: u64) -> StoreResult<bool> {
        let session = session.to_owned();
        self.read(move |conn| composition::dynamic_resolved(conn, &session, turn))
            .await
    }

    async fn hook_cursors(&self, session: &str) -> StoreResult<Vec<(String, u64)>> {
        let session = session.to_owned();
        self.read(move |conn| composition::hook_cursors(conn, &session))
            .await
    }

    async fn sessions_behind_hooks(&self) -> StoreResult<Vec<String>> {
        self.read(composition::sessions_behind_hooks).await
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
        pid: u32,
        host: &str,
    ) -> StoreResult<Vec<ChannelReplyRecord>> {
        let host = host.to_owned();
        self.write(false, move |conn| {
            channels::claim_replies(conn, pid, &host, &pid_alive, now_ms())
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
}

const FIRE_COLS: &str =
    "schedule, fire_at, trigger, status, session_id, detail, created_at, updated_at";

fn fire_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<ScheduleFire>> {
    let trigger: String = row.get(2)?;
    let status: String = row.get(3)?;
    let build = || -> StoreResult<ScheduleFire> {
        Ok(ScheduleFire {
            schedule: row.get(0)?,
            fire_at: row.get(1)?,
            trigger: parse_enum(&trigger, FireTrigger::parse)?,
            status: parse_enum(&status, FireStatus::parse)?,
            session_id: row.get(4)?,
            detail: row.get(5)?,
            created_at: row.get(6)?,
            updated_at: row.get(7)?,
        })
    };
    Ok(build())
}

/// Whether every condition of a claim holds (checked before anything is written).
fn claim_holds(conn: &Connection, claim: &ScheduleClaim) -> StoreResult<bool> {
    let stored: Option<i64> = conn
        .prepare_cached("SELECT next_fire_at FROM schedules WHERE name=?1")?
        .query_row([&claim.schedule], |r| r.get(0))
        .optional()?;
    let state_ok = match claim.expect {
        StateExpect::Any => true,
        StateExpect::Absent => stored.is_none(),
        StateExpect::Next(t) => stored == Some(t),
    };
    if !state_ok {
        return Ok(false);
    }
    for write in &claim.fires {
        let (fire, wanted) = match write {
            FireWrite::Insert(f) => (f, None),
            FireWrite::Promote { from, to } => (to, Some(*from)),
        };
        let status: Option<String> = conn
            .prepare_cached(
                "SELECT status FROM schedule_fires WHERE schedule=?1 AND fire_at=?2 AND trigger=?3",
            )?
            .query_row(
                params![fire.schedule, fire.fire_at, fire.trigger.as_str()],
                |r| r.get(0),
            )
            .optional()?;
        let ok = match wanted {
            None => status.is_none(),
            Some(from) => status.as_deref() == Some(from.as_str()),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn message_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<MessageRecord>> {
    let body: String = row.get(4)?;
    let build = || -> StoreResult<MessageRecord> {
        Ok(MessageRecord {
            session_id: row.get(0)?,
            seq: to_u64(row.get(1)?),
            turn_seq: row.get::<_, Option<i64>>(2)?.map(to_u64),
            kind: row.get(3)?,
            body: json_col(&body)?,
            at: row.get(5)?,
        })
    };
    Ok(build())
}
