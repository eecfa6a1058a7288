//! Column lists and row decoders shared by the SQLite store's reads and writes.
//!
//! One place maps a table's columns to a record type (`SESSION_COLS` with `session_from_row`, …),
//! so a read, a batch write and the run loop's combined read cannot disagree on column order.

use serde_json::Value;

use crate::store::{
    ApprovalState, CallStatus, FireStatus, FireTrigger, InputRequestRecord, MessageRecord,
    RequestStatus, ScheduleFire, SessionRecord, SessionStatus, StoreError, StoreResult,
    ToolCallRecord, TurnPhase, TurnRecord, TurnStatus, UsageTotals,
};

pub(super) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn parse_enum<T>(text: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown state `{text}`")))
}

pub(super) fn json_col(text: &str) -> StoreResult<Value> {
    Ok(serde_json::from_str(text)?)
}

pub(super) const SESSION_COLS: &str = "id, status, build_hash, agent_name, parent_id, parent_call_id, schedule, \
    turn_count, event_count, message_count, context_start, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, cost_usd, loaded_skills, approved_tools, \
    cancel_requested, created_at, updated_at, owner";

pub(super) fn session_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<StoreResult<SessionRecord>> {
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
            owner: row.get(21)?,
        })
    };
    Ok(build())
}

pub(super) const TURN_COLS: &str = "session_id, seq, status, phase, step_index, step_started, build_hash, \
    inbox_id, started_at, ended_at, stop_reason, usage";

pub(super) fn turn_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoreResult<TurnRecord>> {
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

pub(super) const CALL_COLS: &str = "session_id, call_id, turn_seq, step_index, position, kind, name, input, \
    idempotency_key, effect, status, approval, output, is_error, attempts, started_at, ended_at";

pub(super) fn call_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<StoreResult<ToolCallRecord>> {
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

pub(super) const REQUEST_COLS: &str = "id, session_id, turn_seq, step_index, call_id, tool_name, kind, prompt, \
    action, status, reason, created_at, answered_at, responder";

pub(super) fn request_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<StoreResult<InputRequestRecord>> {
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
            responder: row.get(13)?,
        })
    };
    Ok(build())
}

pub(super) fn collect<T>(
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

pub(super) const FIRE_COLS: &str =
    "schedule, fire_at, trigger, status, session_id, detail, created_at, updated_at";

pub(super) fn fire_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<StoreResult<ScheduleFire>> {
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

pub(super) fn message_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<StoreResult<MessageRecord>> {
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
