//! Releases ([`crate::store::ReleaseRecord`]) in PostgreSQL: the same two tables as SQLite.
//! Nodes of a fleet may activate at once, so the writes that read before they write (an
//! activation, the next event index) first lock their table for the transaction: one release is
//! active at a time and the audit stream's indexes stay dense.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::store::releases::activate;
use crate::store::{
    Committed, RELEASE_STREAM, ReleaseOp, ReleaseRecord, StoreError, StoreResult, StoredEvent,
};

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

async fn execute<C: GenericClient>(c: &C, sql: &str, params: Params<'_>) -> StoreResult<u64> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, params).await?)
}

async fn put<C: GenericClient>(c: &C, r: &ReleaseRecord) -> StoreResult<()> {
    execute(
        c,
        "INSERT INTO releases (id, build_hash, status, created_at, record) VALUES ($1,$2,$3,$4,$5) \
         ON CONFLICT (id) DO UPDATE SET build_hash=excluded.build_hash, status=excluded.status, \
         record=excluded.record",
        &[
            &r.id,
            &r.build_hash,
            &r.status.as_str(),
            &r.created_at,
            &serde_json::to_string(r)?,
        ],
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
            let mut r = releases(c)
                .await?
                .into_iter()
                .find(|r| r.id == id)
                .ok_or_else(|| StoreError::NotFound(format!("release {id}")))?;
            r.failures += 1;
            put(c, &r).await?;
        }
        ReleaseOp::Event { kind, data } => {
            c.batch_execute("LOCK TABLE release_events IN SHARE ROW EXCLUSIVE MODE")
                .await?;
            let stmt = c
                .prepare_cached("SELECT COALESCE(MAX(idx) + 1, 0) FROM release_events")
                .await?;
            let index: i64 = c.query_one(&stmt, &[]).await?.try_get(0)?;
            let id = format!("evt_{}", ulid::Ulid::new());
            execute(
                c,
                "INSERT INTO release_events (idx, id, type, data, at) VALUES ($1,$2,$3,$4,$5)",
                &[&index, &id, &kind, &serde_json::to_string(&data)?, &now],
            )
            .await?;
            committed.events.push(StoredEvent {
                session_id: RELEASE_STREAM.to_owned(),
                index: u64::try_from(index).unwrap_or(0),
                id,
                kind,
                data,
                at: now,
            });
        }
    }
    Ok(())
}

/// Every release, oldest first.
pub(super) async fn releases<C: GenericClient>(c: &C) -> StoreResult<Vec<ReleaseRecord>> {
    let stmt = c
        .prepare_cached("SELECT record FROM releases ORDER BY created_at, id")
        .await?;
    let mut out = Vec::new();
    for row in c.query(&stmt, &[]).await? {
        let text: String = row.try_get(0)?;
        out.push(serde_json::from_str(&text)?);
    }
    Ok(out)
}

/// Release events from `from` on, at most `limit`.
pub(super) async fn events<C: GenericClient>(
    c: &C,
    from: u64,
    limit: usize,
) -> StoreResult<Vec<StoredEvent>> {
    let stmt = c
        .prepare_cached(
            "SELECT idx, id, type, data, at FROM release_events WHERE idx >= $1 \
             ORDER BY idx LIMIT $2",
        )
        .await?;
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    for row in c.query(&stmt, &[&from, &limit]).await? {
        let idx: i64 = row.try_get(0)?;
        let data: String = row.try_get(3)?;
        out.push(StoredEvent {
            session_id: RELEASE_STREAM.to_owned(),
            index: u64::try_from(idx).unwrap_or(0),
            id: row.try_get(1)?,
            kind: row.try_get(2)?,
            data: serde_json::from_str(&data)?,
            at: row.try_get(4)?,
        });
    }
    Ok(out)
}
