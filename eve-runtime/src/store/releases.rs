//! Release rows: which build is active, who made it so, what was checked and what it changed.
//!
//! Activation is the runtime's decision and must be recorded and reversible: every build that
//! `eve build` (or a proposal) hands to the runtime becomes a [`ReleaseRecord`] with its source
//! revision, its checks and its capability delta, and exactly one release is `active` at a time.
//! The audit events of releases (`release.built`, `release.activated`, …) form a stream of their
//! own with a dense index (like a session's), so `GET /eve/v1/releases/stream` and
//! `eve releases log` read them stored, then live. Written with [`ReleaseOp`]s inside a
//! [`super::Batch`], atomically with the events that announce them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The pseudo-session id release events carry in [`super::StoredEvent::session_id`].
pub const RELEASE_STREAM: &str = "releases";

/// Where a release stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseStatus {
    /// The build sessions move to (exactly one release at a time).
    Active,
    /// Was active; another release was activated after it.
    Superseded,
    /// Was active; a rollback (by a principal or automatic) replaced it.
    RolledBack,
    /// Refused: a gate failed, or the build had errors.
    Rejected,
    /// Waiting for a principal to activate it (a widening build under `activation: review`).
    Pending,
}

impl ReleaseStatus {
    /// The stored name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Superseded => "superseded",
            Self::RolledBack => "rolled_back",
            Self::Rejected => "rejected",
            Self::Pending => "pending",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "active" => Self::Active,
            "superseded" => Self::Superseded,
            "rolled_back" => Self::RolledBack,
            "rejected" => Self::Rejected,
            "pending" => Self::Pending,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ReleaseStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The source a build was made from: the git commit of `agent/` when it is in a repository.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRevision {
    /// The commit (`git rev-parse HEAD`).
    pub commit: String,
    /// Whether `agent/` had uncommitted changes.
    pub dirty: bool,
}

/// One gated eval case's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateCase {
    /// The case id.
    pub id: String,
    /// `passed`, `failed` or `error`.
    pub result: String,
    /// Why it did not pass (the first failure, or the error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the gate's evals said about a candidate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateReport {
    /// The tags run.
    pub tags: Vec<String>,
    /// Every case run, in suite order.
    pub cases: Vec<GateCase>,
    /// Why the gate could not run at all (no `evals/`, broken cases, no runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl GateReport {
    /// Whether every case passed (and there was something to run).
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.cases.iter().all(|c| c.result == "passed")
    }

    /// The cases that did not pass.
    pub fn failed(&self) -> impl Iterator<Item = &GateCase> {
        self.cases.iter().filter(|c| c.result != "passed")
    }
}

/// What was checked before a release was recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checks {
    /// Diagnostics of the build that were errors.
    pub errors: u64,
    /// Diagnostics of the build that were warnings.
    pub warnings: u64,
    /// The gate's evals, when the active release's policy has a gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateReport>,
    /// Whether a principal forced it past a failed gate or a review.
    #[serde(default)]
    pub forced: bool,
}

/// One release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    /// `rel_<ULID>`.
    pub id: String,
    /// The build (`.eve/builds/<hash>`).
    pub build_hash: String,
    /// The source revision, when `agent/` is in a git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRevision>,
    /// When it was recorded, ms since the epoch.
    pub created_at: i64,
    /// Who recorded it (`local:<user>`, an API principal, `runtime` for the runtime itself).
    pub principal: String,
    /// What was checked.
    pub checks: Checks,
    /// Where it stands.
    pub status: ReleaseStatus,
    /// The capability delta against the release that was active when it was recorded.
    pub delta: eve_compile::Delta,
    /// The release that was active when this one was recorded (what the delta compares with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// When it last became active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activated_at: Option<i64>,
    /// Who last made it active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activated_by: Option<String>,
    /// The release that was active just before this one last became active (where a rollback
    /// goes back to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// Why it is in its status (a rollback's reason, a gate's refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Failed turns counted on it since it last became active (automatic rollback).
    #[serde(default)]
    pub failures: u64,
}

/// A write to the releases (serialisable: a release recorded before its store exists is kept
/// as its operations until the store's next open applies them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseOp {
    /// Inserts a release or replaces it whole.
    Put(Box<ReleaseRecord>),
    /// Makes release `id` the active one: the release active before it (if another) takes
    /// `demote` (superseded or rolled back) with `reason`; `id` becomes active at `at`, by
    /// `by`, with `previous` naming the one it replaced and its failure count reset.
    Activate {
        /// The release to activate.
        id: String,
        /// What the previously active release becomes.
        demote: ReleaseStatus,
        /// Why (kept on the demoted release).
        reason: Option<String>,
        /// When.
        at: i64,
        /// Who.
        by: String,
    },
    /// Counts one failed turn on a release.
    CountFailure {
        /// The release.
        id: String,
    },
    /// Appends an audit event to the releases' stream.
    Event {
        /// Type (`release.activated`, …).
        kind: String,
        /// Data.
        data: Value,
    },
}

/// Applies a [`ReleaseOp::CountFailure`] to the stored releases: the release `id` with one more
/// failure, to be written back. Errors when `id` is not a release.
pub(crate) fn count_failure(
    rows: Vec<ReleaseRecord>,
    id: &str,
) -> super::StoreResult<ReleaseRecord> {
    let mut r = rows
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| super::StoreError::NotFound(format!("release {id}")))?;
    r.failures += 1;
    Ok(r)
}

/// Applies an [`ReleaseOp::Activate`] to the stored releases (oldest first); returns the ones
/// that changed, to be written back. The same rule for every backend. Errors when `id` is not a
/// release.
pub(crate) fn activate(
    rows: &[ReleaseRecord],
    id: &str,
    demote: ReleaseStatus,
    reason: Option<&str>,
    at: i64,
    by: &str,
) -> super::StoreResult<Vec<ReleaseRecord>> {
    let Some(target) = rows.iter().find(|r| r.id == id) else {
        return Err(super::StoreError::NotFound(format!("release {id}")));
    };
    let mut changed = Vec::new();
    let mut previous = None;
    for r in rows
        .iter()
        .filter(|r| r.status == ReleaseStatus::Active && r.id != id)
    {
        let mut r = r.clone();
        r.status = demote;
        r.reason = reason.map(str::to_owned);
        previous = Some(r.id.clone());
        changed.push(r);
    }
    let mut t = target.clone();
    if t.status != ReleaseStatus::Active {
        t.previous = previous.or(t.previous);
        t.status = ReleaseStatus::Active;
        t.activated_at = Some(at);
        t.activated_by = Some(by.to_owned());
        t.failures = 0;
        t.reason = None;
    }
    changed.push(t);
    Ok(changed)
}
