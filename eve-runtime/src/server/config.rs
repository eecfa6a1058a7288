//! Settings of the session API, resolved once before the server starts.
//!
//! They come from the `eve` channel of the manifest (`agent/channels/eve.yaml`: `auth`,
//! `operators`, `cors`, `max_body_bytes`) with `${VAR}` references resolved from the environment. Without that file
//! the API has no authentication, so it may only listen on loopback: [`ServerConfig::check_host`]
//! refuses anything else before a socket is opened.

use std::net::IpAddr;
use std::time::Duration;

use eve_compile::{ChannelKind, Manifest};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::auth::{Authenticator, resolve_refs};
use super::channels::{Channels, McpChannel};
use super::error::ServerError;
use super::tenancy::Operators;

/// Default largest request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Name of the channel that configures the session API.
pub const API_CHANNEL: &str = "eve";

/// Which browser origins may call the API (CORS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorsOrigins {
    /// Any origin (`origins: "*"`).
    Any,
    /// These origins exactly (`https://app.example.com`).
    List(Vec<String>),
}

/// How the session API is served.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Credentials every route but `/health` requires.
    pub auth: Authenticator,
    /// Browser origins allowed by CORS; `None`: no CORS headers.
    pub cors: Option<CorsOrigins>,
    /// Largest request body in bytes.
    pub body_limit: usize,
    /// What files a message may carry (`upload_policy` of `channels/eve.yaml`); a message route
    /// takes a body as large as its files need ([`super::uploads::UploadPolicy::body_limit`]).
    pub uploads: super::uploads::UploadPolicy,
    /// Interval of keep-alive comments on Server-Sent Event streams.
    pub heartbeat: Duration,
    /// How long an NDJSON stream under eve's stream control (`?streamControlVersion=1`) stays
    /// open before its lease-end line asks the client to reconnect (60 s, as eve).
    pub stream_lease: Duration,
    /// Cancelled when the server shuts down: open streams end, new requests are refused.
    pub shutdown: CancellationToken,
    /// Platform channels (`slack`, `discord`, `telegram`, `webhook`), secrets resolved.
    pub channels: Channels,
    /// Who reaches every session (`operators:` of `channels/eve.yaml`).
    pub operators: Operators,
    /// The MCP channel (`channels/mcp.yaml`), when the agent has one.
    pub mcp: Option<std::sync::Arc<McpChannel>>,
    /// Tests only: every caller reaches every session, as before sessions had owners, so a
    /// test can show a stranger reaching another's session when the check is off.
    #[doc(hidden)]
    pub ownership_unchecked_for_tests: bool,
    /// Who may forward a principal (`trusted_forwarders:` of `channels/eve.yaml`).
    pub forwarders: super::forwarded::Forwarders,
    /// Tests only: every caller may forward a principal, so a test can show a stranger taking
    /// another's identity when the check is off.
    #[doc(hidden)]
    pub forwarders_unchecked_for_tests: bool,
    /// Per-principal bounds on the API's sessions in flight and messages queued (`limits:` of
    /// `channels/eve.yaml`); `None`: unbounded. Operators are never bounded.
    pub limits: Option<super::quota::Bounds>,
    /// What the bounds count (clones share it).
    pub quota: super::quota::Quota,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            auth: Authenticator::None,
            cors: None,
            body_limit: DEFAULT_BODY_LIMIT,
            uploads: super::uploads::UploadPolicy::default(),
            heartbeat: Duration::from_secs(15),
            stream_lease: Duration::from_secs(60),
            shutdown: CancellationToken::new(),
            channels: Channels::default(),
            operators: Operators::default(),
            mcp: None,
            ownership_unchecked_for_tests: false,
            forwarders: super::forwarded::Forwarders::default(),
            forwarders_unchecked_for_tests: false,
            limits: None,
            quota: super::quota::Quota::default(),
        }
    }
}

impl ServerConfig {
    /// Settings from the manifest's `eve` channel (defaults without one) and its platform
    /// channels, resolving `${VAR}` references through `env`.
    pub fn from_manifest(
        manifest: &Manifest,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ServerError> {
        let mut config = Self {
            channels: Channels::resolve(manifest, env)?,
            mcp: McpChannel::resolve(manifest, env)?.map(std::sync::Arc::new),
            ..Self::default()
        };
        // The lease of a controlled stream, shorter for tests that watch a client reconnect.
        if let Some(ms) =
            env(crate::env_vars::EVE_STREAM_LEASE_MS).and_then(|v| v.trim().parse::<u64>().ok())
        {
            config.stream_lease = Duration::from_millis(ms.max(100));
        }
        let Some(channel) = manifest
            .agent
            .channels
            .iter()
            .find(|c| c.name == API_CHANNEL && c.kind == ChannelKind::Http)
        else {
            return Ok(config);
        };
        let file = channel.source.as_str();
        config.auth = Authenticator::resolve(&channel.auth, env, file)?;
        config.operators = Operators::from_manifest(&channel.operators);
        config.forwarders =
            super::forwarded::Forwarders::from_setting(channel.settings.get("trusted_forwarders"))
                .map_err(|message| ServerError::InvalidSetting {
                    file: file.to_owned(),
                    message,
                })?;
        if let Some(limits) = channel.settings.get("limits") {
            config.limits = Some(super::quota::limits(limits, "HTTP API channel").map_err(
                |message| ServerError::InvalidSetting {
                    file: file.to_owned(),
                    message,
                },
            )?);
        }
        if let Some(cors) = channel.settings.get("cors") {
            config.cors = Some(parse_cors(cors, env, file)?);
        }
        if let Some(policy) = channel.settings.get("upload_policy") {
            config.uploads = super::uploads::UploadPolicy::parse(policy).map_err(|message| {
                ServerError::InvalidSetting {
                    file: file.to_owned(),
                    message,
                }
            })?;
        }
        if let Some(limit) = channel.settings.get("max_body_bytes") {
            config.body_limit = limit
                .as_u64()
                .filter(|n| *n > 0)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| ServerError::InvalidSetting {
                    file: file.to_owned(),
                    message: format!(
                        "`max_body_bytes` must be a positive number of bytes, found {limit}"
                    ),
                })?;
        }
        Ok(config)
    }

    /// The largest body a message route reads: its files at the upload limit, base64, and the
    /// usual limit for the rest ([`Self::body_limit`] still caps everything but the files).
    pub(crate) fn message_limit(&self) -> usize {
        self.uploads
            .body_limit(self.body_limit)
            .max(self.body_limit)
    }

    /// Refuses a host other machines can reach when the API has no authentication.
    pub fn check_host(&self, host: &str) -> Result<(), ServerError> {
        if let Some(mcp) = &self.mcp {
            mcp.check_host(host)?;
        }
        if self.auth.is_required() || is_loopback_host(host) {
            Ok(())
        } else {
            Err(ServerError::PublicWithoutAuth {
                host: host.to_owned(),
            })
        }
    }

    /// Whether a browser origin is in the CORS list.
    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        match &self.cors {
            Some(CorsOrigins::Any) => true,
            Some(CorsOrigins::List(list)) => list.iter().any(|o| o == origin),
            None => false,
        }
    }
}

fn parse_cors(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    file: &str,
) -> Result<CorsOrigins, ServerError> {
    let invalid = |message: String| ServerError::InvalidSetting {
        file: file.to_owned(),
        message,
    };
    let origins = match value {
        Value::Object(map) => map.get("origins").cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    let list: Vec<String> = match origins {
        Value::String(s) => vec![s],
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(invalid(format!(
                    "`cors.origins` must list strings, found {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(invalid(format!(
                "`cors` must be `{{origins: [\"https://app.example.com\"]}}` or `{{origins: \"*\"}}`, \
                 found {other}"
            )));
        }
    };
    if list.iter().any(|o| o.trim() == "*") {
        return Ok(CorsOrigins::Any);
    }
    let mut resolved = Vec::with_capacity(list.len());
    for origin in list {
        let origin = resolve_refs(origin.trim(), env, file, "cors.origins")?;
        let origin = origin.trim_end_matches('/').to_owned();
        let ok = (origin.starts_with("http://") || origin.starts_with("https://"))
            && axum::http::HeaderValue::from_str(&origin).is_ok();
        if !ok {
            return Err(invalid(format!(
                "`cors.origins` entry `{origin}` is not an origin: write it as \
                 `https://host[:port]`"
            )));
        }
        resolved.push(origin);
    }
    Ok(CorsOrigins::List(resolved))
}

/// Whether `host` (an IP address or `localhost`, optionally in brackets) is loopback.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The host part of a `Host` header or an origin's authority (`host`, `host:port`, `[v6]:port`).
pub fn authority_host(authority: &str) -> &str {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}
