//! Releases ([`crate::store::ReleaseRecord`]) in SQLite: a `releases` table holding each record
//! as JSON (with its status and build in columns), and `release_events`, the releases' audit
//! stream, numbered densely from 0 inside the writer's transaction.

use rusqlite::{Connection, params};

use super::rows::{all, write};
use crate::store::releases::{activate, count_failure};
use crate::store::rows::{self, RELEASE_COLS, RELEASE_EVENT_COLS, to_i64};
use crate::store::{Committed, RELEASE_STREAM, ReleaseOp, ReleaseRecord, StoreResult, StoredEvent};

fn put(conn: &Connection, r: &ReleaseRecord) -> StoreResult<()> {
    write(
        conn,
        &format!(
            "INSERT INTO releases ({RELEASE_COLS}) VALUES (?1,?2,?3,?4,?5) \
             ON CONFLICT (id) DO UPDATE SET build_hash=excluded.build_hash, \
             status=excluded.status, record=excluded.record"
        ),
        &rows::release_values(r)?,
    )?;
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
            let r = count_failure(releases(conn)?, &id)?;
            put(conn, &r)?;
        }
        ReleaseOp::Event { kind, data } => {
            let index: i64 = conn
                .prepare_cached("SELECT COALESCE(MAX(idx) + 1, 0) FROM release_events")?
                .query_row([], |r| r.get(0))?;
            let event = rows::new_event(
                RELEASE_STREAM.to_owned(),
                rows::to_u64(index),
                kind,
                data,
                now,
            );
            write(
                conn,
                &format!(
                    "INSERT INTO release_events ({RELEASE_EVENT_COLS}) VALUES (?1,?2,?3,?4,?5)"
                ),
                &rows::release_event_values(&event)?,
            )?;
            committed.events.push(event);
        }
    }
    Ok(())
}

/// Every release, oldest first.
pub(super) fn releases(conn: &Connection) -> StoreResult<Vec<ReleaseRecord>> {
    all(
        conn,
        &format!("SELECT {RELEASE_COLS} FROM releases ORDER BY created_at, id"),
        [],
        rows::release,
    )
}

/// Release events from `from` on, at most `limit`.
pub(super) fn events(conn: &Connection, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    all(
        conn,
        &format!(
            "SELECT {RELEASE_EVENT_COLS} FROM release_events WHERE idx >= ?1 ORDER BY idx LIMIT ?2"
        ),
        params![to_i64(from), limit],
        rows::release_event,
    )
}
