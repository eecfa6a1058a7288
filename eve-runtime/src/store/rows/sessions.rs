//! Rows of a session's own tables: the session, its turns, steps, tool calls, input requests,
//! inbox, messages and events, and the breakers and leases the run loop keeps.

use serde_json::Value;

use super::{Cell, StoredRow};
use crate::store::{
    ApprovalState, BreakerRecord, CallStatus, InboxRecord, InputRequestRecord, LeaseClaim,
    LeaseRecord, Liveness, MessageRecord, ProcessRef, RequestStatus, SessionRecord, SessionStatus,
    StepRecord, StoreError, StoreResult, StoredEvent, ToolCallRecord, TurnPhase, TurnRecord,
    TurnStatus, UsageTotals, lease_is_live,
};
// ---- sessions ---------------------------------------------------------------------------

pub(crate) const SESSION_COLS: &str = "id, status, build_hash, agent_name, parent_id, parent_call_id, schedule, \
    turn_count, event_count, message_count, context_start, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, cost_usd, loaded_skills, approved_tools, \
    cancel_requested, created_at, updated_at, owner";

pub(crate) fn session(r: &dyn StoredRow) -> StoreResult<SessionRecord> {
    Ok(SessionRecord {
        id: r.text(0)?,
        status: r.state(1, SessionStatus::parse)?,
        build_hash: r.text(2)?,
        agent_name: r.text(3)?,
        parent_id: r.opt_text(4)?,
        parent_call_id: r.opt_text(5)?,
        schedule: r.opt_text(6)?,
        turn_count: r.count(7)?,
        event_count: r.count(8)?,
        message_count: r.count(9)?,
        context_start: r.count(10)?,
        usage: UsageTotals {
            cost_usd: None,
            input_tokens: r.count(11)?,
            output_tokens: r.count(12)?,
            cache_read_tokens: r.count(13)?,
            cache_write_tokens: r.count(14)?,
        },
        cost_usd: r.real(15)?,
        loaded_skills: r.json(16)?,
        approved_tools: r.json(17)?,
        cancel_requested: r.flag(18)?,
        created_at: r.int(19)?,
        updated_at: r.int(20)?,
        owner: r.opt_text(21)?,
    })
}

/// The values of a session's insert: [`SESSION_COLS`] less the three counters the store owns
/// (event and message counts, context start: the statement writes 0 between `turn_count` and
/// `input_tokens`), updated now.
pub(crate) fn session_insert(s: &SessionRecord, now: i64) -> StoreResult<Vec<Cell>> {
    let mut v = cells![
        &s.id,
        s.status.as_str(),
        &s.build_hash,
        &s.agent_name,
        s.parent_id.as_ref(),
        s.parent_call_id.as_ref(),
        s.schedule.as_ref(),
        s.turn_count,
    ];
    v.extend(session_usage(s)?);
    v.extend(cells![
        s.cancel_requested,
        s.created_at,
        now,
        s.owner.as_ref()
    ]);
    Ok(v)
}

/// The values of a session's update: id, status, build, turn count, usage, cost, skills,
/// approvals, and now (the fields the engine owns).
pub(crate) fn session_update(s: &SessionRecord, now: i64) -> StoreResult<Vec<Cell>> {
    let mut v = cells![&s.id, s.status.as_str(), &s.build_hash, s.turn_count];
    v.extend(session_usage(s)?);
    v.push(Cell::from(now));
    Ok(v)
}

fn session_usage(s: &SessionRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        s.usage.input_tokens,
        s.usage.output_tokens,
        s.usage.cache_read_tokens,
        s.usage.cache_write_tokens,
        s.cost_usd,
        Cell::json(&s.loaded_skills)?,
        Cell::json(&s.approved_tools)?,
    ])
}

// ---- turns, steps, tool calls, input requests ---------------------------------------------

pub(crate) const TURN_COLS: &str = "session_id, seq, status, phase, step_index, step_started, build_hash, \
    inbox_id, started_at, ended_at, stop_reason, usage";

pub(crate) fn turn(r: &dyn StoredRow) -> StoreResult<TurnRecord> {
    Ok(TurnRecord {
        session_id: r.text(0)?,
        seq: r.count(1)?,
        status: r.state(2, TurnStatus::parse)?,
        phase: r.state(3, TurnPhase::parse)?,
        step_index: r.count(4)?,
        step_started: r.flag(5)?,
        build_hash: r.text(6)?,
        inbox_id: r.opt_text(7)?,
        started_at: r.int(8)?,
        ended_at: r.opt_int(9)?,
        stop_reason: r.opt_text(10)?,
        usage: r.json(11)?,
    })
}

pub(crate) fn turn_values(t: &TurnRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &t.session_id,
        t.seq,
        t.status.as_str(),
        t.phase.as_str(),
        t.step_index,
        t.step_started,
        &t.build_hash,
        t.inbox_id.as_ref(),
        t.started_at,
        t.ended_at,
        t.stop_reason.as_ref(),
        Cell::json(&t.usage)?,
    ])
}

pub(crate) const STEP_COLS: &str = "session_id, turn_seq, step_index, model_id, response, at";

pub(crate) fn step(r: &dyn StoredRow) -> StoreResult<StepRecord> {
    Ok(StepRecord {
        session_id: r.text(0)?,
        turn_seq: r.count(1)?,
        step_index: r.count(2)?,
        model_id: r.text(3)?,
        response: r.json(4)?,
        at: r.int(5)?,
    })
}

pub(crate) fn step_values(s: &StepRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &s.session_id,
        s.turn_seq,
        s.step_index,
        &s.model_id,
        Cell::json(&s.response)?,
        s.at,
    ])
}

pub(crate) const CALL_COLS: &str = "session_id, call_id, turn_seq, step_index, position, kind, name, input, \
    idempotency_key, effect, status, approval, output, is_error, attempts, started_at, ended_at";

pub(crate) fn call(r: &dyn StoredRow) -> StoreResult<ToolCallRecord> {
    Ok(ToolCallRecord {
        session_id: r.text(0)?,
        call_id: r.text(1)?,
        turn_seq: r.count(2)?,
        step_index: r.count(3)?,
        position: r.count(4)?,
        kind: r.text(5)?,
        name: r.text(6)?,
        input: r.json(7)?,
        idempotency_key: r.text(8)?,
        effect: r.text(9)?,
        status: r.state(10, CallStatus::parse)?,
        approval: r.state(11, ApprovalState::parse)?,
        output: r.opt_json(12)?,
        is_error: r.flag(13)?,
        attempts: r.small(14)?,
        started_at: r.opt_int(15)?,
        ended_at: r.opt_int(16)?,
    })
}

pub(crate) fn call_values(c: &ToolCallRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &c.session_id,
        &c.call_id,
        c.turn_seq,
        c.step_index,
        c.position,
        &c.kind,
        &c.name,
        Cell::json(&c.input)?,
        &c.idempotency_key,
        &c.effect,
        c.status.as_str(),
        c.approval.as_str(),
        Cell::opt_json(c.output.as_ref())?,
        c.is_error,
        c.attempts,
        c.started_at,
        c.ended_at,
    ])
}

pub(crate) const REQUEST_COLS: &str = "id, session_id, turn_seq, step_index, call_id, tool_name, kind, prompt, \
    action, status, reason, created_at, answered_at, responder";

pub(crate) fn request(r: &dyn StoredRow) -> StoreResult<InputRequestRecord> {
    Ok(InputRequestRecord {
        id: r.text(0)?,
        session_id: r.text(1)?,
        turn_seq: r.count(2)?,
        step_index: r.count(3)?,
        call_id: r.text(4)?,
        tool_name: r.text(5)?,
        kind: r.text(6)?,
        prompt: r.text(7)?,
        action: r.json(8)?,
        status: r.state(9, RequestStatus::parse)?,
        reason: r.opt_text(10)?,
        created_at: r.int(11)?,
        answered_at: r.opt_int(12)?,
        responder: r.opt_text(13)?,
    })
}

pub(crate) fn request_values(r: &InputRequestRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &r.id,
        &r.session_id,
        r.turn_seq,
        r.step_index,
        &r.call_id,
        &r.tool_name,
        &r.kind,
        &r.prompt,
        Cell::json(&r.action)?,
        r.status.as_str(),
        r.reason.as_ref(),
        r.created_at,
        r.answered_at,
        r.responder.as_ref(),
    ])
}

/// The values of an answer's compare-and-set: id, then status, reason, time and responder.
pub(crate) fn answer_values(r: &InputRequestRecord) -> Vec<Cell> {
    cells![
        &r.id,
        r.status.as_str(),
        r.reason.as_ref(),
        r.answered_at,
        r.responder.as_ref(),
    ]
}

/// Refuses an answer whose view of its turn's other pending requests (`seen`) is not what the
/// store holds now (`pending`): another answer settled one of them first.
pub(crate) fn others_unmoved(
    request: &InputRequestRecord,
    mut pending: Vec<String>,
    seen: &[String],
) -> StoreResult<()> {
    pending.sort();
    let mut seen = seen.to_vec();
    seen.sort();
    seen.dedup();
    if pending != seen {
        return Err(StoreError::InputsMoved {
            session: request.session_id.clone(),
            turn: request.turn_seq,
        });
    }
    Ok(())
}

// ---- inbox, messages, events, breakers, leases --------------------------------------------

pub(crate) const INBOX_COLS: &str = "id, session_id, text, accepted_at, consumed_turn, input";

pub(crate) fn inbox(r: &dyn StoredRow) -> StoreResult<InboxRecord> {
    Ok(InboxRecord {
        id: r.text(0)?,
        session_id: r.text(1)?,
        text: r.text(2)?,
        accepted_at: r.int(3)?,
        consumed_turn: r.opt_count(4)?,
        input: r.opt_json(5)?,
    })
}

pub(crate) fn inbox_values(m: &InboxRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &m.id,
        &m.session_id,
        &m.text,
        m.accepted_at,
        m.consumed_turn,
        Cell::opt_json(m.input.as_ref())?
    ])
}

pub(crate) const MESSAGE_COLS: &str = "session_id, seq, turn_seq, kind, body, at";

pub(crate) fn message(r: &dyn StoredRow) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        session_id: r.text(0)?,
        seq: r.count(1)?,
        turn_seq: r.opt_count(2)?,
        kind: r.text(3)?,
        body: r.json(4)?,
        at: r.int(5)?,
    })
}

/// The values of a message row (in [`MESSAGE_COLS`] order), stored at `at`.
pub(crate) fn message_values(
    session_id: &str,
    seq: u64,
    turn_seq: Option<u64>,
    kind: &str,
    body: &Value,
    at: i64,
) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        session_id,
        seq,
        turn_seq,
        kind,
        Cell::json(body)?,
        at
    ])
}

pub(crate) const EVENT_COLS: &str = "session_id, idx, id, type, data, at";

pub(crate) fn event(r: &dyn StoredRow) -> StoreResult<StoredEvent> {
    Ok(StoredEvent {
        session_id: r.text(0)?,
        index: r.count(1)?,
        id: r.text(2)?,
        kind: r.text(3)?,
        data: r.json(4)?,
        at: r.int(5)?,
    })
}

/// A new event (a fresh `evt_<ULID>` id) at `index` of its stream.
pub(crate) fn new_event(
    session_id: String,
    index: u64,
    kind: String,
    data: Value,
    at: i64,
) -> StoredEvent {
    StoredEvent {
        session_id,
        index,
        id: format!("evt_{}", ulid::Ulid::new()),
        kind,
        data,
        at,
    }
}

/// The values of an event row (in [`EVENT_COLS`] order).
pub(crate) fn event_values(e: &StoredEvent) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &e.session_id,
        e.index,
        &e.id,
        &e.kind,
        Cell::json(&e.data)?,
        e.at
    ])
}

pub(crate) const BREAKER_COLS: &str =
    "tool, consecutive_failures, open_until, backoff_ms, updated_at";

pub(crate) fn breaker(r: &dyn StoredRow) -> StoreResult<BreakerRecord> {
    Ok(BreakerRecord {
        tool: r.text(0)?,
        consecutive_failures: r.small(1)?,
        open_until: r.int(2)?,
        backoff_ms: r.int(3)?,
    })
}

pub(crate) fn breaker_values(b: &BreakerRecord, now: i64) -> Vec<Cell> {
    cells![
        &b.tool,
        b.consecutive_failures,
        b.open_until,
        b.backoff_ms,
        now
    ]
}

pub(crate) const LEASE_COLS: &str = "session_id, holder, pid, host, expires_at, token";

pub(crate) fn lease(r: &dyn StoredRow) -> StoreResult<LeaseRecord> {
    Ok(LeaseRecord {
        session_id: r.text(0)?,
        holder: r.text(1)?,
        pid: r.small(2)?,
        host: r.text(3)?,
        expires_at: r.int(4)?,
        token: r.count(5)?,
    })
}

/// A session with work, as the sessions-with-work read returns it: its id, then the holder,
/// pid, host and expiry of its lease (all `NULL` when it has none).
pub(crate) struct Work {
    id: String,
    lease: Option<(String, ProcessRef, i64)>,
}

pub(crate) fn work(r: &dyn StoredRow) -> StoreResult<Work> {
    let lease = match (r.opt_text(1)?, r.opt_int(4)?) {
        (Some(holder), Some(expires)) => {
            let process = ProcessRef {
                pid: u32::try_from(r.opt_int(2)?.unwrap_or(0)).unwrap_or(0),
                host: r.opt_text(3)?.unwrap_or_default(),
            };
            Some((holder, process, expires))
        }
        _ => None,
    };
    Ok(Work {
        id: r.text(0)?,
        lease,
    })
}

/// The ids of the sessions of `work` that no live lease holds (see [`lease_is_live`]).
pub(crate) fn unleased(work: Vec<Work>, liveness: &dyn Liveness, now: i64) -> Vec<String> {
    work.into_iter()
        .filter(|w| match &w.lease {
            Some((holder, process, expires)) => {
                !lease_is_live(liveness, holder, process, *expires, now)
            }
            None => true,
        })
        .map(|w| w.id)
        .collect()
}

/// The columns of a lease's write: [`LEASE_COLS`] with the time it was taken before the token.
pub(crate) const LEASE_WRITE_COLS: &str =
    "session_id, holder, pid, host, expires_at, acquired_at, token";

/// The values of a lease's write taken now by `claim`, token excepted (the backend numbers it).
pub(crate) fn lease_values(claim: &LeaseClaim, now: i64) -> Vec<Cell> {
    cells![
        &claim.session_id,
        &claim.holder,
        claim.pid,
        &claim.host,
        now.saturating_add(claim.ttl_ms),
        now,
    ]
}
