//! Connections: MCP servers whose tools the agent offers, how to reach them, which of their
//! tools are offered, and the default timeout of a call.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Approval;

/// Tool filters of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    /// Only these tools (empty = all).
    pub allow: Vec<String>,
    /// Never these tools.
    pub block: Vec<String>,
}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Transport {
    /// A child process speaking MCP on stdio.
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Environment (values may be `${VAR}` references).
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP server.
    Http {
        /// Endpoint URL.
        url: String,
        /// Headers (values may be `${VAR}` references).
        headers: BTreeMap<String, String>,
    },
}

/// An MCP server whose tools appear as `NAME__tool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// Name from the path; the tool prefix is `NAME__`.
    pub name: String,
    /// Source file.
    pub source: String,
    /// Transport.
    pub transport: Transport,
    /// Tool filters.
    pub tools: ToolFilter,
    /// Approval for every tool of this server.
    pub approval: Approval,
    /// Per-call timeout in milliseconds.
    pub timeout_ms: u64,
    /// Longest wait for the server to start and answer `initialize`, in milliseconds (`None`:
    /// the runtime's default, 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_ms: Option<u64>,
    /// OAuth of a connection over `url:` (`None`: no authorization, or static `headers:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthSettings>,
    /// Whose tokens the connection uses: the app's (one, authorized by the operator with
    /// `eve connections login`) or each user's.
    #[serde(default, skip_serializing_if = "is_app")]
    pub credentials: Credentials,
}

fn is_app(c: &Credentials) -> bool {
    *c == Credentials::App
}

/// Whose tokens an OAuth connection uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Credentials {
    /// One token for the app, obtained by the operator.
    #[default]
    App,
    /// A token per user principal.
    User,
}

/// How tokens are obtained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// Authorization code with PKCE: someone approves in a browser.
    #[default]
    AuthorizationCode,
    /// Client credentials: the client's own identity, no person involved.
    ClientCredentials,
}

/// The `oauth:` block of a connection. Secrets stay `${VAR}` references here: they are resolved
/// from the environment when the runtime connects, never written into the build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettings {
    /// Grant.
    #[serde(default)]
    pub grant: OAuthGrant,
    /// A client registered beforehand (`None`: dynamic registration); may be a `${VAR}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The pre-registered client's secret: always a `${VAR}` reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes to ask for (empty: what the server says it needs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// `host:port` of an authorization server on a loopback or private address that may be
    /// reached (public addresses always may).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

/// Default MCP call timeout: 60 s.
pub const DEFAULT_MCP_TIMEOUT_MS: u64 = 60_000;
