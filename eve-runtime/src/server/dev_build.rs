//! What `eve dev` knows of its last rebuild that the build it serves cannot say: that the last
//! edit failed to build, and why.
//!
//! A rebuild with errors changes nothing on disk (the last good build keeps serving, and its
//! `diagnostics.json` is the good build's), so without this the console's agent view would show
//! the served build's diagnostics ("the build is clean") while the folder does not build. `eve dev`
//! records each rebuild's outcome here; `GET /eve/v1/agent` reports the failure as `failedBuild`
//! until a rebuild succeeds. Outside `eve dev` nothing records, and `failedBuild` is `null`.

use std::sync::{Arc, Mutex, PoisonError};

use eve_discover::Diagnostic;

use crate::store::now_ms;

/// The outcome of `eve dev`'s last rebuild, shared between its rebuild loop and the server (a
/// clone is the same record).
#[derive(Debug, Clone, Default)]
pub struct DevBuild(Arc<Mutex<Option<FailedBuild>>>);

/// A rebuild that failed: its diagnostics (errors and warnings, as `eve build` printed them) and
/// when it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedBuild {
    /// Every diagnostic of the failed build.
    pub(crate) diagnostics: Vec<Diagnostic>,
    /// When it was built, in milliseconds since the epoch.
    pub(crate) at_ms: i64,
}

impl DevBuild {
    /// The last rebuild failed with `diagnostics`: the last good build keeps serving.
    pub fn failed(&self, diagnostics: Vec<Diagnostic>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(FailedBuild {
            diagnostics,
            at_ms: now_ms(),
        });
    }

    /// The last rebuild built (whether or not its release became active).
    pub fn built(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The failure of the last rebuild, if it failed.
    pub(crate) fn failure(&self) -> Option<FailedBuild> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eve_discover::Code;

    #[test]
    fn a_failure_is_kept_until_a_build_succeeds_and_clones_share_it() {
        let record = DevBuild::default();
        let seen_by_server = record.clone();
        assert_eq!(seen_by_server.failure(), None);
        record.failed(vec![Diagnostic::new(
            Code::UnknownEntry,
            "agent/x".to_owned(),
            "unknown file",
        )]);
        let failure = seen_by_server.failure().unwrap();
        assert_eq!(failure.diagnostics.len(), 1);
        assert!(failure.at_ms > 0);
        record.built();
        assert_eq!(seen_by_server.failure(), None);
    }
}
