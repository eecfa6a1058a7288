//! The release policy in the delta: `activation`, `gate` and `rollback`, where asking less of a
//! new build is itself a widening.

use super::{ChangeKind, Differ};
use crate::manifest::*;

impl Differ {
    pub(super) fn policy(&mut self, prev: Option<&AgentConfig>, next: &AgentConfig) {
        let Some(prev) = prev else {
            if next.activation != Activation::Auto {
                self.push(
                    ChangeKind::PolicyTightened,
                    "activation".to_owned(),
                    None,
                    Some(next.activation.as_str().to_owned()),
                    false,
                );
            }
            if !next.gate.is_empty() {
                self.push(
                    ChangeKind::PolicyTightened,
                    "gate".to_owned(),
                    None,
                    Some(next.gate.join(", ")),
                    false,
                );
            }
            if let Some(r) = next.rollback {
                self.push(
                    ChangeKind::PolicyTightened,
                    "rollback".to_owned(),
                    None,
                    Some(rollback_summary(&r)),
                    false,
                );
            }
            return;
        };
        if prev.activation != next.activation {
            let loosened = next.activation < prev.activation;
            self.push(
                if loosened {
                    ChangeKind::PolicyLoosened
                } else {
                    ChangeKind::PolicyTightened
                },
                "activation".to_owned(),
                Some(prev.activation.as_str().to_owned()),
                Some(next.activation.as_str().to_owned()),
                loosened,
            );
        }
        if prev.gate != next.gate {
            let dropped = prev.gate.iter().any(|t| !next.gate.contains(t));
            let show = |g: &[String]| {
                if g.is_empty() {
                    "none".to_owned()
                } else {
                    g.join(", ")
                }
            };
            self.push(
                if dropped {
                    ChangeKind::PolicyLoosened
                } else {
                    ChangeKind::PolicyTightened
                },
                "gate".to_owned(),
                Some(show(&prev.gate)),
                Some(show(&next.gate)),
                dropped,
            );
        }
        if prev.rollback != next.rollback {
            let loosened = match (prev.rollback, next.rollback) {
                (Some(_), None) => true,
                (None, _) => false,
                // More failures needed, or fewer counted (a shorter window), act later.
                (Some(a), Some(b)) => b.failures > a.failures || b.window_ms < a.window_ms,
            };
            let show = |r: Option<RollbackPolicy>| {
                r.map(|r| rollback_summary(&r))
                    .unwrap_or_else(|| "none".to_owned())
            };
            self.push(
                if loosened {
                    ChangeKind::PolicyLoosened
                } else {
                    ChangeKind::PolicyTightened
                },
                "rollback".to_owned(),
                Some(show(prev.rollback)),
                Some(show(next.rollback)),
                loosened,
            );
        }
    }
}

fn rollback_summary(r: &RollbackPolicy) -> String {
    format!("{} failures in {}", r.failures, duration(r.window_ms))
}

/// `90000` → `90s`, `600000` → `10m`, `3600000` → `1h`.
fn duration(ms: u64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}
