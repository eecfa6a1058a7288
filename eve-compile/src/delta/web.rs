//! `web:` in the delta: where the built-in `web_fetch` may go. It runs in eve's own process under
//! these rules, so widening them is a network capability of the agent like its sandbox's
//! `network:`: `public: true` where it was `false`, an `allow` entry added (a guarded address,
//! a private range, a name beyond `public: false`), or a `deny` entry removed.

use super::{ChangeKind, Differ};
use crate::manifest::*;

fn show(entries: &[String]) -> String {
    if entries.is_empty() {
        "(none)".to_owned()
    } else {
        entries.join(", ")
    }
}

impl Differ {
    /// `web:` of one agent before (`None`: a first build, compared with the defaults, where only
    /// what widens is listed) and after.
    pub(super) fn web(&mut self, prefix: &str, old: Option<&Web>, new: &Web) {
        let first = old.is_none();
        let default = Web::default();
        let old = old.unwrap_or(&default);
        let subject = |field: &str| format!("{prefix}web.{field}");
        if old.public != new.public && (new.public || !first) {
            self.push(
                ChangeKind::NetworkWidened,
                subject("public"),
                Some(old.public.to_string()),
                Some(new.public.to_string()),
                new.public,
            );
        }
        let added_allow = new.allow.iter().any(|e| !old.allow.contains(e));
        let removed_allow = old.allow.iter().any(|e| !new.allow.contains(e));
        if added_allow || (removed_allow && !first) {
            self.push(
                ChangeKind::NetworkWidened,
                subject("allow"),
                Some(show(&old.allow)),
                Some(show(&new.allow)),
                added_allow,
            );
        }
        let removed_deny = old.deny.iter().any(|e| !new.deny.contains(e));
        let added_deny = new.deny.iter().any(|e| !old.deny.contains(e));
        if removed_deny || (added_deny && !first) {
            self.push(
                ChangeKind::NetworkWidened,
                subject("deny"),
                Some(show(&old.deny)),
                Some(show(&new.deny)),
                removed_deny,
            );
        }
    }
}
