//! Reads of the SQLite store: sessions, turns, steps, calls, requests, inbox, messages, events,
//! breakers, and the run loop's combined read ([`drive_state`]).
//!
//! Each function runs on a pooled read connection (WAL: readers never block the writer) with
//! statements prepared once per connection (`prepare_cached`).

use rusqlite::{Connection, params};

use super::composition;
use super::rows::{all, one};
use crate::store::rows::{
    self, BREAKER_COLS, CALL_COLS, EVENT_COLS, INBOX_COLS, MESSAGE_COLS, REQUEST_COLS,
    SESSION_COLS, STEP_COLS, TURN_COLS, to_i64,
};
use crate::store::{
    BreakerRecord, DriveState, InboxRecord, InputRequestRecord, MessageRecord, SessionFilter,
    SessionRecord, StepRecord, StoreResult, StoredEvent, ToolCallRecord, TurnRecord, TurnView,
    UsageTotals,
};

pub(super) fn session(conn: &Connection, id: &str) -> StoreResult<Option<SessionRecord>> {
    one(
        conn,
        &format!("SELECT {SESSION_COLS} FROM sessions WHERE id=?1"),
        [id],
        rows::session,
    )
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
    all(
        conn,
        &format!(
            "SELECT {SESSION_COLS} FROM sessions \
             WHERE (?1 IS NULL OR schedule=?1) AND (?2 IS NULL OR status=?2) \
             AND (?4 IS NULL OR owner=?4) \
             ORDER BY created_at DESC, id DESC LIMIT ?3"
        ),
        params![
            filter.schedule,
            filter.status.map(|s| s.as_str()),
            limit,
            filter.owner
        ],
        rows::session,
    )
}

pub(super) fn turn(conn: &Connection, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
    one(
        conn,
        &format!("SELECT {TURN_COLS} FROM turns WHERE session_id=?1 AND seq=?2"),
        params![session, to_i64(seq)],
        rows::turn,
    )
}

pub(super) fn last_turn(conn: &Connection, session: &str) -> StoreResult<Option<TurnRecord>> {
    one(
        conn,
        &format!("SELECT {TURN_COLS} FROM turns WHERE session_id=?1 ORDER BY seq DESC LIMIT 1"),
        [session],
        rows::turn,
    )
}

pub(super) fn steps(conn: &Connection, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
    all(
        conn,
        &format!(
            "SELECT {STEP_COLS} FROM steps WHERE session_id=?1 AND turn_seq=?2 ORDER BY step_index"
        ),
        params![session, to_i64(turn)],
        rows::step,
    )
}

pub(super) fn tool_calls(
    conn: &Connection,
    session: &str,
    turn: u64,
) -> StoreResult<Vec<ToolCallRecord>> {
    all(
        conn,
        &format!(
            "SELECT {CALL_COLS} FROM tool_calls WHERE session_id=?1 AND turn_seq=?2 \
             ORDER BY step_index, position"
        ),
        params![session, to_i64(turn)],
        rows::call,
    )
}

pub(super) fn input_requests(
    conn: &Connection,
    session: &str,
    pending_only: bool,
) -> StoreResult<Vec<InputRequestRecord>> {
    all(
        conn,
        &format!(
            "SELECT {REQUEST_COLS} FROM input_requests \
             WHERE session_id=?1 AND (?2 = 0 OR status='pending') ORDER BY rowid"
        ),
        params![session, i64::from(pending_only)],
        rows::request,
    )
}

pub(super) fn input_request(
    conn: &Connection,
    id: &str,
) -> StoreResult<Option<InputRequestRecord>> {
    one(
        conn,
        &format!("SELECT {REQUEST_COLS} FROM input_requests WHERE id=?1"),
        [id],
        rows::request,
    )
}

pub(super) fn pending_inbox(conn: &Connection, session: &str) -> StoreResult<Vec<InboxRecord>> {
    all(
        conn,
        &format!(
            "SELECT {INBOX_COLS} FROM inbox \
             WHERE session_id=?1 AND consumed_turn IS NULL ORDER BY rowid"
        ),
        [session],
        rows::inbox,
    )
}

pub(super) fn context(conn: &Connection, session: &str) -> StoreResult<Vec<MessageRecord>> {
    all(
        conn,
        "SELECT m.session_id, m.seq, m.turn_seq, m.kind, m.body, m.at FROM messages m \
         JOIN sessions s ON s.id = m.session_id \
         WHERE m.session_id=?1 AND m.seq >= s.context_start ORDER BY m.seq",
        [session],
        rows::message,
    )
}

pub(super) fn messages(
    conn: &Connection,
    session: &str,
    from: u64,
    limit: usize,
) -> StoreResult<Vec<MessageRecord>> {
    all(
        conn,
        &format!(
            "SELECT {MESSAGE_COLS} FROM messages WHERE session_id=?1 AND seq >= ?2 \
             ORDER BY seq LIMIT ?3"
        ),
        params![session, to_i64(from), i64::try_from(limit).unwrap_or(-1)],
        rows::message,
    )
}

pub(super) fn events(
    conn: &Connection,
    session: &str,
    from: u64,
    limit: usize,
) -> StoreResult<Vec<StoredEvent>> {
    all(
        conn,
        &format!(
            "SELECT {EVENT_COLS} FROM events WHERE session_id=?1 AND idx >= ?2 \
             ORDER BY idx LIMIT ?3"
        ),
        params![session, to_i64(from), i64::try_from(limit).unwrap_or(-1)],
        rows::event,
    )
}

pub(super) fn breaker(conn: &Connection, tool: &str) -> StoreResult<Option<BreakerRecord>> {
    one(
        conn,
        &format!("SELECT {BREAKER_COLS} FROM breakers WHERE tool=?1"),
        [tool],
        rows::breaker,
    )
}

pub(super) fn sessions_with_work(
    conn: &Connection,
    liveness: &dyn crate::store::Liveness,
) -> StoreResult<Vec<String>> {
    let now = crate::store::now_ms();
    let rows = all(
        conn,
        "SELECT s.id, l.holder, l.pid, l.host, l.expires_at FROM sessions s \
         LEFT JOIN leases l ON l.session_id = s.id \
         WHERE s.status = 'running' \
         OR (s.status = 'waiting' AND NOT EXISTS (SELECT 1 FROM input_requests r \
             WHERE r.session_id = s.id AND r.status = 'pending')) \
         OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
             AND i.consumed_turn IS NULL) \
         ORDER BY s.updated_at",
        [],
        rows::work,
    )?;
    Ok(rows::unleased(rows, liveness, now))
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
