//! Releases ([`crate::store::ReleaseRecord`]) in PostgreSQL: the same two tables as SQLite.
//! Nodes of a fleet may activate at once, so the writes that read before they write (an
//! activation, the next event index) first lock their table for the transaction: one release is
//! active at a time and the audit stream's indexes stay dense.

use deadpool_postgres::GenericClient;

use super::sql::{all, bind};
use crate::store::releases::{activate, count_failure};
use crate::store::rows::{self, Cell, RELEASE_COLS, RELEASE_EVENT_COLS, to_i64, to_u64};
use crate::store::{Committed, RELEASE_STREAM, ReleaseOp, ReleaseRecord, StoreResult, StoredEvent};

async fn write<C: GenericClient>(c: &C, sql: &str, values: &[Cell]) -> StoreResult<u64> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, &bind(values)).await?)
}

async fn put<C: GenericClient>(c: &C, r: &ReleaseRecord) -> StoreResult<()> {
    write(
        c,
        &format!(
            "INSERT INTO releases ({RELEASE_COLS}) VALUES ($1,$2,$3,$4,$5) \
             ON CONFLICT (id) DO UPDATE SET build_hash=excluded.build_hash, \
             status=excluded.status, record=excluded.record"
        ),
        &rows::release_values(r)?,
    )
    .await?;
    Ok(())
}

pub(super) async fn apply<C: GenericClient>(
    c: &C,
    op: ReleaseOp,
    now: i64,
    committed: &mut Committed,
) -> StoreResult<()> {
    match op {
        ReleaseOp::Put(r) => put(c, &r).await?,
        ReleaseOp::Activate {
            id,
            demote,
            reason,
            at,
            by,
        } => {
            c.batch_execute("LOCK TABLE releases IN SHARE ROW EXCLUSIVE MODE")
                .await?;
            let rows = releases(c).await?;
            for r in activate(&rows, &id, demote, reason.as_deref(), at, &by)? {
                put(c, &r).await?;
            }
        }
        ReleaseOp::CountFailure { id } => {
            c.batch_execute("LOCK TABLE releases IN SHARE ROW EXCLUSIVE MODE")
                .await?;
            let r = count_failure(releases(c).await?, &id)?;
            put(c, &r).await?;
        }
        ReleaseOp::Event { kind, data } => {
            c.batch_execute("LOCK TABLE release_events IN SHARE ROW EXCLUSIVE MODE")
                .await?;
            let stmt = c
                .prepare_cached("SELECT COALESCE(MAX(idx) + 1, 0) FROM release_events")
                .await?;
            let index: i64 = c.query_one(&stmt, &[]).await?.try_get(0)?;
            let event = rows::new_event(RELEASE_STREAM.to_owned(), to_u64(index), kind, data, now);
            write(
                c,
                &format!(
                    "INSERT INTO release_events ({RELEASE_EVENT_COLS}) VALUES ($1,$2,$3,$4,$5)"
                ),
                &rows::release_event_values(&event)?,
            )
            .await?;
            committed.events.push(event);
        }
    }
    Ok(())
}

/// Every release, oldest first.
pub(super) async fn releases<C: GenericClient>(c: &C) -> StoreResult<Vec<ReleaseRecord>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {RELEASE_COLS} FROM releases ORDER BY created_at, id"
        ))
        .await?;
    all(&c.query(&stmt, &[]).await?, rows::release)
}

/// Release events from `from` on, at most `limit`.
pub(super) async fn events<C: GenericClient>(
    c: &C,
    from: u64,
    limit: usize,
) -> StoreResult<Vec<StoredEvent>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {RELEASE_EVENT_COLS} FROM release_events WHERE idx >= $1 \
             ORDER BY idx LIMIT $2"
        ))
        .await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    all(
        &c.query(&stmt, &[&to_i64(from), &limit]).await?,
        rows::release_event,
    )
}
