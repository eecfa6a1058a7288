//! Sandboxes in the delta: an agent's `sandbox.yaml` (provider, network, extra paths; its
//! limits are `limits`'s) and the effective sandbox of one tool, hook or connection process.

use super::{ChangeKind, Differ};
use crate::manifest::*;

pub(super) fn describe_sandbox(s: &EffectiveSandbox) -> String {
    format!("{}, network {}", s.provider.as_str(), s.network.describe())
}

impl Differ {
    /// The effective sandbox of one process (tool, hook, connection) before and after.
    pub(super) fn process_sandbox(
        &mut self,
        subject: &str,
        old: Option<&EffectiveSandbox>,
        new: Option<&EffectiveSandbox>,
    ) {
        let (Some(old), Some(new)) = (old, new) else {
            return;
        };
        if old.provider == Provider::Isolated && new.provider == Provider::Host {
            self.push(
                ChangeKind::SandboxWidened,
                subject.to_owned(),
                Some(old.provider.as_str().to_owned()),
                Some(new.provider.as_str().to_owned()),
                true,
            );
        } else if new.network.widens(&old.network) {
            self.push(
                ChangeKind::NetworkWidened,
                subject.to_owned(),
                Some(old.network.describe()),
                Some(new.network.describe()),
                true,
            );
        }
    }

    /// `sandbox.yaml` of one agent (a first build is compared with the defaults).
    pub(super) fn sandbox(&mut self, prefix: &str, old: &Sandbox, new: &Sandbox) {
        let subject = format!("{prefix}sandbox");
        if old.provider == Provider::Isolated && new.provider == Provider::Host {
            self.push(
                ChangeKind::SandboxWidened,
                subject.clone(),
                Some(old.provider.as_str().to_owned()),
                Some(new.provider.as_str().to_owned()),
                true,
            );
        }
        if new.network.widens(&old.network) {
            self.push(
                ChangeKind::NetworkWidened,
                subject.clone(),
                Some(old.network.describe()),
                Some(new.network.describe()),
                true,
            );
        }
        for (what, a, b) in [
            ("write", &old.write, &new.write),
            ("read", &old.read, &new.read),
        ] {
            for path in b.iter().filter(|p| !a.contains(p)) {
                self.push(
                    ChangeKind::SandboxWidened,
                    format!("{subject}.{what}"),
                    None,
                    Some(path.clone()),
                    true,
                );
            }
        }
    }
}
