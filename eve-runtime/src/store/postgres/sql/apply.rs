//! Applying a [`Batch`] inside one transaction: each [`Op`] becomes one planned statement
//! (a counter's increment and the row it numbers are one data-modifying `WITH`), sent together
//! with the batch's fence checks; composition, note, release and answer operations, which run
//! several dependent statements, are awaited in their place.

use deadpool_postgres::GenericClient;

use super::leases::fence_planned;
use super::pipeline::{Planned, Then, run_planned};
use super::{NOTIFY_SQL, answers, composition, notes};
use crate::store::postgres::releases;
use crate::store::rows::{
    self, BREAKER_COLS, CALL_COLS, Cell, EVENT_COLS, INBOX_COLS, MESSAGE_COLS, REQUEST_COLS,
    SESSION_COLS, STEP_COLS, TURN_COLS, cells,
};
use crate::store::{
    Batch, Committed, MESSAGE_KIND_CHECKPOINT, Op, StoreError, StoreResult, now_ms,
};

/// Applies a batch inside the caller's transaction, or inside one it opens: `start` (`BEGIN`,
/// and any `SET LOCAL`) is sent with the batch's first statements. `notify` (channel, payload)
/// adds the commit's notification, and `end` (`COMMIT`) goes with the last statements. The
/// fence checks come first, and every statement is planned and sent together, so a batch is
/// one round trip (plus one for statements this connection has not prepared yet); only
/// composition, note and release operations, which run several dependent statements, are
/// awaited one by one, in their place in the batch. Every check fails inside the server
/// ([`Strict`](super::pipeline::Strict)), so a `COMMIT` sent with the batch never commits a
/// refused one.
pub(in crate::store::postgres) async fn apply<C: GenericClient>(
    c: &C,
    batch: Batch,
    start: Option<&str>,
    notify: Option<(&str, &str)>,
    end: Option<&str>,
) -> StoreResult<Committed> {
    let mut committed = Committed::default();
    let now = now_ms();
    let mut start = start;
    let mut plan: Vec<Planned> = batch.fences.iter().map(fence_planned).collect();
    for op in batch.ops {
        match op {
            Op::Composition(op) => {
                run_planned(c, start.take(), &mut plan, &mut committed, None).await?;
                composition::apply(c, op, now).await?;
            }
            Op::Note(op) => {
                run_planned(c, start.take(), &mut plan, &mut committed, None).await?;
                notes::apply(c, op).await?;
            }
            Op::Release(op) => {
                run_planned(c, start.take(), &mut plan, &mut committed, None).await?;
                releases::apply(c, op, now, &mut committed).await?;
            }
            Op::AnswerInputRequest {
                request,
                others_pending,
            } => {
                run_planned(c, start.take(), &mut plan, &mut committed, None).await?;
                answers::settle(c, &request, &others_pending).await?;
            }
            op => plan.push(plan_op(op, now)?),
        }
    }
    if let Some((channel, payload)) = notify {
        plan.push(Planned::new(
            NOTIFY_SQL,
            cells![channel, payload],
            Then::Nothing,
        ));
    }
    run_planned(c, start.take(), &mut plan, &mut committed, end).await?;
    Ok(committed)
}

/// One operation as one statement (composition, note and release operations excepted).
/// The SQL of [`plan_op`]'s statements, by operation (warmed on new connections, see
/// [`hot_statements`](super::hot_statements)).
pub(super) static PLANNED_SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    vec![
        format!(
            "INSERT INTO sessions ({SESSION_COLS}) VALUES \
                 ($1,$2,$3,$4,$5,$6,$7,$8,0,0,0,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)"
        ),
        "WITH u AS (UPDATE sessions SET status=$2, build_hash=$3, turn_count=$4, \
                 input_tokens=$5, output_tokens=$6, cache_read_tokens=$7, \
                 cache_write_tokens=$8, cost_usd=$9, loaded_skills=$10, approved_tools=$11, \
                 updated_at=$12 WHERE id=$1 RETURNING 1) \
         SELECT 1 / count(*) FROM u"
            .to_owned(),
        "UPDATE sessions SET cancel_requested=$2, updated_at=$3 WHERE id=$1".to_owned(),
        "UPDATE sessions SET context_start=message_count, updated_at=$2 WHERE id=$1".to_owned(),
        format!("INSERT INTO inbox ({INBOX_COLS}) VALUES ($1,$2,$3,$4,$5,$6)"),
        "UPDATE inbox SET consumed_turn=$2 WHERE id=$1".to_owned(),
        format!(
            "WITH n AS (UPDATE sessions SET message_count=message_count+1, \
                 context_start=CASE WHEN $2::BOOLEAN THEN message_count ELSE context_start END \
                 WHERE id=$1 RETURNING message_count-1 AS seq) \
                 INSERT INTO messages ({MESSAGE_COLS}) \
                 VALUES ($1, (SELECT seq FROM n), $3::BIGINT, $4::TEXT, $5::TEXT, $6::BIGINT) RETURNING seq"
        ),
        format!(
            "INSERT INTO turns ({TURN_COLS}) VALUES \
                 ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12) \
                 ON CONFLICT (session_id, seq) DO UPDATE SET status=excluded.status, \
                 phase=excluded.phase, step_index=excluded.step_index, \
                 step_started=excluded.step_started, build_hash=excluded.build_hash, \
                 inbox_id=excluded.inbox_id, started_at=excluded.started_at, \
                 ended_at=excluded.ended_at, stop_reason=excluded.stop_reason, \
                 usage=excluded.usage"
        ),
        format!(
            "INSERT INTO steps ({STEP_COLS}) \
             VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (session_id, turn_seq, step_index) \
             DO UPDATE SET model_id=excluded.model_id, response=excluded.response, \
             at=excluded.at"
        ),
        format!(
            "INSERT INTO tool_calls ({CALL_COLS}) VALUES \
                     ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17) \
                     ON CONFLICT (session_id, turn_seq, call_id) DO UPDATE SET \
                     step_index=excluded.step_index, position=excluded.position, \
                     kind=excluded.kind, name=excluded.name, input=excluded.input, \
                     idempotency_key=excluded.idempotency_key, effect=excluded.effect, \
                     status=excluded.status, approval=excluded.approval, \
                     output=excluded.output, is_error=excluded.is_error, \
                     attempts=excluded.attempts, started_at=excluded.started_at, \
                     ended_at=excluded.ended_at"
        ),
        format!(
            "INSERT INTO input_requests ({REQUEST_COLS}) VALUES \
                 ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) \
                 ON CONFLICT (id) DO UPDATE SET status=excluded.status, \
                 reason=excluded.reason, answered_at=excluded.answered_at, \
                 responder=excluded.responder, prompt=excluded.prompt, \
                 action=excluded.action"
        ),
        format!(
            "INSERT INTO breakers ({BREAKER_COLS}) VALUES ($1,$2,$3,$4,$5) \
             ON CONFLICT (tool) DO UPDATE SET \
             consecutive_failures=excluded.consecutive_failures, \
             open_until=excluded.open_until, backoff_ms=excluded.backoff_ms, \
             updated_at=excluded.updated_at"
        ),
        format!(
            "WITH n AS (UPDATE sessions SET event_count=event_count+1, updated_at=$2 \
                 WHERE id=$1 RETURNING event_count-1 AS idx) \
                 INSERT INTO events ({EVENT_COLS}) \
                 VALUES ($1, (SELECT idx FROM n), $3::TEXT, $4::TEXT, $5::TEXT, $2) RETURNING idx"
        ),
    ]
});

fn plan_op(op: Op, now: i64) -> StoreResult<Planned> {
    let (sql, values, then) = match op {
        Op::InsertSession(s) => (0, rows::session_insert(&s, now)?, Then::Nothing),
        Op::UpdateSession(s) => (
            1,
            rows::session_update(&s, now)?,
            Then::Touch(format!("session {}", s.id)),
        ),
        Op::SetCancel {
            session_id,
            requested,
        } => (2, cells![session_id, requested, now], Then::Nothing),
        Op::ClearContext { session_id } => (3, cells![session_id, now], Then::Nothing),
        Op::InsertInbox(m) => (4, rows::inbox_values(&m)?, Then::Nothing),
        Op::ConsumeInbox { id, turn_seq } => (5, cells![id, turn_seq], Then::Nothing),
        Op::AppendMessage {
            session_id,
            turn_seq,
            kind,
            body,
        } => {
            let checkpoint = kind == MESSAGE_KIND_CHECKPOINT;
            let values = cells![
                &session_id,
                checkpoint,
                turn_seq,
                kind,
                Cell::json(&body)?,
                now
            ];
            (6, values, Then::Message(session_id))
        }
        Op::PutTurn(t) => (7, rows::turn_values(&t)?, Then::Nothing),
        Op::PutStep(s) => (8, rows::step_values(&s)?, Then::Nothing),
        Op::PutToolCall(call) => (9, rows::call_values(&call)?, Then::Nothing),
        Op::PutInputRequest(r) => (10, rows::request_values(&r)?, Then::Nothing),
        Op::PutBreaker(b) => (11, rows::breaker_values(&b, now), Then::Nothing),
        Op::Event {
            session_id,
            kind,
            data,
        } => {
            // The index is the statement's answer.
            let event = rows::new_event(session_id, 0, kind, data, now);
            let values = cells![
                &event.session_id,
                now,
                &event.id,
                &event.kind,
                Cell::json(&event.data)?
            ];
            (12, values, Then::Event(event))
        }
        Op::Composition(_) | Op::Note(_) | Op::Release(_) | Op::AnswerInputRequest { .. } => {
            return Err(StoreError::Backend(
                "internal: a composition, note, release or answer operation was planned as one \
                 statement"
                    .to_owned(),
            ));
        }
    };
    Ok(Planned::new(&PLANNED_SQL[sql], values, then))
}
