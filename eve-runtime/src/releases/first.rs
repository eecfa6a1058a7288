//! A project's first release, recorded without creating its store: what a clean `eve build`
//! does.
//!
//! With no store yet there is no active release, so the decision [`Runtime::release_build`]
//! would take is known without one: no policy applies (the first build activates), no gate runs,
//! the delta is everything the build can do. [`release_first_build`] takes the same decision
//! with the same records (the release, `release.built`, `release.activated`) and hands them to
//! the SQLite store as a release recorded beside it ([`SqliteStore::record_release`]), which its
//! next open stores before anything reads it; then it points `.eve/current` at the build, as an
//! activation does. Anything else (a store that exists, a release recorded already, a
//! `.eve/current` from before releases were recorded, a build with errors) is left to the
//! runtime.
//!
//! [`Runtime::release_build`]: crate::engine::Runtime::release_build

use std::path::Path;

use eve_compile::{Activation, capability_delta};

use super::activation::{built_active, diagnostics_counts, new_release};
use super::follow::point_current;
use super::{Candidate, Principal, ReleaseOpts, ReleaseOutcome, Verdict};
use crate::engine::{RuntimeResult, load_build};
use crate::store::{SqliteStore, now_ms};

/// Records build `hash` (in `state_dir`) as the first release of a project whose SQLite store
/// at `db` does not exist yet, active at once, without creating the store. `None`, with nothing
/// recorded: hand the build to a runtime ([`crate::engine::Runtime::release_build`]).
pub fn release_first_build(
    db: &Path,
    state_dir: &Path,
    hash: &str,
    by: &Principal,
    opts: ReleaseOpts,
) -> RuntimeResult<Option<ReleaseOutcome>> {
    // A build `.eve/current` named before releases were recorded becomes the first release
    // (`baseline`), and judges this one: the runtime's path.
    if state_dir.join("current").symlink_metadata().is_ok() {
        return Ok(None);
    }
    let checks = diagnostics_counts(state_dir, hash);
    if checks.errors > 0 {
        return Ok(None);
    }
    let (_, _, manifest) = load_build(state_dir, Some(hash))?;
    let candidate = Candidate {
        build_hash: hash.to_owned(),
        base: None,
        delta: capability_delta(None, &manifest),
        checks,
        activation: Activation::Auto,
        gate: Vec::new(),
        verdict: Verdict::Activate,
    };
    let now = now_ms();
    let mut release = new_release(&candidate, by, &opts, now);
    let ops = built_active(&mut release, None, by, now);
    if !SqliteStore::record_release(db, &release.id, now, ops)? {
        return Ok(None);
    }
    point_current(state_dir, hash);
    Ok(Some(ReleaseOutcome::Activated(release)))
}
