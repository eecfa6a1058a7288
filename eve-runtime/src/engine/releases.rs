//! Releases: the runtime decides which build is live, records it, and can take it back.
//!
//! `eve build` writes a build; it does not make it live. [`Runtime::release_build`] does, under
//! the policy of the release that is active now (`activation`, `gate`, `rollback` of its
//! `agent.yaml`, so a candidate cannot relax its own gate): it computes the capability delta
//! against the active release, runs the gated evals through the [`GateRunner`] the CLI installs,
//! and activates, parks (pending review) or rejects the build, recording a [`Release`] and an
//! audit event either way. [`Runtime::activate`] and [`Runtime::rollback`] are a principal's
//! decisions. The active release is the source of truth for "current": the [`BuildStore`]
//! follows it (refreshed when another process or fleet node commits), and `.eve/current` is kept
//! pointed at its build for tools that read the link. Nothing is rebuilt: builds stay in
//! `.eve/builds/`. Automatic rollback watches the turns this process runs on a release with a
//! `rollback:` policy and re-activates the previous release when too many fail in the window.
//!
//! [`BuildStore`]: super::BuildStore

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use eve_compile::{Activation, Delta, Manifest, RollbackPolicy, capability_delta};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::error::{RuntimeError, RuntimeResult};
use super::{Inner, Runtime, events};
use crate::store::{
    Batch, Checks, GateReport, Op, ReleaseOp, ReleaseRecord, ReleaseStatus, SourceRevision,
    StoredEvent, now_ms,
};

/// A release row (see [`ReleaseRecord`]).
pub type Release = ReleaseRecord;

/// Who does something: the principal id the runtime records (`local:<user>` for the CLI, an
/// API principal such as `token:EVE_API_TOKEN` or `jwt:<sub>`, `runtime` for the runtime's own
/// decisions such as an automatic rollback).
pub type Principal = str;

/// The principal of the runtime's own decisions (automatic rollback, an upgrade's first release).
pub const RUNTIME_PRINCIPAL: &str = "runtime";

/// `release.built`: a build was recorded as a release (any status).
pub const RELEASE_BUILT: &str = "release.built";
/// `release.activated`: a release became the active one.
pub const RELEASE_ACTIVATED: &str = "release.activated";
/// `release.rejected`: a release was refused (a failed gate).
pub const RELEASE_REJECTED: &str = "release.rejected";
/// `release.rolled_back`: the active release was replaced by an earlier one.
pub const RELEASE_ROLLED_BACK: &str = "release.rolled_back";
/// `change.proposed`: the agent proposed a change to its own folder.
pub const CHANGE_PROPOSED: &str = "change.proposed";
/// `change.approved`: a principal approved a proposed change.
pub const CHANGE_APPROVED: &str = "change.approved";
/// `change.denied`: a principal denied a proposed change.
pub const CHANGE_DENIED: &str = "change.denied";

/// Runs the gated evals (`gate: [tags]`) on a candidate build. The eval runner lives in the CLI,
/// which installs one on the runtimes it builds ([`Runtime::set_gate_runner`]).
pub trait GateRunner: Send + Sync {
    /// Runs the cases tagged with any of `tags` against build `build_hash`.
    fn run(&self, build_hash: &str, tags: &[String]) -> BoxFuture<'static, GateReport>;
}

/// How [`Runtime::release_build`] treats a build.
#[derive(Debug, Clone, Default)]
pub struct ReleaseOpts {
    /// Activate even when the gate fails (recorded as forced).
    pub force: bool,
    /// The source revision (`git` commit and dirty flag), when known.
    pub source: Option<SourceRevision>,
    /// Checks known to the caller; the diagnostics counts are read from the build itself.
    pub checks: Checks,
}

/// What [`Runtime::release_build`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReleaseOutcome {
    /// The build is the active release.
    Activated(Release),
    /// The build widens a capability under `activation: review`: it waits for a principal.
    Pending(Release),
    /// The build was refused (a failed gate, or errors).
    Rejected(Release),
}

impl ReleaseOutcome {
    /// The release, whatever happened.
    pub fn release(&self) -> &Release {
        match self {
            Self::Activated(r) | Self::Pending(r) | Self::Rejected(r) => r,
        }
    }
}

/// What would happen to a candidate build, without recording or activating anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It would activate.
    Activate,
    /// It would wait for a principal (it widens a capability under review).
    Pending,
    /// It would be refused (failed gate or errors).
    Reject,
}

/// A candidate build judged against the active release ([`Runtime::candidate`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The build.
    pub build_hash: String,
    /// The active release it is compared with (`None`: the first build).
    pub base: Option<Release>,
    /// The capability delta against the active release.
    pub delta: Delta,
    /// Diagnostics counts, and the gate's results when the policy has a gate.
    pub checks: Checks,
    /// The activation policy that applies (the active release's).
    pub activation: Activation,
    /// The gate tags that apply (the active release's).
    pub gate: Vec<String>,
    /// What [`Runtime::release_build`] would do with it.
    pub verdict: Verdict,
}

/// The releases' share of the runtime's state.
#[derive(Default)]
pub(crate) struct ReleaseState {
    gate: Mutex<Option<Arc<dyn GateRunner>>>,
    /// Release events this process committed.
    live: Mutex<Option<broadcast::Sender<StoredEvent>>>,
    /// The active release when it has a `rollback:` policy (what the failure monitor watches).
    watched: Mutex<Option<watch::Sender<Option<Watched>>>>,
    /// Serialises this process's release decisions.
    pub(crate) lock: tokio::sync::Mutex<()>,
}

#[derive(Debug, Clone, PartialEq)]
struct Watched {
    release: String,
    build_hash: String,
    activated_at: i64,
    policy: RollbackPolicy,
}

impl ReleaseState {
    fn live(&self) -> broadcast::Sender<StoredEvent> {
        match self.live.lock() {
            Ok(mut live) => live
                .get_or_insert_with(|| broadcast::channel(256).0)
                .clone(),
            Err(_) => broadcast::channel(1).0,
        }
    }
}

/// How often a release follower looks at the store when nothing tells it to.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

impl Runtime {
    /// Installs the runner of gated evals.
    pub fn set_gate_runner(&self, runner: Arc<dyn GateRunner>) {
        if let Ok(mut gate) = self.inner.releases.gate.lock() {
            *gate = Some(runner);
        }
    }

    fn gate_runner(&self) -> Option<Arc<dyn GateRunner>> {
        self.inner.releases.gate.lock().ok().and_then(|g| g.clone())
    }

    /// Every release, oldest first.
    pub async fn releases_list(&self) -> RuntimeResult<Vec<Release>> {
        Ok(self.inner.store.releases().await?)
    }

    /// One release, by id, a unique id prefix, or a build hash (or unique hash prefix; the
    /// newest release of that build).
    pub async fn release(&self, id: &str) -> RuntimeResult<Release> {
        let all = self.releases_list().await?;
        find(&all, id)
            .cloned()
            .ok_or_else(|| RuntimeError::ReleaseNotFound(id.to_owned()))
    }

    /// The active release, if any.
    pub async fn active_release(&self) -> RuntimeResult<Option<Release>> {
        let all = self.releases_list().await?;
        Ok(all.into_iter().find(|r| r.status == ReleaseStatus::Active))
    }

    /// Audit events of the releases' stream from `from` on (at most `limit`, 0 = all).
    pub async fn release_events(&self, from: u64, limit: usize) -> RuntimeResult<Vec<StoredEvent>> {
        let limit = if limit == 0 { usize::MAX >> 1 } else { limit };
        Ok(self.inner.store.release_events(from, limit).await?)
    }

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

    /// Appends an audit event to the releases' stream (`change.proposed`, `change.approved`,
    /// `change.denied`, …) and tells its followers.
    pub async fn audit(&self, kind: &str, data: Value) -> RuntimeResult<StoredEvent> {
        let mut batch = Batch::durable();
        batch.push(Op::Release(ReleaseOp::Event {
            kind: kind.to_owned(),
            data,
        }));
        let committed = self.commit_releases(batch).await?;
        committed
            .into_iter()
            .next()
            .ok_or_else(|| RuntimeError::Other("the audit event was not stored".to_owned()))
    }

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
        let mut checks = candidate.checks.clone();
        checks.forced = opts.force && candidate.checks.gate.as_ref().is_some_and(|g| !g.passed());
        if opts.checks.gate.is_some() && checks.gate.is_none() {
            checks.gate = opts.checks.gate.clone();
        }
        let now = now_ms();
        let mut release = ReleaseRecord {
            id: format!("rel_{}", ulid::Ulid::new()),
            build_hash: hash.to_owned(),
            source: opts.source.clone(),
            created_at: now,
            principal: by.to_owned(),
            checks,
            status: ReleaseStatus::Pending,
            delta: candidate.delta.clone(),
            base: base.as_ref().map(|b| b.id.clone()),
            activated_at: None,
            activated_by: None,
            previous: None,
            reason: None,
            failures: 0,
        };
        // On a fleet's store, every node must be able to load the release it will follow.
        if self.inner.store.shared() {
            super::publish::publish_build(self.inner.store.as_ref(), self.state_dir(), hash)
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
                batch.push(Op::Release(ReleaseOp::Put(Box::new(release.clone()))));
                let mut data = built_data(&release);
                data["status"] = json!(ReleaseStatus::Active);
                batch.push(Op::Release(ReleaseOp::Event {
                    kind: RELEASE_BUILT.to_owned(),
                    data,
                }));
                self.push_activation(&mut batch, &release, base.as_ref(), by, None, now);
                release.status = ReleaseStatus::Active;
                release.activated_at = Some(now);
                release.activated_by = Some(by.to_owned());
                release.previous = base.as_ref().map(|b| b.id.clone());
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
        self.push_activation(&mut batch, &updated, active.as_ref(), by, None, now);
        self.commit_releases(batch).await?;
        let release = self.release(&target.id).await?;
        self.follow_active(Some(&release)).await;
        Ok(release)
    }

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

    // ---- internals -------------------------------------------------------------------------

    fn push_activation(
        &self,
        batch: &mut Batch,
        release: &Release,
        previous: Option<&Release>,
        by: &Principal,
        reason: Option<String>,
        now: i64,
    ) {
        batch.push(Op::Release(ReleaseOp::Activate {
            id: release.id.clone(),
            demote: ReleaseStatus::Superseded,
            reason,
            at: now,
            by: by.to_owned(),
        }));
        batch.push(Op::Release(ReleaseOp::Event {
            kind: RELEASE_ACTIVATED.to_owned(),
            data: json!({
                "releaseId": release.id,
                "buildHash": release.build_hash,
                "principal": by,
                "previous": previous.map(|p| p.id.clone()),
                "forced": release.checks.forced,
            }),
        }));
    }

    /// Commits a batch of release operations; tells this process's release followers.
    async fn commit_releases(&self, batch: Batch) -> RuntimeResult<Vec<StoredEvent>> {
        let committed = self.commit_quietly(batch).await?;
        let live = self.inner.releases.live();
        for e in &committed.events {
            let _ = live.send(e.clone());
        }
        Ok(committed.events)
    }

    fn manifest_of(&self, hash: &str) -> RuntimeResult<Manifest> {
        Ok(self.inner.builds.get(hash)?.manifest.clone())
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
    async fn baseline(&self) -> RuntimeResult<Option<Release>> {
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
        self.push_activation(&mut batch, &release, None, RUNTIME_PRINCIPAL, None, now);
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

    /// Points this process at the active release: the build store's current build, the
    /// `.eve/current` link, and the failure monitor.
    pub(crate) async fn follow_active(&self, active: Option<&Release>) {
        let hash = active.map(|r| r.build_hash.clone());
        if let Some(h) = &hash
            && self.inner.builds.get(h).is_ok()
            && eve_compile::build::current_hash(&self.inner.config.state_dir).as_deref()
                != Some(h.as_str())
        {
            let link = self.inner.config.state_dir.join("current");
            let tmp = self
                .inner
                .config
                .state_dir
                // Unique per call: two follows in one process must not remove each other's link.
                .join(format!(
                    ".current-{}-{}",
                    std::process::id(),
                    ulid::Ulid::new()
                ));
            let _ = std::fs::remove_file(&tmp);
            let pointed = std::os::unix::fs::symlink(std::path::Path::new("builds").join(h), &tmp)
                .and_then(|()| std::fs::rename(&tmp, &link));
            if let Err(e) = pointed {
                let _ = std::fs::remove_file(&tmp);
                tracing::warn!(error = %e, link = %link.display(), "cannot point the link at the active build");
            }
        }
        self.inner.builds.set_active(hash);
        let watched = match active {
            Some(r) => match (self.inner.builds.get(&r.build_hash), r.activated_at) {
                (Ok(b), Some(at)) => b.manifest.agent.config.rollback.map(|policy| Watched {
                    release: r.id.clone(),
                    build_hash: r.build_hash.clone(),
                    activated_at: at,
                    policy,
                }),
                _ => None,
            },
            None => None,
        };
        let sender = self
            .inner
            .releases
            .watched
            .lock()
            .ok()
            .and_then(|w| w.clone());
        if let Some(tx) = sender {
            tx.send_if_modified(|w| {
                if *w == watched {
                    false
                } else {
                    *w = watched;
                    true
                }
            });
        }
    }

    /// Reads the active release and follows it; then again whenever another process commits.
    /// Started with the runtime when there is an async runtime to run it on.
    pub(crate) fn start_releases(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tx, rx) = watch::channel(None);
        if let Ok(mut w) = self.inner.releases.watched.lock() {
            *w = Some(tx);
        }
        let weak = Arc::downgrade(&self.inner);
        let mut foreign = self.inner.store.foreign_commits();
        handle.spawn({
            let weak = weak.clone();
            async move {
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
            }
        });
        handle.spawn(monitor(weak, rx));
    }
}

fn upgrade(weak: &Weak<Inner>) -> Option<Runtime> {
    weak.upgrade().map(|inner| Runtime { inner })
}

/// Counts the failed turns this process runs on a watched release; rolls back at the limit.
async fn monitor(weak: Weak<Inner>, mut watched: watch::Receiver<Option<Watched>>) {
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
        match self
            .rollback_from(&release, None, RUNTIME_PRINCIPAL, &reason, extra)
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

    /// The index of the next event this follower returns.
    pub fn position(&self) -> u64 {
        self.next
    }
}

/// The release `id` names: an id, a unique id prefix, a build hash or a unique prefix of one
/// (the newest release of that build).
fn find<'a>(all: &'a [Release], id: &str) -> Option<&'a Release> {
    let id = id.trim();
    if id.is_empty() {
        return None;
    }
    if let Some(r) = all.iter().find(|r| r.id == id) {
        return Some(r);
    }
    if let Some(r) = all.iter().rev().find(|r| r.build_hash == id) {
        return Some(r);
    }
    let by_id: Vec<&Release> = all.iter().filter(|r| r.id.starts_with(id)).collect();
    if by_id.len() == 1 {
        return by_id.first().copied();
    }
    let mut hashes: Vec<&str> = all
        .iter()
        .filter(|r| r.build_hash.starts_with(id))
        .map(|r| r.build_hash.as_str())
        .collect();
    hashes.dedup();
    if hashes.len() == 1 {
        return all.iter().rev().find(|r| r.build_hash.starts_with(id));
    }
    None
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

/// The counts of `diagnostics.json` of build `hash`.
fn diagnostics_counts(state_dir: &std::path::Path, hash: &str) -> Checks {
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

pub(crate) fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else if let Some(stem) = what.strip_suffix('y') {
        format!("{n} {stem}ies")
    } else {
        format!("{n} {what}s")
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn window(ms: u64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// The source revision of `dir` when it is in a git repository: `git rev-parse HEAD` and
/// whether `git status --porcelain` lists changes under it. `None` without git or a repository.
pub fn source_revision(dir: &std::path::Path) -> Option<SourceRevision> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "HEAD"])?;
    if commit.is_empty() {
        return None;
    }
    let dirty = git(&["status", "--porcelain", "--", "."]).is_some_and(|s| !s.is_empty());
    Some(SourceRevision { commit, dirty })
}

/// The principal id of the person at this terminal: `local:<user>`.
pub fn local_principal() -> String {
    let user = std::env::var(crate::env_vars::USER)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "operator".to_owned());
    format!("local:{user}")
}
