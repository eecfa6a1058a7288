//! What channels need from the engine besides accepting messages: the owed replies this process
//! may take over, and which replies a follower of this runtime already follows.
//!
//! The registry of followed replies belongs to the runtime (not to the process): two runtimes in
//! one process (tests, `eve dev` rebuilding its router) each know only their own followers. It
//! also holds each reply's fencing token: the holds it renews are those it follows, so a reply
//! nobody follows any more (its follower stopped on an error) lapses and is taken again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use super::{Runtime, RuntimeResult};
use crate::store::{ChannelReplyRecord, ReplyClaim, ReplyHeld};

/// One follower of a reply.
struct Follower {
    id: u64,
    token: u64,
    shutdown: CancellationToken,
}

/// Replies followed by one runtime, by inbox id.
#[derive(Default)]
pub(crate) struct Following {
    next: AtomicU64,
    followers: Mutex<HashMap<String, Follower>>,
}

/// A registered follower of one reply; unregisters when dropped.
pub struct ReplyFollower {
    runtime: Runtime,
    inbox_id: String,
    id: u64,
}

impl std::fmt::Debug for ReplyFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyFollower")
            .field("inbox_id", &self.inbox_id)
            .finish_non_exhaustive()
    }
}

impl Drop for ReplyFollower {
    fn drop(&mut self) {
        if let Ok(mut f) = self.runtime.inner.following.followers.lock()
            && f.get(&self.inbox_id).is_some_and(|x| x.id == self.id)
        {
            f.remove(&self.inbox_id);
        }
    }
}

impl Runtime {
    /// The host name this process records as owner of what it holds.
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// The session lease's TTL (`EVE_LEASE_TTL_MS`).
    pub(crate) fn lease_ttl(&self) -> std::time::Duration {
        self.inner.config.lease_ttl
    }

    /// How long a reply is held without renewal, in milliseconds: the session lease's TTL.
    pub(crate) fn reply_ttl_ms(&self) -> i64 {
        i64::try_from(self.inner.config.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Takes for this process the replies owed to platforms that this runtime does not follow
    /// and whose hold lapsed, or (unless `expired_only`: the periodic look of a running server)
    /// whose process is gone or is this one; returns them, each with its new token.
    pub(crate) async fn claim_owed_replies(
        &self,
        expired_only: bool,
    ) -> RuntimeResult<Vec<ChannelReplyRecord>> {
        let skip = self
            .inner
            .following
            .followers
            .lock()
            .map(|f| f.keys().cloned().collect())
            .unwrap_or_default();
        Ok(self
            .inner
            .store
            .claim_channel_replies(ReplyClaim {
                pid: std::process::id(),
                host: self.inner.host.clone(),
                ttl_ms: self.reply_ttl_ms(),
                expired_only,
                skip,
            })
            .await?)
    }

    /// Renews the holds of the replies this runtime follows; returns how many were renewed.
    pub(crate) async fn renew_followed_replies(&self) -> RuntimeResult<usize> {
        let held: Vec<ReplyHeld> = self
            .inner
            .following
            .followers
            .lock()
            .map(|f| {
                f.iter()
                    .filter(|(_, x)| !x.shutdown.is_cancelled())
                    .map(|(inbox_id, x)| ReplyHeld {
                        inbox_id: inbox_id.clone(),
                        token: x.token,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(self
            .inner
            .store
            .renew_channel_replies(held, self.reply_ttl_ms())
            .await?)
    }

    /// Registers a follower of the reply to `inbox_id`, held with `token`, stopping at
    /// `shutdown`; it unregisters when the returned value is dropped.
    pub fn follow_reply(
        &self,
        inbox_id: &str,
        token: u64,
        shutdown: &CancellationToken,
    ) -> ReplyFollower {
        let following = &self.inner.following;
        let id = following.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = following.followers.lock() {
            f.insert(
                inbox_id.to_owned(),
                Follower {
                    id,
                    token,
                    shutdown: shutdown.clone(),
                },
            );
        }
        ReplyFollower {
            runtime: self.clone(),
            inbox_id: inbox_id.to_owned(),
            id,
        }
    }

    /// Whether a follower of this runtime, not shut down, already follows the reply to
    /// `inbox_id`.
    pub fn reply_followed(&self, inbox_id: &str) -> bool {
        self.inner
            .following
            .followers
            .lock()
            .map(|f| f.get(inbox_id).is_some_and(|x| !x.shutdown.is_cancelled()))
            .unwrap_or(false)
    }
}
