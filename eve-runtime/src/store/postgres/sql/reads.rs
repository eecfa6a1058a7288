//! Reads of the PostgreSQL store: sessions, turns, steps, calls, requests, inbox, messages,
//! events, breakers, the sessions with work, and the run loop's combined read
//! ([`drive_state`]).

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::composition::{descendant_usage, dynamic_tools, link, subagent_call_by_inbox};
use super::rows::{all, opt};
use super::{
    CONTEXT_SQL, DYNAMIC_RESOLVED_SQL, HAS_CHILDREN_SQL, INBOX_SQL, LAST_TURN_SQL, REQUESTS_SQL,
    SESSION_SQL, TOOL_CALLS_SQL, i, limit, query, query_opt,
};
use crate::store::rows::{
    self, BREAKER_COLS, EVENT_COLS, MESSAGE_COLS, REQUEST_COLS, SESSION_COLS, STEP_COLS, TURN_COLS,
};
use crate::store::{
    BreakerRecord, DriveState, InboxRecord, InputRequestRecord, Liveness, MessageRecord,
    SessionFilter, SessionRecord, StepRecord, StoreError, StoreResult, StoredEvent, ToolCallRecord,
    TurnRecord, TurnView, UsageTotals, now_ms,
};

pub(in crate::store::postgres) async fn session<C: GenericClient>(
    c: &C,
    id: &str,
) -> StoreResult<Option<SessionRecord>> {
    opt(query_opt(c, &SESSION_SQL, &[&id]).await?, rows::session)
}

pub(in crate::store::postgres) async fn sessions<C: GenericClient>(
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
             AND ($4::TEXT IS NULL OR owner=$4) \
             ORDER BY created_at DESC, id DESC LIMIT $3"
        ),
        &[&filter.schedule, &status, &limit, &filter.owner],
    )
    .await?;
    all(&rows, rows::session)
}

pub(in crate::store::postgres) async fn turn<C: GenericClient>(
    c: &C,
    session: &str,
    seq: u64,
) -> StoreResult<Option<TurnRecord>> {
    let row = query_opt(
        c,
        &format!("SELECT {TURN_COLS} FROM turns WHERE session_id=$1 AND seq=$2"),
        &[&session, &i(seq)],
    )
    .await?;
    opt(row, rows::turn)
}

pub(in crate::store::postgres) async fn last_turn<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<TurnRecord>> {
    opt(query_opt(c, &LAST_TURN_SQL, &[&session]).await?, rows::turn)
}

pub(in crate::store::postgres) async fn steps<C: GenericClient>(
    c: &C,
    session: &str,
    turn: u64,
) -> StoreResult<Vec<StepRecord>> {
    let rows = query(
        c,
        &format!(
            "SELECT {STEP_COLS} FROM steps WHERE session_id=$1 AND turn_seq=$2 ORDER BY step_index"
        ),
        &[&session, &i(turn)],
    )
    .await?;
    all(&rows, rows::step)
}

pub(in crate::store::postgres) async fn tool_calls<C: GenericClient>(
    c: &C,
    session: &str,
    turn: u64,
) -> StoreResult<Vec<ToolCallRecord>> {
    let rows = query(c, &TOOL_CALLS_SQL, &[&session, &i(turn)]).await?;
    all(&rows, rows::call)
}

pub(in crate::store::postgres) async fn input_requests<C: GenericClient>(
    c: &C,
    session: &str,
    pending_only: bool,
) -> StoreResult<Vec<InputRequestRecord>> {
    let rows = query(c, &REQUESTS_SQL, &[&session, &pending_only]).await?;
    all(&rows, rows::request)
}

pub(in crate::store::postgres) async fn input_request<C: GenericClient>(
    c: &C,
    id: &str,
) -> StoreResult<Option<InputRequestRecord>> {
    let row = query_opt(
        c,
        &format!("SELECT {REQUEST_COLS} FROM input_requests WHERE id=$1"),
        &[&id],
    )
    .await?;
    opt(row, rows::request)
}

pub(in crate::store::postgres) async fn pending_inbox<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<InboxRecord>> {
    let rows = query(c, &INBOX_SQL, &[&session]).await?;
    all(&rows, rows::inbox)
}

pub(in crate::store::postgres) async fn context<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Vec<MessageRecord>> {
    let rows = query(c, CONTEXT_SQL, &[&session]).await?;
    all(&rows, rows::message)
}

pub(in crate::store::postgres) async fn messages<C: GenericClient>(
    c: &C,
    session: &str,
    from: u64,
    max: usize,
) -> StoreResult<Vec<MessageRecord>> {
    let rows = query(
        c,
        &format!(
            "SELECT {MESSAGE_COLS} FROM messages WHERE session_id=$1 AND seq >= $2 \
             ORDER BY seq LIMIT $3"
        ),
        &[&session, &i(from), &limit(max)],
    )
    .await?;
    all(&rows, rows::message)
}

pub(in crate::store::postgres) async fn events<C: GenericClient>(
    c: &C,
    session: &str,
    from: u64,
    max: usize,
) -> StoreResult<Vec<StoredEvent>> {
    let rows = query(
        c,
        &format!(
            "SELECT {EVENT_COLS} FROM events WHERE session_id=$1 AND idx >= $2 \
             ORDER BY idx LIMIT $3"
        ),
        &[&session, &i(from), &limit(max)],
    )
    .await?;
    all(&rows, rows::event)
}

pub(in crate::store::postgres) async fn breaker<C: GenericClient>(
    c: &C,
    tool: &str,
) -> StoreResult<Option<BreakerRecord>> {
    let row = query_opt(
        c,
        &format!("SELECT {BREAKER_COLS} FROM breakers WHERE tool=$1"),
        &[&tool],
    )
    .await?;
    opt(row, rows::breaker)
}

/// Sessions with work and no live lease: a node looking for work skips the sessions another
/// node drives (their lease says so), and finds a dead node's sessions once its lease expired.
pub(in crate::store::postgres) async fn sessions_with_work<C: GenericClient>(
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
    Ok(rows::unleased(all(&rows, rows::work)?, liveness, now))
}

/// The run loop's combined read, in one `REPEATABLE READ` snapshot: `begin` (sent first, with
/// the reads) opens it, or the caller has. The reads of every session go out together (one
/// round trip); a subagent's link and budget and a parent's children's usage follow.
pub(in crate::store::postgres) async fn drive_state<C: GenericClient>(
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

/// The model context and the dynamic tools of a session, in one read-only snapshot
/// transaction on `c` (a connection outside any transaction): `BEGIN` and both reads travel
/// together, then `COMMIT`.
pub(in crate::store::postgres) async fn turn_view<C: GenericClient>(
    c: &C,
    id: &str,
) -> StoreResult<TurnView> {
    // `join!` polls in order, so `BEGIN` is sent before either read.
    let (begun, context, dynamic_tools) = futures::join!(
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
        context(c, id),
        dynamic_tools(c, id),
    );
    begun?;
    let (context, dynamic_tools) = (context?, dynamic_tools?);
    c.batch_execute("COMMIT").await?;
    Ok(TurnView {
        context,
        dynamic_tools,
    })
}
