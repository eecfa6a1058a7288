//! Reads of the SQLite store: sessions, turns, steps, calls, requests, inbox, messages, events,
//! breakers, and the run loop's combined read ([`drive_state`]).
//!
//! Each function runs on a pooled read connection (WAL: readers never block the writer) with
//! statements prepared once per connection (`prepare_cached`).

use rusqlite::{Connection, OptionalExtension, params};

use super::composition;
use super::rows::{
    CALL_COLS, REQUEST_COLS, SESSION_COLS, TURN_COLS, call_from_row, collect, json_col,
    message_from_row, request_from_row, session_from_row, to_i64, to_u64, turn_from_row,
};
use crate::store::{
    BreakerRecord, DriveState, InboxRecord, InputRequestRecord, MessageRecord, SessionFilter,
    SessionRecord, StepRecord, StoreResult, StoredEvent, ToolCallRecord, TurnRecord, TurnView,
    UsageTotals,
};

pub(super) fn session(conn: &Connection, id: &str) -> StoreResult<Option<SessionRecord>> {
    conn.prepare_cached(&format!("SELECT {SESSION_COLS} FROM sessions WHERE id=?1"))?
        .query_row([id], session_from_row)
        .optional()?
        .transpose()
}

pub(super) fn sessions(
    conn: &Connection,
    filter: &SessionFilter,
) -> StoreResult<Vec<SessionRecord>> {
    let limit = if filter.limit == 0 {
        -1
    } else {
        i64::try_from(filter.limit).unwrap_or(-1)
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SESSION_COLS} FROM sessions \
         WHERE (?1 IS NULL OR schedule=?1) AND (?2 IS NULL OR status=?2) \
         AND (?4 IS NULL OR owner=?4) \
         ORDER BY created_at DESC, id DESC LIMIT ?3"
    ))?;
    collect(
        &mut stmt,
        params![
            filter.schedule,
            filter.status.map(|s| s.as_str()),
            limit,
            filter.owner
        ],
        session_from_row,
    )
}

pub(super) fn turn(conn: &Connection, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {TURN_COLS} FROM turns WHERE session_id=?1 AND seq=?2"
    ))?
    .query_row(params![session, to_i64(seq)], turn_from_row)
    .optional()?
    .transpose()
}

pub(super) fn last_turn(conn: &Connection, session: &str) -> StoreResult<Option<TurnRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {TURN_COLS} FROM turns WHERE session_id=?1 ORDER BY seq DESC LIMIT 1"
    ))?
    .query_row([session], turn_from_row)
    .optional()?
    .transpose()
}

pub(super) fn steps(conn: &Connection, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
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
}

pub(super) fn tool_calls(
    conn: &Connection,
    session: &str,
    turn: u64,
) -> StoreResult<Vec<ToolCallRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CALL_COLS} FROM tool_calls WHERE session_id=?1 AND turn_seq=?2 \
         ORDER BY step_index, position"
    ))?;
    collect(&mut stmt, params![session, to_i64(turn)], call_from_row)
}

pub(super) fn input_requests(
    conn: &Connection,
    session: &str,
    pending_only: bool,
) -> StoreResult<Vec<InputRequestRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {REQUEST_COLS} FROM input_requests \
         WHERE session_id=?1 AND (?2 = 0 OR status='pending') ORDER BY rowid"
    ))?;
    collect(
        &mut stmt,
        params![session, i64::from(pending_only)],
        request_from_row,
    )
}

pub(super) fn input_request(
    conn: &Connection,
    id: &str,
) -> StoreResult<Option<InputRequestRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {REQUEST_COLS} FROM input_requests WHERE id=?1"
    ))?
    .query_row([id], request_from_row)
    .optional()?
    .transpose()
}

pub(super) fn pending_inbox(conn: &Connection, session: &str) -> StoreResult<Vec<InboxRecord>> {
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
}

pub(super) fn context(conn: &Connection, session: &str) -> StoreResult<Vec<MessageRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.session_id, m.seq, m.turn_seq, m.kind, m.body, m.at FROM messages m \
         JOIN sessions s ON s.id = m.session_id \
         WHERE m.session_id=?1 AND m.seq >= s.context_start ORDER BY m.seq",
    )?;
    collect(&mut stmt, [session], message_from_row)
}

pub(super) fn messages(
    conn: &Connection,
    session: &str,
    from: u64,
    limit: usize,
) -> StoreResult<Vec<MessageRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT session_id, seq, turn_seq, kind, body, at FROM messages \
         WHERE session_id=?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
    )?;
    collect(
        &mut stmt,
        params![session, to_i64(from), i64::try_from(limit).unwrap_or(-1)],
        message_from_row,
    )
}

pub(super) fn events(
    conn: &Connection,
    session: &str,
    from: u64,
    limit: usize,
) -> StoreResult<Vec<StoredEvent>> {
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
}

pub(super) fn breaker(conn: &Connection, tool: &str) -> StoreResult<Option<BreakerRecord>> {
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
}

pub(super) fn sessions_with_work(
    conn: &Connection,
    liveness: &dyn crate::store::Liveness,
) -> StoreResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.id, l.holder, l.pid, l.host, l.expires_at FROM sessions s \
         LEFT JOIN leases l ON l.session_id = s.id \
         WHERE s.status = 'running' \
         OR (s.status = 'waiting' AND NOT EXISTS (SELECT 1 FROM input_requests r \
             WHERE r.session_id = s.id AND r.status = 'pending')) \
         OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
             AND i.consumed_turn IS NULL) \
         ORDER BY s.updated_at",
    )?;
    let now = crate::store::now_ms();
    let rows = collect(&mut stmt, [], |row| {
        Ok(Ok((
            row.get::<_, String>(0)?,
            row.get::<_, Option<String>>(1)?,
            row.get::<_, Option<i64>>(2)?,
            row.get::<_, Option<String>>(3)?,
            row.get::<_, Option<i64>>(4)?,
        )))
    })?;
    Ok(rows
        .into_iter()
        .filter(|(_, holder, pid, host, expires)| match (holder, expires) {
            (Some(holder), Some(expires)) => !crate::store::lease_is_live(
                liveness,
                holder,
                &crate::store::ProcessRef {
                    pid: pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
                    host: host.clone().unwrap_or_default(),
                },
                *expires,
                now,
            ),
            _ => true,
        })
        .map(|(id, ..)| id)
        .collect())
}

/// Everything the run loop reads before it acts on a session, from one read transaction (one
/// snapshot of the WAL): the session row, its latest turn, accepted messages not yet taken, its
/// pending requests, its subagent link and the budget its parent passed down with the latest
/// turn's message, whether that turn's dynamic tools were resolved, and what its descendants
/// spent. Child-only and parent-only reads are skipped when they cannot find anything.
pub(super) fn drive_state(conn: &Connection, id: &str) -> StoreResult<Option<DriveState>> {
    let tx = conn.unchecked_transaction()?;
    let Some(session) = session(&tx, id)? else {
        return Ok(None);
    };
    let last_turn = last_turn(&tx, id)?;
    let inbox = pending_inbox(&tx, id)?;
    let pending_requests = input_requests(&tx, id, true)?;
    let (link, budget) = if session.parent_id.is_some() {
        let link = composition::link(&tx, id)?;
        let budget = match last_turn.as_ref().and_then(|t| t.inbox_id.as_deref()) {
            Some(inbox_id) => composition::subagent_call_by_inbox(&tx, inbox_id)?.map(|c| c.budget),
            None => None,
        };
        (link, budget)
    } else {
        (None, None)
    };
    let has_children = composition::has_children(&tx, id)?;
    let descendant_usage = if has_children {
        composition::descendant_usage(&tx, id)?
    } else {
        (UsageTotals::default(), 0.0)
    };
    let dynamic_resolved = match &last_turn {
        Some(t) => composition::dynamic_resolved(&tx, id, t.seq)?,
        None => false,
    };
    tx.commit()?;
    Ok(Some(DriveState {
        session,
        last_turn,
        inbox,
        pending_requests,
        link,
        budget,
        has_children,
        descendant_usage,
        dynamic_resolved,
    }))
}

/// The model context and the dynamic tools of a session, in one read transaction.
pub(super) fn turn_view(conn: &Connection, id: &str) -> StoreResult<TurnView> {
    let tx = conn.unchecked_transaction()?;
    let context = context(&tx, id)?;
    let dynamic_tools = composition::dynamic_tools(&tx, id)?;
    tx.commit()?;
    Ok(TurnView {
        context,
        dynamic_tools,
    })
}
