//! One Streamable HTTP MCP session driven directly (outside the supervised [`super::McpManager`]):
//! connect, list tools, call tools, with OAuth ([`super::oauth`]) and elicitation.
//!
//! This is eve's MCP client as a single session: the requests go through the runtime's guarded
//! client (the origin of the URL only), a 401 runs the authorization and retries, a 403
//! `insufficient_scope` steps up (bounded) and retries, and a server's `elicitation/create` is
//! answered by an [`Elicitor`]. `eve mcp client` (the adapter of the MCP conformance suite)
//! runs on it.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation,
    RequestParamsMeta,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;

use super::oauth::{Authorizer, Challenge, OAuthError, challenge_in};
use super::transport::tidy;

/// Answers a server's request for input (`elicitation/create`, form mode).
#[async_trait::async_trait]
pub trait Elicitor: Send + Sync {
    /// The content to accept with (an object matching `schema`), or `None` to decline.
    async fn elicit(&self, message: &str, schema: &Value) -> Option<Value>;
}

/// Why a session failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The URL or client could not be set up.
    #[error("mcp_config: {0}")]
    Config(String),
    /// The server could not be reached or did not finish `initialize`.
    #[error("mcp_connect: {0}")]
    Connect(String),
    /// A request failed.
    #[error("mcp_request: {0}")]
    Request(String),
    /// Authorization failed.
    #[error("{0}")]
    OAuth(#[from] OAuthError),
}

/// eve as an MCP client: its identity, and elicitation when an [`Elicitor`] is given.
struct Handler {
    elicitor: Option<Arc<dyn Elicitor>>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.elicitor.is_some() {
            capabilities.elicitation = Some(
                ElicitationCapability::default().with_form(FormElicitationCapability::default()),
            );
        }
        ClientConfig::new(
            capabilities,
            Implementation::new("eve", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let decline = ElicitResult::new(ElicitationAction::Decline);
        let (
            Some(elicitor),
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            },
        ) = (&self.elicitor, request)
        else {
            return Ok(decline);
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
        Ok(match elicitor.elicit(&message, &schema).await {
            Some(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
            None => decline,
        })
    }
}

/// A tool as the server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// Name on the server.
    pub name: String,
    /// JSON Schema of the input.
    pub input_schema: Value,
    /// Description (empty when the server gave none).
    pub description: String,
    /// The server marks it read-only (`readOnlyHint`).
    pub read_only: bool,
}

/// A connected session.
pub struct HttpSession {
    service: RunningService<RoleClient, Handler>,
    authorizer: Option<Arc<Authorizer>>,
}

/// Connects to the Streamable HTTP server at `url` and runs `initialize`. With an `authorizer`,
/// a 401 challenge runs the authorization, then the connection is tried again (once).
pub async fn connect_http(
    url: &str,
    authorizer: Option<Arc<Authorizer>>,
    elicitor: Option<Arc<dyn Elicitor>>,
    own: Vec<SocketAddr>,
) -> Result<HttpSession, SessionError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| SessionError::Config(e.to_string()))?;
    let client =
        crate::tools::guarded::origin_client(&parsed, own).map_err(SessionError::Config)?;
    let handler = Arc::new(elicitor);
    let mut authorized = false;
    loop {
        let config = StreamableHttpClientTransportConfig::with_uri(url);
        let handler = Handler {
            elicitor: (*handler).clone(),
        };
        let outcome = match &authorizer {
            Some(auth) => {
                let transport = StreamableHttpClientTransport::with_client(
                    super::traceparent::Traced(auth.auth_client(client.clone()).await?),
                    config,
                );
                handler.serve(transport).await
            }
            None => {
                let transport = StreamableHttpClientTransport::with_client(
                    super::traceparent::Traced(client.clone()),
                    config,
                );
                handler.serve(transport).await
            }
        };
        match outcome {
            Ok(service) => {
                return Ok(HttpSession {
                    service,
                    authorizer,
                });
            }
            Err(e) => {
                let challenge = challenge_in(&e);
                match (&authorizer, challenge) {
                    (Some(auth), Some(Challenge::Unauthorized(ch))) if !authorized => {
                        auth.authorize(Some(&ch)).await?;
                        authorized = true;
                    }
                    (Some(auth), Some(Challenge::InsufficientScope(ch))) => {
                        auth.step_up(&ch).await?;
                    }
                    _ => return Err(SessionError::Connect(tidy(&e.to_string()))),
                }
            }
        }
    }
}

impl HttpSession {
    /// The server's tools (every page).
    pub async fn list_tools(&self) -> Result<Vec<ListedTool>, SessionError> {
        let tools = self
            .authorized(|| self.service.peer().list_all_tools())
            .await?;
        Ok(tools
            .into_iter()
            .map(|t| ListedTool {
                name: t.name.to_string(),
                input_schema: Value::Object((*t.input_schema).clone()),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                read_only: t
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            })
            .collect())
    }

    /// Calls a tool; the result as the server sent it (JSON).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, SessionError> {
        self.call_tool_traced(name, arguments, None).await
    }

    /// [`Self::call_tool`] as part of a traced tool call: `traceparent` rides in the request's
    /// `_meta` and as its `traceparent` header.
    pub async fn call_tool_traced(
        &self,
        name: &str,
        arguments: Value,
        traceparent: Option<&str>,
    ) -> Result<Value, SessionError> {
        let result = self
            .authorized(|| {
                let mut params = CallToolRequestParams::new(name.to_owned());
                if let Value::Object(map) = &arguments {
                    params = params.with_arguments(map.clone());
                }
                if let Some(traceparent) = traceparent {
                    params.set_traceparent(traceparent);
                }
                self.service.peer().call_tool(params)
            })
            .await?;
        serde_json::to_value(&result).map_err(|e| SessionError::Request(e.to_string()))
    }

    /// Runs a request; a 401 authorizes again once, a 403 `insufficient_scope` steps up (as
    /// often as the connection allows), and the request is sent again.
    async fn authorized<T, F, Fut>(&self, request: F) -> Result<T, SessionError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        let mut reauthorized = false;
        loop {
            match request().await {
                Ok(value) => {
                    if let Some(auth) = &self.authorizer {
                        auth.reset_step_ups().await;
                    }
                    return Ok(value);
                }
                Err(e) => match (&self.authorizer, challenge_in(&e)) {
                    (Some(auth), Some(Challenge::InsufficientScope(ch))) => {
                        auth.step_up(&ch).await?;
                    }
                    (Some(auth), Some(Challenge::Unauthorized(ch))) if !reauthorized => {
                        auth.authorize(Some(&ch)).await?;
                        reauthorized = true;
                    }
                    _ => return Err(SessionError::Request(tidy(&e.to_string()))),
                },
            }
        }
    }

    /// Ends the session.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}
