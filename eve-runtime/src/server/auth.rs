//! Authentication of the session API, as `channels/eve.yaml` configures it.
//!
//! The manifest keeps secrets as `${VAR}` references; they are resolved once, when the server
//! starts, into an [`Authenticator`]. Every comparison of a secret is constant-time (tokens and
//! passwords are compared as SHA-256 digests, so not even their length leaks). JWTs are HS256
//! with a secret, or an identity provider's asymmetric keys (see `jwt`): the `alg` of the token
//! never chooses the kind of key. `auth:` as a list is eve's auth walk: the methods are tried in
//! order and the first that accepts the request wins. Missing or wrong credentials are a 401; a
//! verified identity that this API does not accept (a JWT for another issuer or audience) is a
//! 403, and ends the walk.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use eve_compile::Auth;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::{ApiError, ServerError};
use super::jwt::{JwtMethod, JwtSettings, Refusal};

/// Who made a request, once verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The API has no authentication.
    Anonymous,
    /// A bearer token from the configured list: its principal id (`token:<VAR>` when the token
    /// is a `${VAR}` reference, else `token:<position from 1>`).
    Token(String),
    /// HTTP basic with the configured user.
    User(String),
    /// A verified JWT (its `sub`, if any).
    Jwt(Option<String>),
}

impl Identity {
    /// The principal id recorded with what this identity does (answers to approvals):
    /// `anonymous`, `token:EVE_API_TOKEN` (or `token:2`), `basic:<user>`, `jwt:<sub>` or `jwt`.
    pub(crate) fn principal_id(&self) -> String {
        match self {
            Self::Anonymous => "anonymous".to_owned(),
            Self::Token(name) => name.clone(),
            Self::User(user) => format!("basic:{user}"),
            Self::Jwt(Some(sub)) => format!("jwt:{sub}"),
            Self::Jwt(None) => "jwt".to_owned(),
        }
    }
}

/// The principal id of the bearer token configured as `template` at `index` (from 0): the name
/// of the first `${VAR}` it references, else its position from 1. Never the token itself.
fn token_principal(template: &str, index: usize) -> String {
    let var = template.split("${").nth(1).and_then(|rest| {
        let name = &rest[..rest.find('}')?];
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        valid.then_some(name)
    });
    match var {
        Some(name) => format!("token:{name}"),
        None => format!("token:{}", index + 1),
    }
}

/// Verified credentials of the session API, with secrets resolved.
#[derive(Clone)]
pub enum Authenticator {
    /// No authentication.
    None,
    /// `Authorization: Bearer <token>`; SHA-256 digests of the accepted tokens, each with its
    /// principal id.
    Bearer(Vec<([u8; 32], String)>),
    /// HTTP basic; SHA-256 digests of the user name and password.
    Basic {
        /// The user name (shown as the identity).
        username: String,
        /// Digest of the user name.
        user_digest: [u8; 32],
        /// Digest of the password.
        password_digest: [u8; 32],
    },
    /// A JWT: HS256 with a secret, or asymmetric keys from a PEM or a JWKS URL.
    Jwt(std::sync::Arc<JwtMethod>),
    /// Several methods, tried in order: the first that accepts the request wins.
    Chain(Vec<Authenticator>),
}

/// The attributes of the request's principal (claims its JWT method names), a request
/// extension beside its [`Identity`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attributes(pub serde_json::Map<String, Value>);

/// A verified caller: who, the claims of its JWT (what decides whether it is an operator), and
/// the attributes its method carries from them.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// Who.
    pub identity: Identity,
    /// The claims of a verified JWT.
    pub claims: Option<serde_json::Map<String, Value>>,
    /// The claims `attributes:` of the method names, as the token carries them.
    pub attributes: serde_json::Map<String, Value>,
}

impl Verified {
    fn plain(identity: Identity) -> Self {
        Self {
            identity,
            claims: None,
            attributes: serde_json::Map::new(),
        }
    }
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "Authenticator::None",
            Self::Bearer(_) => "Authenticator::Bearer(<redacted>)",
            Self::Basic { .. } => "Authenticator::Basic(<redacted>)",
            Self::Jwt(_) => "Authenticator::Jwt(<redacted>)",
            Self::Chain(_) => "Authenticator::Chain(<redacted>)",
        })
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

/// Replaces every `${VAR}` in `text` through `env`; an unset or empty variable is an error naming
/// `file` and `field`.
pub(crate) fn resolve_refs(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    file: &str,
    field: &str,
) -> Result<String, ServerError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let var = &after[..end];
        let valid = !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            out.push_str("${");
            rest = after;
            continue;
        }
        match env(var).filter(|v| !v.is_empty()) {
            Some(value) => out.push_str(&value),
            None => {
                return Err(ServerError::MissingSecret {
                    file: file.to_owned(),
                    field: field.to_owned(),
                    var: var.to_owned(),
                });
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Authenticator {
    /// Resolves the `auth` of a channel defined in `file`.
    pub(crate) fn resolve(
        auth: &Auth,
        env: &dyn Fn(&str) -> Option<String>,
        file: &str,
    ) -> Result<Self, ServerError> {
        Ok(match auth {
            Auth::None => Self::None,
            Auth::Bearer { tokens } => {
                let mut digests = Vec::with_capacity(tokens.len());
                for (i, token) in tokens.iter().enumerate() {
                    let value = resolve_refs(token, env, file, "auth.tokens")?;
                    digests.push((digest(value.trim().as_bytes()), token_principal(token, i)));
                }
                Self::Bearer(digests)
            }
            Auth::Basic { username, password } => {
                let username = resolve_refs(username, env, file, "auth.username")?;
                let password = resolve_refs(password, env, file, "auth.password")?;
                Self::Basic {
                    user_digest: digest(username.as_bytes()),
                    password_digest: digest(password.as_bytes()),
                    username,
                }
            }
            Auth::Jwt {
                secret,
                jwks_url,
                public_key,
                algorithms,
                issuer,
                audience,
                require_exp,
                leeway,
                attributes,
            } => {
                let field = |value: &Option<String>, name: &str| {
                    value
                        .as_deref()
                        .map(|v| resolve_refs(v, env, file, name))
                        .transpose()
                };
                let settings = JwtSettings {
                    secret: field(secret, "auth.secret")?,
                    jwks_url: field(jwks_url, "auth.jwks_url")?,
                    public_key: field(public_key, "auth.public_key")?,
                    algorithms: algorithms.clone(),
                    issuer: field(issuer, "auth.issuer")?,
                    audience: field(audience, "auth.audience")?,
                    require_exp: *require_exp,
                    leeway: *leeway,
                    attributes: attributes.clone(),
                };
                Self::Jwt(std::sync::Arc::new(JwtMethod::new(settings, file)?))
            }
            Auth::Chain { methods } => Self::Chain(
                methods
                    .iter()
                    .map(|m| Self::resolve(m, env, file))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }

    /// Whether requests must carry credentials.
    pub(crate) fn is_required(&self) -> bool {
        !matches!(self, Self::None)
    }

    fn challenge(&self) -> &'static str {
        match self {
            Self::Basic { .. } => "Basic realm=\"eve\"",
            Self::Chain(methods) => {
                let basic = methods.iter().any(|m| matches!(m, Self::Basic { .. }));
                let bearer = methods
                    .iter()
                    .any(|m| matches!(m, Self::Bearer(_) | Self::Jwt(_)));
                match (basic, bearer) {
                    (true, true) => "Basic realm=\"eve\", Bearer",
                    (true, false) => "Basic realm=\"eve\"",
                    _ => "Bearer",
                }
            }
            _ => "Bearer",
        }
    }

    /// Verifies the `Authorization` header at `now` (Unix seconds).
    pub(crate) async fn verify(
        &self,
        authorization: Option<&str>,
        now: i64,
    ) -> Result<Verified, ApiError> {
        let unauthorized = || ApiError::Unauthorized {
            challenge: self.challenge(),
        };
        if let Self::None = self {
            return Ok(Verified::plain(Identity::Anonymous));
        }
        let header = authorization.map(str::trim).ok_or_else(unauthorized)?;
        let (scheme, credentials) = header.split_once(' ').ok_or_else(unauthorized)?;
        let credentials = credentials.trim();
        let methods: &[Self] = match self {
            Self::Chain(methods) => methods,
            one => std::slice::from_ref(one),
        };
        for method in methods {
            match method.try_one(scheme, credentials, now).await {
                Ok(verified) => return Ok(verified),
                Err(Refusal::Forbidden(message)) => return Err(ApiError::Forbidden(message)),
                Err(Refusal::NotVerified) => {}
            }
        }
        Err(unauthorized())
    }

    /// One method of the walk: the caller, or why not.
    async fn try_one(
        &self,
        scheme: &str,
        credentials: &str,
        now: i64,
    ) -> Result<Verified, Refusal> {
        match self {
            Self::None | Self::Chain(_) => Err(Refusal::NotVerified),
            Self::Bearer(digests) => {
                if !scheme.eq_ignore_ascii_case("bearer") || credentials.is_empty() {
                    return Err(Refusal::NotVerified);
                }
                let presented = digest(credentials.as_bytes());
                // Compare with every token, so timing does not tell which one (or none) matched.
                let mut found = None;
                for (d, name) in digests {
                    if same(d, &presented) && found.is_none() {
                        found = Some(name);
                    }
                }
                found
                    .map(|name| Verified::plain(Identity::Token(name.clone())))
                    .ok_or(Refusal::NotVerified)
            }
            Self::Basic {
                username,
                user_digest,
                password_digest,
            } => {
                if !scheme.eq_ignore_ascii_case("basic") {
                    return Err(Refusal::NotVerified);
                }
                let decoded = STANDARD
                    .decode(credentials)
                    .map_err(|_| Refusal::NotVerified)?;
                let text = String::from_utf8(decoded).map_err(|_| Refusal::NotVerified)?;
                let (user, password) = text.split_once(':').ok_or(Refusal::NotVerified)?;
                let user_ok = same(user_digest, &digest(user.as_bytes()));
                let password_ok = same(password_digest, &digest(password.as_bytes()));
                if user_ok & password_ok {
                    Ok(Verified::plain(Identity::User(username.clone())))
                } else {
                    Err(Refusal::NotVerified)
                }
            }
            Self::Jwt(method) => {
                if !scheme.eq_ignore_ascii_case("bearer") {
                    return Err(Refusal::NotVerified);
                }
                let claims = method.verify(credentials, now).await?;
                let sub = claims.get("sub").and_then(Value::as_str).map(str::to_owned);
                let attributes = method
                    .attributes
                    .iter()
                    .filter_map(|name| {
                        claims
                            .get(name)
                            .filter(|v| !v.is_null())
                            .map(|v| (name.clone(), v.clone()))
                    })
                    .collect();
                Ok(Verified {
                    identity: Identity::Jwt(sub),
                    claims: Some(claims),
                    attributes,
                })
            }
        }
    }
}

fn decode_segment(segment: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(segment.trim_end_matches('=')).ok()
}

/// Verifies an HS256 JWT: the header's `alg` must be `HS256`, the signature must match `secret`,
/// `exp` (if present) must be in the future and `nbf` (if present) not. Returns the claims.
pub fn verify_hs256(
    token: &str,
    secret: &[u8],
    now: i64,
) -> Option<serde_json::Map<String, Value>> {
    let claims = hs256_claims(token, secret)?;
    let time = |name: &str| -> Result<Option<i64>, ()> {
        match claims.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .or_else(|| v.as_f64().map(|f| f as i64))
                .map(Some)
                .ok_or(()),
        }
    };
    let exp = time("exp").ok()?;
    let nbf = time("nbf").ok()?;
    if exp.is_some_and(|exp| now >= exp) || nbf.is_some_and(|nbf| now < nbf) {
        return None;
    }
    Some(claims)
}

/// The claims of an HS256 JWT whose signature matches `secret` (its times unchecked).
pub(crate) fn hs256_claims(token: &str, secret: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let mut parts = token.split('.');
    let (header_b64, payload_b64, signature_b64) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header: Value = serde_json::from_slice(&decode_segment(header_b64)?).ok()?;
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return None;
    }
    let signature = decode_segment(signature_b64)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(header_b64.as_bytes());
    mac.update(b".");
    mac.update(payload_b64.as_bytes());
    mac.verify_slice(&signature).ok()?;
    let claims: Value = serde_json::from_slice(&decode_segment(payload_b64)?).ok()?;
    let Value::Object(claims) = claims else {
        return None;
    };
    Some(claims)
}

/// Signs `claims` as an HS256 JWT (for tests and tooling).
pub fn sign_hs256(claims: &Value, secret: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string().as_bytes());
    let signing_input = format!("{header}.{payload}");
    let signature = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(signing_input.as_bytes());
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    };
    format!("{signing_input}.{signature}")
}
