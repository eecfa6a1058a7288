//! SQL of composition: subagent links and calls, the inbox message a subagent's turn consumed,
//! dynamic tools, observe-hook cursors.
//!
//! The rows are described in [`crate::store::CompositionOp`] and its record types; this module
//! writes them inside a batch's transaction and reads them back for the engine.

use deadpool_postgres::GenericClient;

use super::rows::{all, opt};
use super::{execute, g, i, query, query_opt, u, write};
use crate::store::rows::{self, DYNAMIC_TOOL_COLS, LINK_COLS, REQUEST_COLS, SUBCALL_COLS};
use crate::store::{
    CompositionOp, DynamicToolRecord, InputRequestRecord, StoreResult, SubagentCall, SubagentLink,
    UsageTotals,
};

/// Applies one composition write.
pub(super) async fn apply<C: GenericClient>(c: &C, op: CompositionOp, now: i64) -> StoreResult<()> {
    match op {
        CompositionOp::InsertLink(l) => {
            write(
                c,
                &format!(
                    "INSERT INTO subagent_sessions ({LINK_COLS}) \
                     VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (session_id) DO UPDATE SET \
                     parent_id=excluded.parent_id, call_id=excluded.call_id, \
                     root_id=excluded.root_id, agent_path=excluded.agent_path, \
                     created_at=excluded.created_at"
                ),
                &rows::link_values(&l),
            )
            .await?;
        }
        CompositionOp::PutSubagentCall(call) => {
            write(
                c,
                &format!(
                    "INSERT INTO subagent_calls ({SUBCALL_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) \
                     ON CONFLICT (parent_id, turn_seq, call_id) DO UPDATE SET \
                     child_id=excluded.child_id, inbox_id=excluded.inbox_id, \
                     task_id=excluded.task_id, budget=excluded.budget, \
                     created_at=excluded.created_at"
                ),
                &rows::subcall_values(&call)?,
            )
            .await?;
        }
        CompositionOp::PutDynamicTools {
            session_id,
            providers,
            tools,
            turn_seq,
            detail,
        } => {
            for provider in &providers {
                execute(
                    c,
                    "DELETE FROM dynamic_tools WHERE session_id=$1 AND provider=$2",
                    &[&session_id, provider],
                )
                .await?;
            }
            for t in tools {
                write(
                    c,
                    &format!(
                        "INSERT INTO dynamic_tools ({DYNAMIC_TOOL_COLS}) \
                         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (session_id, name) \
                         DO UPDATE SET provider=excluded.provider, \
                         description=excluded.description, input_schema=excluded.input_schema, \
                         provider_tool=excluded.provider_tool, build_hash=excluded.build_hash, \
                         turn_seq=excluded.turn_seq, resolved_at=excluded.resolved_at"
                    ),
                    &rows::dynamic_tool_values(&t)?,
                )
                .await?;
            }
            write(
                c,
                "INSERT INTO dynamic_resolutions (session_id, turn_seq, detail, at) \
                 VALUES ($1,$2,$3,$4) ON CONFLICT (session_id, turn_seq) DO UPDATE SET \
                 detail=excluded.detail, at=excluded.at",
                &rows::resolution_values(&session_id, turn_seq, &detail, now)?,
            )
            .await?;
        }
        CompositionOp::HookCursor {
            session_id,
            hook,
            delivered,
        } => {
            write(
                c,
                "INSERT INTO hook_cursors (session_id, hook, delivered, updated_at) \
                 VALUES ($1,$2,$3,$4) ON CONFLICT (session_id, hook) DO UPDATE SET \
                 delivered=GREATEST(hook_cursors.delivered, excluded.delivered), \
                 updated_at=excluded.updated_at",
                &rows::cursor_values(&session_id, &hook, delivered, now),
            )
            .await?;
        }
    }
    Ok(())
}

pub(in crate::store::postgres) async fn link<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<SubagentLink>> {
    let row = query_opt(
        c,
        &format!("SELECT {LINK_COLS} FROM subagent_sessions WHERE session_id=$1"),
        &[&session],
    )
    .await?;
    opt(row, rows::link)
}

pub(in crate::store::postgres) async fn link_by_token<C: GenericClient>(
    c: &C,
    parent: &str,
    call_id: &str,
) -> StoreResult<Option<SubagentLink>> {
    let row = query_opt(
        c,
        &format!(
            "SELECT {LINK_COLS} FROM subagent_sessions WHERE parent_id=$1 AND call_id=$2 \
             ORDER BY created_at, ord LIMIT 1"
        ),
        &[&parent, &call_id],
    )
    .await?;
    opt(row, rows::link)
}

pub(in crate::store::postgres) async fn subagent_call<C: GenericClient>(
    c: &C,
    parent: &str,
    turn: u64,
    call_id: &str,
) -> StoreResult<Option<SubagentCall>> {
    let row = query_opt(
        c,
        &format!(
            "SELECT {SUBCALL_COLS} FROM subagent_calls \
             WHERE parent_id=$1 AND turn_seq=$2 AND call_id=$3"
        ),
        &[&parent, &i(turn), &call_id],
    )
    .await?;
    opt(row, rows::subcall)
}

pub(in crate::store::postgres) async fn subagent_call_by_inbox<C: GenericClient>(
    c: &C,
    inbox_id: &str,
) -> StoreResult<Option<SubagentCall>> {
    let row = query_opt(
        c,
        &format!("SELECT {SUBCALL_COLS} FROM subagent_calls WHERE inbox_id=$1"),
        &[&inbox_id],
    )
    .await?;
    opt(row, rows::subcall)
}

pub(in crate::store::postgres) async fn inbox_turn<C: GenericClient>(
    c: &C,
    inbox_id: &str,
) -> StoreResult<Option<Option<u64>>> {
    query_opt(
        c,
        "SELECT consumed_turn FROM inbox WHERE id=$1",
        &[&inbox_id],
    )
    .await?
    .map(|row| Ok(g::<Option<i64>>(&row, 0)?.map(u)))
    .transpose()
}

pub(in crate::store::postgres) async fn turn_inbox<C: GenericClient>(
    c: &C,
    session: &str,
    seq: u64,
) -> StoreResult<Vec<String>> {
    query(
        c,
        "SELECT id FROM inbox WHERE session_id=$1 AND consumed_turn=$2 ORDER BY ord",
        &[&session, &i(seq)],
    )
    .await?
    .iter()
    .map(|row| g::<String>(row, 0))
    .collect()
}

const DESCENDANTS: &str = "WITH RECURSIVE tree(id) AS ( \
     SELECT session_id FROM subagent_sessions WHERE parent_id=$1 \
     UNION SELECT s.session_id FROM subagent_sessions s JOIN tree t ON s.parent_id = t.id)";

pub(in crate::store::postgres) async fn descendant_requests<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<InputRequestRecord>> {
    let rows = query(
        c,
        &format!(
            "{DESCENDANTS} SELECT {REQUEST_COLS} FROM input_requests \
             WHERE session_id IN (SELECT id FROM tree) AND status='pending' ORDER BY ord"
        ),
        &[&session],
    )
    .await?;
    all(&rows, rows::request)
}

pub(in crate::store::postgres) async fn descendant_usage<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<(UsageTotals, f64)> {
    let row = query_opt(
        c,
        &format!(
            "{DESCENDANTS} SELECT COALESCE(SUM(input_tokens),0)::BIGINT, \
             COALESCE(SUM(output_tokens),0)::BIGINT, COALESCE(SUM(cache_read_tokens),0)::BIGINT, \
             COALESCE(SUM(cost_usd),0)::DOUBLE PRECISION FROM sessions \
             WHERE id IN (SELECT id FROM tree)"
        ),
        &[&session],
    )
    .await?;
    let Some(row) = row else {
        return Ok((UsageTotals::default(), 0.0));
    };
    Ok((
        UsageTotals {
            cost_usd: None,
            input_tokens: u(g(&row, 0)?),
            output_tokens: u(g(&row, 1)?),
            cache_read_tokens: u(g(&row, 2)?),
            cache_write_tokens: 0,
        },
        g(&row, 3)?,
    ))
}

pub(in crate::store::postgres) async fn dynamic_tools<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<DynamicToolRecord>> {
    let rows = query(
        c,
        &format!("SELECT {DYNAMIC_TOOL_COLS} FROM dynamic_tools WHERE session_id=$1 ORDER BY name"),
        &[&session],
    )
    .await?;
    all(&rows, rows::dynamic_tool)
}

pub(in crate::store::postgres) async fn dynamic_resolved<C: GenericClient>(
    c: &C,
    session: &str,
    turn: u64,
) -> StoreResult<bool> {
    Ok(query_opt(
        c,
        "SELECT 1 FROM dynamic_resolutions WHERE session_id=$1 AND turn_seq=$2",
        &[&session, &i(turn)],
    )
    .await?
    .is_some())
}

pub(in crate::store::postgres) async fn hook_cursors<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<(String, u64)>> {
    let rows = query(
        c,
        "SELECT hook, delivered FROM hook_cursors WHERE session_id=$1 ORDER BY hook",
        &[&session],
    )
    .await?;
    rows.iter()
        .map(|r| Ok((g::<String>(r, 0)?, u(g(r, 1)?))))
        .collect()
}

pub(in crate::store::postgres) async fn sessions_behind_hooks<C: GenericClient>(
    c: &C,
) -> StoreResult<Vec<String>> {
    let rows = query(
        c,
        "SELECT id FROM sessions s WHERE s.event_count > COALESCE((SELECT MIN(h.delivered) \
         FROM hook_cursors h WHERE h.session_id = s.id), 0) ORDER BY s.updated_at",
        &[],
    )
    .await?;
    rows.iter().map(|r| g::<String>(r, 0)).collect()
}
