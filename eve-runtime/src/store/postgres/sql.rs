//! The SQL of the PostgreSQL store: applying a batch, reads, leases, schedules, composition and
//! channel rows.
//!
//! Every function takes a [`GenericClient`] (a pooled connection or a transaction) and prepares
//! its statements through deadpool's per-connection cache. Concurrency is PostgreSQL's, not a
//! writer thread's: a batch runs in one `READ COMMITTED` transaction, and the per-session
//! counters (event index, message sequence) are advanced by `UPDATE … RETURNING` on the session
//! row, whose row lock serialises writers of one session until commit, so indexes stay dense
//! and are never handed out twice, on any number of nodes. Claims that must happen once across
//! the fleet (a schedule fire, a platform delivery, a lease) are decided inside the transaction
//! that writes their effects, under a row or advisory lock.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql};

use crate::store::*;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn g<'a, T: FromSql<'a>>(row: &'a Row, idx: usize) -> StoreResult<T> {
    Ok(row.try_get(idx)?)
}

fn json(text: &str) -> StoreResult<Value> {
    Ok(serde_json::from_str(text)?)
}

fn parse_enum<T>(text: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown state `{text}`")))
}

async fn query<C: GenericClient>(c: &C, sql: &str, params: Params<'_>) -> StoreResult<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}

async fn query_opt<C: GenericClient>(
    c: &C,
    sql: &str,
    params: Params<'_>,
) -> StoreResult<Option<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query_opt(&stmt, params).await?)
}

async fn execute<C: GenericClient>(c: &C, sql: &str, params: Params<'_>) -> StoreResult<u64> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, params).await?)
}

// ---- the statements of the run loop, by name (warmed on new connections) ----------------

const INBOX_SQL: &str = "SELECT id, session_id, text, accepted_at FROM inbox \
         WHERE session_id=$1 AND consumed_turn IS NULL ORDER BY ord";
const CONTEXT_SQL: &str = "SELECT m.session_id, m.seq, m.turn_seq, m.kind, m.body, m.at FROM messages m \
         JOIN sessions s ON s.id = m.session_id \
         WHERE m.session_id=$1 AND m.seq >= s.context_start ORDER BY m.seq";
const HAS_CHILDREN_SQL: &str = "SELECT 1 FROM subagent_sessions WHERE parent_id=$1 LIMIT 1";
const DYNAMIC_RESOLVED_SQL: &str = "SELECT 1 FROM dynamic_resolutions WHERE session_id=$1 \
         AND turn_seq=(SELECT max(seq) FROM turns WHERE session_id=$1)";
const FENCE_SQL: &str = Strict::FENCE;
const NOTIFY_SQL: &str = "SELECT pg_notify($1, $2)";
const LEASE_INSERT_SQL: &str = "INSERT INTO leases (session_id, holder, pid, host, expires_at, acquired_at, token) \
         VALUES ($1,$2,$3,$4,$5,$6,nextval('lease_tokens')) ON CONFLICT (session_id) DO NOTHING";
const LEASE_TAKE_SQL: &str = "UPDATE leases SET holder=$2, pid=$3, host=$4, expires_at=$5, acquired_at=$6, \
         token = CASE WHEN holder=$2 THEN token ELSE nextval('lease_tokens') END \
         WHERE session_id=$1";
const RELEASE_SQL: &str = "WITH r AS (UPDATE leases SET holder='', expires_at=0 WHERE session_id=$1 AND holder=$2) \
         SELECT pg_notify($3, $4)";
static SESSION_SQL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {SESSION_COLS} FROM sessions WHERE id=$1"));
static LAST_TURN_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {TURN_COLS} FROM turns WHERE session_id=$1 ORDER BY seq DESC LIMIT 1")
});
static LEASE_SQL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {LEASE_COLS} FROM leases WHERE session_id=$1"));
static REQUESTS_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {REQUEST_COLS} FROM input_requests \
         WHERE session_id=$1 AND (NOT $2 OR status='pending') ORDER BY ord"
    )
});
static TOOL_CALLS_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {CALL_COLS} FROM tool_calls WHERE session_id=$1 AND turn_seq=$2 \
         ORDER BY step_index, position"
    )
});
static LEASE_LOCK_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {LEASE_COLS} FROM leases WHERE session_id=$1 FOR UPDATE SKIP LOCKED")
});

/// The statements of a step and of a resumed turn: prepared on every new connection in one
/// pipelined round trip, so no step waits for a prepare.
pub(super) fn hot_statements() -> Vec<String> {
    let mut all = PLANNED_SQL.clone();
    all.extend(
        [
            INBOX_SQL,
            CONTEXT_SQL,
            HAS_CHILDREN_SQL,
            DYNAMIC_RESOLVED_SQL,
            FENCE_SQL,
            NOTIFY_SQL,
            LEASE_INSERT_SQL,
            LEASE_TAKE_SQL,
            RELEASE_SQL,
        ]
        .map(String::from),
    );
    all.extend(
        [
            &*SESSION_SQL,
            &*LAST_TURN_SQL,
            &*LEASE_SQL,
            &*REQUESTS_SQL,
            &*TOOL_CALLS_SQL,
            &*LEASE_LOCK_SQL,
        ]
        .map(String::clone),
    );
    all
}

// ---- rows ----------------------------------------------------------------------------------

const SESSION_COLS: &str = "id, status, build_hash, agent_name, parent_id, parent_call_id, schedule, \
    turn_count, event_count, message_count, context_start, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, cost_usd, loaded_skills, approved_tools, \
    cancel_requested, created_at, updated_at";

fn session_row(row: &Row) -> StoreResult<SessionRecord> {
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
    })
}

const TURN_COLS: &str = "session_id, seq, status, phase, step_index, step_started, build_hash, \
    inbox_id, started_at, ended_at, stop_reason, usage";

fn turn_row(row: &Row) -> StoreResult<TurnRecord> {
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

const CALL_COLS: &str = "session_id, call_id, turn_seq, step_index, position, kind, name, input, \
    idempotency_key, effect, status, approval, output, is_error, attempts, started_at, ended_at";

fn call_row(row: &Row) -> StoreResult<ToolCallRecord> {
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

const REQUEST_COLS: &str = "id, session_id, turn_seq, step_index, call_id, tool_name, kind, prompt, \
    action, status, reason, created_at, answered_at, responder";

fn request_row(row: &Row) -> StoreResult<InputRequestRecord> {
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

fn message_row(row: &Row) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        session_id: g(row, 0)?,
        seq: u(g(row, 1)?),
        turn_seq: g::<Option<i64>>(row, 2)?.map(u),
        kind: g(row, 3)?,
        body: json(g(row, 4)?)?,
        at: g(row, 5)?,
    })
}

const FIRE_COLS: &str =
    "schedule, fire_at, trigger, status, session_id, detail, created_at, updated_at";

fn fire_row(row: &Row) -> StoreResult<ScheduleFire> {
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

fn all<T>(rows: &[Row], f: fn(&Row) -> StoreResult<T>) -> StoreResult<Vec<T>> {
    rows.iter().map(f).collect()
}

// ---- batches -------------------------------------------------------------------------------

/// A statement's parameters, owned, so a whole batch can be planned before any is sent.
type Owned = Vec<Box<dyn ToSql + Sync + Send>>;

macro_rules! params {
    ($($p:expr),* $(,)?) => {
        vec![$(Box::new($p) as Box<dyn ToSql + Sync + Send>),*]
    };
}

/// What a planned statement's answer means for the batch.
enum Then {
    /// Nothing to check.
    Nothing,
    /// Rows changed, or `NotFound(what)`.
    Touch(String),
    /// The lease row's token, checked against ours.
    Fence(Fence),
    /// The new message's sequence, or the session is missing.
    Message(String),
    /// The new event's index, or the session is missing.
    Event(StoredEvent),
}

/// One statement of a batch, planned: its SQL, parameters and how to read its answer. Each is
/// a single statement (a counter's increment and the row it numbers are one data-modifying
/// `WITH`), so the server runs them in the order they were sent.
struct Planned {
    sql: String,
    params: Owned,
    then: Then,
}

impl Planned {
    fn new(sql: impl Into<String>, params: Owned, then: Then) -> Self {
        Self {
            sql: sql.into(),
            params,
            then,
        }
    }
}

/// How many statements go out before their answers are awaited (at most `join_all`'s small
/// size, below which it polls its futures in order, which is the order they are sent in).
const PIPELINE: usize = 30;

/// Sends `start` (simple statements such as `BEGIN`, first) and `plan`'s statements without
/// waiting between them (tokio-postgres pipelines requests polled together: one round trip for
/// the lot, once their statements are prepared on this connection), then reads the answers in
/// order. The first error wins; statements after it were refused by the server anyway. `end`
/// (`COMMIT`) is sent after the last statement, in the same round trip: every check of a
/// strict plan fails inside the server (see [`Strict`]), so a `COMMIT` after a failed check
/// ends an aborted transaction, which the server rolls back.
async fn run_planned<C: GenericClient>(
    c: &C,
    start: Option<&str>,
    plan: &mut Vec<Planned>,
    committed: &mut Committed,
    end: Option<&str>,
) -> StoreResult<()> {
    let mut start = start;
    let mut end = end;
    let planned: Vec<Planned> = std::mem::take(plan);
    let mut planned = planned.into_iter().peekable();
    while start.is_some() || planned.peek().is_some() || end.is_some() {
        let chunk: Vec<Planned> = planned.by_ref().take(PIPELINE).collect();
        let last = planned.peek().is_none();
        // Prepared once per connection (the cache); misses are prepared together.
        let stmts = futures::future::join_all(chunk.iter().map(|p| c.prepare_cached(&p.sql)))
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = chunk
            .iter()
            .map(|p| {
                p.params
                    .iter()
                    .map(|b| &**b as &(dyn ToSql + Sync))
                    .collect()
            })
            .collect();
        let begin = async {
            match start.take() {
                Some(sql) => c.batch_execute(sql).await,
                None => Ok(()),
            }
        };
        let writes = futures::future::join_all(
            chunk
                .iter()
                .zip(&stmts)
                .zip(&refs)
                .map(|((_, stmt), params)| c.query(stmt, params)),
        );
        let finish = if last { end.take() } else { None };
        let finish = async {
            match finish {
                Some(sql) => c.batch_execute(sql).await,
                None => Ok(()),
            }
        };
        // `join!` polls in order: `BEGIN` is sent first, then the statements in plan order,
        // then `COMMIT`.
        let (begun, answers, finished) = futures::join!(begin, writes, finish);
        begun?;
        for (p, answer) in chunk.into_iter().zip(answers) {
            match answer {
                Ok(answer) => read_answer(p.then, answer, committed)?,
                Err(e) => return Err(failed_check(p.then, e)),
            }
        }
        finished?;
    }
    Ok(())
}

/// How a strict plan's checks fail inside the server, so that nothing after them commits.
struct Strict;

impl Strict {
    /// The fence check: the lease row read `FOR KEY SHARE`, and a cast that fails when a newer
    /// holder's token is there (the error names the token).
    const FENCE: &'static str = "SELECT CASE WHEN token > $2 THEN ('eve-fenced:' || token)::BIGINT \
        ELSE token END FROM leases WHERE session_id=$1 FOR KEY SHARE";
}

/// The error a failed statement stands for: a strict check's own failure becomes the store's
/// error (fenced, or not found); any other is the server's.
fn failed_check(then: Then, e: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    let code = e.code().cloned();
    match (then, code) {
        (Then::Fence(fence), Some(c)) if c == SqlState::INVALID_TEXT_REPRESENTATION => {
            let text = e
                .as_db_error()
                .map(|d| d.message().to_owned())
                .unwrap_or_default();
            let current = text
                .split_once("eve-fenced:")
                .map(|(_, rest)| {
                    rest.chars()
                        .take_while(char::is_ascii_digit)
                        .collect::<String>()
                })
                .and_then(|n| n.parse().ok())
                .unwrap_or(fence.token.saturating_add(1));
            StoreError::Fenced {
                session: fence.session_id,
                ours: fence.token,
                current,
            }
        }
        (Then::Touch(what), Some(c)) if c == SqlState::DIVISION_BY_ZERO => {
            StoreError::NotFound(what)
        }
        (Then::Message(session), Some(c)) if c == SqlState::NOT_NULL_VIOLATION => {
            StoreError::NotFound(format!("session {session}"))
        }
        (Then::Event(event), Some(c)) if c == SqlState::NOT_NULL_VIOLATION => {
            StoreError::NotFound(format!("session {}", event.session_id))
        }
        _ => e.into(),
    }
}

/// Reads a statement's rows; the checks were made inside the server (see [`Strict`]), so a
/// missing row here means a statement that should have failed did not: refused all the same.
fn read_answer(then: Then, rows: Vec<Row>, committed: &mut Committed) -> StoreResult<()> {
    if matches!(then, Then::Nothing) {
        return Ok(());
    }
    let first: Option<i64> = rows.first().map(|r| g(r, 0)).transpose()?;
    match then {
        Then::Nothing => {}
        Then::Touch(what) => {
            if first.is_none() {
                return Err(StoreError::NotFound(what));
            }
        }
        Then::Fence(fence) => {
            let current = first.map_or(0, u);
            if current > fence.token {
                return Err(StoreError::Fenced {
                    session: fence.session_id,
                    ours: fence.token,
                    current,
                });
            }
        }
        Then::Message(session) => {
            let seq = first.ok_or_else(|| StoreError::NotFound(format!("session {session}")))?;
            committed.message_seqs.push(u(seq));
        }
        Then::Event(mut event) => {
            let index = first
                .ok_or_else(|| StoreError::NotFound(format!("session {}", event.session_id)))?;
            event.index = u(index);
            committed.events.push(event);
        }
    }
    Ok(())
}

/// The fence check of one session: the lease row is read `FOR KEY SHARE`: a renewal (a plain
/// update) does not wait for it, but a takeover (which locks the row `FOR UPDATE`) cannot
/// happen between this check and the commit.
fn fence_planned(fence: &Fence) -> Planned {
    Planned::new(
        FENCE_SQL,
        params![fence.session_id.clone(), i(fence.token)],
        Then::Fence(fence.clone()),
    )
}

/// Refuses the batch when a session it speaks for has a newer lease holder (see
/// [`fence_planned`]); all the fences in one round trip.
pub(super) async fn check_fences<C: GenericClient>(c: &C, fences: &[Fence]) -> StoreResult<()> {
    let mut plan: Vec<Planned> = fences.iter().map(fence_planned).collect();
    run_planned(c, None, &mut plan, &mut Committed::default(), None).await
}

/// Applies a batch inside the caller's transaction, or inside one it opens: `start` (`BEGIN`,
/// and any `SET LOCAL`) is sent with the batch's first statements. `notify` (channel, payload)
/// adds the commit's notification, and `end` (`COMMIT`) goes with the last statements. The
/// fence checks come first, and every statement is planned and sent together, so a batch is
/// one round trip (plus one for statements this connection has not prepared yet); only
/// composition, note and release operations, which run several dependent statements, are
/// awaited one by one, in their place in the batch. Every check fails inside the server
/// ([`Strict`]), so a `COMMIT` sent with the batch never commits a refused one.
pub(super) async fn apply<C: GenericClient>(
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
                composition_apply(c, op, now).await?;
            }
            Op::Note(op) => {
                run_planned(c, start.take(), &mut plan, &mut committed, None).await?;
                note_apply(c, op).await?;
            }
            Op::Release(op) => {
                run_planned(c, start.take(), &mut plan, &mut committed, None).await?;
                super::releases::apply(c, op, now, &mut committed).await?;
            }
            op => plan.push(plan_op(op, now)?),
        }
    }
    if let Some((channel, payload)) = notify {
        plan.push(Planned::new(
            NOTIFY_SQL,
            params![channel.to_owned(), payload.to_owned()],
            Then::Nothing,
        ));
    }
    run_planned(c, start.take(), &mut plan, &mut committed, end).await?;
    Ok(committed)
}

/// One operation as one statement (composition, note and release operations excepted).
/// The SQL of [`plan_op`]'s statements, by operation (warmed on new connections, see
/// [`hot_statements`]).
static PLANNED_SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    vec![
        format!(
            "INSERT INTO sessions ({SESSION_COLS}) VALUES \
                 ($1,$2,$3,$4,$5,$6,$7,$8,0,0,0,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18)"
        ),
        "WITH u AS (UPDATE sessions SET status=$2, build_hash=$3, turn_count=$4, \
                 input_tokens=$5, output_tokens=$6, cache_read_tokens=$7, \
                 cache_write_tokens=$8, cost_usd=$9, loaded_skills=$10, approved_tools=$11, \
                 updated_at=$12 WHERE id=$1 RETURNING 1) \
         SELECT 1 / count(*) FROM u"
            .to_owned(),
        "UPDATE sessions SET cancel_requested=$2, updated_at=$3 WHERE id=$1".to_owned(),
        "UPDATE sessions SET context_start=message_count, updated_at=$2 WHERE id=$1".to_owned(),
        "INSERT INTO inbox (id, session_id, text, accepted_at, consumed_turn) \
             VALUES ($1,$2,$3,$4,$5)"
            .to_owned(),
        "UPDATE inbox SET consumed_turn=$2 WHERE id=$1".to_owned(),
        "WITH n AS (UPDATE sessions SET message_count=message_count+1, \
                 context_start=CASE WHEN $2::BOOLEAN THEN message_count ELSE context_start END \
                 WHERE id=$1 RETURNING message_count-1 AS seq) \
                 INSERT INTO messages (session_id, seq, turn_seq, kind, body, at) \
                 VALUES ($1, (SELECT seq FROM n), $3::BIGINT, $4::TEXT, $5::TEXT, $6::BIGINT) RETURNING seq"
            .to_owned(),
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
        "INSERT INTO steps (session_id, turn_seq, step_index, model_id, response, at) \
             VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (session_id, turn_seq, step_index) \
             DO UPDATE SET model_id=excluded.model_id, response=excluded.response, \
             at=excluded.at"
            .to_owned(),
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
        "INSERT INTO breakers (tool, consecutive_failures, open_until, backoff_ms, \
             updated_at) VALUES ($1,$2,$3,$4,$5) ON CONFLICT (tool) DO UPDATE SET \
             consecutive_failures=excluded.consecutive_failures, \
             open_until=excluded.open_until, backoff_ms=excluded.backoff_ms, \
             updated_at=excluded.updated_at"
            .to_owned(),
        "WITH n AS (UPDATE sessions SET event_count=event_count+1, updated_at=$2 \
                 WHERE id=$1 RETURNING event_count-1 AS idx) \
                 INSERT INTO events (session_id, idx, id, type, data, at) \
                 VALUES ($1, (SELECT idx FROM n), $3::TEXT, $4::TEXT, $5::TEXT, $2) RETURNING idx"
            .to_owned(),
    ]
});

fn plan_op(op: Op, now: i64) -> StoreResult<Planned> {
    Ok(match op {
        Op::InsertSession(s) => Planned::new(
            &PLANNED_SQL[0],
            params![
                s.id,
                s.status.as_str(),
                s.build_hash,
                s.agent_name,
                s.parent_id,
                s.parent_call_id,
                s.schedule,
                i(s.turn_count),
                i(s.usage.input_tokens),
                i(s.usage.output_tokens),
                i(s.usage.cache_read_tokens),
                i(s.usage.cache_write_tokens),
                s.cost_usd,
                serde_json::to_string(&s.loaded_skills)?,
                serde_json::to_string(&s.approved_tools)?,
                s.cancel_requested,
                s.created_at,
                now,
            ],
            Then::Nothing,
        ),
        Op::UpdateSession(s) => {
            let what = format!("session {}", s.id);
            Planned::new(
                &PLANNED_SQL[1],
                params![
                    s.id,
                    s.status.as_str(),
                    s.build_hash,
                    i(s.turn_count),
                    i(s.usage.input_tokens),
                    i(s.usage.output_tokens),
                    i(s.usage.cache_read_tokens),
                    i(s.usage.cache_write_tokens),
                    s.cost_usd,
                    serde_json::to_string(&s.loaded_skills)?,
                    serde_json::to_string(&s.approved_tools)?,
                    now,
                ],
                Then::Touch(what),
            )
        }
        Op::SetCancel {
            session_id,
            requested,
        } => Planned::new(
            &PLANNED_SQL[2],
            params![session_id, requested, now],
            Then::Nothing,
        ),
        Op::ClearContext { session_id } => {
            Planned::new(&PLANNED_SQL[3], params![session_id, now], Then::Nothing)
        }
        Op::InsertInbox(m) => Planned::new(
            &PLANNED_SQL[4],
            params![
                m.id,
                m.session_id,
                m.text,
                m.accepted_at,
                m.consumed_turn.map(i),
            ],
            Then::Nothing,
        ),
        Op::ConsumeInbox { id, turn_seq } => {
            Planned::new(&PLANNED_SQL[5], params![id, i(turn_seq)], Then::Nothing)
        }
        Op::AppendMessage {
            session_id,
            turn_seq,
            kind,
            body,
        } => {
            let checkpoint = kind == MESSAGE_KIND_CHECKPOINT;
            Planned::new(
                &PLANNED_SQL[6],
                params![
                    session_id.clone(),
                    checkpoint,
                    turn_seq.map(i),
                    kind,
                    serde_json::to_string(&body)?,
                    now,
                ],
                Then::Message(session_id),
            )
        }
        Op::PutTurn(t) => Planned::new(
            &PLANNED_SQL[7],
            params![
                t.session_id,
                i(t.seq),
                t.status.as_str(),
                t.phase.as_str(),
                i(t.step_index),
                t.step_started,
                t.build_hash,
                t.inbox_id,
                t.started_at,
                t.ended_at,
                t.stop_reason,
                serde_json::to_string(&t.usage)?,
            ],
            Then::Nothing,
        ),
        Op::PutStep(s) => Planned::new(
            &PLANNED_SQL[8],
            params![
                s.session_id,
                i(s.turn_seq),
                i(s.step_index),
                s.model_id,
                serde_json::to_string(&s.response)?,
                s.at,
            ],
            Then::Nothing,
        ),
        Op::PutToolCall(call) => {
            let output = call
                .output
                .as_ref()
                .map(serde_json::to_string)
                .transpose()?;
            Planned::new(
                &PLANNED_SQL[9],
                params![
                    call.session_id,
                    call.call_id,
                    i(call.turn_seq),
                    i(call.step_index),
                    i(call.position),
                    call.kind,
                    call.name,
                    serde_json::to_string(&call.input)?,
                    call.idempotency_key,
                    call.effect,
                    call.status.as_str(),
                    call.approval.as_str(),
                    output,
                    call.is_error,
                    i64::from(call.attempts),
                    call.started_at,
                    call.ended_at,
                ],
                Then::Nothing,
            )
        }
        Op::PutInputRequest(r) => Planned::new(
            &PLANNED_SQL[10],
            params![
                r.id,
                r.session_id,
                i(r.turn_seq),
                i(r.step_index),
                r.call_id,
                r.tool_name,
                r.kind,
                r.prompt,
                serde_json::to_string(&r.action)?,
                r.status.as_str(),
                r.reason,
                r.created_at,
                r.answered_at,
                r.responder,
            ],
            Then::Nothing,
        ),
        Op::PutBreaker(b) => Planned::new(
            &PLANNED_SQL[11],
            params![
                b.tool,
                i64::from(b.consecutive_failures),
                b.open_until,
                b.backoff_ms,
                now,
            ],
            Then::Nothing,
        ),
        Op::Event {
            session_id,
            kind,
            data,
        } => {
            let id = format!("evt_{}", ulid::Ulid::new());
            Planned::new(
                &PLANNED_SQL[12],
                params![
                    session_id.clone(),
                    now,
                    id.clone(),
                    kind.clone(),
                    serde_json::to_string(&data)?,
                ],
                Then::Event(StoredEvent {
                    session_id,
                    index: 0,
                    id,
                    kind,
                    data,
                    at: now,
                }),
            )
        }
        Op::Composition(_) | Op::Note(_) | Op::Release(_) => {
            return Err(StoreError::Backend(
                "internal: a composition, note or release operation was planned as one statement"
                    .to_owned(),
            ));
        }
    })
}

/// See `Store::prune_sessions` (the same rows as SQLite's `prune.rs`; the candidates are locked
/// with `FOR UPDATE SKIP LOCKED`, so a node taking a session at that moment keeps it).
pub(super) async fn prune<C: GenericClient>(
    c: &C,
    cutoff: i64,
    now: i64,
) -> StoreResult<Vec<String>> {
    let roots = query(
        c,
        "SELECT s.id FROM sessions s WHERE s.parent_id IS NULL AND s.status = 'idle' \
         AND s.updated_at < $1 \
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = s.id \
                         AND l.holder != '' AND l.expires_at > $2) \
         AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
                         AND i.consumed_turn IS NULL) \
         ORDER BY s.updated_at FOR UPDATE SKIP LOCKED",
        &[&cutoff, &now],
    )
    .await?;
    let mut deleted = Vec::new();
    for row in &roots {
        let root: String = g(row, 0)?;
        let mut ids = vec![root.clone()];
        for child in query(
            c,
            "SELECT session_id FROM subagent_sessions WHERE root_id = $1",
            &[&root],
        )
        .await?
        {
            ids.push(g(&child, 0)?);
        }
        for id in &ids {
            for (table, column) in super::super::SESSION_TABLES {
                execute(
                    c,
                    &format!("DELETE FROM {table} WHERE {column} = $1"),
                    &[id],
                )
                .await?;
            }
            for ns in super::super::session_note_namespaces(id) {
                execute(c, "DELETE FROM notes WHERE namespace = $1", &[&ns]).await?;
            }
        }
        deleted.extend(ids);
    }
    Ok(deleted)
}

async fn note_apply<C: GenericClient>(c: &C, op: NoteOp) -> StoreResult<()> {
    match op {
        NoteOp::Put(n) => {
            execute(
                c,
                "INSERT INTO notes (namespace, key, text, created_at, updated_at) \
                 VALUES ($1,$2,$3,$4,$5) ON CONFLICT (namespace, key) \
                 DO UPDATE SET text=excluded.text, updated_at=excluded.updated_at",
                &[&n.namespace, &n.key, &n.text, &n.created_at, &n.updated_at],
            )
            .await?;
        }
        NoteOp::Delete { namespace, key } => {
            execute(
                c,
                "DELETE FROM notes WHERE namespace=$1 AND key=$2",
                &[&namespace, &key],
            )
            .await?;
        }
        NoteOp::Clear { namespace } => {
            execute(c, "DELETE FROM notes WHERE namespace=$1", &[&namespace]).await?;
        }
    }
    Ok(())
}

fn note_row(row: &Row) -> StoreResult<NoteRecord> {
    Ok(NoteRecord {
        namespace: g(row, 0)?,
        key: g(row, 1)?,
        text: g(row, 2)?,
        created_at: g(row, 3)?,
        updated_at: g(row, 4)?,
    })
}

pub(super) async fn note<C: GenericClient>(
    c: &C,
    namespace: &str,
    key: &str,
) -> StoreResult<Option<NoteRecord>> {
    query_opt(
        c,
        "SELECT namespace, key, text, created_at, updated_at FROM notes \
         WHERE namespace=$1 AND key=$2",
        &[&namespace, &key],
    )
    .await?
    .as_ref()
    .map(note_row)
    .transpose()
}

pub(super) async fn notes<C: GenericClient>(
    c: &C,
    namespace: &str,
) -> StoreResult<Vec<NoteRecord>> {
    let rows = query(
        c,
        "SELECT namespace, key, text, created_at, updated_at FROM notes WHERE namespace=$1 \
         ORDER BY created_at, key",
        &[&namespace],
    )
    .await?;
    rows.iter().map(note_row).collect()
}

pub(super) async fn notes_under<C: GenericClient>(
    c: &C,
    prefix: &str,
) -> StoreResult<Vec<NoteRecord>> {
    let rows = query(
        c,
        "SELECT namespace, key, text, created_at, updated_at FROM notes \
         WHERE left(namespace, length($1)) = $1 ORDER BY namespace, created_at, key",
        &[&prefix],
    )
    .await?;
    rows.iter().map(note_row).collect()
}

async fn composition_apply<C: GenericClient>(
    c: &C,
    op: CompositionOp,
    now: i64,
) -> StoreResult<()> {
    match op {
        CompositionOp::InsertLink(l) => {
            execute(
                c,
                "INSERT INTO subagent_sessions \
                 (session_id, parent_id, call_id, root_id, agent_path, created_at) \
                 VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (session_id) DO UPDATE SET \
                 parent_id=excluded.parent_id, call_id=excluded.call_id, \
                 root_id=excluded.root_id, agent_path=excluded.agent_path, \
                 created_at=excluded.created_at",
                &[
                    &l.session_id,
                    &l.parent_id,
                    &l.call_id,
                    &l.root_id,
                    &l.agent_path,
                    &l.created_at,
                ],
            )
            .await?;
        }
        CompositionOp::PutSubagentCall(call) => {
            execute(
                c,
                "INSERT INTO subagent_calls (parent_id, turn_seq, call_id, child_id, inbox_id, \
                 task_id, budget, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) \
                 ON CONFLICT (parent_id, turn_seq, call_id) DO UPDATE SET \
                 child_id=excluded.child_id, inbox_id=excluded.inbox_id, \
                 task_id=excluded.task_id, budget=excluded.budget, created_at=excluded.created_at",
                &[
                    &call.parent_id,
                    &i(call.turn_seq),
                    &call.call_id,
                    &call.child_id,
                    &call.inbox_id,
                    &call.task_id,
                    &serde_json::to_string(&call.budget)?,
                    &call.created_at,
                ],
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
                execute(
                    c,
                    "INSERT INTO dynamic_tools (session_id, name, provider, description, \
                     input_schema, provider_tool, build_hash, turn_seq, resolved_at) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (session_id, name) \
                     DO UPDATE SET provider=excluded.provider, \
                     description=excluded.description, input_schema=excluded.input_schema, \
                     provider_tool=excluded.provider_tool, build_hash=excluded.build_hash, \
                     turn_seq=excluded.turn_seq, resolved_at=excluded.resolved_at",
                    &[
                        &t.session_id,
                        &t.name,
                        &t.provider,
                        &t.description,
                        &serde_json::to_string(&t.input_schema)?,
                        &serde_json::to_string(&t.provider_tool)?,
                        &t.build_hash,
                        &i(t.turn_seq),
                        &t.resolved_at,
                    ],
                )
                .await?;
            }
            execute(
                c,
                "INSERT INTO dynamic_resolutions (session_id, turn_seq, detail, at) \
                 VALUES ($1,$2,$3,$4) ON CONFLICT (session_id, turn_seq) DO UPDATE SET \
                 detail=excluded.detail, at=excluded.at",
                &[
                    &session_id,
                    &i(turn_seq),
                    &serde_json::to_string(&detail)?,
                    &now,
                ],
            )
            .await?;
        }
        CompositionOp::HookCursor {
            session_id,
            hook,
            delivered,
        } => {
            execute(
                c,
                "INSERT INTO hook_cursors (session_id, hook, delivered, updated_at) \
                 VALUES ($1,$2,$3,$4) ON CONFLICT (session_id, hook) DO UPDATE SET \
                 delivered=GREATEST(hook_cursors.delivered, excluded.delivered), \
                 updated_at=excluded.updated_at",
                &[&session_id, &hook, &i(delivered), &now],
            )
            .await?;
        }
    }
    Ok(())
}

// ---- reads ---------------------------------------------------------------------------------

pub(super) async fn session<C: GenericClient>(
    c: &C,
    id: &str,
) -> StoreResult<Option<SessionRecord>> {
    query_opt(c, &SESSION_SQL, &[&id])
        .await?
        .as_ref()
        .map(session_row)
        .transpose()
}

pub(super) async fn sessions<C: GenericClient>(
    c: &C,
    filter: &SessionFilter,
) -> StoreResult<Vec<SessionRecord>> {
    let limit = (filter.limit > 0).then(|| i64::try_from(filter.limit).unwrap_or(i64::MAX));
    let status = filter.status.map(|s| s.as_str());
    let rows = query(
        c,
        &format!(
            "SELECT {SESSION_COLS} FROM sessions \
             WHERE ($1::TEXT IS NULL OR schedule=$1) AND ($2::TEXT IS NULL OR status=$2) \
             ORDER BY created_at DESC, id DESC LIMIT $3"
        ),
        &[&filter.schedule, &status, &limit],
    )
    .await?;
    all(&rows, session_row)
}

pub(super) async fn turn<C: GenericClient>(
    c: &C,
    session: &str,
    seq: u64,
) -> StoreResult<Option<TurnRecord>> {
    query_opt(
        c,
        &format!("SELECT {TURN_COLS} FROM turns WHERE session_id=$1 AND seq=$2"),
        &[&session, &i(seq)],
    )
    .await?
    .as_ref()
    .map(turn_row)
    .transpose()
}

pub(super) async fn last_turn<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<TurnRecord>> {
    query_opt(c, &LAST_TURN_SQL, &[&session])
        .await?
        .as_ref()
        .map(turn_row)
        .transpose()
}

pub(super) async fn steps<C: GenericClient>(
    c: &C,
    session: &str,
    turn: u64,
) -> StoreResult<Vec<StepRecord>> {
    let rows = query(
        c,
        "SELECT session_id, turn_seq, step_index, model_id, response, at FROM steps \
         WHERE session_id=$1 AND turn_seq=$2 ORDER BY step_index",
        &[&session, &i(turn)],
    )
    .await?;
    all(&rows, |row| {
        Ok(StepRecord {
            session_id: g(row, 0)?,
            turn_seq: u(g(row, 1)?),
            step_index: u(g(row, 2)?),
            model_id: g(row, 3)?,
            response: json(g(row, 4)?)?,
            at: g(row, 5)?,
        })
    })
}

pub(super) async fn tool_calls<C: GenericClient>(
    c: &C,
    session: &str,
    turn: u64,
) -> StoreResult<Vec<ToolCallRecord>> {
    let rows = query(c, &TOOL_CALLS_SQL, &[&session, &i(turn)]).await?;
    all(&rows, call_row)
}

pub(super) async fn input_requests<C: GenericClient>(
    c: &C,
    session: &str,
    pending_only: bool,
) -> StoreResult<Vec<InputRequestRecord>> {
    let rows = query(c, &REQUESTS_SQL, &[&session, &pending_only]).await?;
    all(&rows, request_row)
}

pub(super) async fn input_request<C: GenericClient>(
    c: &C,
    id: &str,
) -> StoreResult<Option<InputRequestRecord>> {
    query_opt(
        c,
        &format!("SELECT {REQUEST_COLS} FROM input_requests WHERE id=$1"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(request_row)
    .transpose()
}

pub(super) async fn pending_inbox<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<InboxRecord>> {
    let rows = query(c, INBOX_SQL, &[&session]).await?;
    all(&rows, |row| {
        Ok(InboxRecord {
            id: g(row, 0)?,
            session_id: g(row, 1)?,
            text: g(row, 2)?,
            accepted_at: g(row, 3)?,
            consumed_turn: None,
        })
    })
}

pub(super) async fn context<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<MessageRecord>> {
    let rows = query(c, CONTEXT_SQL, &[&session]).await?;
    all(&rows, message_row)
}

fn limit(n: usize) -> Option<i64> {
    i64::try_from(n).ok()
}

pub(super) async fn messages<C: GenericClient>(
    c: &C,
    session: &str,
    from: u64,
    max: usize,
) -> StoreResult<Vec<MessageRecord>> {
    let rows = query(
        c,
        "SELECT session_id, seq, turn_seq, kind, body, at FROM messages \
         WHERE session_id=$1 AND seq >= $2 ORDER BY seq LIMIT $3",
        &[&session, &i(from), &limit(max)],
    )
    .await?;
    all(&rows, message_row)
}

pub(super) async fn events<C: GenericClient>(
    c: &C,
    session: &str,
    from: u64,
    max: usize,
) -> StoreResult<Vec<StoredEvent>> {
    let rows = query(
        c,
        "SELECT session_id, idx, id, type, data, at FROM events \
         WHERE session_id=$1 AND idx >= $2 ORDER BY idx LIMIT $3",
        &[&session, &i(from), &limit(max)],
    )
    .await?;
    all(&rows, |row| {
        Ok(StoredEvent {
            session_id: g(row, 0)?,
            index: u(g(row, 1)?),
            id: g(row, 2)?,
            kind: g(row, 3)?,
            data: json(g(row, 4)?)?,
            at: g(row, 5)?,
        })
    })
}

pub(super) async fn breaker<C: GenericClient>(
    c: &C,
    tool: &str,
) -> StoreResult<Option<BreakerRecord>> {
    query_opt(
        c,
        "SELECT tool, consecutive_failures, open_until, backoff_ms FROM breakers WHERE tool=$1",
        &[&tool],
    )
    .await?
    .map(|row| {
        Ok(BreakerRecord {
            tool: g(&row, 0)?,
            consecutive_failures: u32::try_from(g::<i64>(&row, 1)?).unwrap_or(0),
            open_until: g(&row, 2)?,
            backoff_ms: g(&row, 3)?,
        })
    })
    .transpose()
}

/// Sessions with work and no live lease: a node looking for work skips the sessions another
/// node drives (their lease says so), and finds a dead node's sessions once its lease expired.
pub(super) async fn sessions_with_work<C: GenericClient>(
    c: &C,
    liveness: &dyn Liveness,
) -> StoreResult<Vec<String>> {
    let now = now_ms();
    let rows = query(
        c,
        "SELECT s.id, l.holder, l.pid, l.host, l.expires_at FROM sessions s \
         LEFT JOIN leases l ON l.session_id = s.id \
         WHERE (s.status = 'running' \
         OR (s.status = 'waiting' AND NOT EXISTS (SELECT 1 FROM input_requests r \
             WHERE r.session_id = s.id AND r.status = 'pending')) \
         OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
             AND i.consumed_turn IS NULL)) \
         ORDER BY s.updated_at",
        &[],
    )
    .await?;
    let mut out = Vec::new();
    for r in &rows {
        let holder: Option<String> = g(r, 1)?;
        let expires: Option<i64> = g(r, 4)?;
        if let (Some(holder), Some(expires)) = (holder, expires) {
            let process = ProcessRef {
                pid: u32::try_from(g::<Option<i64>>(r, 2)?.unwrap_or(0)).unwrap_or(0),
                host: g::<Option<String>>(r, 3)?.unwrap_or_default(),
            };
            if lease_is_live(liveness, &holder, &process, expires, now) {
                continue;
            }
        }
        out.push(g::<String>(r, 0)?);
    }
    Ok(out)
}

/// The run loop's combined read, in one `REPEATABLE READ` snapshot: `begin` (sent first, with
/// the reads) opens it, or the caller has. The reads of every session go out together (one
/// round trip); a subagent's link and budget and a parent's children's usage follow.
pub(super) async fn drive_state<C: GenericClient>(
    c: &C,
    id: &str,
    begin: Option<&str>,
) -> StoreResult<Option<DriveState>> {
    let begin = async {
        match begin {
            Some(sql) => Ok(c.batch_execute(sql).await?),
            None => Ok::<(), StoreError>(()),
        }
    };
    let by_id: [&(dyn ToSql + Sync); 1] = [&id];
    // `join!` polls in order, so `BEGIN` is sent before any read.
    let (begun, session, last_turn, inbox, pending_requests, has_children, dynamic_resolved) = futures::join!(
        begin,
        session(c, id),
        last_turn(c, id),
        pending_inbox(c, id),
        input_requests(c, id, true),
        query_opt(c, HAS_CHILDREN_SQL, &by_id,),
        query_opt(c, DYNAMIC_RESOLVED_SQL, &by_id,),
    );
    begun?;
    let Some(session) = session? else {
        return Ok(None);
    };
    let (last_turn, inbox, pending_requests) = (last_turn?, inbox?, pending_requests?);
    let has_children = has_children?.is_some();
    let dynamic_resolved = last_turn.is_some() && dynamic_resolved?.is_some();
    let (link, budget) = if session.parent_id.is_some() {
        let link = link(c, id).await?;
        let budget = match last_turn.as_ref().and_then(|t| t.inbox_id.as_deref()) {
            Some(inbox_id) => subagent_call_by_inbox(c, inbox_id).await?.map(|x| x.budget),
            None => None,
        };
        (link, budget)
    } else {
        (None, None)
    };
    let descendant_usage = if has_children {
        descendant_usage(c, id).await?
    } else {
        (UsageTotals::default(), 0.0)
    };
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

// ---- composition ---------------------------------------------------------------------------

const LINK_COLS: &str = "session_id, parent_id, call_id, root_id, agent_path, created_at";

fn link_row(row: &Row) -> StoreResult<SubagentLink> {
    Ok(SubagentLink {
        session_id: g(row, 0)?,
        parent_id: g(row, 1)?,
        call_id: g(row, 2)?,
        root_id: g(row, 3)?,
        agent_path: g(row, 4)?,
        created_at: g(row, 5)?,
    })
}

pub(super) async fn link<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<SubagentLink>> {
    query_opt(
        c,
        &format!("SELECT {LINK_COLS} FROM subagent_sessions WHERE session_id=$1"),
        &[&session],
    )
    .await?
    .as_ref()
    .map(link_row)
    .transpose()
}

pub(super) async fn link_by_token<C: GenericClient>(
    c: &C,
    parent: &str,
    call_id: &str,
) -> StoreResult<Option<SubagentLink>> {
    query_opt(
        c,
        &format!(
            "SELECT {LINK_COLS} FROM subagent_sessions WHERE parent_id=$1 AND call_id=$2 \
             ORDER BY created_at, ord LIMIT 1"
        ),
        &[&parent, &call_id],
    )
    .await?
    .as_ref()
    .map(link_row)
    .transpose()
}

const SUBCALL_COLS: &str =
    "parent_id, turn_seq, call_id, child_id, inbox_id, task_id, budget, created_at";

fn subcall_row(row: &Row) -> StoreResult<SubagentCall> {
    Ok(SubagentCall {
        parent_id: g(row, 0)?,
        turn_seq: u(g(row, 1)?),
        call_id: g(row, 2)?,
        child_id: g(row, 3)?,
        inbox_id: g(row, 4)?,
        task_id: g(row, 5)?,
        budget: serde_json::from_str(g(row, 6)?)?,
        created_at: g(row, 7)?,
    })
}

pub(super) async fn subagent_call<C: GenericClient>(
    c: &C,
    parent: &str,
    turn: u64,
    call_id: &str,
) -> StoreResult<Option<SubagentCall>> {
    query_opt(
        c,
        &format!(
            "SELECT {SUBCALL_COLS} FROM subagent_calls \
             WHERE parent_id=$1 AND turn_seq=$2 AND call_id=$3"
        ),
        &[&parent, &i(turn), &call_id],
    )
    .await?
    .as_ref()
    .map(subcall_row)
    .transpose()
}

pub(super) async fn subagent_call_by_inbox<C: GenericClient>(
    c: &C,
    inbox_id: &str,
) -> StoreResult<Option<SubagentCall>> {
    query_opt(
        c,
        &format!("SELECT {SUBCALL_COLS} FROM subagent_calls WHERE inbox_id=$1"),
        &[&inbox_id],
    )
    .await?
    .as_ref()
    .map(subcall_row)
    .transpose()
}

pub(super) async fn inbox_turn<C: GenericClient>(
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

pub(super) async fn turn_inbox<C: GenericClient>(
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

pub(super) async fn descendant_requests<C: GenericClient>(
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
    all(&rows, request_row)
}

pub(super) async fn descendant_usage<C: GenericClient>(
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
            input_tokens: u(g(&row, 0)?),
            output_tokens: u(g(&row, 1)?),
            cache_read_tokens: u(g(&row, 2)?),
            cache_write_tokens: 0,
        },
        g(&row, 3)?,
    ))
}

pub(super) async fn dynamic_tools<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<DynamicToolRecord>> {
    let rows = query(
        c,
        "SELECT session_id, name, provider, description, input_schema, provider_tool, build_hash, \
         turn_seq, resolved_at FROM dynamic_tools WHERE session_id=$1 ORDER BY name",
        &[&session],
    )
    .await?;
    all(&rows, |row| {
        Ok(DynamicToolRecord {
            session_id: g(row, 0)?,
            name: g(row, 1)?,
            provider: g(row, 2)?,
            description: g(row, 3)?,
            input_schema: json(g(row, 4)?)?,
            provider_tool: json(g(row, 5)?)?,
            build_hash: g(row, 6)?,
            turn_seq: u(g(row, 7)?),
            resolved_at: g(row, 8)?,
        })
    })
}

pub(super) async fn dynamic_resolved<C: GenericClient>(
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

pub(super) async fn hook_cursors<C: GenericClient>(
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

pub(super) async fn sessions_behind_hooks<C: GenericClient>(c: &C) -> StoreResult<Vec<String>> {
    let rows = query(
        c,
        "SELECT id FROM sessions s WHERE s.event_count > COALESCE((SELECT MIN(h.delivered) \
         FROM hook_cursors h WHERE h.session_id = s.id), 0) ORDER BY s.updated_at",
        &[],
    )
    .await?;
    rows.iter().map(|r| g::<String>(r, 0)).collect()
}

// ---- leases --------------------------------------------------------------------------------

fn lease_row(row: &Row) -> StoreResult<LeaseRecord> {
    Ok(LeaseRecord {
        session_id: g(row, 0)?,
        holder: g(row, 1)?,
        pid: u32::try_from(g::<i64>(row, 2)?).unwrap_or(0),
        host: g(row, 3)?,
        expires_at: g(row, 4)?,
        token: u(g(row, 5)?),
    })
}

const LEASE_COLS: &str = "session_id, holder, pid, host, expires_at, token";

pub(super) async fn lease<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<LeaseRecord>> {
    query_opt(c, &LEASE_SQL, &[&session])
        .await?
        .as_ref()
        .map(lease_row)
        .transpose()
}

/// Takes the lease in a transaction of its own on `c` (a pooled connection outside any
/// transaction), in two round trips: `BEGIN`, the insert of a free session's row and the lock
/// of an existing one travel together, then the takeover's update with `COMMIT` (or
/// `ROLLBACK`). A free session's row is inserted (a concurrent insert of the same session
/// waits, then finds the row); an existing row is locked `FOR UPDATE SKIP LOCKED`, so a
/// claimant never queues behind another claim or a commit in flight: it is told the session
/// is held and moves on. A new holder takes a new token from the `lease_tokens` sequence
/// (never reused, so it only grows). Returns whether the transaction was committed; on an
/// error it is left open (the caller drops the connection).
pub(super) async fn acquire(
    c: &deadpool_postgres::Client,
    claim: &LeaseClaim,
    liveness: &dyn Liveness,
) -> StoreResult<LeaseOutcome> {
    let now = now_ms();
    let expires = now.saturating_add(claim.ttl_ms);
    let pid = i64::from(claim.pid);
    let (insert, select) = futures::try_join!(
        c.prepare_cached(LEASE_INSERT_SQL,),
        c.prepare_cached(&LEASE_LOCK_SQL),
    )?;
    let values: [&(dyn ToSql + Sync); 6] = [
        &claim.session_id,
        &claim.holder,
        &pid,
        &claim.host,
        &expires,
        &now,
    ];
    let key: [&(dyn ToSql + Sync); 1] = [&claim.session_id];
    // `join!` polls in order: BEGIN, then the insert, then the lock.
    let (begun, inserted, locked) = futures::join!(
        c.batch_execute("BEGIN"),
        c.execute(&insert, &values),
        c.query_opt(&select, &key),
    );
    begun?;
    let (inserted, locked) = (inserted?, locked?);
    if inserted > 0 {
        c.batch_execute("COMMIT").await?;
        return Ok(LeaseOutcome::Acquired);
    }
    let held = |pid: u32, host: String| LeaseOutcome::HeldBy { pid, host };
    let Some(row) = locked else {
        // Another node is claiming it or committing under it right now.
        let (current, ended) =
            futures::join!(lease(c, &claim.session_id), c.batch_execute("ROLLBACK"));
        ended?;
        let current = current?;
        return Ok(held(
            current.as_ref().map_or(0, |l| l.pid),
            current.map(|l| l.host).unwrap_or_default(),
        ));
    };
    let current = lease_row(&row)?;
    let ours = current.holder == claim.holder;
    let free = current.holder.is_empty() || current.expires_at < now;
    let holder = ProcessRef {
        pid: current.pid,
        host: current.host.clone(),
    };
    let claimant = ProcessRef {
        pid: claim.pid,
        host: claim.host.clone(),
    };
    if !ours && !free && !liveness.lease_holder_dead(&holder, &claimant) {
        c.batch_execute("ROLLBACK").await?;
        return Ok(held(holder.pid, holder.host));
    }
    let update = c.prepare_cached(LEASE_TAKE_SQL).await?;
    let (updated, ended) = futures::join!(c.execute(&update, &values), c.batch_execute("COMMIT"));
    // A failed update aborts the transaction, and its COMMIT then rolls it back.
    updated?;
    ended?;
    Ok(LeaseOutcome::Acquired)
}

pub(super) async fn renew<C: GenericClient>(c: &C, claim: &LeaseClaim) -> StoreResult<bool> {
    let n = execute(
        c,
        "UPDATE leases SET expires_at=$3 WHERE session_id=$1 AND holder=$2 AND holder<>''",
        &[
            &claim.session_id,
            &claim.holder,
            &now_ms().saturating_add(claim.ttl_ms),
        ],
    )
    .await?;
    Ok(n > 0)
}

/// Releases the lease and notifies the fleet (a released session may have work left: another
/// node may take it at once), in one statement, so one round trip.
pub(super) async fn release<C: GenericClient>(
    c: &C,
    session: &str,
    holder: &str,
    notify: (&str, &str),
) -> StoreResult<()> {
    query(c, RELEASE_SQL, &[&session, &holder, &notify.0, &notify.1]).await?;
    Ok(())
}

// ---- schedules -----------------------------------------------------------------------------

pub(super) async fn schedule_states<C: GenericClient>(c: &C) -> StoreResult<Vec<ScheduleState>> {
    let rows = query(
        c,
        "SELECT name, spec, next_fire_at, updated_at FROM schedules ORDER BY name",
        &[],
    )
    .await?;
    all(&rows, |row| {
        Ok(ScheduleState {
            name: g(row, 0)?,
            spec: g(row, 1)?,
            next_fire_at: g(row, 2)?,
            updated_at: g(row, 3)?,
        })
    })
}

pub(super) async fn schedule_fires<C: GenericClient>(
    c: &C,
    schedule: &str,
    status: Option<FireStatus>,
    max: usize,
) -> StoreResult<Vec<ScheduleFire>> {
    let max = (max > 0).then(|| limit(max)).flatten();
    let status = status.map(FireStatus::as_str);
    let rows = query(
        c,
        &format!(
            "SELECT {FIRE_COLS} FROM schedule_fires WHERE schedule=$1 \
             AND ($2::TEXT IS NULL OR status=$2) ORDER BY fire_at DESC, created_at DESC LIMIT $3"
        ),
        &[&schedule, &status, &max],
    )
    .await?;
    all(&rows, fire_row)
}

/// A claim's compare-and-set, inside the caller's transaction. Claims of one schedule are
/// serialised by an advisory lock on its name (held to commit), so two nodes racing for one
/// fire (or for a schedule's first state) cannot both see their condition hold.
pub(super) async fn claim_schedule<C: GenericClient>(
    c: &C,
    claim: &ScheduleClaim,
    batch: Batch,
) -> StoreResult<Option<Committed>> {
    execute(
        c,
        "SELECT pg_advisory_xact_lock(hashtext('eve-schedule:' || $1))",
        &[&claim.schedule],
    )
    .await?;
    let stored = query_opt(
        c,
        "SELECT next_fire_at FROM schedules WHERE name=$1",
        &[&claim.schedule],
    )
    .await?
    .map(|r| g::<i64>(&r, 0))
    .transpose()?;
    let state_ok = match claim.expect {
        StateExpect::Any => true,
        StateExpect::Absent => stored.is_none(),
        StateExpect::Next(t) => stored == Some(t),
    };
    if !state_ok {
        return Ok(None);
    }
    for write in &claim.fires {
        let (fire, wanted) = match write {
            FireWrite::Insert(f) => (f, None),
            FireWrite::Promote { from, to } => (to, Some(*from)),
        };
        let status = query_opt(
            c,
            "SELECT status FROM schedule_fires WHERE schedule=$1 AND fire_at=$2 AND trigger=$3",
            &[&fire.schedule, &fire.fire_at, &fire.trigger.as_str()],
        )
        .await?
        .map(|r| g::<String>(&r, 0))
        .transpose()?;
        let ok = match wanted {
            None => status.is_none(),
            Some(from) => status.as_deref() == Some(from.as_str()),
        };
        if !ok {
            return Ok(None);
        }
    }
    let now = now_ms();
    if let Some((next, spec)) = &claim.next {
        execute(
            c,
            "INSERT INTO schedules (name, spec, next_fire_at, updated_at) VALUES ($1,$2,$3,$4) \
             ON CONFLICT (name) DO UPDATE SET spec=excluded.spec, \
             next_fire_at=excluded.next_fire_at, updated_at=excluded.updated_at",
            &[&claim.schedule, spec, next, &now],
        )
        .await?;
    }
    for write in &claim.fires {
        let fire = match write {
            FireWrite::Insert(f) | FireWrite::Promote { to: f, .. } => f,
        };
        execute(
            c,
            &format!(
                "INSERT INTO schedule_fires ({FIRE_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) \
                 ON CONFLICT (schedule, fire_at, trigger) DO UPDATE SET status=excluded.status, \
                 session_id=excluded.session_id, detail=excluded.detail, \
                 created_at=excluded.created_at, updated_at=excluded.updated_at"
            ),
            &[
                &fire.schedule,
                &fire.fire_at,
                &fire.trigger.as_str(),
                &fire.status.as_str(),
                &fire.session_id,
                &fire.detail,
                &fire.created_at,
                &now,
            ],
        )
        .await?;
    }
    apply(c, batch, None, None, None).await.map(Some)
}

// ---- channels ------------------------------------------------------------------------------

/// Remembers a delivery id (a concurrent accept of the same delivery on another node waits on
/// the unique key, then finds it); `false` when it was already accepted.
pub(super) async fn claim_delivery<C: GenericClient>(
    c: &C,
    accept: &ChannelAccept,
    now: i64,
) -> StoreResult<bool> {
    let Some(delivery) = &accept.delivery else {
        return Ok(true);
    };
    let inserted = execute(
        c,
        "INSERT INTO channel_deliveries (channel, delivery_id, accepted_at) VALUES ($1,$2,$3) \
         ON CONFLICT DO NOTHING",
        &[&delivery.channel, &delivery.delivery_id, &now],
    )
    .await?;
    if inserted == 0 {
        return Ok(false);
    }
    execute(
        c,
        "DELETE FROM channel_deliveries WHERE accepted_at < $1",
        &[&now.saturating_sub(CHANNEL_ROWS_KEPT_MS)],
    )
    .await?;
    Ok(true)
}

pub(super) async fn insert_reply<C: GenericClient>(
    c: &C,
    accept: &ChannelAccept,
    now: i64,
) -> StoreResult<()> {
    let Some(r) = &accept.reply else {
        return Ok(());
    };
    execute(
        c,
        "INSERT INTO channel_replies (inbox_id, channel, session_id, from_index, address, \
         announced, done, detail, owner_pid, owner_host, created_at, updated_at, owner_token, \
         owner_expires_at, sending) \
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$11,$12,$13,$14) \
         ON CONFLICT (inbox_id) DO UPDATE SET \
         channel=excluded.channel, session_id=excluded.session_id, \
         from_index=excluded.from_index, address=excluded.address, \
         announced=excluded.announced, done=excluded.done, detail=excluded.detail, \
         owner_pid=excluded.owner_pid, owner_host=excluded.owner_host, \
         created_at=excluded.created_at, updated_at=excluded.updated_at, \
         owner_token=excluded.owner_token, owner_expires_at=excluded.owner_expires_at, \
         sending=excluded.sending",
        &[
            &r.inbox_id,
            &r.channel,
            &r.session_id,
            &i(r.from_index),
            &serde_json::to_string(&r.address)?,
            &serde_json::to_string(&r.announced)?,
            &r.done,
            &r.detail,
            &i64::from(r.owner_pid),
            &r.owner_host,
            &now,
            &i(r.owner_token),
            &r.owner_expires_at,
            &r.sending.as_ref().map(serde_json::to_string).transpose()?,
        ],
    )
    .await?;
    execute(
        c,
        "DELETE FROM channel_replies WHERE done AND updated_at < $1",
        &[&now.saturating_sub(CHANNEL_ROWS_KEPT_MS)],
    )
    .await?;
    Ok(())
}

const REPLY_COLS: &str = "inbox_id, channel, session_id, from_index, address, announced, done, \
                          detail, owner_pid, owner_host, created_at, updated_at, owner_token, \
                          owner_expires_at, sending";

fn reply_row(row: &Row) -> StoreResult<ChannelReplyRecord> {
    Ok(ChannelReplyRecord {
        inbox_id: g(row, 0)?,
        channel: g(row, 1)?,
        session_id: g(row, 2)?,
        from_index: u(g(row, 3)?),
        address: json(g(row, 4)?)?,
        announced: serde_json::from_str(g(row, 5)?)?,
        done: g(row, 6)?,
        detail: g(row, 7)?,
        owner_pid: u32::try_from(g::<i64>(row, 8)?).unwrap_or(0),
        owner_host: g(row, 9)?,
        created_at: g(row, 10)?,
        updated_at: g(row, 11)?,
        owner_token: u(g(row, 12)?),
        owner_expires_at: g(row, 13)?,
        sending: g::<Option<&str>>(row, 14)?
            .map(serde_json::from_str::<Sending>)
            .transpose()?,
    })
}

pub(super) async fn replies<C: GenericClient>(
    c: &C,
    pending_only: bool,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let rows = query(
        c,
        &format!(
            "SELECT {REPLY_COLS} FROM channel_replies WHERE (NOT $1 OR NOT done) \
             ORDER BY created_at, inbox_id"
        ),
        &[&pending_only],
    )
    .await?;
    all(&rows, reply_row)
}

pub(super) async fn reply<C: GenericClient>(
    c: &C,
    inbox_id: &str,
) -> StoreResult<Option<ChannelReplyRecord>> {
    query_opt(
        c,
        &format!("SELECT {REPLY_COLS} FROM channel_replies WHERE inbox_id=$1"),
        &[&inbox_id],
    )
    .await?
    .as_ref()
    .map(reply_row)
    .transpose()
}

/// Takes the owed replies `claim` says, inside the caller's transaction, each with a new token
/// and a fresh hold; rows another node is taking at the same moment are skipped (`SKIP LOCKED`),
/// so each is taken once. Only rows whose hold lapsed are read unless owners judged gone by
/// `liveness` are wanted too.
pub(super) async fn claim_replies<C: GenericClient>(
    c: &C,
    claim: &ReplyClaim,
    liveness: &dyn Liveness,
    now: i64,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let me = ProcessRef {
        pid: claim.pid,
        host: claim.host.clone(),
    };
    let rows = query(
        c,
        &format!(
            "SELECT {REPLY_COLS} FROM channel_replies WHERE NOT done \
             AND (NOT $1 OR owner_expires_at <= $2) AND NOT (inbox_id = ANY($3)) \
             ORDER BY created_at, inbox_id FOR UPDATE SKIP LOCKED"
        ),
        &[&claim.expired_only, &now, &claim.skip],
    )
    .await?;
    let mut taken = Vec::new();
    for row in &rows {
        let mut r = reply_row(row)?;
        let owner = ProcessRef {
            pid: r.owner_pid,
            host: r.owner_host.clone(),
        };
        if r.owner_expires_at > now && !liveness.reply_owner_gone(&owner, &me) {
            continue;
        }
        let token = r.owner_token.saturating_add(1);
        let expires = now.saturating_add(claim.ttl_ms);
        execute(
            c,
            "UPDATE channel_replies SET owner_pid=$2, owner_host=$3, updated_at=$4, \
             owner_token=$5, owner_expires_at=$6 WHERE inbox_id=$1",
            &[
                &r.inbox_id,
                &i64::from(claim.pid),
                &claim.host,
                &now,
                &i(token),
                &expires,
            ],
        )
        .await?;
        r.owner_pid = claim.pid;
        r.owner_host = claim.host.clone();
        r.updated_at = now;
        r.owner_token = token;
        r.owner_expires_at = expires;
        taken.push(r);
    }
    Ok(taken)
}

/// Renews the holds of the owed replies in `held` (one statement); returns how many.
pub(super) async fn renew_replies<C: GenericClient>(
    c: &C,
    held: &[ReplyHeld],
    ttl_ms: i64,
    now: i64,
) -> StoreResult<usize> {
    if held.is_empty() {
        return Ok(0);
    }
    let ids: Vec<&str> = held.iter().map(|h| h.inbox_id.as_str()).collect();
    let tokens: Vec<i64> = held.iter().map(|h| i(h.token)).collect();
    let renewed = execute(
        c,
        "UPDATE channel_replies r SET owner_expires_at=$3 \
         FROM unnest($1::text[], $2::bigint[]) AS h(inbox_id, token) \
         WHERE r.inbox_id = h.inbox_id AND r.owner_token = h.token AND NOT r.done",
        &[&ids, &tokens, &now.saturating_add(ttl_ms)],
    )
    .await?;
    Ok(usize::try_from(renewed).unwrap_or(usize::MAX))
}

/// Records that `held`'s owner starts sending `sending`; `false` when it no longer holds it.
pub(super) async fn start_send<C: GenericClient>(
    c: &C,
    held: &ReplyHeld,
    sending: &Sending,
    ttl_ms: i64,
    now: i64,
) -> StoreResult<bool> {
    let changed = execute(
        c,
        "UPDATE channel_replies SET sending=$3, owner_expires_at=$4, updated_at=$5 \
         WHERE inbox_id=$1 AND owner_token=$2 AND NOT done",
        &[
            &held.inbox_id,
            &i(held.token),
            &serde_json::to_string(sending)?,
            &now.saturating_add(ttl_ms),
            &now,
        ],
    )
    .await?;
    Ok(changed == 1)
}

pub(super) async fn update_reply<C: GenericClient>(
    c: &C,
    update: &ChannelReplyUpdate,
    now: i64,
) -> StoreResult<()> {
    execute(
        c,
        "UPDATE channel_replies SET address=$2, announced=$3, done=$4, detail=$5, updated_at=$6, \
         sending=NULL WHERE inbox_id=$1 AND NOT done",
        &[
            &update.inbox_id,
            &serde_json::to_string(&update.address)?,
            &serde_json::to_string(&update.announced)?,
            &update.done,
            &update.detail,
            &now,
        ],
    )
    .await?;
    Ok(())
}
