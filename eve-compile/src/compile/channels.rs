//! `channels/`: where messages come from (HTTP, Slack, Discord, Telegram, webhooks), each kind's
//! required settings, and `auth:`. Secrets must be `${VAR}` references, never values in the file.

use std::collections::BTreeMap;

use serde_json::Value;

use eve_discover::{Code, Diagnostic, Named, SourceFile};

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;
use crate::yaml::Doc;

impl Compiler {
    pub(super) fn channel(&mut self, c: &Named) -> Option<Channel> {
        let name_ok = self.check_name(&c.name, &c.file.path, "channel");
        let parsed = self.yaml_file(&c.file)?;
        let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
        let kind = if c.name == "eve" && !f.has("kind") {
            Some(ChannelKind::Http)
        } else if !f.has("kind") {
            f.push(
                Diagnostic::new(
                    Code::InvalidChannel,
                    c.file.path.clone(),
                    "channel has no `kind`",
                )
                .at(1, 1)
                .help("set `kind:` to http, slack, discord, telegram or webhook"),
            );
            None
        } else {
            f.choice(
                "kind",
                &[
                    ("http", ChannelKind::Http),
                    ("slack", ChannelKind::Slack),
                    ("discord", ChannelKind::Discord),
                    ("telegram", ChannelKind::Telegram),
                    ("webhook", ChannelKind::Webhook),
                ],
            )
        };
        let kind = kind?;
        let (required, secrets): (&[&str], &[&str]) = match kind {
            ChannelKind::Http => (&[], &[]),
            ChannelKind::Slack => (
                &["signing_secret", "bot_token"],
                &["signing_secret", "bot_token"],
            ),
            ChannelKind::Discord => (&["public_key"], &["bot_token"]),
            ChannelKind::Telegram => (
                &["bot_token", "secret_token"],
                &["bot_token", "secret_token"],
            ),
            ChannelKind::Webhook => (&["secret"], &["secret"]),
        };
        let mut ok = name_ok;
        for key in required {
            if !f.has(key) {
                f.push(
                    Diagnostic::new(Code::InvalidChannel, c.file.path.clone(), format!("{kind:?} channel needs `{key}`").to_lowercase())
                        .at(1, 1)
                        .help(format!("add `{key}: ${{ENV_VAR}}` (the value is read from the environment at run time)")),
                );
                ok = false;
            }
        }
        let mut settings = BTreeMap::new();
        if let Value::Object(map) = &parsed.doc.value {
            for (k, v) in map {
                if k == "kind" || k == "auth" {
                    continue;
                }
                if secrets.contains(&k.as_str()) && !is_env_ref(v) {
                    f.report(
                        Code::InvalidField,
                        k,
                        format!("`{k}` is a secret written in the file"),
                        "reference it as `${ENV_VAR}`: secrets are resolved at run time and never stored in builds",
                    );
                    ok = false;
                    continue;
                }
                settings.insert(k.clone(), v.clone());
            }
        }
        let auth = self.auth(&c.file, &parsed.doc);
        if auth.is_none() {
            ok = false;
        }
        ok.then(|| Channel {
            name: c.name.clone(),
            source: c.file.path.clone(),
            kind,
            auth: auth.unwrap_or_default(),
            settings,
        })
    }

    fn auth(&mut self, file: &SourceFile, doc: &Doc) -> Option<Auth> {
        let raw = doc.value.get("auth").cloned();
        let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
        let secret = |f: &mut Fields<'_>, key: &str, value: Option<String>| -> Option<String> {
            let v = value?;
            if is_env_ref(&Value::String(v.clone())) {
                Some(v)
            } else {
                f.report_at(
                    Code::InvalidField,
                    &format!("/auth/{key}"),
                    format!("`auth.{key}` is a secret written in the file"),
                    "reference it as `${ENV_VAR}`: secrets are resolved at run time and never stored in builds",
                );
                None
            }
        };
        match raw {
            None | Some(Value::Null) => Some(Auth::None),
            Some(Value::String(s)) if s == "none" => Some(Auth::None),
            Some(Value::Object(_)) => {
                let mut a = Fields::new(&file.path, doc, "/auth", &mut self.diags);
                let kind = a.choice(
                    "type",
                    &[("none", 0), ("bearer", 1), ("basic", 2), ("jwt", 3)],
                );
                match kind {
                    Some(0) => Some(Auth::None),
                    Some(1) => {
                        a.unknown_keys(&["type", "tokens", "token"], "auth");
                        let mut tokens = a.string_list("tokens").unwrap_or_default();
                        tokens.extend(a.string("token"));
                        if tokens.is_empty() {
                            a.report(
                                Code::MissingField,
                                "type",
                                "bearer auth has no `tokens`".to_owned(),
                                "add `tokens: [${API_TOKEN}]`",
                            );
                            return None;
                        }
                        let mut ok = Vec::new();
                        for t in tokens {
                            ok.push(secret(&mut a, "tokens", Some(t))?);
                        }
                        Some(Auth::Bearer { tokens: ok })
                    }
                    Some(2) => {
                        a.unknown_keys(&["type", "username", "password"], "auth");
                        let username = a.required_string("username", "add `username:`")?;
                        let password =
                            a.required_string("password", "add `password: ${PASSWORD_VAR}`");
                        let password = secret(&mut a, "password", password)?;
                        Some(Auth::Basic { username, password })
                    }
                    Some(3) => {
                        a.unknown_keys(
                            &["type", "secret", "issuer", "audience", "require_exp"],
                            "auth",
                        );
                        let s = a.required_string("secret", "add `secret: ${JWT_SECRET}`");
                        let secret_v = secret(&mut a, "secret", s)?;
                        Some(Auth::Jwt {
                            secret: secret_v,
                            issuer: a.string("issuer"),
                            audience: a.string("audience"),
                            require_exp: a.bool("require_exp").unwrap_or(true),
                        })
                    }
                    _ => {
                        if !a.has("type") {
                            a.report_at(
                                Code::MissingField,
                                "/auth",
                                "`auth` has no `type`".to_owned(),
                                "set `type:` to none, bearer, basic or jwt",
                            );
                        }
                        None
                    }
                }
            }
            Some(other) => {
                f.report(
                    Code::InvalidField,
                    "auth",
                    format!(
                        "`auth` must be `none` or a mapping with `type:`, found {}",
                        crate::fields::kind(&other)
                    ),
                    "write `auth: none`, or `auth:` with `type: bearer` and `tokens: [${API_TOKEN}]`",
                );
                None
            }
        }
    }
}

/// Whether a value is exactly a `${VAR}` reference.
pub fn is_env_ref(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        let s = s.trim();
        s.starts_with("${")
            && s.ends_with('}')
            && s[2..s.len() - 1]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && s.len() > 3
    })
}
