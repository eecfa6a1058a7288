//! How long sessions live: an idle session expires after `limits.session_timeout` (eve's
//! `410 session_expired` on every route that addresses it), and a server prunes expired sessions
//! after `retention:` (their rows, subagent sessions, notes, workspaces and the blobs nothing
//! references any more).
//!
//! Pruning runs on every server of a fleet, and happens once: a run takes the store's claim
//! `retention:prune` (a lease row, as every claim: `crate::engine::claims`) and skips when another
//! process holds it, or when the last run (the note `retention`/`last`) is more recent than the
//! interval. What is deleted is the store's `prune_sessions`, the same rows on both backends.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::{Runtime, RuntimeResult};
use crate::store::{Batch, NoteOp, NoteRecord, Op, SessionRecord, SessionStatus, now_ms};

/// The claim a pruning run holds.
const CLAIM: &str = "retention:prune";
/// Where the last run's time is kept.
const NAMESPACE: &str = "retention";
const LAST: &str = "last";

/// How often a server prunes when `EVE_RETENTION_INTERVAL_MS` is unset: an hour.
pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(3_600);

/// The pruning interval: `EVE_RETENTION_INTERVAL_MS` as `env` gives it, else
/// [`DEFAULT_RETENTION_INTERVAL`].
pub fn retention_interval(env: &dyn Fn(&str) -> Option<String>) -> Duration {
    env(crate::env_vars::EVE_RETENTION_INTERVAL_MS)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(DEFAULT_RETENTION_INTERVAL, Duration::from_millis)
}

/// What one pruning run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The sessions deleted (roots and their subagent sessions).
    pub sessions: Vec<String>,
    /// Workspace blobs deleted.
    pub blobs: u64,
}

impl Runtime {
    /// Whether `session` expired: not running, and idle (no write) for longer than the
    /// `limits.session_timeout` of the build it is pinned to.
    pub(crate) fn expired(&self, session: &SessionRecord) -> bool {
        if session.status == SessionStatus::Running {
            return false;
        }
        let Ok(build) = self.inner.builds.get(&session.build_hash) else {
            return false;
        };
        let Some(timeout) = build.manifest.agent.config.limits.session_timeout_ms else {
            return false;
        };
        let idle = now_ms().saturating_sub(session.updated_at);
        idle > i64::try_from(timeout).unwrap_or(i64::MAX)
    }

    /// One pruning run, if it is this process's turn: `None` when the active build keeps
    /// expired sessions (no `retention:`), another process is pruning, or the last run (by any
    /// process on this store) is less than `every` ago.
    pub async fn prune_expired(&self, every: Duration) -> RuntimeResult<Option<Pruned>> {
        let build = self.inner.builds.current()?;
        let config = &build.manifest.agent.config;
        let (Some(keep), Some(timeout)) = (config.retention_ms, config.limits.session_timeout_ms)
        else {
            return Ok(None);
        };
        let Ok(claim) = self.try_claim(CLAIM).await? else {
            return Ok(None);
        };
        let outcome = self.prune_held(every, timeout.saturating_add(keep)).await;
        claim.release().await;
        outcome
    }

    async fn prune_held(&self, every: Duration, age_ms: u64) -> RuntimeResult<Option<Pruned>> {
        let now = now_ms();
        let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
        let last = self
            .inner
            .store
            .note(NAMESPACE, LAST)
            .await?
            .and_then(|n| n.text.parse::<i64>().ok());
        if last.is_some_and(|at| now.saturating_sub(at) < every_ms) {
            return Ok(None);
        }
        let mut batch = Batch::durable();
        batch.push(Op::Note(NoteOp::Put(NoteRecord {
            namespace: NAMESPACE.to_owned(),
            key: LAST.to_owned(),
            text: now.to_string(),
            created_at: now,
            updated_at: now,
        })));
        self.commit(batch).await?;
        let cutoff = now.saturating_sub(i64::try_from(age_ms).unwrap_or(i64::MAX));
        let sessions = self.inner.store.prune_sessions(cutoff).await?;
        for (path, e) in self.remove_local_workspaces(&sessions) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a pruned workspace");
        }
        let blobs = if sessions.is_empty() {
            0
        } else {
            self.inner.store.collect_workspace_blobs().await?.blobs
        };
        if !sessions.is_empty() {
            tracing::info!(count = sessions.len(), blobs, "pruned expired sessions");
        }
        Ok(Some(Pruned { sessions, blobs }))
    }

    /// Prunes expired sessions every `every` until `shutdown` (what `eve serve` and `eve dev`
    /// run beside the scheduler).
    pub async fn retention_loop(self, every: Duration, shutdown: CancellationToken) {
        let every = every.max(Duration::from_millis(100));
        loop {
            if let Err(e) = self.prune_expired(every).await {
                tracing::warn!(error = %e, "pruning expired sessions failed");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }
}
