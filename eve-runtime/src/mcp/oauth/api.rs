//! OAuth for OpenAPI connections (`openapi:` with `oauth:`): the bearer token of one call,
//! obtained with the same machinery as an MCP connection's.
//!
//! The API's `base_url` is the protected resource: discovery (RFC 9728 protected-resource
//! metadata on the API's origin, RFC 8414 authorization-server metadata), registration, PKCE,
//! resource indicators, refresh and client credentials are the [`Authorizer`]'s, every request
//! through the guarded client. Tokens are the same store notes (`oauth:NAME`, key `app` or the
//! principal's id), so `eve connections login|list|logout` and the in-turn authorization
//! (`crate::features::authorize`, which parks a `credentials: user` call until the principal has
//! signed in) treat both kinds of connection alike: [`connection_of`] gives an OpenAPI
//! connection the shape those expect.
//!
//! A token that has not expired is read from the store and used as it is (no request besides the
//! call's own); an expired one is refreshed (or, with client credentials, obtained again). A
//! principal's token the API refuses (`401`) is forgotten, so the next call asks again.

use std::collections::BTreeMap;
use std::sync::Arc;

use eve_compile::{
    Approval, Connection, Credentials, OAuthGrant, OpenApiCall, ToolFilter, Transport,
};
use rmcp::transport::auth::StoredCredentials;

use super::connect::config;
use super::store::{APP_PRINCIPAL, TokenPlace};
use super::{Authorizer, OAuthError, UserAgent};
use crate::mcp::transport::expand_env;
use crate::tools::ToolContext;

/// The redirect the runtime's own authorizer names (it never completes a code flow itself).
const RUNTIME_REDIRECT: &str = "http://127.0.0.1/callback";

/// Seconds before expiry at which a stored token counts as expired (refreshed first).
const EXPIRY_MARGIN_SECS: u64 = 30;

/// An OpenAPI connection with OAuth, in the shape of an MCP connection over `url:` (its
/// `base_url`), for the authorization code flows and `eve connections`.
pub fn connection_of(call: &OpenApiCall) -> Option<Connection> {
    let oauth = call.oauth.clone()?;
    Some(Connection {
        name: call.connection.clone(),
        source: String::new(),
        transport: Transport::Http {
            url: call.base_url.clone(),
            headers: BTreeMap::new(),
        },
        tools: ToolFilter::default(),
        approval: Approval::Never,
        timeout_ms: 0,
        start_timeout_ms: None,
        oauth: Some(*oauth),
        credentials: call.credentials,
    })
}

/// A user agent that cannot approve.
struct NobodyApproves(String);

#[async_trait::async_trait]
impl UserAgent for NobodyApproves {
    async fn authorize(&self, _url: &str) -> Result<String, OAuthError> {
        Err(OAuthError::UserAgent(self.0.clone()))
    }
}

/// Whose tokens a call of `call` uses, and where they are kept.
fn token_place(call: &OpenApiCall, ctx: &ToolContext) -> Result<TokenPlace, String> {
    let name = &call.connection;
    let principal = match call.credentials {
        Credentials::App => APP_PRINCIPAL.to_owned(),
        Credentials::User => ctx.principal.clone().ok_or_else(|| {
            format!(
                "`{name}` acts for a signed-in user (`credentials: user`), and this session has \
                 none"
            )
        })?,
    };
    let store = ctx
        .store
        .clone()
        .ok_or_else(|| format!("`{name}` uses OAuth, and this runtime has no store for tokens"))?;
    Ok(TokenPlace {
        store,
        connection: name.clone(),
        principal,
    })
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The stored access token, unless it has expired (or is about to).
fn fresh_token(stored: &StoredCredentials) -> Option<String> {
    let response = serde_json::to_value(stored.token_response.as_ref()?).ok()?;
    let token = response.get("access_token")?.as_str()?.to_owned();
    let fresh = match (
        response
            .get("expires_in")
            .and_then(serde_json::Value::as_u64),
        stored.token_received_at,
    ) {
        (Some(lifetime), Some(at)) => {
            at + lifetime > now_secs() + EXPIRY_MARGIN_SECS.min(lifetime / 2)
        }
        _ => true,
    };
    fresh.then_some(token)
}

/// The access token of a call of `call` (an OpenAPI operation with `oauth:`): the stored one
/// while it is fresh, else refreshed or obtained. The error is a sentence naming no token.
pub(crate) async fn bearer(call: &OpenApiCall, ctx: &ToolContext) -> Result<String, String> {
    let name = call.connection.as_str();
    let place = token_place(call, ctx)?;
    let stored = place.read().await.map_err(|e| e.to_string())?;
    if let Some(token) = stored.as_ref().and_then(fresh_token) {
        return Ok(token);
    }
    let (Some(connection), Some(settings)) = (connection_of(call), call.oauth.as_ref()) else {
        return Err(format!("`{name}` has no `oauth:` block"));
    };
    let user = call.credentials == Credentials::User;
    if stored.is_none() && settings.grant == OAuthGrant::AuthorizationCode {
        return Err(if user {
            format!(
                "`{name}` is not authorized for this user yet: call the tool again to ask them to sign in"
            )
        } else {
            format!(
                "`{name}` is not authorized yet: run `eve connections login {name}` and approve in the browser"
            )
        });
    }
    let env = ctx.env.clone();
    let url = expand_env(&call.base_url, &env, name, "base_url").map_err(|e| e.to_string())?;
    let settings = config(
        &connection,
        settings,
        &env,
        RUNTIME_REDIRECT,
        Some(place.clone()),
    )
    .map_err(|e| e.to_string())?;
    let grant = settings.grant;
    let agent = Arc::new(NobodyApproves(if user {
        format!(
            "the sign-in of this user to `{name}` is no longer accepted: call the tool again to sign in again"
        )
    } else {
        format!(
            "the runtime cannot approve an authorization itself: run `eve connections login {name}`"
        )
    }));
    let authorizer = Authorizer::new(&url, settings, ctx.exec.own_listeners(), agent)
        .await
        .map_err(|e| format!("`{name}`: {e}"))?;
    let restored = authorizer
        .restore()
        .await
        .map_err(|e| format!("`{name}`: {e}"))?;
    if restored {
        match authorizer.access_token().await {
            Ok(token) => return Ok(token),
            Err(OAuthError::Failed(_)) | Err(OAuthError::UserAgent(_))
                if grant == super::Grant::ClientCredentials => {}
            Err(e) => {
                if user {
                    let _ = place.remove().await;
                }
                return Err(format!("`{name}`: {e}"));
            }
        }
    }
    if grant != super::Grant::ClientCredentials {
        return Err(format!("`{name}` is not authorized: sign in again"));
    }
    authorizer
        .authorize(None)
        .await
        .map_err(|e| format!("`{name}`: {e}"))?;
    authorizer
        .access_token()
        .await
        .map_err(|e| format!("`{name}`: {e}"))
}

/// After a call answered `401` with a principal's token: the token is forgotten, so the next
/// call asks the principal to sign in again. App tokens are kept (the operator logs in again).
pub(crate) async fn refused(call: &OpenApiCall, ctx: &ToolContext) {
    if call.credentials == Credentials::User
        && let Ok(place) = token_place(call, ctx)
    {
        let _ = place.remove().await;
    }
}
