//! SQL of session leases: who drives a session, until when, under which fencing token, and
//! the fence check a batch runs before its writes.
//!
//! A lease is taken in a transaction of its own ([`acquire`]); whether an unexpired holder is
//! dead is the store's [`Liveness`] policy. [`check_fences`] refuses a batch whose session has
//! a newer holder, inside the batch's transaction.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::pipeline::{Planned, Then, run_planned};
use super::rows::{bind, opt};
use super::{
    FENCE_SQL, LEASE_INSERT_SQL, LEASE_LOCK_SQL, LEASE_SQL, LEASE_TAKE_SQL, RELEASE_SQL,
    SESSION_EXISTS_SQL, execute, query, query_opt,
};
use crate::store::rows::{self, cells};
use crate::store::{
    Committed, Fence, LeaseClaim, LeaseOutcome, LeaseRecord, LeaseTaken, Liveness, ProcessRef,
    StoreResult, now_ms,
};

/// The fence check of one session: the lease row is read `FOR KEY SHARE`: a renewal (a plain
/// update) does not wait for it, but a takeover (which locks the row `FOR UPDATE`) cannot
/// happen between this check and the commit.
pub(super) fn fence_planned(fence: &Fence) -> Planned {
    Planned::new(
        FENCE_SQL,
        cells![&fence.session_id, fence.token],
        Then::Fence(fence.clone()),
    )
}

/// Refuses the batch when a session it speaks for has a newer lease holder (see
/// [`fence_planned`]); all the fences in one round trip.
pub(in crate::store::postgres) async fn check_fences<C: GenericClient>(
    c: &C,
    fences: &[Fence],
) -> StoreResult<()> {
    let mut plan: Vec<Planned> = fences.iter().map(fence_planned).collect();
    run_planned(c, None, &mut plan, &mut Committed::default(), None).await
}

pub(in crate::store::postgres) async fn lease<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<LeaseRecord>> {
    opt(query_opt(c, &LEASE_SQL, &[&session]).await?, rows::lease)
}

/// Takes the lease in a transaction of its own on `c` (a pooled connection outside any
/// transaction), in two round trips: `BEGIN`, the insert of a free session's row and the lock
/// of an existing one travel together, then the takeover's update with `COMMIT` (or
/// `ROLLBACK`). A free session's row is inserted (a concurrent insert of the same session
/// waits, then finds the row); an existing row is locked `FOR UPDATE SKIP LOCKED`, so a
/// claimant never queues behind another claim or a commit in flight: it is told the session
/// is held and moves on. A new holder takes a new token from the `lease_tokens` sequence
/// (never reused, so it only grows). Returns whether the transaction was committed; on an
/// error it is left open (the caller drops the connection).
pub(in crate::store::postgres) async fn acquire(
    c: &deadpool_postgres::Client,
    claim: &LeaseClaim,
    liveness: &dyn Liveness,
) -> StoreResult<LeaseOutcome> {
    Ok(match take(c, claim, liveness, false).await? {
        LeaseTaken::Acquired { .. } | LeaseTaken::NoSession => LeaseOutcome::Acquired,
        LeaseTaken::HeldBy { pid, host } => LeaseOutcome::HeldBy { pid, host },
    })
}

/// [`acquire`], answering with the token the lease is held under (returned by the insert or
/// the takeover, no extra round trip); with `session_only`, only for an existing session: the
/// check travels with the insert, and a missing session rolls the transaction back.
pub(in crate::store::postgres) async fn take(
    c: &deadpool_postgres::Client,
    claim: &LeaseClaim,
    liveness: &dyn Liveness,
    session_only: bool,
) -> StoreResult<LeaseTaken> {
    let now = now_ms();
    let (insert, select, exists) = futures::try_join!(
        c.prepare_cached(LEASE_INSERT_SQL,),
        c.prepare_cached(&LEASE_LOCK_SQL),
        c.prepare_cached(SESSION_EXISTS_SQL),
    )?;
    let cells = rows::lease_values(claim, now);
    let values = bind(&cells);
    let key: [&(dyn ToSql + Sync); 1] = [&claim.session_id];
    let found = async {
        if session_only {
            Ok(c.query_opt(&exists, &key).await?.is_some())
        } else {
            Ok::<bool, tokio_postgres::Error>(true)
        }
    };
    // `join!` polls in order: BEGIN, then the session check, the insert, then the lock.
    let (begun, found, inserted, locked) = futures::join!(
        c.batch_execute("BEGIN"),
        found,
        c.query_opt(&insert, &values),
        c.query_opt(&select, &key),
    );
    begun?;
    let (found, inserted, locked) = (found?, inserted?, locked?);
    if !found {
        c.batch_execute("ROLLBACK").await?;
        return Ok(LeaseTaken::NoSession);
    }
    if let Some(row) = inserted {
        c.batch_execute("COMMIT").await?;
        return Ok(LeaseTaken::Acquired {
            token: crate::store::rows::to_u64(row.try_get::<_, i64>(0)?),
        });
    }
    let held = |pid: u32, host: String| LeaseTaken::HeldBy { pid, host };
    let Some(row) = locked else {
        // Another node is claiming it or committing under it right now.
        let (current, ended) =
            futures::join!(lease(c, &claim.session_id), c.batch_execute("ROLLBACK"));
        ended?;
        let current = current?;
        return Ok(held(
            current.as_ref().map_or(0, |l| l.pid),
            current.map(|l| l.host).unwrap_or_default(),
        ));
    };
    let current = rows::lease(&row)?;
    let ours = current.holder == claim.holder;
    let free = current.holder.is_empty() || current.expires_at < now;
    let holder = ProcessRef {
        pid: current.pid,
        host: current.host.clone(),
    };
    let claimant = ProcessRef {
        pid: claim.pid,
        host: claim.host.clone(),
    };
    if !ours && !free && !liveness.lease_holder_dead(&holder, &claimant) {
        c.batch_execute("ROLLBACK").await?;
        return Ok(held(holder.pid, holder.host));
    }
    let update = c.prepare_cached(LEASE_TAKE_SQL).await?;
    let (updated, ended) = futures::join!(c.query_one(&update, &values), c.batch_execute("COMMIT"));
    // A failed update aborts the transaction, and its COMMIT then rolls it back.
    let updated = updated?;
    ended?;
    Ok(LeaseTaken::Acquired {
        token: crate::store::rows::to_u64(updated.try_get::<_, i64>(0)?),
    })
}

pub(in crate::store::postgres) async fn renew<C: GenericClient>(
    c: &C,
    claim: &LeaseClaim,
) -> StoreResult<bool> {
    let n = execute(
        c,
        "UPDATE leases SET expires_at=$3 WHERE session_id=$1 AND holder=$2 AND holder<>''",
        &[
            &claim.session_id,
            &claim.holder,
            &now_ms().saturating_add(claim.ttl_ms),
        ],
    )
    .await?;
    Ok(n > 0)
}

/// Releases the lease and notifies the fleet (a released session may have work left: another
/// node may take it at once), in one statement, so one round trip.
pub(in crate::store::postgres) async fn release<C: GenericClient>(
    c: &C,
    session: &str,
    holder: &str,
    notify: (&str, &str),
) -> StoreResult<()> {
    query(c, RELEASE_SQL, &[&session, &holder, &notify.0, &notify.1]).await?;
    Ok(())
}
