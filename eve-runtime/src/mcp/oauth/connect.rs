//! The [`Authorizer`] of a connection file's `oauth:` block, as the supervised manager starts
//! the connection: secrets resolved from the environment, tokens read from (and refreshed into)
//! eve's store. The runtime never runs the user's part of the authorization code flow itself:
//! an app-scoped connection is authorized once by the operator (`eve connections login NAME`);
//! client credentials are obtained (and renewed) without anyone.

use std::sync::Arc;

use eve_compile::{Connection, Credentials, OAuthGrant, OAuthSettings};

use super::store::{APP_PRINCIPAL, TokenPlace};
use super::{Authorizer, DEFAULT_MAX_STEP_UP, Grant, OAuthConfig, OAuthError, UserAgent};
use crate::mcp::EnvLookup;
use crate::mcp::error::McpError;
use crate::mcp::transport::expand_env;

/// The redirect the runtime's own authorizer names (it never completes a code flow itself).
const RUNTIME_REDIRECT: &str = "http://127.0.0.1/callback";

/// A user agent that cannot approve: the operator must authorize the connection first.
struct OperatorMustLogIn(String);

#[async_trait::async_trait]
impl UserAgent for OperatorMustLogIn {
    async fn authorize(&self, _url: &str) -> Result<String, OAuthError> {
        Err(OAuthError::UserAgent(format!(
            "the runtime cannot approve an authorization itself: run `eve connections login {}`",
            self.0
        )))
    }
}

/// The OAuth settings of `connection` with its `${VAR}` references resolved; `redirect_uri`
/// and `place` as given.
pub fn config(
    connection: &Connection,
    settings: &OAuthSettings,
    env: &EnvLookup,
    redirect_uri: &str,
    place: Option<TokenPlace>,
) -> Result<OAuthConfig, McpError> {
    let name = connection.name.as_str();
    let resolve = |value: &Option<String>, place: &str| {
        value
            .as_deref()
            .map(|v| expand_env(v, env, name, place))
            .transpose()
    };
    Ok(OAuthConfig {
        grant: match settings.grant {
            OAuthGrant::AuthorizationCode => Grant::AuthorizationCode,
            OAuthGrant::ClientCredentials => Grant::ClientCredentials,
        },
        client_id: resolve(&settings.client_id, "oauth.client_id")?,
        client_secret: resolve(&settings.client_secret, "oauth.client_secret")?,
        client_metadata_url: None,
        client_name: Some(format!("eve ({name})")),
        scopes: settings.scopes.clone(),
        redirect_uri: redirect_uri.to_owned(),
        allow: settings.allow.clone(),
        max_step_up: DEFAULT_MAX_STEP_UP,
        place,
    })
}

/// The authorizer the runtime uses for `connection` at `url`: stored tokens loaded, or client
/// credentials obtained; otherwise a coded error telling the operator to log in.
pub(crate) async fn authorizer(
    connection: &Connection,
    settings: &OAuthSettings,
    url: &str,
    env: &EnvLookup,
    exec: &crate::exec::Executor,
    store: Option<&Arc<dyn crate::store::Store>>,
) -> Result<Arc<Authorizer>, McpError> {
    let name = connection.name.as_str();
    let unauthorized = |reason: String| McpError::Unauthorized {
        connection: name.to_owned(),
        reason,
    };
    if connection.credentials == Credentials::User {
        return Err(unauthorized(
            "it uses per-user tokens (`credentials: user`), which this runtime does not serve yet; use `credentials: app`".to_owned(),
        ));
    }
    let Some(store) = store else {
        return Err(unauthorized(
            "this runtime has no store to keep its tokens in".to_owned(),
        ));
    };
    let place = TokenPlace {
        store: store.clone(),
        connection: name.to_owned(),
        principal: APP_PRINCIPAL.to_owned(),
    };
    let config = config(connection, settings, env, RUNTIME_REDIRECT, Some(place))?;
    let grant = config.grant;
    let agent = Arc::new(OperatorMustLogIn(name.to_owned()));
    let authorizer = Authorizer::new(url, config, exec.own_listeners(), agent)
        .await
        .map_err(|e| unauthorized(e.to_string()))?;
    let restored = authorizer
        .restore()
        .await
        .map_err(|e| unauthorized(e.to_string()))?;
    if !restored {
        if grant == Grant::ClientCredentials {
            let challenge = probe_challenge(url, exec.own_listeners()).await;
            authorizer
                .authorize(challenge.as_deref())
                .await
                .map_err(|e| unauthorized(e.to_string()))?;
        } else {
            return Err(unauthorized(format!(
                "not authorized yet: run `eve connections login {name}` and approve in the browser"
            )));
        }
    }
    Ok(Arc::new(authorizer))
}

/// The `WWW-Authenticate` challenge the server at `url` answers an unauthenticated `initialize`
/// with (the start of discovery), if it answers 401 with one.
pub(crate) async fn probe_challenge(url: &str, own: Vec<std::net::SocketAddr>) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let client = crate::tools::guarded::origin_client(&parsed, own).ok()?;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "eve", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let response = client
        .post(parsed)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}
