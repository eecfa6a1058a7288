//! Settling an input request with its answer, as a compare-and-set inside the writer's
//! transaction ([`Op::AnswerInputRequest`](crate::store::Op::AnswerInputRequest)).
//!
//! Two answers to one request (an approval and a denial posted at once, the terminal and a
//! platform user, two processes on one file) each read the request pending, then commit. The
//! store decides which counts: the update applies only while the row is still `pending`, so the
//! first commit wins and every later one is refused whole (its `approval.settled` event is
//! never written) with the answer that won. The same transaction checks that the other requests
//! of the turn still pending are the ones the caller saw, so of two answers to two requests of
//! one turn exactly one sees the wait resolved. Every commit runs in a `BEGIN IMMEDIATE`
//! transaction (one writer at a time, across processes), so the reads here see every earlier
//! commit.

use rusqlite::{Connection, params};

use super::rows::{one, write};
use crate::store::rows::{self, REQUEST_COLS, to_i64};
use crate::store::{InputRequestRecord, RequestStatus, StoreError, StoreResult};

pub(super) fn settle(
    conn: &Connection,
    request: &InputRequestRecord,
    others_pending: &[String],
) -> StoreResult<()> {
    let changed = write(
        conn,
        "UPDATE input_requests SET status=?2, reason=?3, answered_at=?4, responder=?5 \
         WHERE id=?1 AND status='pending'",
        &rows::answer_values(request),
    )?;
    if changed == 0 {
        let stored = one(
            conn,
            &format!("SELECT {REQUEST_COLS} FROM input_requests WHERE id=?1"),
            [&request.id],
            rows::request,
        )?
        .ok_or_else(|| StoreError::NotFound(format!("input request {}", request.id)))?;
        return Err(StoreError::AlreadyAnswered(Box::new(stored)));
    }
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM input_requests WHERE session_id=?1 AND turn_seq=?2 \
         AND status=?3 AND id<>?4 ORDER BY id",
    )?;
    let pending: Vec<String> = stmt
        .query_map(
            params![
                request.session_id,
                to_i64(request.turn_seq),
                RequestStatus::Pending.as_str(),
                request.id
            ],
            |r| r.get(0),
        )?
        .collect::<Result<_, _>>()?;
    rows::others_unmoved(request, pending, others_pending)
}
