//! Taking a release back: a principal's rollback to an earlier release, and the automatic one,
//! which counts the failed turns this process runs on a release with a `rollback:` policy and
//! re-activates the previous release when too many fail within the window.
//!
//! The automatic rollback never ping-pongs: it only goes back to a release that was superseded
//! in the ordinary way, never to one that was rolled back, and a release it restored is not moved
//! again by failures: they raise `release.rollback_held` (audit log and stream) for a principal
//! to decide.

use std::sync::Weak;

use eve_compile::RollbackPolicy;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::{
    Principal, RELEASE_ROLLBACK_HELD, RELEASE_ROLLED_BACK, RUNTIME_PRINCIPAL, Release, find,
    upgrade,
};
use crate::engine::error::{RuntimeError, RuntimeResult};
use crate::engine::{Inner, Runtime, events};
use crate::store::{Batch, Op, ReleaseOp, ReleaseStatus, StoredEvent, now_ms};

/// The active release when it has a `rollback:` policy: what the failure monitor watches.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Watched {
    pub(super) release: String,
    pub(super) build_hash: String,
    pub(super) activated_at: i64,
    pub(super) policy: RollbackPolicy,
}

impl Runtime {
    /// Makes an earlier release active again at once: `to` (a release id, prefix or build
    /// hash), or the release that was active before the active one. Nothing is rebuilt.
    pub async fn rollback(
        &self,
        to: Option<&str>,
        by: &Principal,
        reason: &str,
    ) -> RuntimeResult<Release> {
        let _guard = self.inner.releases.lock.lock().await;
        let active = self.baseline().await?.ok_or_else(|| {
            RuntimeError::Release("there is no active release to roll back".to_owned())
        })?;
        self.rollback_from(&active, to, by, reason, json!({})).await
    }

    async fn rollback_from(
        &self,
        active: &Release,
        to: Option<&str>,
        by: &Principal,
        reason: &str,
        extra: Value,
    ) -> RuntimeResult<Release> {
        let all = self.releases_list().await?;
        let target = match to {
            Some(id) => find(&all, id)
                .cloned()
                .ok_or_else(|| RuntimeError::ReleaseNotFound(id.to_owned()))?,
            None => previous_of(&all, active).cloned().ok_or_else(|| {
                RuntimeError::Release(format!(
                    "release {} has no earlier release to roll back to",
                    active.id
                ))
            })?,
        };
        if target.id == active.id {
            return Err(RuntimeError::Release(format!(
                "release {} is already the active release",
                target.id
            )));
        }
        if matches!(
            target.status,
            ReleaseStatus::Rejected | ReleaseStatus::Pending
        ) {
            return Err(RuntimeError::Release(format!(
                "release {} is {}: only a release that was active can be rolled back to (use `eve activate`)",
                target.id, target.status
            )));
        }
        self.manifest_of(&target.build_hash)?;
        let now = now_ms();
        let mut batch = Batch::durable();
        batch.push(Op::Release(ReleaseOp::Activate {
            id: target.id.clone(),
            demote: ReleaseStatus::RolledBack,
            reason: Some(reason.to_owned()),
            at: now,
            by: by.to_owned(),
        }));
        let mut data = json!({
            "releaseId": target.id,
            "buildHash": target.build_hash,
            "from": active.id,
            "fromBuildHash": active.build_hash,
            "principal": by,
            "reason": reason,
            "automatic": by == RUNTIME_PRINCIPAL,
        });
        if let (Value::Object(d), Value::Object(e)) = (&mut data, extra) {
            d.extend(e);
        }
        batch.push(Op::Release(ReleaseOp::Event {
            kind: RELEASE_ROLLED_BACK.to_owned(),
            data,
        }));
        self.commit_releases(batch).await?;
        let release = self.release(&target.id).await?;
        self.follow_active(Some(&release)).await;
        Ok(release)
    }
}

/// Counts the failed turns this process runs on a watched release; rolls back at the limit.
pub(super) async fn monitor(weak: Weak<Inner>, mut watched: watch::Receiver<Option<Watched>>) {
    loop {
        let current = watched.borrow_and_update().clone();
        let Some(w) = current else {
            if watched.changed().await.is_err() {
                return;
            }
            continue;
        };
        let Some(mut events) = upgrade(&weak).map(|rt| rt.subscribe_all()) else {
            return;
        };
        loop {
            tokio::select! {
                changed = watched.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                event = events.recv() => {
                    let event = match event {
                        Ok(e) => e,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    if event.kind != events::TURN_COMPLETED && event.kind != events::TURN_FAILED {
                        continue;
                    }
                    let Some(rt) = upgrade(&weak) else { return };
                    if let Err(e) = rt.count_turn(&w, &event).await {
                        tracing::warn!(error = %e, "cannot count a failed turn for automatic rollback");
                    }
                }
            }
        }
    }
}

impl Runtime {
    async fn count_turn(&self, w: &Watched, event: &StoredEvent) -> RuntimeResult<()> {
        let Some(seq) = event.data.get("sequence").and_then(Value::as_u64) else {
            return Ok(());
        };
        let Some(turn) = self.inner.store.turn(&event.session_id, seq).await? else {
            return Ok(());
        };
        let now = now_ms();
        let window_end = w
            .activated_at
            .saturating_add(i64::try_from(w.policy.window_ms).unwrap_or(i64::MAX));
        if turn.build_hash != w.build_hash || turn.started_at < w.activated_at || now > window_end {
            return Ok(());
        }
        let failed = event.kind == events::TURN_FAILED
            || self
                .inner
                .store
                .tool_calls(&event.session_id, seq)
                .await?
                .iter()
                .any(|c| c.is_error);
        if !failed {
            return Ok(());
        }
        let _guard = self.inner.releases.lock.lock().await;
        let mut batch = Batch::new();
        batch.push(Op::Release(ReleaseOp::CountFailure {
            id: w.release.clone(),
        }));
        self.commit_releases(batch).await?;
        let release = self.release(&w.release).await?;
        if release.status != ReleaseStatus::Active
            || release.failures < u64::from(w.policy.failures)
        {
            return Ok(());
        }
        let reason = format!(
            "{} failed turns on release {} within {} of its activation (rollback: {{failures: {}, window: {}}})",
            release.failures,
            release.id,
            window(w.policy.window_ms),
            w.policy.failures,
            window(w.policy.window_ms),
        );
        let extra = json!({
            "failures": release.failures,
            "windowMs": w.policy.window_ms,
            "threshold": w.policy.failures,
        });
        let all = self.releases_list().await?;
        let held = if release.activated_by.as_deref() == Some(RUNTIME_PRINCIPAL) {
            Some(format!(
                "release {} was restored by an automatic rollback: failures on it are reported, \
                 not acted on (`eve rollback ID` or `eve activate ID` decides)",
                release.id
            ))
        } else if automatic_target(&all, &release).is_none() {
            Some(format!(
                "release {} has no earlier release that was not rolled back: nothing to go back to \
                 automatically (`eve rollback ID` decides)",
                release.id
            ))
        } else {
            None
        };
        if let Some(why) = held {
            // Once per activation: at the threshold, not at every failure after it.
            if release.failures == u64::from(w.policy.failures) {
                tracing::error!(release = %release.id, "{reason}; {why}");
                let mut data = json!({
                    "releaseId": release.id,
                    "buildHash": release.build_hash,
                    "reason": format!("{reason}; {why}"),
                });
                if let (Value::Object(d), Value::Object(e)) = (&mut data, extra) {
                    d.extend(e);
                }
                let mut batch = Batch::durable();
                batch.push(Op::Release(ReleaseOp::Event {
                    kind: RELEASE_ROLLBACK_HELD.to_owned(),
                    data,
                }));
                self.commit_releases(batch).await?;
            }
            return Ok(());
        }
        let to = automatic_target(&all, &release).map(|r| r.id.clone());
        match self
            .rollback_from(&release, to.as_deref(), RUNTIME_PRINCIPAL, &reason, extra)
            .await
        {
            Ok(to) => tracing::warn!(from = %release.id, to = %to.id, "{reason}: rolled back"),
            Err(e) => {
                tracing::warn!(release = %release.id, error = %e, "automatic rollback failed")
            }
        }
        Ok(())
    }
}

/// The release a rollback of `active` goes back to: the one active before it, else the newest
/// earlier release that was ever active.
fn previous_of<'a>(all: &'a [Release], active: &Release) -> Option<&'a Release> {
    if let Some(prev) = active
        .previous
        .as_deref()
        .and_then(|p| all.iter().find(|r| r.id == p))
        && prev.id != active.id
    {
        return Some(prev);
    }
    all.iter()
        .rev()
        .filter(|r| r.id != active.id && r.activated_at.is_some())
        .filter(|r| {
            matches!(
                r.status,
                ReleaseStatus::Superseded | ReleaseStatus::RolledBack
            )
        })
        .max_by_key(|r| r.activated_at)
}

/// Where an automatic rollback of `active` goes: the release a principal's rollback would take,
/// unless it was itself rolled back (then the newest earlier release that was only superseded).
fn automatic_target<'a>(all: &'a [Release], active: &Release) -> Option<&'a Release> {
    if let Some(prev) = previous_of(all, active)
        && prev.status != ReleaseStatus::RolledBack
    {
        return Some(prev);
    }
    all.iter()
        .filter(|r| r.id != active.id && r.activated_at.is_some())
        .filter(|r| r.status == ReleaseStatus::Superseded)
        .max_by_key(|r| r.activated_at)
}

fn window(ms: u64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}
