//! SQL of the platform channels: delivery ids remembered with the inbox message, and replies owed.
//!
//! The rows are described in [`crate::store::ChannelReplyRecord`] and [`crate::store::ChannelAccept`];
//! this module writes and reads them inside the SQLite store's transactions.

use rusqlite::{Connection, params};

use super::rows::{all, one, write};
use crate::store::rows::{self, REPLY_COLS, to_i64};
use crate::store::{
    CHANNEL_ROWS_KEPT_MS, ChannelAccept, ChannelReplyRecord, ChannelReplyUpdate, Liveness,
    ProcessRef, ReplyClaim, ReplyHeld, Sending, StoreResult,
};

/// Remembers `accept`'s delivery, forgetting those older than a day. `false` (and nothing
/// written) when the delivery was already accepted.
pub(super) fn claim_delivery(
    conn: &Connection,
    accept: &ChannelAccept,
    now: i64,
) -> StoreResult<bool> {
    let Some(delivery) = &accept.delivery else {
        return Ok(true);
    };
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO channel_deliveries (channel, delivery_id, accepted_at) \
             VALUES (?1,?2,?3)",
        )?
        .execute(params![delivery.channel, delivery.delivery_id, now])?;
    if inserted == 0 {
        return Ok(false);
    }
    conn.prepare_cached("DELETE FROM channel_deliveries WHERE accepted_at < ?1")?
        .execute([now.saturating_sub(CHANNEL_ROWS_KEPT_MS)])?;
    Ok(true)
}

/// Writes `accept`'s reply, forgetting replies done more than a day ago.
pub(super) fn insert_reply(conn: &Connection, accept: &ChannelAccept, now: i64) -> StoreResult<()> {
    let Some(r) = &accept.reply else {
        return Ok(());
    };
    write(
        conn,
        &format!(
            "INSERT OR REPLACE INTO channel_replies ({REPLY_COLS}) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?11,?12,?13,?14)"
        ),
        &rows::reply_insert(r, now)?,
    )?;
    conn.prepare_cached("DELETE FROM channel_replies WHERE done = 1 AND updated_at < ?1")?
        .execute([now.saturating_sub(CHANNEL_ROWS_KEPT_MS)])?;
    Ok(())
}

/// Replies (only those still owed when `pending_only`), oldest first.
pub(super) fn replies(
    conn: &Connection,
    pending_only: bool,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let sql = format!(
        "SELECT {REPLY_COLS} FROM channel_replies {} ORDER BY created_at, inbox_id",
        if pending_only { "WHERE done = 0" } else { "" }
    );
    all(conn, &sql, [], rows::reply)
}

/// One reply.
pub(super) fn reply(conn: &Connection, inbox_id: &str) -> StoreResult<Option<ChannelReplyRecord>> {
    one(
        conn,
        &format!("SELECT {REPLY_COLS} FROM channel_replies WHERE inbox_id=?1"),
        [inbox_id],
        rows::reply,
    )
}

/// Takes the owed replies `claim` says (hold lapsed, or owner gone as `liveness` judges unless
/// only lapsed holds are wanted), each with a new token and a fresh hold. Returns them, now ours.
pub(super) fn claim_replies(
    conn: &Connection,
    claim: &ReplyClaim,
    liveness: &dyn Liveness,
    now: i64,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let me = ProcessRef {
        pid: claim.pid,
        host: claim.host.clone(),
    };
    let mut taken = Vec::new();
    for mut r in replies(conn, true)? {
        if claim.skip.contains(&r.inbox_id) {
            continue;
        }
        let owner = ProcessRef {
            pid: r.owner_pid,
            host: r.owner_host.clone(),
        };
        let lapsed = r.owner_expires_at <= now;
        if !lapsed && (claim.expired_only || !liveness.reply_owner_gone(&owner, &me)) {
            continue;
        }
        rows::take_reply(&mut r, claim, now);
        write(
            conn,
            "UPDATE channel_replies SET owner_pid=?2, owner_host=?3, updated_at=?4, \
             owner_token=?5, owner_expires_at=?6 WHERE inbox_id=?1",
            &rows::reply_owner(&r),
        )?;
        taken.push(r);
    }
    Ok(taken)
}

/// Renews the holds of the owed replies in `held`; returns how many were renewed.
pub(super) fn renew_replies(
    conn: &Connection,
    held: &[ReplyHeld],
    ttl_ms: i64,
    now: i64,
) -> StoreResult<usize> {
    let mut renewed = 0;
    let mut stmt = conn.prepare_cached(
        "UPDATE channel_replies SET owner_expires_at=?3 \
         WHERE inbox_id=?1 AND owner_token=?2 AND done=0",
    )?;
    for h in held {
        renewed += stmt.execute(params![
            h.inbox_id,
            to_i64(h.token),
            now.saturating_add(ttl_ms)
        ])?;
    }
    Ok(renewed)
}

/// Records that `held`'s owner starts sending `sending`; `false` when it no longer holds it.
pub(super) fn start_send(
    conn: &Connection,
    held: &ReplyHeld,
    sending: &Sending,
    ttl_ms: i64,
    now: i64,
) -> StoreResult<bool> {
    let changed = write(
        conn,
        "UPDATE channel_replies SET sending=?3, owner_expires_at=?4, updated_at=?5 \
         WHERE inbox_id=?1 AND owner_token=?2 AND done=0",
        &rows::send_values(held, sending, now.saturating_add(ttl_ms), now)?,
    )?;
    Ok(changed == 1)
}

/// Records a reply's progress (a reply done stays done).
pub(super) fn update_reply(
    conn: &Connection,
    update: &ChannelReplyUpdate,
    now: i64,
) -> StoreResult<()> {
    write(
        conn,
        "UPDATE channel_replies SET address=?2, announced=?3, done=?4, detail=?5, updated_at=?6, \
         sending=NULL WHERE inbox_id=?1 AND done=0",
        &rows::reply_update(update, now)?,
    )?;
    Ok(())
}
