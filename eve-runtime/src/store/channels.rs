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
//! started, without announcing anything twice. The SQL is the SQLite backend's
//! (`sqlite/channels.rs`).
//!
//! **Ownership.** A reply is followed by one process at a time, under a lease of its own: its
//! owner, an expiry the owner pushes forward while it follows the reply ([`ReplyHeld`]), and a
//! fencing token that grows with every new owner. A node of a fleet that dies stops renewing;
//! once the expiry passes another node takes the reply ([`ReplyClaim`], `FOR UPDATE SKIP LOCKED`
//! on PostgreSQL) with a new token. Before each message is sent, its owner records that it is
//! sending it, under its token (refused once a newer owner exists), so two owners never both
//! send: a new owner that finds a message marked as being sent by a dead one treats it as sent
//! (it may have arrived), as a `write` tool call cut off mid-run is never re-run.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// Fencing token of the owner: grows with every claim ([`FIRST_REPLY_TOKEN`] when written).
    #[serde(default = "first_token")]
    pub owner_token: u64,
    /// When the owner's hold lapses unless renewed (milliseconds since the epoch).
    #[serde(default)]
    pub owner_expires_at: i64,
    /// The message its owner was sending when last recorded ([`Sending`]), cleared once the
    /// send is recorded: a new owner finding it set treats that message as sent.
    #[serde(default)]
    pub sending: Option<Sending>,
    /// Written.
    pub created_at: i64,
    /// Last changed.
    pub updated_at: i64,
}

/// The fencing token of a reply's first owner (the process that accepted the message).
pub const FIRST_REPLY_TOKEN: u64 = 1;

fn first_token() -> u64 {
    FIRST_REPLY_TOKEN
}

/// A message of a reply whose send has started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Sending {
    /// The announcement of these input requests.
    Approval(Vec<String>),
    /// The final message (the answer, the failure, the cancellation).
    Final,
}

/// Which owed replies a process takes ([`crate::store::Store::claim_channel_replies`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyClaim {
    /// The claiming process.
    pub pid: u32,
    /// Its host.
    pub host: String,
    /// How long the claimed replies are held without renewal (milliseconds).
    pub ttl_ms: i64,
    /// Only replies whose hold has lapsed (a running process's periodic look); otherwise also
    /// those whose owner the store's liveness policy calls gone (a process starting).
    pub expired_only: bool,
    /// Replies this process follows already: never taken.
    pub skip: Vec<String>,
}

/// A reply a process follows, by the token it holds it with (renewed by
/// [`crate::store::Store::renew_channel_replies`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeld {
    /// The message the reply is for.
    pub inbox_id: String,
    /// The owner's fencing token.
    pub token: u64,
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
