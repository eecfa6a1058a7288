//! Channels: where messages come from (the session API, chat platforms, webhooks) and how an
//! HTTP channel authenticates its callers.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An inbound channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    /// Name from the path (`eve` configures the default session API).
    pub name: String,
    /// Source file.
    pub source: String,
    /// `http`, `slack`, `discord`, `telegram` or `webhook`.
    pub kind: ChannelKind,
    /// Authentication for `http` channels.
    pub auth: Auth,
    /// Other settings of the channel kind, with `${VAR}` references unresolved.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// Who reaches every session (`operators:` of `channels/eve.yaml`); everyone else reaches
    /// only the sessions they started.
    #[serde(default, skip_serializing_if = "Operators::is_empty")]
    pub operators: Operators,
}

/// The principals that reach every session of the agent, and answer any approval: the
/// `operators:` of `channels/eve.yaml`. The terminal is always one; so is every caller of an
/// API without authentication (it answers loopback only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Operators {
    /// Principal ids as `approval.settled` shows them: `token:<VAR>` (a bearer token by the
    /// variable it is read from), `basic:<user>`, `jwt:<sub>`, `slack:<user id>`,
    /// `discord:<user id>`, `telegram:<user id>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<String>,
    /// JWT claims that make a token's holder an operator: every listed claim must hold (the
    /// token's claim equals the value, or is a list holding it), such as `role: operator`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims: BTreeMap<String, serde_json::Value>,
}

impl Operators {
    /// Whether nobody is named.
    pub fn is_empty(&self) -> bool {
        self.principals.is_empty() && self.claims.is_empty()
    }
}

/// Channel kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// The session API.
    Http,
    /// Slack Events API.
    Slack,
    /// Discord interactions.
    Discord,
    /// Telegram bot webhook.
    Telegram,
    /// Generic signed webhook.
    Webhook,
    /// The agent as an MCP server (Streamable HTTP at `/eve/v1/mcp`).
    Mcp,
}

/// Authentication of an HTTP channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Auth {
    /// No authentication (the default API then binds loopback only).
    #[default]
    None,
    /// `Authorization: Bearer <token>`; tokens are `${VAR}` references or literals.
    Bearer {
        /// Accepted tokens.
        tokens: Vec<String>,
    },
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password (a `${VAR}` reference).
        password: String,
    },
    /// A JWT, verified with exactly one of: an HMAC `secret` (HS256), the keys of a JWKS URL
    /// (`jwks_url`, as Auth0, Clerk, Okta, Google and Keycloak publish them) or a PEM public key
    /// (`public_key`). The token's `alg` never chooses the kind of key.
    Jwt {
        /// HMAC secret for HS256 (a `${VAR}` reference).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<String>,
        /// URL of a JSON Web Key Set (fetched, cached and refetched on rotation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jwks_url: Option<String>,
        /// A PEM public key (RSA, P-256/P-384 or Ed25519), or a `${VAR}` holding one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        public_key: Option<String>,
        /// Accepted algorithms of an asymmetric key (empty: every one its key allows).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        algorithms: Vec<String>,
        /// Required `iss`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        issuer: Option<String>,
        /// Required `aud`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
        /// Whether a token must carry `exp` (default true: a token without one would be valid
        /// forever).
        #[serde(default = "yes")]
        require_exp: bool,
        /// Seconds of clock skew allowed on `exp` and `nbf` (default 60).
        #[serde(default = "default_leeway")]
        leeway: u64,
        /// Claims carried as the principal's attributes (a tenant id, an email).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attributes: Vec<String>,
    },
    /// Several methods tried in order (`auth:` as a list, eve's auth walk): the first that
    /// accepts the request wins.
    Chain {
        /// The methods, in order (none of them `none` or another chain).
        methods: Vec<Auth>,
    },
}

impl Auth {
    /// The methods tried: a chain's, else this one.
    pub fn methods(&self) -> Vec<&Auth> {
        match self {
            Self::Chain { methods } => methods.iter().collect(),
            other => vec![other],
        }
    }
}

/// Default clock leeway of JWT times, in seconds.
pub const DEFAULT_JWT_LEEWAY: u64 = 60;

fn default_leeway() -> u64 {
    DEFAULT_JWT_LEEWAY
}

fn yes() -> bool {
    true
}
