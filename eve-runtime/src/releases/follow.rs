//! Following the releases: this process points its build store and `.eve/current` at the active
//! release (again whenever another process or fleet node commits), and
//! [`ReleaseFollower`] streams the releases' audit events, stored then live.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::{Release, upgrade};
use crate::engine::{Runtime, RuntimeResult};
use crate::store::{ReleaseStatus, StoredEvent};

/// How often a release follower looks at the store when nothing tells it to.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

impl Runtime {
    /// Follows the releases' audit stream from `from` on: stored events, then live ones, with no
    /// gap and no repeat (also those other processes commit).
    pub fn follow_releases(&self, from: u64) -> ReleaseFollower {
        ReleaseFollower {
            rt: self.clone(),
            next: from,
            buffered: std::collections::VecDeque::new(),
            live: self.inner.releases.live().subscribe(),
            foreign: self.inner.store.foreign_commits(),
        }
    }

    /// Points this process at the active release: the build store's current build and the
    /// `.eve/current` link.
    pub(crate) async fn follow_active(&self, active: Option<&Release>) {
        let hash = active.map(|r| r.build_hash.clone());
        if let Some(h) = &hash
            && self.inner.builds.get(h).is_ok()
            && eve_compile::build::current_hash(&self.inner.config.state_dir).as_deref()
                != Some(h.as_str())
        {
            point_current(&self.inner.config.state_dir, h);
        }
        self.inner.builds.set_active(hash);
    }

    /// Reads the active release and follows it; then again whenever another process commits.
    /// Started with the runtime when there is an async runtime to run it on.
    pub(crate) fn start_releases(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        let mut foreign = self.inner.store.foreign_commits();
        handle.spawn(async move {
            loop {
                {
                    let Some(rt) = upgrade(&weak) else { return };
                    match rt.inner.store.releases().await {
                        Ok(all) => {
                            let active = all.iter().find(|r| r.status == ReleaseStatus::Active);
                            rt.follow_active(active).await;
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot read the active release"),
                    }
                }
                match foreign.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            return;
                        }
                    }
                    None => return,
                }
            }
        });
    }
}

/// Points `<state_dir>/current` at build `hash` (a link replaced atomically; a failure is
/// logged: the link is for tools that read it, the store says which release is active).
pub(super) fn point_current(state_dir: &Path, hash: &str) {
    let link = state_dir.join("current");
    // Unique per call: two follows in one process must not remove each other's link.
    let tmp = state_dir.join(format!(
        ".current-{}-{}",
        std::process::id(),
        ulid::Ulid::new()
    ));
    let _ = std::fs::remove_file(&tmp);
    let pointed = std::os::unix::fs::symlink(Path::new("builds").join(hash), &tmp)
        .and_then(|()| std::fs::rename(&tmp, &link));
    if let Err(e) = pointed {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(error = %e, link = %link.display(), "cannot point the link at the active build");
    }
}

/// Follows the releases' audit stream: stored, then live, with no gap and no repeat.
pub struct ReleaseFollower {
    rt: Runtime,
    next: u64,
    buffered: std::collections::VecDeque<StoredEvent>,
    live: broadcast::Receiver<StoredEvent>,
    foreign: Option<watch::Receiver<u64>>,
}

impl ReleaseFollower {
    /// The next event, waiting for one when none is stored yet.
    pub async fn next(&mut self) -> RuntimeResult<StoredEvent> {
        loop {
            if let Some(e) = self.buffered.pop_front() {
                self.next = e.index + 1;
                return Ok(e);
            }
            let page = self.rt.inner.store.release_events(self.next, 256).await?;
            if !page.is_empty() {
                self.buffered.extend(page);
                continue;
            }
            // Caught up: wait for this process's commit, another's, or the poll.
            let foreign = async {
                match self.foreign.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = self.live.recv() => {}
                () = foreign => {}
                () = tokio::time::sleep(FOLLOW_POLL) => {}
            }
        }
    }
}
