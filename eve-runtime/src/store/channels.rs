//! Rows of the platform channels: deliveries already accepted, and replies still owed.
//!
//! A platform retries a delivery it believes was lost (Slack's `X-Slack-Retry-Num`, Telegram's
//! redelivered `update_id`). The delivery id is remembered in the transaction that puts the message
//! in the inbox ([`ChannelAccept`]), so "accepted" and "remembered" cannot disagree: a retry of an
//! accepted delivery finds its row, even after a restart, and nothing is written twice.
//!
//! The answer to a message is owed to the platform until it is sent. A [`ChannelReplyRecord`],
//! written with the message, says where it goes (the platform's reply address as JSON) and what
//! was announced already (approval requests), so a restarted server finishes what the killed one
//! started, without announcing anything twice. The SQL lives here so the SQLite store only
//! delegates.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreResult;

/// How long delivery ids, and replies already done, are kept (one day, in milliseconds).
pub const CHANNEL_ROWS_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// A platform's id of one delivery (Slack `event_id`, Telegram `update_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelDelivery {
    /// Channel name (the file name).
    pub channel: String,
    /// The platform's delivery id.
    pub delivery_id: String,
}

/// A reply owed to a platform for one accepted message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelReplyRecord {
    /// The accepted message (inbox id); one reply per message.
    pub inbox_id: String,
    /// Channel name.
    pub channel: String,
    /// Session.
    pub session_id: String,
    /// The session's event index before the message was accepted: the reply follows from there.
    pub from_index: u64,
    /// Where the reply goes, as the platform's implementation wrote it (Slack channel and
    /// thread, Discord interaction webhook, Telegram chat and topic, a webhook's reply URL), and
    /// what it needs to continue (whether Discord's original response was edited).
    pub address: Value,
    /// Input request ids already announced.
    pub announced: Vec<String>,
    /// The final message was sent (or given up on); nothing more is owed.
    pub done: bool,
    /// Why it was closed without an answer, when it was.
    pub detail: Option<String>,
    /// Process following it (pid).
    pub owner_pid: u32,
    /// Host of that process.
    pub owner_host: String,
    /// Written.
    pub created_at: i64,
    /// Last changed.
    pub updated_at: i64,
}

/// What accepting a platform message writes besides the message itself.
#[derive(Debug, Clone, Default)]
pub struct ChannelAccept {
    /// The delivery's id, when the platform gives one: the accept is refused (nothing written)
    /// when it is already stored.
    pub delivery: Option<ChannelDelivery>,
    /// The reply owed for the message, when there is somewhere to send it.
    pub reply: Option<ChannelReplyRecord>,
}

/// Progress of a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelReplyUpdate {
    /// The message the reply is for.
    pub inbox_id: String,
    /// The address as it is now.
    pub address: Value,
    /// Input request ids announced so far.
    pub announced: Vec<String>,
    /// Nothing more is owed.
    pub done: bool,
    /// Why it was closed without an answer.
    pub detail: Option<String>,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

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
    conn.prepare_cached(
        "INSERT OR REPLACE INTO channel_replies (inbox_id, channel, session_id, from_index, \
         address, announced, done, detail, owner_pid, owner_host, created_at, updated_at) \
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?11)",
    )?
    .execute(params![
        r.inbox_id,
        r.channel,
        r.session_id,
        to_i64(r.from_index),
        serde_json::to_string(&r.address)?,
        serde_json::to_string(&r.announced)?,
        r.done,
        r.detail,
        i64::from(r.owner_pid),
        r.owner_host,
        now
    ])?;
    conn.prepare_cached("DELETE FROM channel_replies WHERE done = 1 AND updated_at < ?1")?
        .execute([now.saturating_sub(CHANNEL_ROWS_KEPT_MS)])?;
    Ok(())
}

const REPLY_COLS: &str = "inbox_id, channel, session_id, from_index, address, announced, done, \
                          detail, owner_pid, owner_host, created_at, updated_at";

fn reply_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<(ChannelReplyRecord, String, String)> {
    Ok((
        ChannelReplyRecord {
            inbox_id: row.get(0)?,
            channel: row.get(1)?,
            session_id: row.get(2)?,
            from_index: u64::try_from(row.get::<_, i64>(3)?).unwrap_or(0),
            address: Value::Null,
            announced: Vec::new(),
            done: row.get(6)?,
            detail: row.get(7)?,
            owner_pid: u32::try_from(row.get::<_, i64>(8)?).unwrap_or(0),
            owner_host: row.get(9)?,
            created_at: row.get(10)?,
            updated_at: row.get(11)?,
        },
        row.get(4)?,
        row.get(5)?,
    ))
}

fn decode(
    (mut record, address, announced): (ChannelReplyRecord, String, String),
) -> StoreResult<ChannelReplyRecord> {
    record.address = serde_json::from_str(&address)?;
    record.announced = serde_json::from_str(&announced)?;
    Ok(record)
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
    let rows = conn
        .prepare_cached(&sql)?
        .query_map([], reply_from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(decode).collect()
}

/// One reply.
pub(super) fn reply(conn: &Connection, inbox_id: &str) -> StoreResult<Option<ChannelReplyRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {REPLY_COLS} FROM channel_replies WHERE inbox_id=?1"
    ))?
    .query_row([inbox_id], reply_from_row)
    .optional()?
    .map(decode)
    .transpose()
}

/// Takes the owed replies whose process is gone for the process `pid` on `host`: those of a
/// process on this host that no longer runs (`alive` says), those of this very process (a
/// server restarted in the same process), and those of another host (a container restarted
/// under a new name: a shared SQLite file does not span live hosts). Returns them, now ours.
pub(super) fn claim_replies(
    conn: &Connection,
    pid: u32,
    host: &str,
    alive: &dyn Fn(u32) -> bool,
    now: i64,
) -> StoreResult<Vec<ChannelReplyRecord>> {
    let mut taken = Vec::new();
    for mut r in replies(conn, true)? {
        let gone = r.owner_host != host || r.owner_pid == pid || !alive(r.owner_pid);
        if !gone {
            continue;
        }
        conn.prepare_cached(
            "UPDATE channel_replies SET owner_pid=?2, owner_host=?3, updated_at=?4 \
             WHERE inbox_id=?1",
        )?
        .execute(params![r.inbox_id, i64::from(pid), host, now])?;
        r.owner_pid = pid;
        r.owner_host = host.to_owned();
        r.updated_at = now;
        taken.push(r);
    }
    Ok(taken)
}

/// Records a reply's progress (a reply done stays done).
pub(super) fn update_reply(
    conn: &Connection,
    update: &ChannelReplyUpdate,
    now: i64,
) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE channel_replies SET address=?2, announced=?3, done=?4, detail=?5, updated_at=?6 \
         WHERE inbox_id=?1 AND done=0",
    )?
    .execute(params![
        update.inbox_id,
        serde_json::to_string(&update.address)?,
        serde_json::to_string(&update.announced)?,
        update.done,
        update.detail,
        now
    ])?;
    Ok(())
}
