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
    /// JWT signed with HMAC (HS256).
    Jwt {
        /// Secret (a `${VAR}` reference).
        secret: String,
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
    },
}

fn yes() -> bool {
    true
}
