//! Planned statements and how they are sent: a batch's statements, each planned with its
//! parameters and what its answer means, go out together in one round trip (tokio-postgres
//! pipelines requests polled together) and their answers are read in order.
//!
//! Every check of a plan fails inside the server ([`Strict`]), so a `COMMIT` sent in the same
//! round trip never commits a batch that one of its checks refused.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::rows::bind;
use super::{g, u};
use crate::store::rows::Cell;
use crate::store::{Committed, Fence, StoreError, StoreResult, StoredEvent};

/// What a planned statement's answer means for the batch.
pub(super) enum Then {
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
pub(super) struct Planned {
    sql: String,
    /// The parameters, owned, so a whole batch can be planned before any is sent.
    params: Vec<Cell>,
    then: Then,
}

impl Planned {
    pub(super) fn new(sql: impl Into<String>, params: Vec<Cell>, then: Then) -> Self {
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
pub(super) async fn run_planned<C: GenericClient>(
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
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = chunk.iter().map(|p| bind(&p.params)).collect();
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
pub(super) struct Strict;

impl Strict {
    /// The fence check: the lease row read `FOR KEY SHARE`, and a cast that fails when a newer
    /// holder's token is there (the error names the token).
    pub(super) const FENCE: &'static str = "SELECT CASE WHEN token > $2 THEN ('eve-fenced:' || token)::BIGINT \
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
