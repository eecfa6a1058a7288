//! Taking a release back: a principal's rollback to an earlier release, and the automatic one,
//! which re-activates the previous release when too many turns fail on a release with a
//! `rollback:` policy within its window.
//!
//! Failures are counted in the store, whichever process ran the turns: a failed turn (or one
//! that completed with a failed tool call) on the active release, started after its activation
//! and ending within its window, carries `ReleaseOp::CountFailure` in the very commit that ends
//! it ([`Runtime::failure_to_count`]), so it counts once, also when the process exits right after
//! (`eve run`) and also when another process (a server) watches the store. The process that ran
//! the turn then decides, before its driver returns ([`Runtime::failure_counted`]): under the
//! store claim `releases:rollback` (one process decides at a time) it reads the release as
//! stored and, at the threshold, rolls back; whichever process counts the failure that reaches
//! the threshold is the one that acts.
//!
//! The automatic rollback never ping-pongs: it only goes back to a release that was superseded
//! in the ordinary way, never to one that was rolled back, and a release it restored is not moved
//! again by failures: they raise `release.rollback_held` (audit log and stream) for a principal
//! to decide.

use std::time::Duration;

use eve_compile::RollbackPolicy;
use serde_json::{Value, json};

use super::{
    Principal, RELEASE_ROLLBACK_HELD, RELEASE_ROLLED_BACK, RUNTIME_PRINCIPAL, Release, find,
};
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::store::{Batch, Op, ReleaseOp, ReleaseStatus, TurnRecord, TurnStatus, now_ms};

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

/// The claim under which one process at a time decides an automatic rollback.
const ROLLBACK_CLAIM: &str = "releases:rollback";
/// Longest wait for another process's rollback decision to end.
const DECISION_WAIT: Duration = Duration::from_secs(10);

/// A failed turn counted on a release with a `rollback:` policy: what
/// [`Runtime::failure_counted`] decides on.
#[derive(Debug, Clone)]
pub(crate) struct CountedFailure {
    release: String,
    policy: RollbackPolicy,
}

impl Runtime {
    /// Whether the turn ending now with `status` counts as a failure under its release's
    /// `rollback:` policy: it ran on the active release, started after its activation, ends
    /// within its window, and failed (or completed with a failed tool call). `Some` holds the
    /// operation to commit with the turn's end, and what to decide once it is stored.
    pub(crate) async fn failure_to_count(
        &self,
        turn: &TurnRecord,
        status: TurnStatus,
    ) -> RuntimeResult<Option<(Op, CountedFailure)>> {
        let Ok(build) = self.inner.builds.get(&turn.build_hash) else {
            return Ok(None);
        };
        let Some(policy) = build.manifest.agent.config.rollback else {
            return Ok(None);
        };
        let failed = match status {
            TurnStatus::Failed => true,
            TurnStatus::Completed => self
                .inner
                .store
                .tool_calls(&turn.session_id, turn.seq)
                .await?
                .iter()
                .any(|c| c.is_error),
            _ => false,
        };
        if !failed {
            return Ok(None);
        }
        let Some(active) = self.active_release().await? else {
            return Ok(None);
        };
        let Some(activated_at) = active.activated_at else {
            return Ok(None);
        };
        let window_end =
            activated_at.saturating_add(i64::try_from(policy.window_ms).unwrap_or(i64::MAX));
        if active.build_hash != turn.build_hash
            || turn.started_at < activated_at
            || now_ms() > window_end
        {
            return Ok(None);
        }
        Ok(Some((
            Op::Release(ReleaseOp::CountFailure {
                id: active.id.clone(),
            }),
            CountedFailure {
                release: active.id,
                policy,
            },
        )))
    }

    /// A failed turn was counted on a release: at the threshold, rolls back, or raises
    /// `release.rollback_held` when it must not move. Decided on the release as stored now, by
    /// one process at a time; a failure never fails the turn that was counted.
    pub(crate) async fn failure_counted(&self, counted: CountedFailure) {
        if let Err(e) = self.decide_rollback(&counted).await {
            tracing::warn!(release = %counted.release, error = %e, "cannot decide an automatic rollback");
        }
    }

    async fn decide_rollback(&self, counted: &CountedFailure) -> RuntimeResult<()> {
        let _guard = self.inner.releases.lock.lock().await;
        let claim = match self.claim_within(ROLLBACK_CLAIM, DECISION_WAIT).await? {
            Ok(claim) => claim,
            Err(pid) => {
                tracing::warn!(
                    pid,
                    release = %counted.release,
                    "another eve process has been deciding an automatic rollback for too long; \
                     leaving this failure to its count"
                );
                return Ok(());
            }
        };
        let decided = self.decide_claimed(counted).await;
        claim.release().await;
        decided
    }

    async fn decide_claimed(&self, counted: &CountedFailure) -> RuntimeResult<()> {
        let policy = &counted.policy;
        let release = self.release(&counted.release).await?;
        if release.status != ReleaseStatus::Active || release.failures < u64::from(policy.failures)
        {
            return Ok(());
        }
        let reason = format!(
            "{} failed turns on release {} within {} of its activation (rollback: {{failures: {}, window: {}}})",
            release.failures,
            release.id,
            window(policy.window_ms),
            policy.failures,
            window(policy.window_ms),
        );
        let extra = json!({
            "failures": release.failures,
            "windowMs": policy.window_ms,
            "threshold": policy.failures,
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
            // Once per activation, whichever process counts the failures after it.
            if self.held_raised(&release).await? {
                return Ok(());
            }
            tracing::error!(release = %release.id, "{reason}; {why}");
            let mut data = json!({
                "releaseId": release.id,
                "buildHash": release.build_hash,
                "activatedAt": release.activated_at,
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

    /// Whether `release.rollback_held` was raised for this activation of `release`.
    async fn held_raised(&self, release: &Release) -> RuntimeResult<bool> {
        Ok(self.release_events(0, 0).await?.iter().any(|e| {
            e.kind == RELEASE_ROLLBACK_HELD
                && e.data["releaseId"] == release.id.as_str()
                && e.data["activatedAt"] == json!(release.activated_at)
        }))
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
