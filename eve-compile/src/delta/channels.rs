//! Channels in the delta: added or removed channels, changed settings, and whether a changed
//! `auth:` lets in someone it did not.

use std::collections::{BTreeMap, BTreeSet};

use super::{ChangeKind, Differ};
use crate::manifest::*;

fn auth_summary(a: &Auth) -> String {
    match a {
        Auth::None => "none".to_owned(),
        Auth::Bearer { tokens } => format!("bearer ({} token(s))", tokens.len()),
        Auth::Basic { username, .. } => format!("basic ({username})"),
        Auth::Jwt { issuer, .. } => match issuer {
            Some(iss) => format!("jwt (issuer {iss})"),
            None => "jwt".to_owned(),
        },
    }
}

/// Whether `next` accepts a credential `prev` did not (or checks less).
fn auth_widens(prev: &Auth, next: &Auth) -> bool {
    match (prev, next) {
        (_, Auth::None) => !matches!(prev, Auth::None),
        (Auth::Bearer { tokens: a }, Auth::Bearer { tokens: b }) => {
            b.iter().any(|t| !a.contains(t))
        }
        (
            Auth::Jwt {
                secret: s1,
                issuer: i1,
                audience: a1,
                require_exp: e1,
            },
            Auth::Jwt {
                secret: s2,
                issuer: i2,
                audience: a2,
                require_exp: e2,
            },
        ) => {
            s1 != s2
                || (i1.is_some() && i2.is_none())
                || (a1.is_some() && a2.is_none())
                || (*e1 && !*e2)
                || (i1.is_some() && i1 != i2)
                || (a1.is_some() && a1 != a2)
        }
        (Auth::None, _) => false,
        // Another kind of credential, or another user or password: someone new may get in.
        _ => prev != next,
    }
}

impl Differ {
    pub(super) fn channels(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let old: BTreeMap<&str, &Channel> = prev
            .map(|a| a.channels.iter().map(|c| (c.name.as_str(), c)).collect())
            .unwrap_or_default();
        let kind = |c: &Channel| {
            serde_json::to_value(c.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        for c in &next.channels {
            let subject = format!("{prefix}{}", c.name);
            let Some(o) = old.get(c.name.as_str()) else {
                self.push(
                    ChangeKind::ChannelAdded,
                    subject,
                    None,
                    Some(format!("{}, auth {}", kind(c), auth_summary(&c.auth))),
                    true,
                );
                continue;
            };
            if o.kind != c.kind || o.settings != c.settings {
                let changed: Vec<&str> = o
                    .settings
                    .keys()
                    .chain(c.settings.keys())
                    .filter(|k| o.settings.get(*k) != c.settings.get(*k))
                    .map(String::as_str)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                self.push(
                    ChangeKind::ChannelChanged,
                    subject.clone(),
                    Some(kind(o)),
                    Some(if changed.is_empty() {
                        kind(c)
                    } else {
                        format!("{} (changed: {})", kind(c), changed.join(", "))
                    }),
                    true,
                );
            }
            if o.auth != c.auth {
                self.push(
                    ChangeKind::AuthChanged,
                    subject,
                    Some(auth_summary(&o.auth)),
                    Some(auth_summary(&c.auth)),
                    auth_widens(&o.auth, &c.auth),
                );
            }
        }
        for (n, c) in old {
            if !next.channels.iter().any(|x| x.name == n) {
                self.push(
                    ChangeKind::ChannelRemoved,
                    format!("{prefix}{n}"),
                    Some(kind(c)),
                    None,
                    false,
                );
            }
        }
    }
}
