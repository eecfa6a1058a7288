//! Channels in the delta: added or removed channels, changed settings, and how a channel
//! authenticates what it receives: `auth:` of an `http` channel, and the signature a platform
//! channel checks with a setting of its own (a webhook's HMAC `secret`, Slack's
//! `signing_secret`, Discord's `public_key`, Telegram's `secret_token`). A changed credential
//! lets in someone it did not; any other changed field (settings, or a field added to channels
//! later) is compared generically, so nothing about a channel changes unseen.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{ChangeKind, Differ};
use crate::manifest::*;

/// The setting a platform channel checks each request's signature with, and how.
fn signature(kind: ChannelKind) -> Option<(&'static str, &'static str)> {
    match kind {
        ChannelKind::Http | ChannelKind::Mcp => None,
        ChannelKind::Webhook => Some(("secret", "hmac-sha256")),
        ChannelKind::Slack => Some(("signing_secret", "slack signature")),
        ChannelKind::Discord => Some(("public_key", "ed25519 signature")),
        ChannelKind::Telegram => Some(("secret_token", "telegram secret token")),
    }
}

/// How a channel authenticates what it receives: `hmac-sha256 (secret ${HOOK_SECRET})` for a
/// signed webhook, `auth:` for the session API.
fn channel_auth(c: &Channel) -> String {
    let mut out = match signature(c.kind) {
        None => auth_summary(&c.auth),
        Some((key, how)) => match c.settings.get(key) {
            Some(Value::String(v)) if v.starts_with("${") => format!("{how} ({key} {v})"),
            Some(Value::String(_)) => format!("{how} ({key} written in the file)"),
            _ => format!("none ({key} not set)"),
        },
    };
    if !matches!(c.kind, ChannelKind::Http | ChannelKind::Mcp) && c.auth != Auth::None {
        out.push_str(&format!(", auth {}", auth_summary(&c.auth)));
    }
    out
}

/// A channel's fields apart from its name, source, kind, settings and auth: whatever else a
/// channel carries, compared as JSON.
fn other_fields(c: &Channel) -> serde_json::Map<String, Value> {
    let mut map = match serde_json::to_value(c) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    for key in ["name", "source", "kind", "settings", "auth"] {
        map.remove(key);
    }
    map
}

fn auth_summary(a: &Auth) -> String {
    match a {
        Auth::None => "none".to_owned(),
        Auth::Bearer { tokens } => format!("bearer ({} token(s))", tokens.len()),
        Auth::Basic { username, .. } => format!("basic ({username})"),
        Auth::Jwt {
            issuer,
            jwks_url,
            public_key,
            ..
        } => {
            let keys = if let Some(url) = jwks_url {
                format!("keys {url}")
            } else if public_key.is_some() {
                "public key".to_owned()
            } else {
                "secret".to_owned()
            };
            match issuer {
                Some(iss) => format!("jwt ({keys}, issuer {iss})"),
                None => format!("jwt ({keys})"),
            }
        }
        Auth::Chain { methods } => {
            let each: Vec<String> = methods.iter().map(auth_summary).collect();
            format!("first of [{}]", each.join(", "))
        }
    }
}

/// Whether `next` accepts a credential `prev` did not (or checks less).
fn auth_widens(prev: &Auth, next: &Auth) -> bool {
    match (prev, next) {
        (_, Auth::None) => !matches!(prev, Auth::None),
        (Auth::None, _) => false,
        // A chain accepts what any of its methods accepts: it widens when some method of the
        // new one widens every method of the old one.
        (_, Auth::Chain { .. }) | (Auth::Chain { .. }, _) => next
            .methods()
            .iter()
            .any(|n| prev.methods().iter().all(|p| auth_widens(p, n))),
        (Auth::Bearer { tokens: a }, Auth::Bearer { tokens: b }) => {
            b.iter().any(|t| !a.contains(t))
        }
        (
            Auth::Jwt {
                secret: s1,
                jwks_url: j1,
                public_key: k1,
                algorithms: g1,
                issuer: i1,
                audience: a1,
                require_exp: e1,
                leeway: l1,
                attributes: _,
            },
            Auth::Jwt {
                secret: s2,
                jwks_url: j2,
                public_key: k2,
                algorithms: g2,
                issuer: i2,
                audience: a2,
                require_exp: e2,
                leeway: l2,
                attributes: _,
            },
        ) => {
            s1 != s2
                || j1 != j2
                || k1 != k2
                || (!g2.is_empty() && g2.iter().any(|g| !g1.contains(g)))
                || (!g1.is_empty() && g2.is_empty())
                || l2 > l1
                || (i1.is_some() && i2.is_none())
                || (a1.is_some() && a2.is_none())
                || (*e1 && !*e2)
                || (i1.is_some() && i1 != i2)
                || (a1.is_some() && a1 != a2)
        }
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
                    Some(format!("{}, auth {}", kind(c), channel_auth(c))),
                    true,
                );
                continue;
            };
            let sig = |ch: &Channel| signature(ch.kind).map(|(key, _)| key);
            let (a, b) = (other_fields(o), other_fields(c));
            let changed: Vec<&str> = o
                .settings
                .keys()
                .chain(c.settings.keys())
                .filter(|k| o.settings.get(*k) != c.settings.get(*k))
                .filter(|k| o.kind != c.kind || Some(k.as_str()) != sig(c))
                .map(String::as_str)
                .chain(
                    a.keys()
                        .chain(b.keys())
                        .filter(|k| a.get(*k) != b.get(*k))
                        .map(String::as_str),
                )
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if o.kind != c.kind || !changed.is_empty() {
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
            let (before, after) = (channel_auth(o), channel_auth(c));
            let signed = |ch: &Channel| sig(ch).and_then(|key| ch.settings.get(key).cloned());
            if o.auth != c.auth || signed(o) != signed(c) || before != after {
                // Another signing secret or key accepts requests the old one refused.
                let widens = auth_widens(&o.auth, &c.auth)
                    || signed(o) != signed(c)
                    || (o.kind != c.kind && before != after);
                self.push(
                    ChangeKind::AuthChanged,
                    subject,
                    Some(before),
                    Some(after),
                    widens,
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
