//! Hooks in the delta: added or removed hooks, and a changed hook. A hook sees every event it
//! subscribes to and a `tool.before` hook allows, denies or rewrites calls, so any change to
//! what a hook runs (its command or interpreter, the events it receives, the variables it is
//! given) widens, whatever its sandbox; a change to its script's bytes is found by `code`.

use std::collections::BTreeMap;

use super::code::runner_summary;
use super::sandbox::describe_sandbox;
use super::{ChangeKind, Differ};
use crate::manifest::*;

impl Differ {
    pub(super) fn hooks(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let old: BTreeMap<&str, &Hook> = prev
            .map(|a| a.hooks.iter().map(|h| (h.name.as_str(), h)).collect())
            .unwrap_or_default();
        for h in &next.hooks {
            let subject = format!("{prefix}{}", h.name);
            let Some(o) = old.get(h.name.as_str()) else {
                self.push(
                    ChangeKind::HookAdded,
                    subject,
                    None,
                    Some(format!(
                        "{}, {}",
                        h.events.join(","),
                        describe_sandbox(&next.hook_sandbox(h))
                    )),
                    true,
                );
                continue;
            };
            if o.runner != h.runner {
                self.push(
                    ChangeKind::HookChanged,
                    subject.clone(),
                    Some(runner_summary(&o.runner)),
                    Some(runner_summary(&h.runner)),
                    true,
                );
            }
            if o.events != h.events {
                self.push(
                    ChangeKind::HookChanged,
                    subject.clone(),
                    Some(format!("events {}", o.events.join(","))),
                    Some(format!("events {}", h.events.join(","))),
                    true,
                );
            }
            if o.env != h.env {
                self.push(
                    ChangeKind::HookChanged,
                    subject.clone(),
                    Some(format!("env {}", list(&o.env))),
                    Some(format!("env {}", list(&h.env))),
                    true,
                );
            }
            self.timeout(
                &subject,
                "timeout_ms",
                Some(o.timeout_ms),
                Some(h.timeout_ms),
            );
            if let Some(prev) = prev {
                let (a, b) = (prev.hook_sandbox(o), next.hook_sandbox(h));
                self.process_sandbox(&subject, Some(&a), Some(&b));
            }
        }
        for (n, h) in old {
            if !next.hooks.iter().any(|x| x.name == n) {
                // A `tool.before` hook guards calls: removing it lets through what it denied.
                let guard = h.events.iter().any(|e| e == "tool.before" || e == "*");
                self.push(
                    ChangeKind::HookRemoved,
                    format!("{prefix}{n}"),
                    Some(h.events.join(",")),
                    None,
                    guard,
                );
            }
        }
    }
}

/// `A,B`, or `none`.
pub(super) fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(",")
    }
}
