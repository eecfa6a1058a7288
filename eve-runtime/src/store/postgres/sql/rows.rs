//! Column lists and row decoders shared by the PostgreSQL store's reads and writes (as
//! `store/sqlite/rows.rs` is for SQLite).
//!
//! One place maps a table's columns to a record type (`SESSION_COLS` with `session_row`, …), so
//! a read, a batch's statement and the run loop's combined read cannot disagree on column order.

use tokio_postgres::Row;

use super::{g, json, parse_enum, u};
use crate::store::{
    ApprovalState, CallStatus, FireStatus, FireTrigger, InputRequestRecord, MessageRecord,
    RequestStatus, ScheduleFire, SessionRecord, SessionStatus, StoreResult, ToolCallRecord,
    TurnPhase, TurnRecord, TurnStatus, UsageTotals,
};

pub(super) const SESSION_COLS: &str = "id, status, build_hash, agent_name, parent_id, parent_call_id, schedule, \
    turn_count, event_count, message_count, context_start, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, cost_usd, loaded_skills, approved_tools, \
    cancel_requested, created_at, updated_at, owner";

pub(super) fn session_row(row: &Row) -> StoreResult<SessionRecord> {
    Ok(SessionRecord {
        id: g(row, 0)?,
        status: parse_enum(g::<&str>(row, 1)?, SessionStatus::parse)?,
        build_hash: g(row, 2)?,
        agent_name: g(row, 3)?,
        parent_id: g(row, 4)?,
        parent_call_id: g(row, 5)?,
        schedule: g(row, 6)?,
        turn_count: u(g(row, 7)?),
        event_count: u(g(row, 8)?),
        message_count: u(g(row, 9)?),
        context_start: u(g(row, 10)?),
        usage: UsageTotals {
            input_tokens: u(g(row, 11)?),
            output_tokens: u(g(row, 12)?),
            cache_read_tokens: u(g(row, 13)?),
            cache_write_tokens: u(g(row, 14)?),
        },
        cost_usd: g(row, 15)?,
        loaded_skills: serde_json::from_str(g(row, 16)?)?,
        approved_tools: serde_json::from_str(g(row, 17)?)?,
        cancel_requested: g(row, 18)?,
        created_at: g(row, 19)?,
        updated_at: g(row, 20)?,
        owner: g(row, 21)?,
    })
}

pub(super) const TURN_COLS: &str = "session_id, seq, status, phase, step_index, step_started, build_hash, \
    inbox_id, started_at, ended_at, stop_reason, usage";

pub(super) fn turn_row(row: &Row) -> StoreResult<TurnRecord> {
    Ok(TurnRecord {
        session_id: g(row, 0)?,
        seq: u(g(row, 1)?),
        status: parse_enum(g::<&str>(row, 2)?, TurnStatus::parse)?,
        phase: parse_enum(g::<&str>(row, 3)?, TurnPhase::parse)?,
        step_index: u(g(row, 4)?),
        step_started: g(row, 5)?,
        build_hash: g(row, 6)?,
        inbox_id: g(row, 7)?,
        started_at: g(row, 8)?,
        ended_at: g(row, 9)?,
        stop_reason: g(row, 10)?,
        usage: serde_json::from_str(g(row, 11)?)?,
    })
}

pub(super) const CALL_COLS: &str = "session_id, call_id, turn_seq, step_index, position, kind, name, input, \
    idempotency_key, effect, status, approval, output, is_error, attempts, started_at, ended_at";

pub(super) fn call_row(row: &Row) -> StoreResult<ToolCallRecord> {
    let output: Option<&str> = g(row, 12)?;
    Ok(ToolCallRecord {
        session_id: g(row, 0)?,
        call_id: g(row, 1)?,
        turn_seq: u(g(row, 2)?),
        step_index: u(g(row, 3)?),
        position: u(g(row, 4)?),
        kind: g(row, 5)?,
        name: g(row, 6)?,
        input: json(g(row, 7)?)?,
        idempotency_key: g(row, 8)?,
        effect: g(row, 9)?,
        status: parse_enum(g::<&str>(row, 10)?, CallStatus::parse)?,
        approval: parse_enum(g::<&str>(row, 11)?, ApprovalState::parse)?,
        output: output.map(json).transpose()?,
        is_error: g(row, 13)?,
        attempts: u32::try_from(g::<i64>(row, 14)?).unwrap_or(0),
        started_at: g(row, 15)?,
        ended_at: g(row, 16)?,
    })
}

pub(super) const REQUEST_COLS: &str = "id, session_id, turn_seq, step_index, call_id, tool_name, kind, prompt, \
    action, status, reason, created_at, answered_at, responder";

pub(super) fn request_row(row: &Row) -> StoreResult<InputRequestRecord> {
    Ok(InputRequestRecord {
        id: g(row, 0)?,
        session_id: g(row, 1)?,
        turn_seq: u(g(row, 2)?),
        step_index: u(g(row, 3)?),
        call_id: g(row, 4)?,
        tool_name: g(row, 5)?,
        kind: g(row, 6)?,
        prompt: g(row, 7)?,
        action: json(g(row, 8)?)?,
        status: parse_enum(g::<&str>(row, 9)?, RequestStatus::parse)?,
        reason: g(row, 10)?,
        created_at: g(row, 11)?,
        answered_at: g(row, 12)?,
        responder: g(row, 13)?,
    })
}

pub(super) fn message_row(row: &Row) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        session_id: g(row, 0)?,
        seq: u(g(row, 1)?),
        turn_seq: g::<Option<i64>>(row, 2)?.map(u),
        kind: g(row, 3)?,
        body: json(g(row, 4)?)?,
        at: g(row, 5)?,
    })
}

pub(super) const FIRE_COLS: &str =
    "schedule, fire_at, trigger, status, session_id, detail, created_at, updated_at";

pub(super) fn fire_row(row: &Row) -> StoreResult<ScheduleFire> {
    Ok(ScheduleFire {
        schedule: g(row, 0)?,
        fire_at: g(row, 1)?,
        trigger: parse_enum(g::<&str>(row, 2)?, FireTrigger::parse)?,
        status: parse_enum(g::<&str>(row, 3)?, FireStatus::parse)?,
        session_id: g(row, 4)?,
        detail: g(row, 5)?,
        created_at: g(row, 6)?,
        updated_at: g(row, 7)?,
    })
}

pub(super) fn all<T>(rows: &[Row], f: fn(&Row) -> StoreResult<T>) -> StoreResult<Vec<T>> {
    rows.iter().map(f).collect()
}
