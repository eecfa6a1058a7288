//! SQL of the schedule tables: stored next fire times, fires, and the claim that writes them.
//!
//! A claim ([`ScheduleClaim`]) is a compare-and-set: its conditions are checked, then its rows
//! and the fire's session batch are written, inside one writer transaction.

use rusqlite::{Connection, OptionalExtension, params};

use super::apply::apply;
use super::rows::{all, write};
use crate::store::rows::{self, FIRE_COLS, SCHEDULE_COLS};
use crate::store::{
    Batch, Committed, FireStatus, FireWrite, ScheduleClaim, ScheduleFire, ScheduleState,
    StateExpect, StoreResult, now_ms,
};

/// Stored state of every schedule.
pub(super) fn states(conn: &Connection) -> StoreResult<Vec<ScheduleState>> {
    all(
        conn,
        &format!("SELECT {SCHEDULE_COLS} FROM schedules ORDER BY name"),
        [],
        rows::schedule,
    )
}

/// Fires of one schedule, newest first.
pub(super) fn fires(
    conn: &Connection,
    schedule: &str,
    status: Option<FireStatus>,
    limit: usize,
) -> StoreResult<Vec<ScheduleFire>> {
    let limit = if limit == 0 {
        -1
    } else {
        i64::try_from(limit).unwrap_or(-1)
    };
    all(
        conn,
        &format!(
            "SELECT {FIRE_COLS} FROM schedule_fires WHERE schedule=?1 \
             AND (?2 IS NULL OR status=?2) ORDER BY fire_at DESC, created_at DESC LIMIT ?3"
        ),
        params![schedule, status.map(FireStatus::as_str), limit],
        rows::fire,
    )
}

/// Applies a claim and its batch if every condition holds; `None`, and nothing written, if not.
pub(super) fn claim(
    conn: &Connection,
    claim: &ScheduleClaim,
    batch: Batch,
) -> StoreResult<Option<Committed>> {
    if !claim_holds(conn, claim)? {
        return Ok(None);
    }
    let now = now_ms();
    if let Some((next, spec)) = &claim.next {
        conn.prepare_cached(
            "INSERT INTO schedules (name, spec, next_fire_at, updated_at) \
             VALUES (?1,?2,?3,?4) ON CONFLICT(name) DO UPDATE SET \
             spec=excluded.spec, next_fire_at=excluded.next_fire_at, \
             updated_at=excluded.updated_at",
        )?
        .execute(params![claim.schedule, spec, next, now])?;
    }
    for fire_write in &claim.fires {
        let fire = match fire_write {
            FireWrite::Insert(f) | FireWrite::Promote { to: f, .. } => f,
        };
        write(
            conn,
            &format!(
                "INSERT OR REPLACE INTO schedule_fires ({FIRE_COLS}) \
                 VALUES (?1,?2,?3,?4,?5,?6,?7,?8)"
            ),
            &rows::fire_values(fire, now),
        )?;
    }
    apply(conn, batch).map(Some)
}

/// Whether every condition of a claim holds (checked before anything is written).
fn claim_holds(conn: &Connection, claim: &ScheduleClaim) -> StoreResult<bool> {
    let stored: Option<i64> = conn
        .prepare_cached("SELECT next_fire_at FROM schedules WHERE name=?1")?
        .query_row([&claim.schedule], |r| r.get(0))
        .optional()?;
    let state_ok = match claim.expect {
        StateExpect::Any => true,
        StateExpect::Absent => stored.is_none(),
        StateExpect::Next(t) => stored == Some(t),
    };
    if !state_ok {
        return Ok(false);
    }
    for write in &claim.fires {
        let (fire, wanted) = match write {
            FireWrite::Insert(f) => (f, None),
            FireWrite::Promote { from, to } => (to, Some(*from)),
        };
        let status: Option<String> = conn
            .prepare_cached(
                "SELECT status FROM schedule_fires WHERE schedule=?1 AND fire_at=?2 AND trigger=?3",
            )?
            .query_row(
                params![fire.schedule, fire.fire_at, fire.trigger.as_str()],
                |r| r.get(0),
            )
            .optional()?;
        let ok = match wanted {
            None => status.is_none(),
            Some(from) => status.as_deref() == Some(from.as_str()),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}
