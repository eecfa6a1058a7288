//! MCP connections in the delta: added or removed servers, a changed command, URL, environment
//! or headers, a tool filter that lets more through, and their approval and sandbox.

use std::collections::BTreeMap;

use super::sandbox::describe_sandbox;
use super::tools::approval_name;
use super::{ChangeKind, Differ};
use crate::manifest::*;

fn transport_summary(t: &Transport) -> String {
    match t {
        Transport::Stdio { command, args, .. } => {
            let mut s = command.clone();
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        }
        Transport::Http { url, .. } => url.clone(),
    }
}

impl Differ {
    pub(super) fn connections(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let old: BTreeMap<&str, &Connection> = prev
            .map(|a| a.connections.iter().map(|c| (c.name.as_str(), c)).collect())
            .unwrap_or_default();
        for c in &next.connections {
            let subject = format!("{prefix}{}", c.name);
            let Some(o) = old.get(c.name.as_str()) else {
                let mut after = transport_summary(&c.transport);
                after.push_str(&format!(", approval {}", approval_name(c.approval)));
                if let Some(sb) = next.connection_sandbox(c) {
                    after.push_str(&format!(", {}", describe_sandbox(&sb)));
                }
                self.push(
                    ChangeKind::ConnectionAdded,
                    subject,
                    None,
                    Some(after),
                    true,
                );
                continue;
            };
            let (a, b) = (
                transport_summary(&o.transport),
                transport_summary(&c.transport),
            );
            if o.transport != c.transport {
                let what = if a == b {
                    // Same command or URL: its environment or headers changed.
                    match &c.transport {
                        Transport::Stdio { env, .. } => format!(
                            "{b} (env {})",
                            env.keys().cloned().collect::<Vec<_>>().join(",")
                        ),
                        Transport::Http { headers, .. } => format!(
                            "{b} (headers {})",
                            headers.keys().cloned().collect::<Vec<_>>().join(",")
                        ),
                    }
                } else {
                    b.clone()
                };
                self.push(
                    ChangeKind::ConnectionChanged,
                    subject.clone(),
                    Some(a),
                    Some(what),
                    true,
                );
            }
            if o.tools != c.tools {
                // More tools let through: `allow` emptied or grown, `block` shrunk.
                let widened = (!o.tools.allow.is_empty()
                    && (c.tools.allow.is_empty()
                        || c.tools.allow.iter().any(|t| !o.tools.allow.contains(t))))
                    || o.tools.block.iter().any(|t| !c.tools.block.contains(t));
                let show = |f: &ToolFilter| {
                    format!(
                        "allow [{}], block [{}]",
                        f.allow.join(","),
                        f.block.join(",")
                    )
                };
                self.push(
                    ChangeKind::ConnectionChanged,
                    format!("{subject}.tools"),
                    Some(show(&o.tools)),
                    Some(show(&c.tools)),
                    widened,
                );
            }
            self.approval(&subject, o.approval, c.approval);
            self.connection_limits(&subject, o, c);
            if let Some(prev) = prev {
                let old_sb = prev.connection_sandbox(o);
                let new_sb = next.connection_sandbox(c);
                self.process_sandbox(&subject, old_sb.as_ref(), new_sb.as_ref());
            }
        }
        for (n, c) in old {
            if !next.connections.iter().any(|x| x.name == n) {
                self.push(
                    ChangeKind::ConnectionRemoved,
                    format!("{prefix}{n}"),
                    Some(transport_summary(&c.transport)),
                    None,
                    false,
                );
            }
        }
    }
}
