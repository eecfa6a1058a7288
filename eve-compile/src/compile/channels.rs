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
        } else if c.name == "mcp" && !f.has("kind") {
            Some(ChannelKind::Mcp)
        } else if !f.has("kind") {
            f.push(
                Diagnostic::new(
                    Code::InvalidChannel,
                    c.file.path.clone(),
                    "channel has no `kind`",
                )
                .at(1, 1)
                .help("set `kind:` to http, slack, discord, telegram, webhook or mcp"),
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
                    ("mcp", ChannelKind::Mcp),
                ],
            )
        };
        let kind = kind?;
        let (required, secrets): (&[&str], &[&str]) = match kind {
            ChannelKind::Http | ChannelKind::Mcp => (&[], &[]),
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
                if k == "kind" || k == "auth" || k == "operators" {
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
        let operators = self.operators(&c.file, &parsed.doc, &c.name, auth.as_ref());
        if operators.is_none() {
            ok = false;
        }
        ok.then(|| Channel {
            name: c.name.clone(),
            source: c.file.path.clone(),
            kind,
            auth: auth.unwrap_or_default(),
            settings,
            operators: operators.unwrap_or_default(),
        })
    }

    /// `operators:` of `channels/eve.yaml`: who reaches every session. Principals by kind
    /// (`tokens` by the variable a bearer token is read from, basic `users`, JWT `subjects`, any
    /// principal id under `principals`) and JWT `claims`, each checked against the channel's
    /// `auth` so a name that can never match is an error, not a silent no-op. `None` after
    /// reporting what is wrong.
    fn operators(
        &mut self,
        file: &SourceFile,
        doc: &Doc,
        channel: &str,
        auth: Option<&Auth>,
    ) -> Option<Operators> {
        let raw = match doc.value.get("operators") {
            None | Some(Value::Null) => return Some(Operators::default()),
            Some(raw) => raw.clone(),
        };
        let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
        if channel != "eve" {
            f.report_at(
                Code::InvalidOperators,
                "/operators",
                format!("`operators` in the `{channel}` channel: operators are named once, in channels/eve.yaml"),
                "move `operators:` to agent/channels/eve.yaml; a platform user is named there as \
                 `principals: [slack:U024BE7LH]`",
            );
            return None;
        }
        if !raw.is_object() {
            f.report_at(
                Code::InvalidOperators,
                "/operators",
                format!(
                    "`operators` must be a mapping, found {}",
                    crate::fields::kind(&raw)
                ),
                "write `operators:` with `tokens: [OPS_TOKEN]`, `subjects: [ops@example.com]`, \
                 `claims: {role: operator}` or `principals: [slack:U024BE7LH]`",
            );
            return None;
        }
        let mut o = Fields::new(&file.path, doc, "/operators", &mut self.diags);
        o.unknown_keys(
            &["tokens", "users", "subjects", "claims", "principals"],
            "operators",
        );
        let mut named: Vec<(String, String)> = Vec::new();
        for (key, kind) in [("tokens", "token"), ("users", "basic"), ("subjects", "jwt")] {
            for (i, item) in o
                .string_list(key)
                .unwrap_or_default()
                .into_iter()
                .enumerate()
            {
                let item = item.trim();
                let item = item
                    .strip_prefix("${")
                    .and_then(|v| v.strip_suffix('}'))
                    .unwrap_or(item);
                let item = item.strip_prefix(&format!("{kind}:")).unwrap_or(item);
                named.push((format!("/operators/{key}/{i}"), format!("{kind}:{item}")));
            }
        }
        for (i, item) in o
            .string_list("principals")
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            named.push((format!("/operators/principals/{i}"), item.trim().to_owned()));
        }
        let claims = match o.raw("claims").cloned() {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(map)) => map.into_iter().collect(),
            Some(other) => {
                o.report_at(
                    Code::InvalidOperators,
                    "/operators/claims",
                    format!(
                        "`operators.claims` must be a mapping, found {}",
                        crate::fields::kind(&other)
                    ),
                    "write the claims a JWT must carry, such as `claims: {role: operator}`",
                );
                return None;
            }
        };
        let mut ok = true;
        for (pointer, principal) in &named {
            if let Err((message, help)) = operator_principal(principal, auth) {
                o.report_at(Code::InvalidOperators, pointer, message, &help);
                ok = false;
            }
        }
        for (claim, value) in &claims {
            let pointer = format!("/operators/claims/{claim}");
            if !auth.is_some_and(|a| a.methods().iter().any(|m| matches!(m, Auth::Jwt { .. }))) {
                o.report_at(
                    Code::InvalidOperators,
                    &pointer,
                    format!("`operators.claims.{claim}` needs JWT authentication, and `auth` is not `type: jwt`"),
                    "name operators by what this API authenticates: `tokens:` for bearer, `users:` \
                     for basic",
                );
                ok = false;
            } else if !matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_)) {
                o.report_at(
                    Code::InvalidOperators,
                    &pointer,
                    format!(
                        "`operators.claims.{claim}` must be a string, number or boolean, found {}",
                        crate::fields::kind(value)
                    ),
                    "a token is an operator when its claim equals this value, or is a list \
                     holding it",
                );
                ok = false;
            }
        }
        ok.then(|| Operators {
            principals: named.into_iter().map(|(_, p)| p).collect(),
            claims,
        })
    }

    fn auth(&mut self, file: &SourceFile, doc: &Doc) -> Option<Auth> {
        let raw = doc.value.get("auth").cloned();
        match raw {
            None | Some(Value::Null) => Some(Auth::None),
            Some(Value::String(s)) if s == "none" => Some(Auth::None),
            Some(Value::Object(_)) => self.auth_method(file, doc, "/auth"),
            Some(Value::Array(items)) => {
                let mut methods = Vec::new();
                let mut ok = !items.is_empty();
                for (i, item) in items.iter().enumerate() {
                    let pointer = format!("/auth/{i}");
                    let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                    if !item.is_object() {
                        f.report_at(
                            Code::InvalidField,
                            &pointer,
                            format!(
                                "each method of `auth` is a mapping with `type:`, found {}",
                                crate::fields::kind(item)
                            ),
                            "write `- type: jwt` (or bearer, basic) with its fields",
                        );
                        ok = false;
                        continue;
                    }
                    match self.auth_method(file, doc, &pointer) {
                        Some(Auth::None) => {
                            let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                            f.report_at(
                                Code::InvalidField,
                                &pointer,
                                "`type: none` in a list of methods would let anyone in".to_owned(),
                                "leave it out: a request no method accepts is refused",
                            );
                            ok = false;
                        }
                        Some(method) => methods.push(method),
                        None => ok = false,
                    }
                }
                if items.is_empty() {
                    let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                    f.report(
                        Code::InvalidField,
                        "auth",
                        "`auth` is an empty list".to_owned(),
                        "list the methods to try in order, or write `auth: none`",
                    );
                }
                ok.then_some(Auth::Chain { methods })
            }
            Some(other) => {
                let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "auth",
                    format!(
                        "`auth` must be `none`, a mapping with `type:` or a list of them, found {}",
                        crate::fields::kind(&other)
                    ),
                    "write `auth: none`, or `auth:` with `type: bearer` and `tokens: [${API_TOKEN}]`",
                );
                None
            }
        }
    }

    /// One method of `auth` (the mapping at `base`).
    fn auth_method(&mut self, file: &SourceFile, doc: &Doc, base: &str) -> Option<Auth> {
        let secret = |f: &mut Fields<'_>, key: &str, value: Option<String>| -> Option<String> {
            let v = value?;
            if is_env_ref(&Value::String(v.clone())) {
                Some(v)
            } else {
                f.report(
                    Code::InvalidField,
                    key,
                    format!("`auth.{key}` is a secret written in the file"),
                    "reference it as `${ENV_VAR}`: secrets are resolved at run time and never stored in builds",
                );
                None
            }
        };
        let mut a = Fields::new(&file.path, doc, base, &mut self.diags);
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
                let password = a.required_string("password", "add `password: ${PASSWORD_VAR}`");
                let password = secret(&mut a, "password", password)?;
                Some(Auth::Basic { username, password })
            }
            Some(3) => jwt_method(&mut a, secret),
            _ => {
                if !a.has("type") {
                    a.report_at(
                        Code::MissingField,
                        base,
                        "`auth` has no `type`".to_owned(),
                        "set `type:` to none, bearer, basic or jwt",
                    );
                }
                None
            }
        }
    }
}

/// Algorithms a JWT method with an asymmetric key accepts.
pub const ASYMMETRIC_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// `type: jwt`: exactly one source of keys, the algorithms it may use, and the checks.
fn jwt_method(
    a: &mut Fields<'_>,
    secret: impl Fn(&mut Fields<'_>, &str, Option<String>) -> Option<String>,
) -> Option<Auth> {
    a.unknown_keys(
        &[
            "type",
            "secret",
            "jwks_url",
            "public_key",
            "algorithms",
            "issuer",
            "audience",
            "require_exp",
            "leeway",
            "attributes",
        ],
        "auth",
    );
    let s = a.string("secret");
    let jwks_url = a.string("jwks_url");
    let public_key = a.string("public_key");
    let sources = usize::from(s.is_some())
        + usize::from(jwks_url.is_some())
        + usize::from(public_key.is_some());
    if sources != 1 {
        a.report(
            Code::MissingField,
            "type",
            format!("jwt auth needs exactly one of `secret`, `jwks_url` and `public_key`, found {sources}"),
            "HS256 tokens: `secret: ${JWT_SECRET}`; an identity provider's tokens: `jwks_url:` \
             (its `/.well-known/jwks.json`) or `public_key:` (a PEM)",
        );
        return None;
    }
    let secret_v = match s {
        Some(v) => Some(secret(a, "secret", Some(v))?),
        None => None,
    };
    if let Some(url) = &jwks_url
        && !is_env_ref(&Value::String(url.clone()))
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        a.report(
            Code::InvalidField,
            "jwks_url",
            format!("`auth.jwks_url` must be an http(s) URL, found `{url}`"),
            "write the provider's key set URL, such as https://example.auth0.com/.well-known/jwks.json",
        );
        return None;
    }
    if let Some(pem) = &public_key
        && !is_env_ref(&Value::String(pem.clone()))
        && !pem.contains("-----BEGIN ")
    {
        a.report(
            Code::InvalidField,
            "public_key",
            "`auth.public_key` is not a PEM public key".to_owned(),
            "paste the key with its `-----BEGIN PUBLIC KEY-----` line, or reference it as `${JWT_PUBLIC_KEY}`",
        );
        return None;
    }
    let algorithms = a.string_list("algorithms").unwrap_or_default();
    for alg in &algorithms {
        let allowed = if secret_v.is_some() {
            alg == "HS256"
        } else {
            ASYMMETRIC_ALGORITHMS.contains(&alg.as_str())
        };
        if !allowed {
            let help = if secret_v.is_some() {
                "a `secret` verifies HS256 only".to_owned()
            } else {
                format!(
                    "a public key verifies {} (never an HMAC algorithm or `none`)",
                    ASYMMETRIC_ALGORITHMS.join(", ")
                )
            };
            a.report(
                Code::InvalidField,
                "algorithms",
                format!("`{alg}` is not an algorithm this key can verify"),
                &help,
            );
            return None;
        }
    }
    let leeway = a.u64("leeway").unwrap_or(DEFAULT_JWT_LEEWAY);
    if leeway > 600 {
        a.report(
            Code::InvalidField,
            "leeway",
            format!("`auth.leeway` of {leeway} seconds would accept tokens long expired"),
            "allow a minute or two of clock skew (the default is 60)",
        );
        return None;
    }
    Some(Auth::Jwt {
        secret: secret_v,
        jwks_url,
        public_key,
        algorithms,
        issuer: a.string("issuer"),
        audience: a.string("audience"),
        require_exp: a.bool("require_exp").unwrap_or(true),
        leeway,
        attributes: a.string_list("attributes").unwrap_or_default(),
    })
}

/// Kinds of principal an operator is named by (the prefix of what `approval.settled` shows).
const PRINCIPAL_KINDS: &[&str] = &["token", "basic", "jwt", "slack", "discord", "telegram"];

/// Checks that `principal` (`kind:name`) can be an authenticated caller of this agent under
/// `auth`; the message and help of a diagnostic when it cannot.
fn operator_principal(principal: &str, auth: Option<&Auth>) -> Result<(), (String, String)> {
    // A chain: some method of it authenticates the principal.
    if let Some(Auth::Chain { methods }) = auth {
        let mut first = None;
        for method in methods {
            match operator_principal(principal, Some(method)) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        return first.map_or(Ok(()), Err);
    }
    let Some((kind, name)) = principal.split_once(':') else {
        let help = match principal {
            "local" => "the terminal is always an operator; leave it out".to_owned(),
            "anonymous" => "every caller of an API without authentication is already an \
                            operator (it answers loopback only); leave it out"
                .to_owned(),
            _ => format!(
                "write a principal as `kind:name`, the kind one of {}",
                PRINCIPAL_KINDS.join(", ")
            ),
        };
        return Err((
            format!("operator `{principal}` is not a principal id"),
            help,
        ));
    };
    if !PRINCIPAL_KINDS.contains(&kind) {
        return Err((
            format!("operator `{principal}`: `{kind}` is not a kind of principal"),
            format!("the kinds are {}", PRINCIPAL_KINDS.join(", ")),
        ));
    }
    if name.trim().is_empty() {
        return Err((
            format!("operator `{principal}` names nobody"),
            format!("write the {kind} principal's name after `{kind}:`"),
        ));
    }
    match (kind, auth) {
        ("token", Some(Auth::Bearer { tokens })) => {
            let names: Vec<&str> = tokens.iter().filter_map(|t| token_var(t)).collect();
            if names.contains(&name) {
                Ok(())
            } else {
                Err((
                    format!("operator token `{name}` is not one of `auth.tokens`"),
                    format!(
                        "name a token by the variable it is read from: {}",
                        names.join(", ")
                    ),
                ))
            }
        }
        ("basic", Some(Auth::Basic { username, .. })) => {
            if is_env_ref(&Value::String(username.clone())) || username == name {
                Ok(())
            } else {
                Err((
                    format!("operator user `{name}` is not `auth.username` (`{username}`)"),
                    format!("basic authentication has one user: name `{username}`"),
                ))
            }
        }
        ("jwt", Some(Auth::Jwt { .. })) => Ok(()),
        ("token" | "basic" | "jwt", _) => {
            let wanted = match kind {
                "token" => "bearer",
                "basic" => "basic",
                _ => "jwt",
            };
            Err((
                format!(
                    "operator `{principal}` needs `auth: {{type: {wanted}}}`, and this API's \
                     `auth` is another"
                ),
                "name operators by what this API authenticates (`tokens:` for bearer, `users:` \
                 for basic, `subjects:` or `claims:` for jwt)"
                    .to_owned(),
            ))
        }
        _ => Ok(()),
    }
}

/// The variable a bearer token is read from (`${EVE_API_TOKEN}` → `EVE_API_TOKEN`).
fn token_var(template: &str) -> Option<&str> {
    let rest = template.split("${").nth(1)?;
    let name = &rest[..rest.find('}')?];
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
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
