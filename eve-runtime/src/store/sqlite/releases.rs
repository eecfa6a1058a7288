//! Releases ([`crate::store::ReleaseRecord`]) in SQLite: a `releases` table holding each record
//! as JSON (with its status and build in columns), and `release_events`, the releases' audit
//! stream, numbered densely from 0 inside the writer's transaction.

use rusqlite::{Connection, params};

use super::rows::{to_i64, to_u64};
use crate::store::releases::activate;
use crate::store::{
    Committed, RELEASE_STREAM, ReleaseOp, ReleaseRecord, StoreError, StoreResult, StoredEvent,
};

fn put(conn: &Connection, r: &ReleaseRecord) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO releases (id, build_hash, status, created_at, record) VALUES (?1,?2,?3,?4,?5) \
         ON CONFLICT (id) DO UPDATE SET build_hash=excluded.build_hash, status=excluded.status, \
         record=excluded.record",
    )?
    .execute(params![
        r.id,
        r.build_hash,
        r.status.as_str(),
        r.created_at,
        serde_json::to_string(r)?
    ])?;
    Ok(())
}

pub(super) fn apply(
    conn: &Connection,
    op: ReleaseOp,
    now: i64,
    committed: &mut Committed,
) -> StoreResult<()> {
    match op {
        ReleaseOp::Put(r) => put(conn, &r)?,
        ReleaseOp::Activate {
            id,
            demote,
            reason,
            at,
            by,
        } => {
            let rows = releases(conn)?;
            for r in activate(&rows, &id, demote, reason.as_deref(), at, &by)? {
                put(conn, &r)?;
            }
        }
        ReleaseOp::CountFailure { id } => {
            let mut r = releases(conn)?
                .into_iter()
                .find(|r| r.id == id)
                .ok_or_else(|| StoreError::NotFound(format!("release {id}")))?;
            r.failures += 1;
            put(conn, &r)?;
        }
        ReleaseOp::Event { kind, data } => {
            let index: i64 = conn
                .prepare_cached("SELECT COALESCE(MAX(idx) + 1, 0) FROM release_events")?
                .query_row([], |r| r.get(0))?;
            let id = format!("evt_{}", ulid::Ulid::new());
            conn.prepare_cached(
                "INSERT INTO release_events (idx, id, type, data, at) VALUES (?1,?2,?3,?4,?5)",
            )?
            .execute(params![index, id, kind, serde_json::to_string(&data)?, now])?;
            committed.events.push(StoredEvent {
                session_id: RELEASE_STREAM.to_owned(),
                index: to_u64(index),
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
pub(super) fn releases(conn: &Connection) -> StoreResult<Vec<ReleaseRecord>> {
    let mut stmt = conn.prepare_cached("SELECT record FROM releases ORDER BY created_at, id")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for text in rows {
        out.push(serde_json::from_str(&text?)?);
    }
    Ok(out)
}

/// Release events from `from` on, at most `limit`.
pub(super) fn events(conn: &Connection, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT idx, id, type, data, at FROM release_events WHERE idx >= ?1 ORDER BY idx LIMIT ?2",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![to_i64(from), limit], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (idx, id, kind, data, at) = row?;
        out.push(StoredEvent {
            session_id: RELEASE_STREAM.to_owned(),
            index: to_u64(idx),
            id,
            kind,
            data: serde_json::from_str(&data)?,
            at,
        });
    }
    Ok(out)
}
