//! The MCP channel (`agent/channels/mcp.yaml`): the agent served as an MCP server over Streamable
//! HTTP at `/eve/v1/mcp`, so MCP clients (desktop assistants, IDEs, other agents) delegate durable
//! work to it through eve's four invocation tools (see [`tools`]).
//!
//! Every request is checked in this order before any MCP message is read:
//! 1. **DNS rebinding**: the `Host` header must name a loopback host or one of `allowed_hosts`,
//!    and a browser's `Origin`, when sent, must be the same origin as that `Host` or one of
//!    `allowed_origins` (`403` with a JSON-RPC error otherwise). Without authentication only
//!    connections whose socket peer is loopback are served.
//! 2. **Authentication**: the channel's own `auth:` (bearer, basic, JWT or none), the same
//!    principals as the session API's (`token:NAME`, `basic:user`, `jwt:sub`); operators are the
//!    ones `channels/eve.yaml` names. Sessions belong to the principal that starts them (§15): any
//!    other caller is told an invocation does not exist.
//! 3. **Bounds**: the body is at most 1 MiB (`413`), fields are bounded by the tools, and each
//!    principal has its own bounds on invocations in flight and messages queued ([`quota`]), so
//!    one caller flooding starts or follow-ups cannot starve another's turns.
//!
//! The MCP protocol itself (JSON-RPC, `initialize`, `ping`, `tools/*`, errors for bad JSON-RPC)
//! is rmcp's Streamable HTTP server, stateless: no MCP transport session is kept, every request
//! stands alone and invocations are durable eve sessions.

mod invocation;
use crate::server::quota;
mod tools;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use eve_compile::{ChannelKind, Manifest};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::super::App;
use super::super::auth::{Authenticator, Identity, resolve_refs};
use super::super::config::{authority_host, is_loopback_host};
use super::super::error::{ApiError, ServerError};
use crate::engine::Caller;

/// Where the channel is served.
pub const MCP_PATH: &str = "/eve/v1/mcp";

/// Largest MCP request body, as in eve.
const MCP_BODY_LIMIT: usize = 1024 * 1024;

/// The MCP channel's settings, resolved when the server starts.
#[derive(Debug, Clone)]
pub struct McpChannel {
    /// Credentials every request must carry.
    auth: Authenticator,
    /// Host names (or `host:port`) besides loopback that requests may be addressed to.
    allowed_hosts: Vec<String>,
    /// Browser origins besides the request's own that may call the channel.
    allowed_origins: Vec<String>,
    /// Each principal's bounds on invocations in flight and messages queued.
    bounds: quota::Bounds,
    /// The admissions of every principal, shared by the requests of this channel.
    quota: quota::Quota,
    /// Tests only: no per-principal bounds, so a test can show a flooder starving another
    /// principal when they are off.
    #[doc(hidden)]
    pub limits_off_for_tests: bool,
    /// Tests only: no `Host`/`Origin` check, so a test can show a rebinding page reaching the
    /// channel when the check is off.
    #[doc(hidden)]
    pub host_check_off_for_tests: bool,
}

impl McpChannel {
    /// The `mcp` channel of `manifest` (`kind: mcp`), `${VAR}`s resolved through `env`; `None`
    /// without one. A setting it does not know is an error naming the file.
    pub(crate) fn resolve(
        manifest: &Manifest,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ServerError> {
        let Some(channel) = manifest
            .agent
            .channels
            .iter()
            .find(|c| c.kind == ChannelKind::Mcp)
        else {
            return Ok(None);
        };
        let file = channel.source.as_str();
        let invalid = |message: String| ServerError::InvalidSetting {
            file: file.to_owned(),
            message,
        };
        let mut allowed_hosts = Vec::new();
        let mut allowed_origins = Vec::new();
        let mut bounds = quota::Bounds::default();
        for (key, value) in &channel.settings {
            let list = match key.as_str() {
                "allowed_hosts" => &mut allowed_hosts,
                "allowed_origins" => &mut allowed_origins,
                "limits" => {
                    bounds = quota::limits(value, "MCP channel").map_err(invalid)?;
                    continue;
                }
                other => {
                    return Err(invalid(format!(
                        "`{other}` is not a setting of the MCP channel (it takes `auth`, \
                         `allowed_hosts`, `allowed_origins` and `limits`)"
                    )));
                }
            };
            let items = match value {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| invalid(format!("`{key}` must list strings, found {v}")))
                    })
                    .collect::<Result<_, _>>()?,
                other => return Err(invalid(format!("`{key}` must be a list, found {other}"))),
            };
            for item in items {
                let item = resolve_refs(item.trim(), env, file, key)?;
                let item = item.trim().trim_end_matches('/').to_ascii_lowercase();
                if key == "allowed_origins"
                    && !(item.starts_with("http://") || item.starts_with("https://"))
                {
                    return Err(invalid(format!(
                        "`allowed_origins` entry `{item}` is not an origin: write it as \
                         `https://host[:port]`"
                    )));
                }
                if key == "allowed_hosts" && (item.is_empty() || item.contains('/')) {
                    return Err(invalid(format!(
                        "`allowed_hosts` entry `{item}` is not a host name: write it as \
                         `agent.example.com` or `agent.example.com:8443`"
                    )));
                }
                list.push(item);
            }
        }
        Ok(Some(Self {
            auth: Authenticator::resolve(&channel.auth, env, file)?,
            allowed_hosts,
            allowed_origins,
            bounds,
            quota: quota::Quota::default(),
            limits_off_for_tests: false,
            host_check_off_for_tests: false,
        }))
    }

    /// Refuses a host other machines can reach when the channel has no authentication.
    pub fn check_host(&self, host: &str) -> Result<(), ServerError> {
        if self.auth.is_required() || is_loopback_host(host) {
            Ok(())
        } else {
            Err(ServerError::PublicWithoutAuth {
                host: host.to_owned(),
            })
        }
    }

    /// Whether requests addressed to `host` (a `Host` header) are served.
    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        is_loopback_host(authority_host(&host))
            || self
                .allowed_hosts
                .iter()
                .any(|h| *h == host || *h == authority_host(&host))
    }

    /// Why a request must not be served, before authentication (see the module docs).
    fn refuse(&self, request: &Request) -> Option<String> {
        if !self.auth.is_required() {
            let peer = request
                .extensions()
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|info| info.0);
            if !peer.is_some_and(|p| eve_sandbox::egress::canonical(p.ip()).is_loopback()) {
                return Some(
                    "This MCP channel has no authentication and only answers connections from \
                     this machine's loopback."
                        .to_owned(),
                );
            }
        }
        if self.host_check_off_for_tests {
            return None;
        }
        let headers = request.headers();
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return Some("Missing Host header.".to_owned());
        };
        if !self.host_allowed(host) {
            return Some(format!(
                "Invalid Host header: {host}. List it under `allowed_hosts` in \
                 agent/channels/mcp.yaml to serve it."
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin
                .to_str()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            let same = origin
                .split_once("://")
                .filter(|(scheme, _)| *scheme == "http" || *scheme == "https")
                .is_some_and(|(_, authority)| authority == host.trim().to_ascii_lowercase());
            if !same && !self.allowed_origins.contains(&origin) {
                return Some(format!("Invalid Origin: {origin}"));
            }
        }
        None
    }
}

/// Who a call acts as: the authenticated caller, and the sender its messages carry.
#[derive(Debug, Clone)]
pub(crate) struct McpCaller {
    caller: Caller,
    sender: Option<String>,
}

/// A rejected tool call, as eve reports it in `structuredContent.error`.
#[derive(Debug, Clone)]
pub(crate) struct ToolError {
    code: &'static str,
    message: String,
    retryable: bool,
    error_id: Option<String>,
}

impl ToolError {
    fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: "invalid_input",
            message: message.into(),
            retryable: false,
            error_id: None,
        }
    }

    fn not_found() -> Self {
        Self {
            code: "not_found",
            message: "Invocation not found. It may have expired or belong to another caller."
                .to_owned(),
            retryable: false,
            error_id: None,
        }
    }

    /// The caller has too much work in flight: eve's `conflict`, retryable once some finishes.
    fn busy(message: String) -> Self {
        Self {
            code: "conflict",
            message,
            retryable: true,
            error_id: None,
        }
    }

    fn conflict(message: impl Into<String>) -> Self {
        Self {
            code: "conflict",
            message: message.into(),
            retryable: true,
            error_id: None,
        }
    }

    /// An unexpected failure: logged under a fresh id the client is given, no details shown.
    fn internal(detail: &str) -> Self {
        let id = format!("err_{}", ulid::Ulid::new());
        tracing::error!(error_id = %id, "MCP channel call failed: {detail}");
        Self {
            code: "internal",
            message: format!("Internal error ({id})."),
            retryable: false,
            error_id: Some(id),
        }
    }

    fn body(&self) -> Value {
        let mut v =
            json!({"code": self.code, "message": self.message, "retryable": self.retryable});
        if let Some(id) = &self.error_id {
            v["errorId"] = json!(id);
        }
        v
    }
}

/// A JSON-RPC error response outside any request (`id: null`), code `-32000`.
fn rpc_error(status: StatusCode, message: &str) -> Response {
    rpc_error_coded(status, -32000, message)
}

fn rpc_error_coded(status: StatusCode, code: i64, message: &str) -> Response {
    (
        status,
        axum::Json(
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}),
        ),
    )
        .into_response()
}

/// A `POST` body read whole, at most [`MCP_BODY_LIMIT`] bytes (`413`), that is one JSON-RPC
/// message: not JSON is a `-32700` parse error, JSON that is not a JSON-RPC 2.0 message (a
/// batch, a bare value, no `jsonrpc: "2.0"`) a `-32600` invalid request, both `400`. The request
/// is rebuilt with the bytes for the MCP server; other methods pass unchanged.
async fn checked_body(request: Request) -> Result<Request, Response> {
    if request.method() != axum::http::Method::POST {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MCP_BODY_LIMIT).await else {
        return Err(rpc_error_coded(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            &format!("The request body is larger than {MCP_BODY_LIMIT} bytes."),
        ));
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return Err(rpc_error_coded(
                StatusCode::BAD_REQUEST,
                -32700,
                &format!("Parse error: {e}"),
            ));
        }
    };
    let is_message = message.as_object().is_some_and(|m| {
        m.get("jsonrpc") == Some(&json!("2.0"))
            && (m.get("method").is_some_and(Value::is_string)
                || m.contains_key("result")
                || m.contains_key("error"))
    });
    if !is_message {
        return Err(rpc_error_coded(
            StatusCode::BAD_REQUEST,
            -32600,
            "Invalid Request: the body must be one JSON-RPC 2.0 message.",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// `GET`, `POST` and `DELETE /eve/v1/mcp`.
pub(crate) async fn handle(State(app): State<App>, request: Request) -> Response {
    let Some(channel) = app.config.mcp.clone() else {
        return ApiError::RouteNotFound(format!("{} {MCP_PATH}", request.method())).into_response();
    };
    if let Some(reason) = channel.refuse(&request) {
        return rpc_error(StatusCode::FORBIDDEN, &reason);
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let (identity, claims, attributes) = match channel
        .auth
        .verify(authorization, chrono::Utc::now().timestamp())
        .await
    {
        Ok(verified) => (verified.identity, verified.claims, verified.attributes),
        Err(e) => {
            let mut response = rpc_error(StatusCode::UNAUTHORIZED, "Unauthorized.");
            if let ApiError::Unauthorized { challenge } = e {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(challenge),
                );
            }
            return response;
        }
    };
    // The same principal as on the session API: its id with its attributes.
    let caller = app
        .config
        .operators
        .caller(&identity, claims.as_ref())
        .with_attributes(attributes);
    let sender = match &identity {
        Identity::Anonymous => None,
        other => Some(crate::tenancy::principal_key(
            &other.principal_id(),
            caller.attributes(),
        )),
    };
    let mut request = match checked_body(request).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    request
        .extensions_mut()
        .insert(McpCaller { caller, sender });
    let server = tools::AgentServer {
        runtime: app.runtime.clone(),
        name: String::new(),
        description: None,
        ownership_unchecked: app.config.ownership_unchecked_for_tests,
        quota: (!channel.limits_off_for_tests).then(|| (channel.quota.clone(), channel.bounds)),
    };
    let server = match app.runtime.builds().current() {
        Ok(build) => tools::AgentServer {
            name: build.manifest.agent.name.clone(),
            description: build.manifest.agent.description.clone(),
            ..server
        },
        Err(e) => {
            tracing::error!("MCP channel: no current build: {e}");
            return rpc_error(StatusCode::SERVICE_UNAVAILABLE, "The agent is not built.");
        }
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MCP_BODY_LIMIT)
        .with_cancellation_token(app.config.shutdown.child_token());
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    service.handle(request).await.map(Body::new)
}
