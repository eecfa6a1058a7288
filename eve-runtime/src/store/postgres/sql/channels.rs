//! SQL of the platform channels: delivery ids remembered with the inbox message, and replies
//! owed.
//!
//! The rows are described in [`crate::store::ChannelReplyRecord`] and
//! [`crate::store::ChannelAccept`]; this module writes and reads them inside the PostgreSQL
//! store's transactions, claims deciding once across the fleet under row locks.

use deadpool_postgres::GenericClient;

use super::rows::{all, opt};
use super::{execute, i, query, query_opt, write};
use crate::store::rows::{self, REPLY_COLS};
use crate::store::{
    CHANNEL_ROWS_KEPT_MS, ChannelAccept, ChannelReplyRecord, ChannelReplyUpdate, Liveness,
    ProcessRef, ReplyClaim, ReplyHeld, Sending, StoreResult,
};

/// Remembers a delivery id (a concurrent accept of the same delivery on another node waits on
/// the unique key, then finds it); `false` when it was already accepted.
pub(in crate::store::postgres) async fn claim_delivery<C: GenericClient>(
    c: &C,
    accept: &ChannelAccept,
    now: i64,
) -> StoreResult<bool> {
    let Some(delivery) = &accept.delivery else {
        return Ok(true);
    };
    let inserted = execute(
        c,
        "INSERT INTO channel_deliveries (channel, delivery_id, accepted_at) VALUES ($1,$2,$3) \
         ON CONFLICT DO NOTHING",
        &[&delivery.channel, &delivery.delivery_id, &now],
    )
    .await?;
    if inserted == 0 {
        return Ok(false);
    }
    execute(
        c,
        "DELETE FROM channel_deliveries WHERE accepted_at < $1",
        &[&now.saturating_sub(CHANNEL_ROWS_KEPT_MS)],
    )
    .await?;
    Ok(true)
}

pub(in crate::store::postgres) async fn insert_reply<C: GenericClient>(
    c: &C,
    accept: &ChannelAccept,
    now: i64,
) -> StoreResult<()> {
    let Some(r) = &accept.reply else {
        return Ok(());
    };
    write(
        c,
        &format!(
            "INSERT INTO channel_replies ({REPLY_COLS}) \
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$11,$12,$13,$14) \
             ON CONFLICT (inbox_id) DO UPDATE SET \
             channel=excluded.channel, session_id=excluded.session_id, \
             from_index=excluded.from_index, address=excluded.address, \
             announced=excluded.announced, done=excluded.done, detail=excluded.detail, \
             owner_pid=excluded.owner_pid, owner_host=excluded.owner_host, \
             created_at=excluded.created_at, updated_at=excluded.updated_at, \
             owner_token=excluded.owner_token, owner_expires_at=excluded.owner_expires_at, \
             sending=excluded.sending"
        ),
        &rows::reply_insert(r, now)?,
    )
    .await?;
    execute(
        c,
        "DELETE FROM channel_replies WHERE done AND updated_at < $1",
        &[&now.saturating_sub(CHANNEL_ROWS_KEPT_MS)],
    )
    .await?;
    Ok(())
}

pub(in crate::store::postgres) async fn replies<C: GenericClient>(
    c: &C,
    pending_only: bool,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let rows = query(
        c,
        &format!(
            "SELECT {REPLY_COLS} FROM channel_replies WHERE (NOT $1 OR NOT done) \
             ORDER BY created_at, inbox_id"
        ),
        &[&pending_only],
    )
    .await?;
    all(&rows, rows::reply)
}

pub(in crate::store::postgres) async fn reply<C: GenericClient>(
    c: &C,
    inbox_id: &str,
) -> StoreResult<Option<ChannelReplyRecord>> {
    let row = query_opt(
        c,
        &format!("SELECT {REPLY_COLS} FROM channel_replies WHERE inbox_id=$1"),
        &[&inbox_id],
    )
    .await?;
    opt(row, rows::reply)
}

/// Takes the owed replies `claim` says, inside the caller's transaction, each with a new token
/// and a fresh hold; rows another node is taking at the same moment are skipped (`SKIP LOCKED`),
/// so each is taken once. Only rows whose hold lapsed are read unless owners judged gone by
/// `liveness` are wanted too.
pub(in crate::store::postgres) async fn claim_replies<C: GenericClient>(
    c: &C,
    claim: &ReplyClaim,
    liveness: &dyn Liveness,
    now: i64,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let me = ProcessRef {
        pid: claim.pid,
        host: claim.host.clone(),
    };
    let rows = query(
        c,
        &format!(
            "SELECT {REPLY_COLS} FROM channel_replies WHERE NOT done \
             AND (NOT $1 OR owner_expires_at <= $2) AND NOT (inbox_id = ANY($3)) \
             ORDER BY created_at, inbox_id FOR UPDATE SKIP LOCKED"
        ),
        &[&claim.expired_only, &now, &claim.skip],
    )
    .await?;
    let mut taken = Vec::new();
    for mut r in all(&rows, rows::reply)? {
        let owner = ProcessRef {
            pid: r.owner_pid,
            host: r.owner_host.clone(),
        };
        if r.owner_expires_at > now && !liveness.reply_owner_gone(&owner, &me) {
            continue;
        }
        rows::take_reply(&mut r, claim, now);
        write(
            c,
            "UPDATE channel_replies SET owner_pid=$2, owner_host=$3, updated_at=$4, \
             owner_token=$5, owner_expires_at=$6 WHERE inbox_id=$1",
            &rows::reply_owner(&r),
        )
        .await?;
        taken.push(r);
    }
    Ok(taken)
}

/// Renews the holds of the owed replies in `held` (one statement); returns how many.
pub(in crate::store::postgres) async fn renew_replies<C: GenericClient>(
    c: &C,
    held: &[ReplyHeld],
    ttl_ms: i64,
    now: i64,
) -> StoreResult<usize> {
    if held.is_empty() {
        return Ok(0);
    }
    let ids: Vec<&str> = held.iter().map(|h| h.inbox_id.as_str()).collect();
    let tokens: Vec<i64> = held.iter().map(|h| i(h.token)).collect();
    let renewed = execute(
        c,
        "UPDATE channel_replies r SET owner_expires_at=$3 \
         FROM unnest($1::text[], $2::bigint[]) AS h(inbox_id, token) \
         WHERE r.inbox_id = h.inbox_id AND r.owner_token = h.token AND NOT r.done",
        &[&ids, &tokens, &now.saturating_add(ttl_ms)],
    )
    .await?;
    Ok(usize::try_from(renewed).unwrap_or(usize::MAX))
}

/// Records that `held`'s owner starts sending `sending`; `false` when it no longer holds it.
pub(in crate::store::postgres) async fn start_send<C: GenericClient>(
    c: &C,
    held: &ReplyHeld,
    sending: &Sending,
    ttl_ms: i64,
    now: i64,
) -> StoreResult<bool> {
    let changed = write(
        c,
        "UPDATE channel_replies SET sending=$3, owner_expires_at=$4, updated_at=$5 \
         WHERE inbox_id=$1 AND owner_token=$2 AND NOT done",
        &rows::send_values(held, sending, now.saturating_add(ttl_ms), now)?,
    )
    .await?;
    Ok(changed == 1)
}

pub(in crate::store::postgres) async fn update_reply<C: GenericClient>(
    c: &C,
    update: &ChannelReplyUpdate,
    now: i64,
) -> StoreResult<()> {
    write(
        c,
        "UPDATE channel_replies SET address=$2, announced=$3, done=$4, detail=$5, updated_at=$6, \
         sending=NULL WHERE inbox_id=$1 AND NOT done",
        &rows::reply_update(update, now)?,
    )
    .await?;
    Ok(())
}
