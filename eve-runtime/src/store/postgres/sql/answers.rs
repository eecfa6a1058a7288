//! Settling an input request with its answer in PostgreSQL, as a compare-and-set inside the
//! batch's transaction ([`Op::AnswerInputRequest`](crate::store::Op::AnswerInputRequest)), as
//! `store/sqlite/answers.rs` does for SQLite.
//!
//! Nodes of a fleet answer at once. The session's row is locked first (`FOR UPDATE`), so the
//! answers of one session settle one after the other; each later statement of a `READ COMMITTED`
//! transaction sees every answer committed before the lock was granted. The update applies only
//! while the request is `pending` (a writer that did not take the lock is caught by the row's
//! own re-check), so the first commit wins and every later batch is refused whole with the
//! answer that won. The other requests of the turn still pending must be those the caller saw,
//! so exactly one answer of a turn sees its wait resolved.

use deadpool_postgres::GenericClient;

use super::rows::opt;
use super::{g, i, query, query_opt, write};
use crate::store::rows::{self, REQUEST_COLS};
use crate::store::{InputRequestRecord, RequestStatus, StoreError, StoreResult};

pub(super) async fn settle<C: GenericClient>(
    c: &C,
    request: &InputRequestRecord,
    others_pending: &[String],
) -> StoreResult<()> {
    query(
        c,
        "SELECT 1 FROM sessions WHERE id=$1 FOR UPDATE",
        &[&request.session_id],
    )
    .await?;
    let changed = write(
        c,
        "UPDATE input_requests SET status=$2, reason=$3, answered_at=$4, responder=$5 \
         WHERE id=$1 AND status='pending'",
        &rows::answer_values(request),
    )
    .await?;
    if changed == 0 {
        let row = query_opt(
            c,
            &format!("SELECT {REQUEST_COLS} FROM input_requests WHERE id=$1"),
            &[&request.id],
        )
        .await?;
        let stored = opt(row, rows::request)?
            .ok_or_else(|| StoreError::NotFound(format!("input request {}", request.id)))?;
        return Err(StoreError::AlreadyAnswered(Box::new(stored)));
    }
    let pending = query(
        c,
        "SELECT id FROM input_requests WHERE session_id=$1 AND turn_seq=$2 AND status=$3 \
         AND id<>$4 ORDER BY id",
        &[
            &request.session_id,
            &i(request.turn_seq),
            &RequestStatus::Pending.as_str(),
            &request.id,
        ],
    )
    .await?;
    let pending = pending
        .iter()
        .map(|r| g::<String>(r, 0))
        .collect::<StoreResult<Vec<_>>>()?;
    rows::others_unmoved(request, pending, others_pending)
}
