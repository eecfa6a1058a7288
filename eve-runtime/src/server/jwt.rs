//! JWT methods of the session API: HS256 with a shared secret, or an identity provider's
//! asymmetric keys (RS256/384/512, PS256/384/512, ES256/384, EdDSA) from a PEM public key or a
//! JWKS URL, as Auth0, Clerk, Okta, Google and Keycloak issue them.
//!
//! The kind of key decides the algorithm family, never the token: a token whose `alg` is `none`,
//! an HMAC algorithm for a public key (the algorithm-confusion attack), or an algorithm the
//! method does not list is refused before any signature check. A JWKS is fetched when first
//! needed, kept for [`JWKS_TTL`], and fetched again when a token names a key it does not hold
//! (a provider rotating its keys), at most [`JWKS_FETCHES_PER_MINUTE`] times a minute so that
//! tokens with made-up key ids cannot make the server hammer the provider. A fetch is bounded in
//! time ([`JWKS_TIMEOUT`]) and size ([`JWKS_MAX_BYTES`]); a failed one keeps the keys held.
//!
//! `exp` and `nbf` are checked with the method's leeway (clock skew, 60 s by default); `iss`
//! and `aud` after the signature, so a verified token for another issuer or audience is a 403.

use std::collections::VecDeque;
use std::str::FromStr as _;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::error::ServerError;

/// How long fetched keys are used before they are fetched again.
pub const JWKS_TTL: Duration = Duration::from_secs(600);
/// Most fetches of one key set in a minute.
pub const JWKS_FETCHES_PER_MINUTE: usize = 6;
/// Longest a fetch of a key set may take.
pub const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest key set read.
pub const JWKS_MAX_BYTES: usize = 256 * 1024;

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a token this method verifies (bad signature, unknown key, expired, malformed): the
    /// next method of a chain may try it; a 401 when none accepts it.
    NotVerified,
    /// A verified token this API does not accept (another issuer or audience): a 403.
    Forbidden(String),
}

/// Where a JWT method's keys come from.
enum Keys {
    /// An HMAC secret (HS256).
    Secret(Vec<u8>),
    /// One public key.
    Public(Box<DecodingKey>),
    /// A JSON Web Key Set.
    Set(Arc<KeySet>),
}

/// A verified JWT method, secrets resolved.
pub struct JwtMethod {
    keys: Keys,
    /// Accepted algorithms (for a public key or key set: asymmetric ones only).
    algorithms: Vec<Algorithm>,
    issuer: Option<String>,
    audience: Option<String>,
    require_exp: bool,
    leeway: i64,
    /// Claims carried as the principal's attributes.
    pub(crate) attributes: Vec<String>,
}

impl std::fmt::Debug for JwtMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Secret(_) => "secret".to_owned(),
            Keys::Public(_) => "public key".to_owned(),
            Keys::Set(set) => format!("key set {}", set.url),
        };
        write!(f, "JwtMethod({keys}, <redacted>)")
    }
}

/// The settings of a `type: jwt` method, `${VAR}`s resolved.
pub(crate) struct JwtSettings {
    pub secret: Option<String>,
    pub jwks_url: Option<String>,
    pub public_key: Option<String>,
    pub algorithms: Vec<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub require_exp: bool,
    pub leeway: u64,
    pub attributes: Vec<String>,
}

const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The public key of a PEM: RSA, EC or Ed25519, whichever it is.
fn pem_key(pem: &str) -> Option<DecodingKey> {
    let bytes = pem.trim().as_bytes();
    DecodingKey::from_rsa_pem(bytes)
        .or_else(|_| DecodingKey::from_ec_pem(bytes))
        .or_else(|_| DecodingKey::from_ed_pem(bytes))
        .ok()
}

impl JwtMethod {
    /// A method from its settings (of `file`).
    pub(crate) fn new(settings: JwtSettings, file: &str) -> Result<Self, ServerError> {
        let invalid = |message: String| ServerError::InvalidSetting {
            file: file.to_owned(),
            message,
        };
        let mut algorithms = Vec::new();
        for name in &settings.algorithms {
            let alg = Algorithm::from_str(name)
                .map_err(|_| invalid(format!("`auth.algorithms`: unknown algorithm `{name}`")))?;
            algorithms.push(alg);
        }
        let keys = match (settings.secret, settings.jwks_url, settings.public_key) {
            (Some(secret), None, None) => {
                if algorithms.iter().any(|a| *a != Algorithm::HS256) {
                    return Err(invalid("a JWT `secret` verifies HS256 only".to_owned()));
                }
                algorithms = vec![Algorithm::HS256];
                Keys::Secret(secret.into_bytes())
            }
            (None, Some(url), None) => Keys::Set(Arc::new(KeySet::new(url, file)?)),
            (None, None, Some(pem)) => {
                let key = pem_key(&pem).ok_or_else(|| {
                    invalid(
                        "`auth.public_key` is not a PEM public key (RSA, P-256, P-384 or Ed25519)"
                            .to_owned(),
                    )
                })?;
                Keys::Public(Box::new(key))
            }
            _ => {
                return Err(invalid(
                    "jwt auth needs exactly one of `secret`, `jwks_url` and `public_key`"
                        .to_owned(),
                ));
            }
        };
        if !matches!(keys, Keys::Secret(_)) {
            if algorithms.iter().any(|a| !ASYMMETRIC.contains(a)) {
                return Err(invalid(
                    "a public key verifies asymmetric algorithms only (never HS256 or `none`)"
                        .to_owned(),
                ));
            }
            if algorithms.is_empty() {
                algorithms = ASYMMETRIC.to_vec();
            }
        }
        Ok(Self {
            keys,
            algorithms,
            issuer: settings.issuer,
            audience: settings.audience,
            require_exp: settings.require_exp,
            leeway: i64::try_from(settings.leeway).unwrap_or(i64::MAX),
            attributes: settings.attributes,
        })
    }

    /// Verifies `token` at `now` (Unix seconds): its claims, or why not.
    pub(crate) async fn verify(
        &self,
        token: &str,
        now: i64,
    ) -> Result<Map<String, Value>, Refusal> {
        let claims = match &self.keys {
            Keys::Secret(secret) => {
                super::auth::hs256_claims(token, secret).ok_or(Refusal::NotVerified)?
            }
            Keys::Public(key) => self.verify_with(token, key)?,
            Keys::Set(set) => {
                // `alg: none` and unknown algorithms fail here: they are no `Algorithm`.
                let header =
                    jsonwebtoken::decode_header(token).map_err(|_| Refusal::NotVerified)?;
                if header.alg.family() == AlgorithmFamily::Hmac
                    || !self.algorithms.contains(&header.alg)
                {
                    return Err(Refusal::NotVerified);
                }
                let key = set
                    .key(header.kid.as_deref(), header.alg)
                    .await
                    .ok_or(Refusal::NotVerified)?;
                self.verify_with(token, &key)?
            }
        };
        self.check(claims, now)
    }

    /// The signature of `token`, checked with the public key `key`.
    fn verify_with(&self, token: &str, key: &DecodingKey) -> Result<Map<String, Value>, Refusal> {
        // `alg: none` and unknown algorithms fail here: they are no `Algorithm`.
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refusal::NotVerified)?;
        if header.alg.family() == AlgorithmFamily::Hmac || !self.algorithms.contains(&header.alg) {
            return Err(Refusal::NotVerified);
        }
        if key.family() != header.alg.family() {
            return Err(Refusal::NotVerified);
        }
        // Times, issuer and audience are checked below, with this method's rules.
        let mut validation = Validation::new(header.alg);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .map(|data| data.claims)
            .map_err(|_| Refusal::NotVerified)
    }

    /// `exp`, `nbf` (with the leeway), then `iss` and `aud`.
    fn check(&self, claims: Map<String, Value>, now: i64) -> Result<Map<String, Value>, Refusal> {
        let time = |name: &str| -> Result<Option<i64>, Refusal> {
            match claims.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_i64()
                    .or_else(|| v.as_f64().map(|f| f as i64))
                    .map(Some)
                    .ok_or(Refusal::NotVerified),
            }
        };
        let exp = time("exp")?;
        let nbf = time("nbf")?;
        // A token without `exp` would be valid forever.
        if self.require_exp && exp.is_none() {
            return Err(Refusal::NotVerified);
        }
        if exp.is_some_and(|exp| now >= exp.saturating_add(self.leeway))
            || nbf.is_some_and(|nbf| now < nbf.saturating_sub(self.leeway))
        {
            return Err(Refusal::NotVerified);
        }
        if let Some(want) = &self.issuer
            && claims.get("iss").and_then(Value::as_str) != Some(want.as_str())
        {
            return Err(Refusal::Forbidden(
                "This token's issuer is not accepted by this API.".to_owned(),
            ));
        }
        if let Some(want) = &self.audience {
            let ok = match claims.get("aud") {
                Some(Value::String(a)) => a == want,
                Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(want.as_str())),
                _ => false,
            };
            if !ok {
                return Err(Refusal::Forbidden(
                    "This token's audience does not include this API.".to_owned(),
                ));
            }
        }
        Ok(claims)
    }
}

/// One key of a key set.
#[derive(Clone)]
struct SetKey {
    kid: Option<String>,
    /// The key's own `alg`, when it names one.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// A JSON Web Key Set, fetched when needed.
pub(crate) struct KeySet {
    url: String,
    http: reqwest::Client,
    /// The keys held and when they were fetched.
    held: RwLock<(Arc<Vec<SetKey>>, Option<Instant>)>,
    /// Fetches one at a time; the times of those in the last minute.
    fetches: tokio::sync::Mutex<VecDeque<Instant>>,
}

impl KeySet {
    fn new(url: String, file: &str) -> Result<Self, ServerError> {
        let http = reqwest::Client::builder()
            .timeout(JWKS_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| ServerError::InvalidSetting {
                file: file.to_owned(),
                message: format!("`auth.jwks_url`: {e}"),
            })?;
        Ok(Self {
            url,
            http,
            held: RwLock::new((Arc::new(Vec::new()), None)),
            fetches: tokio::sync::Mutex::new(VecDeque::new()),
        })
    }

    fn held(&self) -> (Arc<Vec<SetKey>>, Option<Instant>) {
        match self.held.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The key for a token's `kid` (or the only key of its family, when the token names none)
    /// and `alg`, fetching the set when it is stale or lacks the key.
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let (keys, fetched) = self.held();
        let fresh = fetched.is_some_and(|at| at.elapsed() < JWKS_TTL);
        if fresh && let Some(key) = find(&keys, kid, alg) {
            return Some(key);
        }
        let mut recent = self.fetches.lock().await;
        // Another request may have fetched while this one waited.
        let (keys, fetched_now) = self.held();
        if fetched_now != fetched
            && let Some(key) = find(&keys, kid, alg)
        {
            return Some(key);
        }
        let now = Instant::now();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            recent.pop_front();
        }
        if recent.len() >= JWKS_FETCHES_PER_MINUTE {
            tracing::warn!(url = %self.url, "JWKS not fetched again: too many fetches this minute");
            return if fresh { None } else { find(&keys, kid, alg) };
        }
        recent.push_back(now);
        match self.fetch().await {
            Ok(set) => {
                let found = find(&set, kid, alg);
                if let Ok(mut held) = self.held.write() {
                    *held = (Arc::new(set), Some(Instant::now()));
                }
                found
            }
            Err(e) => {
                tracing::warn!(url = %self.url, error = %e, "JWKS fetch failed; keeping the keys held");
                find(&keys, kid, alg)
            }
        }
    }

    /// Fetches and parses the set; keys it cannot use (encryption keys, symmetric keys, unknown
    /// kinds) are left out.
    async fn fetch(&self) -> Result<Vec<SetKey>, String> {
        let response = self
            .http
            .get(&self.url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let body = crate::tools::guarded::read_capped(response, JWKS_MAX_BYTES)
            .await
            .map_err(|e| match e {
                crate::tools::guarded::CappedRead::TooLarge => {
                    format!("the key set is larger than {JWKS_MAX_BYTES} bytes")
                }
                crate::tools::guarded::CappedRead::Failed(e) => e.to_string(),
            })?;
        let doc: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let items = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("no `keys` list")?;
        let mut keys = Vec::new();
        for item in items {
            if item
                .get("use")
                .and_then(Value::as_str)
                .is_some_and(|u| u != "sig")
            {
                continue;
            }
            // A symmetric key published in a key set would let anyone sign.
            if item.get("kty").and_then(Value::as_str) == Some("oct") {
                continue;
            }
            let alg = match item.get("alg").and_then(Value::as_str) {
                Some(name) => match Algorithm::from_str(name) {
                    Ok(alg) if ASYMMETRIC.contains(&alg) => Some(alg),
                    _ => continue,
                },
                None => None,
            };
            let Ok(jwk) = serde_json::from_value::<jsonwebtoken::jwk::Jwk>(item.clone()) else {
                continue;
            };
            let Ok(key) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            if key.family() == AlgorithmFamily::Hmac {
                continue;
            }
            keys.push(SetKey {
                kid: item.get("kid").and_then(Value::as_str).map(str::to_owned),
                alg,
                key,
            });
        }
        Ok(keys)
    }
}

/// The key of `keys` for `kid` and `alg`: the one with that id (its own `alg`, if any, equal
/// to the token's), or without an id the only key of the algorithm's family.
fn find(keys: &[SetKey], kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    let fits = |k: &&SetKey| k.key.family() == alg.family() && k.alg.is_none_or(|own| own == alg);
    match kid {
        Some(kid) => keys
            .iter()
            .filter(fits)
            .find(|k| k.kid.as_deref() == Some(kid))
            .map(|k| k.key.clone()),
        None => {
            let mut fitting = keys.iter().filter(fits);
            let only = fitting.next()?;
            fitting.next().is_none().then(|| only.key.clone())
        }
    }
}
