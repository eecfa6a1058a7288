//! Handing a build to the runtime: judging a candidate against the active release (capability
//! delta, diagnostics, the gated evals), then activating it, parking it for review or rejecting
//! it, and recording the release and its audit events either way; and a principal's activation.

use eve_compile::{Activation, Delta, Manifest, capability_delta};
use serde_json::{Value, json};

use super::{
    Candidate, Principal, RELEASE_ACTIVATED, RELEASE_BUILT, RELEASE_REJECTED, RUNTIME_PRINCIPAL,
    Release, ReleaseOpts, ReleaseOutcome, Verdict, count, find,
};
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::store::{
    Batch, Checks, GateReport, Op, ReleaseOp, ReleaseRecord, ReleaseStatus, now_ms,
};

impl Runtime {
    /// Judges build `hash` against the active release: its delta, diagnostics counts and gate
    /// results, and what [`Runtime::release_build`] would do. Records and activates nothing.
    pub async fn candidate(&self, hash: &str) -> RuntimeResult<Candidate> {
        let manifest = self.manifest_of(hash)?;
        let base = self.baseline().await?;
        self.judge(hash, &manifest, base, false).await
    }

    /// Hands build `hash` to the runtime under the active release's policy: activates it,
    /// parks it pending review, or rejects it, and records the release either way. A build that
    /// is already the active release is returned as it is; so is one already pending.
    pub async fn release_build(
        &self,
        hash: &str,
        by: &Principal,
        opts: ReleaseOpts,
    ) -> RuntimeResult<ReleaseOutcome> {
        let _guard = self.inner.releases.lock.lock().await;
        let manifest = self.manifest_of(hash)?;
        let base = self.baseline().await?;
        if let Some(active) = &base
            && active.build_hash == hash
        {
            self.follow_active(Some(active)).await;
            return Ok(ReleaseOutcome::Activated(active.clone()));
        }
        let all = self.releases_list().await?;
        // A build that was rolled back is not made active again by building it again (`eve run`,
        // `eve dev` and `eve build` release what they build): only a principal's `eve activate`
        // brings it back. Otherwise an unchanged folder would undo every rollback.
        if !opts.force
            && let Some(rolled) = all.iter().rev().find(|r| r.build_hash == hash)
            && rolled.status == ReleaseStatus::RolledBack
        {
            let mut held = rolled.clone();
            held.reason = Some(format!(
                "this build was rolled back ({}); building it again does not make it active",
                rolled.reason.as_deref().unwrap_or("no reason recorded")
            ));
            return Ok(ReleaseOutcome::Rejected(held));
        }
        if !opts.force
            && let Some(pending) = all
                .iter()
                .rev()
                .find(|r| r.build_hash == hash && r.status == ReleaseStatus::Pending)
            && pending.base == base.as_ref().map(|b| b.id.clone())
        {
            return Ok(ReleaseOutcome::Pending(pending.clone()));
        }
        let candidate = self
            .judge(hash, &manifest, base.clone(), opts.force)
            .await?;
        let now = now_ms();
        let mut release = new_release(&candidate, by, &opts, now);
        // On a fleet's store, every node must be able to load the release it will follow.
        if self.inner.store.shared() {
            crate::engine::publish::publish_build(
                self.inner.store.as_ref(),
                self.state_dir(),
                hash,
            )
            .await?;
        }
        let mut batch = Batch::durable();
        let outcome = match candidate.verdict {
            Verdict::Reject => {
                release.status = ReleaseStatus::Rejected;
                release.reason = Some(rejection(&release.checks));
                batch.push(Op::Release(ReleaseOp::Put(Box::new(release.clone()))));
                batch.push(Op::Release(ReleaseOp::Event {
                    kind: RELEASE_BUILT.to_owned(),
                    data: built_data(&release),
                }));
                batch.push(Op::Release(ReleaseOp::Event {
                    kind: RELEASE_REJECTED.to_owned(),
                    data: rejected_data(&release),
                }));
                ReleaseOutcome::Rejected(release)
            }
            Verdict::Pending => {
                release.reason = Some(format!(
                    "it widens {} under `activation: review`; a principal activates it",
                    count(release.delta.widening().count(), "capability")
                ));
                batch.push(Op::Release(ReleaseOp::Put(Box::new(release.clone()))));
                batch.push(Op::Release(ReleaseOp::Event {
                    kind: RELEASE_BUILT.to_owned(),
                    data: built_data(&release),
                }));
                ReleaseOutcome::Pending(release)
            }
            Verdict::Activate => {
                for op in built_active(&mut release, base.as_ref(), by, now) {
                    batch.push(Op::Release(op));
                }
                ReleaseOutcome::Activated(release)
            }
        };
        self.commit_releases(batch).await?;
        if let ReleaseOutcome::Activated(r) = &outcome {
            self.follow_active(Some(r)).await;
        }
        Ok(outcome)
    }

    /// A principal makes a release active: by release id (or prefix), or by build hash (a
    /// build with no release yet is recorded first). A pending release activates; a rejected
    /// one only with `force` (recorded); a superseded or rolled-back one activates again.
    pub async fn activate(
        &self,
        id_or_hash: &str,
        by: &Principal,
        force: bool,
    ) -> RuntimeResult<Release> {
        let base = {
            let _guard = self.inner.releases.lock.lock().await;
            self.baseline().await?
        };
        let all = self.releases_list().await?;
        let target = match find(&all, id_or_hash) {
            Some(r) => r.clone(),
            None => {
                let hash = self.resolve_build(id_or_hash)?;
                match self
                    .release_build(
                        &hash,
                        by,
                        ReleaseOpts {
                            force,
                            ..ReleaseOpts::default()
                        },
                    )
                    .await?
                {
                    ReleaseOutcome::Activated(r) => return Ok(r),
                    ReleaseOutcome::Pending(r) => r,
                    ReleaseOutcome::Rejected(r) if force => r,
                    ReleaseOutcome::Rejected(r) => {
                        return Err(RuntimeError::Release(format!(
                            "release {} of build {} was rejected: {}; activate it with --force to override",
                            r.id,
                            short(&r.build_hash),
                            r.reason.clone().unwrap_or_default()
                        )));
                    }
                }
            }
        };
        let _guard = self.inner.releases.lock.lock().await;
        let active = self.active_release().await?.or(base);
        if target.status == ReleaseStatus::Active {
            self.follow_active(Some(&target)).await;
            return Ok(target);
        }
        if target.status == ReleaseStatus::Rejected && !force {
            return Err(RuntimeError::Release(format!(
                "release {} was rejected: {}; pass --force to activate it anyway (recorded)",
                target.id,
                target.reason.clone().unwrap_or_default()
            )));
        }
        self.manifest_of(&target.build_hash)?;
        let now = now_ms();
        let mut updated = target.clone();
        if target.status == ReleaseStatus::Rejected {
            updated.checks.forced = true;
        }
        let mut batch = Batch::durable();
        if updated != target {
            batch.push(Op::Release(ReleaseOp::Put(Box::new(updated.clone()))));
        }
        push_activation(&mut batch, &updated, active.as_ref(), by, now);
        self.commit_releases(batch).await?;
        let release = self.release(&target.id).await?;
        self.follow_active(Some(&release)).await;
        Ok(release)
    }

    /// A build hash named by a full hash or a unique prefix of one under `.eve/builds/`.
    fn resolve_build(&self, name: &str) -> RuntimeResult<String> {
        let dir = self.inner.config.state_dir.join("builds");
        if dir.join(name).join("manifest.json").is_file() {
            return Ok(name.to_owned());
        }
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| !n.starts_with('.') && n.starts_with(name))
                    .collect()
            })
            .unwrap_or_default();
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(RuntimeError::ReleaseNotFound(name.to_owned())),
            n => Err(RuntimeError::Release(format!(
                "`{name}` names {n} builds; give more of the hash"
            ))),
        }
    }

    /// The active release; for a project with builds but no release rows yet (made before
    /// releases existed), the build `.eve/current` points at is recorded as its first release.
    pub(super) async fn baseline(&self) -> RuntimeResult<Option<Release>> {
        let all = self.releases_list().await?;
        if let Some(active) = all.iter().find(|r| r.status == ReleaseStatus::Active) {
            return Ok(Some(active.clone()));
        }
        if !all.is_empty() {
            return Ok(None);
        }
        let Some(hash) = eve_compile::build::current_hash(&self.inner.config.state_dir) else {
            return Ok(None);
        };
        if self.manifest_of(&hash).is_err() {
            return Ok(None);
        }
        let now = now_ms();
        let release = ReleaseRecord {
            id: format!("rel_{}", ulid::Ulid::new()),
            build_hash: hash.clone(),
            source: None,
            created_at: now,
            principal: RUNTIME_PRINCIPAL.to_owned(),
            checks: diagnostics_counts(&self.inner.config.state_dir, &hash),
            status: ReleaseStatus::Pending,
            delta: Delta::default(),
            base: None,
            activated_at: None,
            activated_by: None,
            previous: None,
            reason: Some("the build `.eve/current` named before releases were recorded".to_owned()),
            failures: 0,
        };
        let mut batch = Batch::durable();
        batch.push(Op::Release(ReleaseOp::Put(Box::new(release.clone()))));
        let mut data = built_data(&release);
        data["status"] = json!(ReleaseStatus::Active);
        batch.push(Op::Release(ReleaseOp::Event {
            kind: RELEASE_BUILT.to_owned(),
            data,
        }));
        push_activation(&mut batch, &release, None, RUNTIME_PRINCIPAL, now);
        self.commit_releases(batch).await?;
        Ok(Some(self.release(&release.id).await?))
    }

    async fn judge(
        &self,
        hash: &str,
        manifest: &Manifest,
        base: Option<Release>,
        force: bool,
    ) -> RuntimeResult<Candidate> {
        let base_manifest = match &base {
            Some(b) => Some(self.manifest_of(&b.build_hash)?),
            None => None,
        };
        let delta = capability_delta(base_manifest.as_ref(), manifest);
        let mut checks = diagnostics_counts(&self.inner.config.state_dir, hash);
        // The active release's policy governs; the first build activates.
        let (activation, gate) = match &base_manifest {
            Some(m) => (m.agent.config.activation, m.agent.config.gate.clone()),
            None => (Activation::Auto, Vec::new()),
        };
        if !gate.is_empty() {
            let report = match self.gate_runner() {
                Some(runner) => runner.run(hash, &gate).await,
                None => GateReport {
                    tags: gate.clone(),
                    cases: Vec::new(),
                    error: Some(
                        "this process cannot run evals (no gate runner is installed)".to_owned(),
                    ),
                },
            };
            checks.gate = Some(report);
        }
        let gate_failed = checks.gate.as_ref().is_some_and(|g| !g.passed());
        let verdict = if checks.errors > 0 || (gate_failed && !force) {
            Verdict::Reject
        } else if base.is_some() && activation == Activation::Review && delta.widens() {
            Verdict::Pending
        } else {
            Verdict::Activate
        };
        Ok(Candidate {
            build_hash: hash.to_owned(),
            base,
            delta,
            checks,
            activation,
            gate,
            verdict,
        })
    }
}

/// A new release of the candidate, recorded by `by` at `now`, pending until its operations say
/// otherwise.
pub(super) fn new_release(
    candidate: &Candidate,
    by: &Principal,
    opts: &ReleaseOpts,
    now: i64,
) -> ReleaseRecord {
    let mut checks = candidate.checks.clone();
    checks.forced = opts.force && candidate.checks.gate.as_ref().is_some_and(|g| !g.passed());
    if opts.checks.gate.is_some() && checks.gate.is_none() {
        checks.gate = opts.checks.gate.clone();
    }
    ReleaseRecord {
        id: format!("rel_{}", ulid::Ulid::new()),
        build_hash: candidate.build_hash.clone(),
        source: opts.source.clone(),
        created_at: now,
        principal: by.to_owned(),
        checks,
        status: ReleaseStatus::Pending,
        delta: candidate.delta.clone(),
        base: candidate.base.as_ref().map(|b| b.id.clone()),
        activated_at: None,
        activated_by: None,
        previous: None,
        reason: None,
        failures: 0,
    }
}

/// The operations that record `release` as built and make it active in place of `previous`
/// (`release.built`, `release.activated`); `release` becomes what they store.
pub(super) fn built_active(
    release: &mut Release,
    previous: Option<&Release>,
    by: &Principal,
    now: i64,
) -> Vec<ReleaseOp> {
    let mut ops = vec![ReleaseOp::Put(Box::new(release.clone()))];
    let mut data = built_data(release);
    data["status"] = json!(ReleaseStatus::Active);
    ops.push(ReleaseOp::Event {
        kind: RELEASE_BUILT.to_owned(),
        data,
    });
    ops.extend(activation_ops(release, previous, by, now));
    release.status = ReleaseStatus::Active;
    release.activated_at = Some(now);
    release.activated_by = Some(by.to_owned());
    release.previous = previous.map(|b| b.id.clone());
    ops
}

fn push_activation(
    batch: &mut Batch,
    release: &Release,
    previous: Option<&Release>,
    by: &Principal,
    now: i64,
) {
    for op in activation_ops(release, previous, by, now) {
        batch.push(Op::Release(op));
    }
}

/// `release` becomes the active release in place of `previous`, by `by` at `now`.
fn activation_ops(
    release: &Release,
    previous: Option<&Release>,
    by: &Principal,
    now: i64,
) -> [ReleaseOp; 2] {
    [
        ReleaseOp::Activate {
            id: release.id.clone(),
            demote: ReleaseStatus::Superseded,
            reason: None,
            at: now,
            by: by.to_owned(),
        },
        ReleaseOp::Event {
            kind: RELEASE_ACTIVATED.to_owned(),
            data: json!({
                "releaseId": release.id,
                "buildHash": release.build_hash,
                "principal": by,
                "previous": previous.map(|p| p.id.clone()),
                "forced": release.checks.forced,
            }),
        },
    ]
}

/// The counts of `diagnostics.json` of build `hash`.
pub(super) fn diagnostics_counts(state_dir: &std::path::Path, hash: &str) -> Checks {
    let path = state_dir.join("builds").join(hash).join("diagnostics.json");
    let mut checks = Checks::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return checks;
    };
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(&text) else {
        return checks;
    };
    for d in items {
        match d.get("severity").and_then(Value::as_str) {
            Some("error") => checks.errors += 1,
            Some("warning") => checks.warnings += 1,
            _ => {}
        }
    }
    checks
}

fn rejection(checks: &Checks) -> String {
    if checks.errors > 0 {
        return format!("the build has {}", count(checks.errors as usize, "error"));
    }
    match &checks.gate {
        Some(g) if g.error.is_some() => {
            format!(
                "the gate could not run: {}",
                g.error.clone().unwrap_or_default()
            )
        }
        Some(g) => {
            let failed: Vec<&str> = g.failed().map(|c| c.id.as_str()).collect();
            format!(
                "the gate ({}) failed: {}",
                g.tags.join(", "),
                failed.join(", ")
            )
        }
        None => "refused".to_owned(),
    }
}

fn built_data(r: &Release) -> Value {
    json!({
        "releaseId": r.id,
        "buildHash": r.build_hash,
        "status": r.status,
        "principal": r.principal,
        "source": r.source,
        "checks": r.checks,
        "widens": r.delta.widens(),
        "delta": r.delta,
    })
}

fn rejected_data(r: &Release) -> Value {
    let failed: Vec<&str> = r
        .checks
        .gate
        .as_ref()
        .map(|g| g.failed().map(|c| c.id.as_str()).collect())
        .unwrap_or_default();
    json!({
        "releaseId": r.id,
        "buildHash": r.build_hash,
        "principal": r.principal,
        "reason": r.reason,
        "failed": failed,
    })
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}
