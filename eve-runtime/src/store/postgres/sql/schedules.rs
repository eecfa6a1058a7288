//! SQL of schedules: each schedule's state, its fires, and the claim that records a fire once
//! across the fleet.

use deadpool_postgres::GenericClient;

use super::apply::apply;
use super::rows::all;
use super::{execute, g, limit, query, query_opt, write};
use crate::store::rows::{self, FIRE_COLS, SCHEDULE_COLS};
use crate::store::{
    Batch, Committed, FireStatus, FireWrite, ScheduleClaim, ScheduleFire, ScheduleState,
    StateExpect, StoreResult, now_ms,
};

pub(in crate::store::postgres) async fn schedule_states<C: GenericClient>(
    c: &C,
) -> StoreResult<Vec<ScheduleState>> {
    let rows = query(
        c,
        &format!("SELECT {SCHEDULE_COLS} FROM schedules ORDER BY name"),
        &[],
    )
    .await?;
    all(&rows, rows::schedule)
}

pub(in crate::store::postgres) async fn schedule_fires<C: GenericClient>(
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
    all(&rows, rows::fire)
}

/// A claim's compare-and-set, inside the caller's transaction. Claims of one schedule are
/// serialised by an advisory lock on its name (held to commit), so two nodes racing for one
/// fire (or for a schedule's first state) cannot both see their condition hold.
pub(in crate::store::postgres) async fn claim_schedule<C: GenericClient>(
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
    for fire_write in &claim.fires {
        let fire = match fire_write {
            FireWrite::Insert(f) | FireWrite::Promote { to: f, .. } => f,
        };
        write(
            c,
            &format!(
                "INSERT INTO schedule_fires ({FIRE_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) \
                 ON CONFLICT (schedule, fire_at, trigger) DO UPDATE SET status=excluded.status, \
                 session_id=excluded.session_id, detail=excluded.detail, \
                 created_at=excluded.created_at, updated_at=excluded.updated_at"
            ),
            &rows::fire_values(fire, now),
        )
        .await?;
    }
    apply(c, batch, None, None, None).await.map(Some)
}
