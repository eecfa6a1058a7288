//! SQL of composition: subagent links and waits, dynamic tools, observe-hook cursors.
//!
//! The rows are described in [`crate::store::CompositionOp`] and its record types; this module
//! writes them inside a batch's transaction and reads them back for the engine.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{all, one, write};
use crate::store::rows::{
    self, DYNAMIC_TOOL_COLS, LINK_COLS, REQUEST_COLS, SUBCALL_COLS, to_i64, to_u64,
};
use crate::store::{
    CompositionOp, DynamicToolRecord, InputRequestRecord, StoreResult, SubagentCall, SubagentLink,
    UsageTotals,
};

/// Applies one composition write.
pub(super) fn apply(conn: &Connection, op: CompositionOp, now: i64) -> StoreResult<()> {
    match op {
        CompositionOp::InsertLink(l) => {
            write(
                conn,
                &format!(
                    "INSERT OR REPLACE INTO subagent_sessions ({LINK_COLS}) VALUES (?1,?2,?3,?4,?5,?6)"
                ),
                &rows::link_values(&l),
            )?;
        }
        CompositionOp::PutSubagentCall(c) => {
            write(
                conn,
                &format!(
                    "INSERT OR REPLACE INTO subagent_calls ({SUBCALL_COLS}) \
                     VALUES (?1,?2,?3,?4,?5,?6,?7,?8)"
                ),
                &rows::subcall_values(&c)?,
            )?;
        }
        CompositionOp::PutDynamicTools {
            session_id,
            providers,
            tools,
            turn_seq,
            detail,
        } => {
            for provider in &providers {
                conn.prepare_cached(
                    "DELETE FROM dynamic_tools WHERE session_id=?1 AND provider=?2",
                )?
                .execute(params![session_id, provider])?;
            }
            for t in tools {
                write(
                    conn,
                    &format!(
                        "INSERT OR REPLACE INTO dynamic_tools ({DYNAMIC_TOOL_COLS}) \
                         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)"
                    ),
                    &rows::dynamic_tool_values(&t)?,
                )?;
            }
            write(
                conn,
                "INSERT OR REPLACE INTO dynamic_resolutions (session_id, turn_seq, detail, at) \
                 VALUES (?1,?2,?3,?4)",
                &rows::resolution_values(&session_id, turn_seq, &detail, now)?,
            )?;
        }
        CompositionOp::HookCursor {
            session_id,
            hook,
            delivered,
        } => {
            write(
                conn,
                "INSERT INTO hook_cursors (session_id, hook, delivered, updated_at) \
                 VALUES (?1,?2,?3,?4) ON CONFLICT(session_id, hook) DO UPDATE SET \
                 delivered=MAX(delivered, excluded.delivered), updated_at=excluded.updated_at",
                &rows::cursor_values(&session_id, &hook, delivered, now),
            )?;
        }
    }
    Ok(())
}

/// The link of a child session.
pub(super) fn link(conn: &Connection, session: &str) -> StoreResult<Option<SubagentLink>> {
    one(
        conn,
        &format!("SELECT {LINK_COLS} FROM subagent_sessions WHERE session_id=?1"),
        [session],
        rows::link,
    )
}

/// The child a continuation token names (the oldest, should a call id repeat).
pub(super) fn link_by_token(
    conn: &Connection,
    parent: &str,
    call_id: &str,
) -> StoreResult<Option<SubagentLink>> {
    one(
        conn,
        &format!(
            "SELECT {LINK_COLS} FROM subagent_sessions WHERE parent_id=?1 AND call_id=?2 \
             ORDER BY created_at, rowid LIMIT 1"
        ),
        [parent, call_id],
        rows::link,
    )
}

/// The child turn a parent call waits on.
pub(super) fn subagent_call(
    conn: &Connection,
    parent: &str,
    turn: u64,
    call_id: &str,
) -> StoreResult<Option<SubagentCall>> {
    one(
        conn,
        &format!(
            "SELECT {SUBCALL_COLS} FROM subagent_calls \
             WHERE parent_id=?1 AND turn_seq=?2 AND call_id=?3"
        ),
        params![parent, to_i64(turn), call_id],
        rows::subcall,
    )
}

/// The parent call that put the inbox message `inbox_id` in a child's inbox.
pub(super) fn subagent_call_by_inbox(
    conn: &Connection,
    inbox_id: &str,
) -> StoreResult<Option<SubagentCall>> {
    one(
        conn,
        &format!("SELECT {SUBCALL_COLS} FROM subagent_calls WHERE inbox_id=?1"),
        [inbox_id],
        rows::subcall,
    )
}

/// The turn that took an inbox message: `None` when there is no such message, `Some(None)` while
/// no turn took it yet.
pub(super) fn inbox_turn(conn: &Connection, inbox_id: &str) -> StoreResult<Option<Option<u64>>> {
    Ok(conn
        .prepare_cached("SELECT consumed_turn FROM inbox WHERE id=?1")?
        .query_row([inbox_id], |r| r.get::<_, Option<i64>>(0))
        .optional()?
        .map(|t| t.map(to_u64)))
}

pub(super) fn turn_inbox(conn: &Connection, session: &str, seq: u64) -> StoreResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM inbox WHERE session_id=?1 AND consumed_turn=?2 ORDER BY accepted_at, rowid",
    )?;
    let rows = stmt.query_map(rusqlite::params![session, to_i64(seq)], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

const DESCENDANTS: &str = "WITH RECURSIVE tree(id) AS ( \
     SELECT session_id FROM subagent_sessions WHERE parent_id=?1 \
     UNION SELECT s.session_id FROM subagent_sessions s JOIN tree t ON s.parent_id = t.id)";

/// Pending input requests of every session below `session` (children, their children, …).
pub(super) fn descendant_requests(
    conn: &Connection,
    session: &str,
) -> StoreResult<Vec<InputRequestRecord>> {
    all(
        conn,
        &format!(
            "{DESCENDANTS} SELECT {REQUEST_COLS} FROM input_requests \
             WHERE session_id IN (SELECT id FROM tree) AND status='pending' ORDER BY rowid"
        ),
        [session],
        rows::request,
    )
}

/// Token totals and cost of every session below `session`.
pub(super) fn descendant_usage(
    conn: &Connection,
    session: &str,
) -> StoreResult<(UsageTotals, f64)> {
    Ok(conn
        .prepare_cached(&format!(
            "{DESCENDANTS} SELECT COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0), \
             COALESCE(SUM(cache_read_tokens),0), COALESCE(SUM(cost_usd),0) FROM sessions \
             WHERE id IN (SELECT id FROM tree)"
        ))?
        .query_row([session], |r| {
            Ok((
                UsageTotals {
                    cost_usd: None,
                    input_tokens: to_u64(r.get(0)?),
                    output_tokens: to_u64(r.get(1)?),
                    cache_read_tokens: to_u64(r.get(2)?),
                    cache_write_tokens: 0,
                },
                r.get::<_, f64>(3)?,
            ))
        })?)
}

/// Dynamic tools of a session, by name.
pub(super) fn dynamic_tools(
    conn: &Connection,
    session: &str,
) -> StoreResult<Vec<DynamicToolRecord>> {
    all(
        conn,
        &format!("SELECT {DYNAMIC_TOOL_COLS} FROM dynamic_tools WHERE session_id=?1 ORDER BY name"),
        [session],
        rows::dynamic_tool,
    )
}

/// Whether dynamic tools were resolved for a turn.
pub(super) fn dynamic_resolved(conn: &Connection, session: &str, turn: u64) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM dynamic_resolutions WHERE session_id=?1 AND turn_seq=?2")?
        .query_row(params![session, to_i64(turn)], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Delivery cursors of a session's hooks: `(hook, next event index)`.
pub(super) fn hook_cursors(conn: &Connection, session: &str) -> StoreResult<Vec<(String, u64)>> {
    let mut stmt =
        conn.prepare_cached("SELECT hook, delivered FROM hook_cursors WHERE session_id=?1")?;
    let rows = stmt.query_map([session], |r| {
        Ok((r.get::<_, String>(0)?, to_u64(r.get::<_, i64>(1)?)))
    })?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row?);
    }
    Ok(out)
}

/// Sessions with events some hook may not have acknowledged: no cursor at all, or a cursor behind
/// the session's event count.
pub(super) fn sessions_behind_hooks(conn: &Connection) -> StoreResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM sessions s WHERE s.event_count > COALESCE((SELECT MIN(c.delivered) \
         FROM hook_cursors c WHERE c.session_id = s.id), 0) ORDER BY s.updated_at",
    )?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row?);
    }
    Ok(out)
}

/// Whether any session was created by a call of `session`.
pub(super) fn has_children(conn: &Connection, session: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM subagent_sessions WHERE parent_id=?1 LIMIT 1")?
        .query_row([session], |_| Ok(()))
        .optional()?
        .is_some())
}
