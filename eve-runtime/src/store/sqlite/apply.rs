//! Applying a [`Batch`] inside the writer's transaction.
//!
//! Each [`Op`] becomes its statement (prepared once per connection); the store-owned counters
//! (event indexes, message sequence numbers, the context start) are advanced here, in the same
//! transaction as the rows they number, so they stay gapless per session.
//!
//! A step's batch writes the same rows more than once (the turn row at `step.started`, at the
//! journal and at `step.completed`; a call when journaled and when settled; the session), and
//! carries several events of one session. What the transaction ends with is the same when a
//! row overwritten whole by a later operation of the batch is skipped, and when a session's event
//! indexes are reserved with one update for all its events of the batch: both are done, so a
//! step costs fewer statements (see [`superseded`]).

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::write;
use super::{composition, notes, releases};
use crate::store::rows::{
    self, BREAKER_COLS, CALL_COLS, EVENT_COLS, INBOX_COLS, MESSAGE_COLS, REQUEST_COLS,
    SESSION_COLS, STEP_COLS, TURN_COLS, to_i64, to_u64,
};
use crate::store::{
    Batch, Committed, MESSAGE_KIND_CHECKPOINT, Op, StoreError, StoreResult, now_ms,
};

pub(super) fn apply(conn: &Connection, batch: Batch) -> StoreResult<Committed> {
    let mut committed = Committed::default();
    let now = now_ms();
    super::leases::check_fences(conn, &batch.fences)?;
    let skip = superseded(&batch.ops);
    // Events of the batch per session, and the next index of each once reserved.
    let mut events: HashMap<String, (i64, Option<i64>)> = HashMap::new();
    for op in &batch.ops {
        if let Op::Event { session_id, .. } = op {
            events.entry(session_id.clone()).or_insert((0, None)).0 += 1;
        }
    }
    for (position, op) in batch.ops.into_iter().enumerate() {
        if skip.get(position).copied().unwrap_or(false) {
            continue;
        }
        match op {
            Op::InsertSession(s) => {
                write(
                    conn,
                    &format!(
                        "INSERT INTO sessions ({SESSION_COLS}) VALUES \
                         (?1,?2,?3,?4,?5,?6,?7,?8,0,0,0,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19)"
                    ),
                    &rows::session_insert(&s, now)?,
                )?;
            }
            Op::UpdateSession(s) => {
                let n = write(
                    conn,
                    "UPDATE sessions SET build_hash=?3, turn_count=?4, \
                     input_tokens=?5, output_tokens=?6, cache_read_tokens=?7, \
                     cache_write_tokens=?8, cost_usd=?9, loaded_skills=?10, approved_tools=?11, \
                     updated_at=?12 WHERE id=?1",
                    &rows::session_update(&s, now)?,
                )?;
                if n == 0 {
                    return Err(StoreError::NotFound(format!("session {}", s.id)));
                }
                // Apart, and only when it changes: SQLite rewrites an index entry whenever its
                // column is assigned, even to the value it had, and most updates (one a step)
                // keep the status, so `sessions_by_status` is not written again for them.
                conn.prepare_cached("UPDATE sessions SET status=?2 WHERE id=?1 AND status<>?2")?
                    .execute(params![s.id, s.status.as_str()])?;
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
                write(
                    conn,
                    &format!("INSERT INTO inbox ({INBOX_COLS}) VALUES (?1,?2,?3,?4,?5,?6)"),
                    &rows::inbox_values(&m)?,
                )?;
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
                write(
                    conn,
                    &format!("INSERT INTO messages ({MESSAGE_COLS}) VALUES (?1,?2,?3,?4,?5,?6)"),
                    &rows::message_values(&session_id, to_u64(seq), turn_seq, &kind, &body, now)?,
                )?;
                committed.message_seqs.push(to_u64(seq));
            }
            Op::PutTurn(t) => {
                write(
                    conn,
                    &format!(
                        "INSERT OR REPLACE INTO turns ({TURN_COLS}) VALUES \
                         (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)"
                    ),
                    &rows::turn_values(&t)?,
                )?;
            }
            Op::PutStep(s) => {
                write(
                    conn,
                    &format!(
                        "INSERT OR REPLACE INTO steps ({STEP_COLS}) VALUES (?1,?2,?3,?4,?5,?6)"
                    ),
                    &rows::step_values(&s)?,
                )?;
            }
            Op::PutToolCall(c) => {
                // One b-tree (`WITHOUT ROWID`, no second index): replacing the row rewrites the
                // one leaf it sits in, as an update in place would.
                write(
                    conn,
                    &format!(
                        "INSERT OR REPLACE INTO tool_calls ({CALL_COLS}) VALUES \
                         (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)"
                    ),
                    &rows::call_values(&c)?,
                )?;
            }
            Op::PutInputRequest(r) => {
                write(
                    conn,
                    &format!(
                        "INSERT INTO input_requests ({REQUEST_COLS}) VALUES \
                         (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14) \
                         ON CONFLICT(id) DO UPDATE SET status=excluded.status, \
                         reason=excluded.reason, answered_at=excluded.answered_at, \
                         responder=excluded.responder, \
                         prompt=excluded.prompt, action=excluded.action"
                    ),
                    &rows::request_values(&r)?,
                )?;
            }
            Op::AnswerInputRequest {
                request,
                others_pending,
            } => super::answers::settle(conn, &request, &others_pending)?,
            Op::PutBreaker(b) => {
                write(
                    conn,
                    &format!(
                        "INSERT OR REPLACE INTO breakers ({BREAKER_COLS}) VALUES (?1,?2,?3,?4,?5)"
                    ),
                    &rows::breaker_values(&b, now),
                )?;
            }
            Op::Composition(op) => composition::apply(conn, op, now)?,
            Op::Note(op) => notes::apply(conn, op)?,
            Op::Release(op) => releases::apply(conn, op, now, &mut committed)?,
            Op::Event {
                session_id,
                kind,
                data,
            } => {
                let (count, next) = events.entry(session_id.clone()).or_insert((1, None));
                let index = match *next {
                    Some(index) => index,
                    // The first event of this session in the batch reserves the indexes of all.
                    None => conn
                        .prepare_cached(
                            "UPDATE sessions SET event_count=event_count+?3, updated_at=?2 \
                             WHERE id=?1 RETURNING event_count-?3",
                        )?
                        .query_row(params![session_id, now, *count], |r| r.get(0))
                        .optional()?
                        .ok_or_else(|| StoreError::NotFound(format!("session {session_id}")))?,
                };
                *next = Some(index + 1);
                let event = rows::new_event(session_id, to_u64(index), kind, data, now);
                write(
                    conn,
                    &format!("INSERT INTO events ({EVENT_COLS}) VALUES (?1,?2,?3,?4,?5,?6)"),
                    &rows::event_values(&event)?,
                )?;
                committed.events.push(event);
            }
        }
    }
    Ok(committed)
}

/// Which operations of `ops` a later one of the same batch overwrites whole, so skipping them
/// leaves the same rows: a turn row or a tool call (`INSERT OR REPLACE` of the same key), or a
/// session update (every column it sets is set again; an insert of that session in between
/// keeps the earlier update, whose failure would have failed the batch).
fn superseded(ops: &[Op]) -> Vec<bool> {
    let mut turns: HashSet<(&str, u64)> = HashSet::new();
    let mut calls: HashSet<(&str, &str)> = HashSet::new();
    let mut sessions: HashSet<&str> = HashSet::new();
    let mut skip = vec![false; ops.len()];
    for (position, op) in ops.iter().enumerate().rev() {
        let later = match op {
            Op::PutTurn(t) => !turns.insert((t.session_id.as_str(), t.seq)),
            Op::PutToolCall(c) => !calls.insert((c.session_id.as_str(), c.call_id.as_str())),
            Op::UpdateSession(s) => !sessions.insert(s.id.as_str()),
            Op::InsertSession(s) => {
                sessions.remove(s.id.as_str());
                false
            }
            _ => false,
        };
        if let Some(slot) = skip.get_mut(position) {
            *slot = later;
        }
    }
    skip
}
