//! Environment variables in the delta: every name the build reads (`env:` of tools and hooks,
//! the environment of connections, `${VAR}` references anywhere), newly read ones widening.

use std::collections::BTreeSet;

use super::{ChangeKind, Differ};
use crate::manifest::*;

impl Differ {
    /// Environment variables the whole build reads: `env:` of tools and hooks, the environment
    /// of connections, and every `${VAR}` reference anywhere in the manifest.
    pub(super) fn env(&mut self, prev: Option<&Manifest>, next: &Manifest) {
        let old = prev.map(env_names).unwrap_or_default();
        for name in env_names(next) {
            if !old.contains(&name) {
                self.push(ChangeKind::EnvAdded, name, None, None, true);
            }
        }
    }
}

fn env_names(m: &Manifest) -> BTreeSet<String> {
    fn walk(a: &Agent, out: &mut BTreeSet<String>) {
        for t in &a.tools {
            out.extend(t.env.iter().cloned());
        }
        for h in &a.hooks {
            out.extend(h.env.iter().cloned());
        }
        for c in &a.connections {
            if let Transport::Stdio { env, .. } = &c.transport {
                out.extend(env.keys().cloned());
            }
        }
        for s in &a.subagents {
            walk(s, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(&m.agent, &mut out);
    // `${VAR}` references anywhere (connection settings, channel auth, HTTP tools).
    if let Ok(text) = serde_json::to_string(&m.agent) {
        let mut rest = text.as_str();
        while let Some(i) = rest.find("${") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find('}') else { break };
            let name = &rest[..end];
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                out.insert(name.to_owned());
            }
        }
    }
    out
}
