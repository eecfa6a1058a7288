//! SQL of session leases: who drives a session, until when.
//!
//! One row per session names the holder (a unique id per driver), its process and its expiry.
//! Whether an unexpired holder is dead is not decided here: the store's [`Liveness`] policy says.

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::{LeaseClaim, LeaseOutcome, Liveness, ProcessRef, StoreResult, now_ms};

/// Takes the lease for `claim.holder` if it is free, expired, ours, or its holder is dead.
pub(super) fn acquire(
    conn: &Connection,
    claim: &LeaseClaim,
    liveness: &dyn Liveness,
) -> StoreResult<LeaseOutcome> {
    let now = now_ms();
    let current: Option<(String, u32, String, i64)> = conn
        .prepare_cached("SELECT holder, pid, host, expires_at FROM leases WHERE session_id=?1")?
        .query_row([&claim.session_id], |r| {
            Ok((
                r.get(0)?,
                u32::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                r.get(2)?,
                r.get(3)?,
            ))
        })
        .optional()?;
    if let Some((holder, pid, host, expires_at)) = current {
        let ours = holder == claim.holder;
        let expired = expires_at < now;
        let holder = ProcessRef { pid, host };
        let claimant = ProcessRef {
            pid: claim.pid,
            host: claim.host.clone(),
        };
        if !ours && !expired && !liveness.lease_holder_dead(&holder, &claimant) {
            return Ok(LeaseOutcome::HeldBy {
                pid: holder.pid,
                host: holder.host,
            });
        }
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO leases (session_id, holder, pid, host, expires_at, \
         acquired_at) VALUES (?1,?2,?3,?4,?5,?6)",
    )?
    .execute(params![
        claim.session_id,
        claim.holder,
        i64::from(claim.pid),
        claim.host,
        now.saturating_add(claim.ttl_ms),
        now
    ])?;
    Ok(LeaseOutcome::Acquired)
}

/// Extends the lease if `claim.holder` still holds it.
pub(super) fn renew(conn: &Connection, claim: &LeaseClaim) -> StoreResult<bool> {
    let n = conn
        .prepare_cached("UPDATE leases SET expires_at=?3 WHERE session_id=?1 AND holder=?2")?
        .execute(params![
            claim.session_id,
            claim.holder,
            now_ms().saturating_add(claim.ttl_ms)
        ])?;
    Ok(n > 0)
}

/// Deletes the lease if `holder` holds it.
pub(super) fn release(conn: &Connection, session: &str, holder: &str) -> StoreResult<()> {
    conn.prepare_cached("DELETE FROM leases WHERE session_id=?1 AND holder=?2")?
        .execute(params![session, holder])?;
    Ok(())
}
