//! What channels need from the engine besides accepting messages: the owed replies this process
//! may take over, and which replies a follower of this runtime already follows.
//!
//! The registry of followed replies belongs to the runtime (not to the process): two runtimes in
//! one process (tests, `eve dev` rebuilding its router) each know only their own followers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use super::{Runtime, RuntimeResult};
use crate::store::ChannelReplyRecord;

/// Replies followed by one runtime: inbox id → (follower id, the shutdown token it stops at).
#[derive(Default)]
pub(crate) struct Following {
    next: AtomicU64,
    followers: Mutex<HashMap<String, (u64, CancellationToken)>>,
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
            && f.get(&self.inbox_id).is_some_and(|(id, _)| *id == self.id)
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

    /// Whether this runtime starts drivers itself when work is accepted.
    pub fn autostart(&self) -> bool {
        self.inner.config.autostart
    }

    /// Takes the replies owed to platforms whose process is gone (or is this one) for this
    /// process; returns them.
    pub async fn claim_owed_replies(&self) -> RuntimeResult<Vec<ChannelReplyRecord>> {
        Ok(self
            .inner
            .store
            .claim_channel_replies(std::process::id(), &self.inner.host)
            .await?)
    }

    /// Registers a follower of the reply to `inbox_id`, stopping at `shutdown`; it unregisters
    /// when the returned value is dropped.
    pub fn follow_reply(&self, inbox_id: &str, shutdown: &CancellationToken) -> ReplyFollower {
        let following = &self.inner.following;
        let id = following.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = following.followers.lock() {
            f.insert(inbox_id.to_owned(), (id, shutdown.clone()));
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
            .map(|f| f.get(inbox_id).is_some_and(|(_, t)| !t.is_cancelled()))
            .unwrap_or(false)
    }
}
