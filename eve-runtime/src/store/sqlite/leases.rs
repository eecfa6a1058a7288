//! SQL of session leases: who drives a session, until when, under which fencing token.
//!
//! One row per session names the holder (a unique id per driver), its process, its expiry and a
//! fencing token that grows with every new holder (a released lease keeps its row, holder
//! emptied, so the token never goes back). Whether an unexpired holder is dead is not decided
//! here: the store's [`Liveness`] policy says. [`check_fences`] runs inside a batch's transaction.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{one, write};
use crate::store::rows::{self, LEASE_COLS, LEASE_WRITE_COLS};
use crate::store::{
    Fence, LeaseClaim, LeaseOutcome, LeaseRecord, LeaseTaken, Liveness, ProcessRef, StoreError,
    StoreResult, now_ms,
};

/// Takes the lease for `claim.holder` if it is free, expired, ours, or its holder is dead.
pub(super) fn acquire(
    conn: &Connection,
    claim: &LeaseClaim,
    liveness: &dyn Liveness,
) -> StoreResult<LeaseOutcome> {
    Ok(match take(conn, claim, liveness, false)? {
        LeaseTaken::Acquired { .. } | LeaseTaken::NoSession => LeaseOutcome::Acquired,
        LeaseTaken::HeldBy { pid, host } => LeaseOutcome::HeldBy { pid, host },
    })
}

/// [`acquire`], answering with the token the lease is held under; with `session_only`, only
/// for an existing session (otherwise nothing is written).
pub(super) fn take(
    conn: &Connection,
    claim: &LeaseClaim,
    liveness: &dyn Liveness,
    session_only: bool,
) -> StoreResult<LeaseTaken> {
    if session_only
        && conn
            .prepare_cached("SELECT 1 FROM sessions WHERE id=?1")?
            .query_row([&claim.session_id], |_| Ok(()))
            .optional()?
            .is_none()
    {
        return Ok(LeaseTaken::NoSession);
    }
    let now = now_ms();
    let current = lease(conn, &claim.session_id)?;
    let mut token = 1u64;
    if let Some(current) = current {
        let ours = current.holder == claim.holder;
        let expired = current.expires_at < now || current.holder.is_empty();
        let holder = ProcessRef {
            pid: current.pid,
            host: current.host,
        };
        let claimant = ProcessRef {
            pid: claim.pid,
            host: claim.host.clone(),
        };
        if !ours && !expired && !liveness.lease_holder_dead(&holder, &claimant) {
            return Ok(LeaseTaken::HeldBy {
                pid: holder.pid,
                host: holder.host,
            });
        }
        token = if ours {
            current.token
        } else {
            current.token.saturating_add(1)
        };
    }
    let mut values = rows::lease_values(claim, now);
    values.push(token.into());
    write(
        conn,
        &format!(
            "INSERT OR REPLACE INTO leases ({LEASE_WRITE_COLS}) VALUES (?1,?2,?3,?4,?5,?6,?7)"
        ),
        &values,
    )?;
    Ok(LeaseTaken::Acquired { token })
}

/// Extends the lease if `claim.holder` still holds it.
pub(super) fn renew(conn: &Connection, claim: &LeaseClaim) -> StoreResult<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE leases SET expires_at=?3 WHERE session_id=?1 AND holder=?2 AND holder<>''",
        )?
        .execute(params![
            claim.session_id,
            claim.holder,
            now_ms().saturating_add(claim.ttl_ms)
        ])?;
    Ok(n > 0)
}

/// Frees the lease if `holder` holds it (the row and its token stay).
pub(super) fn release(conn: &Connection, session: &str, holder: &str) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE leases SET holder='', expires_at=0 WHERE session_id=?1 AND holder=?2",
    )?
    .execute(params![session, holder])?;
    Ok(())
}

/// The stored lease of a session.
pub(super) fn lease(conn: &Connection, session: &str) -> StoreResult<Option<LeaseRecord>> {
    one(
        conn,
        &format!("SELECT {LEASE_COLS} FROM leases WHERE session_id=?1"),
        [session],
        rows::lease,
    )
}

/// Refuses the batch when a session it speaks for has a lease holder newer than its fence.
pub(super) fn check_fences(conn: &Connection, fences: &[Fence]) -> StoreResult<()> {
    for fence in fences {
        let current: Option<i64> = conn
            .prepare_cached("SELECT token FROM leases WHERE session_id=?1")?
            .query_row([&fence.session_id], |r| r.get(0))
            .optional()?;
        let current = current.map_or(0, |t| u64::try_from(t).unwrap_or(0));
        if current > fence.token {
            return Err(StoreError::Fenced {
                session: fence.session_id.clone(),
                ours: fence.token,
                current,
            });
        }
    }
    Ok(())
}
