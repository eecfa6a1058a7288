//! Claims: work that one process at a time may do on a shared store, decided by the store.
//!
//! Several processes share a store (`eve serve` and `eve run` on one project, the nodes of a
//! fleet). Some work must be done by one of them at a time even though any of them may start
//! it: delivering a session's events to its observe hooks ([`crate::features::hooks::delivery`]), deciding
//! an automatic rollback ([`crate::releases`]). A claim is a lease row under a key no session
//! has (`hooks:<session>`, `releases:rollback`), taken with the store's lease rules: free,
//! expired, ours, or held by a process the store's liveness policy calls dead. The holder keeps
//! it alive while it works (renewed every third of the lease TTL) and gives it back when done;
//! a holder that dies without giving it back loses it at once on one host (its pid is gone) or
//! when it expires (a fleet).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Runtime, RuntimeResult};
use crate::store::{LeaseClaim, LeaseOutcome};

/// A claim this process holds; renewed until [`HeldClaim::release`] (or dropped, after which
/// it lapses at its expiry).
pub(crate) struct HeldClaim {
    rt: Runtime,
    claim: LeaseClaim,
    heartbeat: CancellationToken,
    lost: Arc<AtomicBool>,
}

impl HeldClaim {
    /// Whether a renewal failed: another process may have taken the claim since.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Gives the claim back.
    pub(crate) async fn release(self) {
        self.heartbeat.cancel();
        if let Err(e) = self
            .rt
            .inner
            .store
            .release_lease(&self.claim.session_id, &self.claim.holder)
            .await
        {
            tracing::warn!(claim = %self.claim.session_id, error = %e, "cannot give a claim back");
        }
    }
}

impl Drop for HeldClaim {
    fn drop(&mut self) {
        self.heartbeat.cancel();
    }
}

impl Runtime {
    /// This runtime's claim on `key` (one holder id per runtime and key, so taking it again
    /// while holding it succeeds).
    fn claim_of(&self, key: &str) -> LeaseClaim {
        LeaseClaim {
            session_id: key.to_owned(),
            holder: format!("{}:{key}", self.inner.holder),
            pid: std::process::id(),
            host: self.inner.host.clone(),
            ttl_ms: i64::try_from(self.inner.config.lease_ttl.as_millis()).unwrap_or(15_000),
        }
    }

    /// Takes the claim on `key` if no other live process holds it; `Err(pid)` names the one
    /// that does.
    pub(crate) async fn try_claim(&self, key: &str) -> RuntimeResult<Result<HeldClaim, u32>> {
        let claim = self.claim_of(key);
        if let LeaseOutcome::HeldBy { pid, .. } = self.inner.store.acquire_lease(&claim).await? {
            return Ok(Err(pid));
        }
        let heartbeat = CancellationToken::new();
        let lost = Arc::new(AtomicBool::new(false));
        {
            let store = self.inner.store.clone();
            let claim = claim.clone();
            let stop = heartbeat.clone();
            let lost = lost.clone();
            let every = (self.inner.config.lease_ttl / 3).max(Duration::from_millis(50));
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(every) => {
                            if !matches!(store.renew_lease(&claim).await, Ok(true)) {
                                tracing::warn!(claim = %claim.session_id, "lost a claim");
                                lost.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
        Ok(Ok(HeldClaim {
            rt: self.clone(),
            claim,
            heartbeat,
            lost,
        }))
    }

    /// Takes the claim on `key`, waiting up to `wait` for another process to give it back;
    /// `Err(pid)` when it still holds it then.
    pub(crate) async fn claim_within(
        &self,
        key: &str,
        wait: Duration,
    ) -> RuntimeResult<Result<HeldClaim, u32>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.try_claim(key).await? {
                Ok(held) => return Ok(Ok(held)),
                Err(pid) if tokio::time::Instant::now() >= deadline => return Ok(Err(pid)),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}
