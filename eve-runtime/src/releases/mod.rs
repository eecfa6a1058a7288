//! Releases: the runtime decides which build is live, records it, and can take it back.
//!
//! Releases are not part of a turn: the engine only counts a failed turn on its release (in the
//! commit that ends it) and runs sessions on the build the active release names. The methods
//! here are `Runtime`'s, on the runtime's share of state ([`ReleaseState`]).
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
//! `.eve/builds/`. Automatic rollback counts, in the store, the failed turns of a release with a
//! `rollback:` policy, whichever process ran them, and re-activates the previous release when
//! too many fail in the window.
//!
//! Here: the release types, the releases' share of the runtime's state, and the reads every
//! move shares. `activation.rs` judges a candidate (delta, gate) and records or activates it;
//! `rollback.rs` takes a release back, by a principal or automatically; `follow.rs` keeps this
//! process (its build store, `.eve/current`) on the active release and streams the audit events;
//! `first.rs` records a project's first release without creating its store (a clean `eve build`).
//!
//! [`BuildStore`]: crate::engine::BuildStore

mod activation;
mod first;
mod follow;
mod rollback;

use std::sync::{Arc, Mutex, Weak};

use eve_compile::{Activation, Delta, Manifest};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::engine::{Inner, Runtime, RuntimeError, RuntimeResult};
use crate::store::{
    Batch, Checks, GateReport, Op, ReleaseOp, ReleaseRecord, ReleaseStatus, SourceRevision,
    StoredEvent,
};

pub use self::first::release_first_build;
pub use self::follow::ReleaseFollower;

/// A release row (see [`ReleaseRecord`]).
pub type Release = ReleaseRecord;

/// Who does something: the principal id the runtime records (`local:<user>` for the CLI, an
/// API principal such as `token:EVE_API_TOKEN` or `jwt:<sub>`, `runtime` for the runtime's own
/// decisions such as an automatic rollback).
pub(crate) type Principal = str;

/// The principal of the runtime's own decisions (automatic rollback, an upgrade's first release).
pub(crate) const RUNTIME_PRINCIPAL: &str = "runtime";

/// `release.built`: a build was recorded as a release (any status).
pub(crate) const RELEASE_BUILT: &str = "release.built";
/// `release.activated`: a release became the active one.
pub(crate) const RELEASE_ACTIVATED: &str = "release.activated";
/// `release.rejected`: a release was refused (a failed gate).
pub(crate) const RELEASE_REJECTED: &str = "release.rejected";
/// `release.rolled_back`: the active release was replaced by an earlier one.
pub(crate) const RELEASE_ROLLED_BACK: &str = "release.rolled_back";
/// `release.rollback_held`: failures reached the `rollback:` threshold, but the runtime did not
/// move: the active release was itself restored by an automatic rollback, or every earlier
/// release was rolled back. An alert for a principal, never a silent ping-pong.
pub(crate) const RELEASE_ROLLBACK_HELD: &str = "release.rollback_held";
/// `change.proposed`: the agent proposed a change to its own folder.
pub const CHANGE_PROPOSED: &str = "change.proposed";
/// `change.approved`: a principal approved a proposed change.
pub(crate) const CHANGE_APPROVED: &str = "change.approved";
/// `change.denied`: a principal denied a proposed change.
pub(crate) const CHANGE_DENIED: &str = "change.denied";

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
    pub(crate) build_hash: String,
    /// The active release it is compared with (`None`: the first build).
    pub base: Option<Release>,
    /// The capability delta against the active release.
    pub delta: Delta,
    /// Diagnostics counts, and the gate's results when the policy has a gate.
    pub(crate) checks: Checks,
    /// The activation policy that applies (the active release's).
    pub(crate) activation: Activation,
    /// The gate tags that apply (the active release's).
    pub(crate) gate: Vec<String>,
    /// What [`Runtime::release_build`] would do with it.
    pub verdict: Verdict,
}

/// The releases' share of the runtime's state.
#[derive(Default)]
pub(crate) struct ReleaseState {
    gate: Mutex<Option<Arc<dyn GateRunner>>>,
    /// Release events this process committed.
    live: Mutex<Option<broadcast::Sender<StoredEvent>>>,
    /// Serialises this process's release decisions.
    pub(crate) lock: tokio::sync::Mutex<()>,
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
}

fn upgrade(weak: &Weak<Inner>) -> Option<Runtime> {
    weak.upgrade().map(|inner| Runtime { inner })
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

pub(crate) fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else if let Some(stem) = what.strip_suffix('y') {
        format!("{n} {stem}ies")
    } else {
        format!("{n} {what}s")
    }
}

/// The source revision of `dir` when it is in a git repository: the commit checked out and
/// whether git lists changes under `dir` (one `git status` process). `None` without git, a
/// repository or a first commit; git is not started when nothing says there may be one.
pub fn source_revision(dir: &std::path::Path) -> Option<SourceRevision> {
    if !may_be_in_git(dir) {
        return None;
    }
    // One git process answers both: `# branch.oid` names the commit, any other line is a change
    // under `dir`. `--no-optional-locks`: the build never takes the index lock a person's own
    // git command may be waiting for.
    let output = std::process::Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(dir)
        .args(["status", "--porcelain=v2", "--branch", "--", "."])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    parse_status(&String::from_utf8_lossy(&output.stdout))
}

/// The source revision in `git status --porcelain=v2 --branch` output: the commit of
/// `# branch.oid` (none before the first commit), dirty when any change is listed.
fn parse_status(text: &str) -> Option<SourceRevision> {
    let mut commit = None;
    let mut dirty = false;
    for line in text.lines() {
        match line.strip_prefix("# ") {
            Some(header) => {
                if let Some(oid) = header.strip_prefix("branch.oid ") {
                    let oid = oid.trim();
                    if oid.len() >= 40 && oid.bytes().all(|b| b.is_ascii_hexdigit()) {
                        commit = Some(oid.to_owned());
                    }
                }
            }
            None if !line.trim().is_empty() => dirty = true,
            None => {}
        }
    }
    Some(SourceRevision {
        commit: commit?,
        dirty,
    })
}

/// Whether git could find a repository for `dir`: a `.git` in it or a folder above it, a folder
/// above laid out as a bare repository, or `GIT_DIR` (which names one anywhere). Starting git
/// only to hear that there is none costs more than the rest of a small build.
fn may_be_in_git(dir: &std::path::Path) -> bool {
    if std::env::var_os(crate::env_vars::GIT_DIR).is_some() {
        return true;
    }
    let Ok(dir) = std::path::absolute(dir) else {
        return true;
    };
    dir.ancestors().any(|d| {
        d.join(".git").symlink_metadata().is_ok()
            || (d.join("HEAD").is_file() && d.join("objects").is_dir() && d.join("refs").is_dir())
    })
}

/// The principal id of the person at this terminal: `local:<user>`.
pub fn local_principal() -> String {
    let user = std::env::var(crate::env_vars::USER)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "operator".to_owned());
    format!("local:{user}")
}

#[cfg(test)]
mod source_tests {
    use super::*;

    fn git(dir: &std::path::Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?}");
    }

    /// The commit and the dirty flag, through a real git repository: none before the first
    /// commit, clean after it, dirty with a changed or an untracked file under the folder, and
    /// clean again when the change is elsewhere in the repository.
    #[test]
    fn source_revision_reads_one_git_status() {
        if std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: no git on this machine");
            return;
        }
        let repo = tempfile::tempdir().unwrap();
        let agent = repo.path().join("agent");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(agent.join("instructions.md"), "hi").unwrap();
        git(repo.path(), &["init", "-q"]);
        assert_eq!(source_revision(&agent), None, "no commit yet");
        git(repo.path(), &["add", "."]);
        git(repo.path(), &["commit", "-q", "-m", "first"]);
        let clean = source_revision(&agent).expect("a revision");
        assert_eq!(clean.commit.len(), 40);
        assert!(!clean.dirty);
        std::fs::write(repo.path().join("elsewhere.txt"), "x").unwrap();
        assert!(
            !source_revision(&agent).unwrap().dirty,
            "a change elsewhere"
        );
        std::fs::write(agent.join("instructions.md"), "changed").unwrap();
        assert!(source_revision(&agent).unwrap().dirty, "a changed file");
        git(repo.path(), &["checkout", "-q", "--", "agent"]);
        std::fs::write(agent.join("new.md"), "new").unwrap();
        let untracked = source_revision(&agent).unwrap();
        assert!(untracked.dirty, "an untracked file");
        assert_eq!(untracked.commit, clean.commit);
    }

    #[test]
    fn status_lines_parse() {
        let oid = "a".repeat(40);
        let clean = format!("# branch.oid {oid}\n# branch.head main\n");
        assert_eq!(
            parse_status(&clean),
            Some(SourceRevision {
                commit: oid.clone(),
                dirty: false
            })
        );
        let dirty = format!("{clean}1 .M N... 100644 100644 100644 x y agent/a.md\n");
        assert!(parse_status(&dirty).unwrap().dirty);
        assert_eq!(parse_status("# branch.oid (initial)\n? new.md\n"), None);
    }
}
