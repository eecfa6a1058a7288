//! Per-user authorization of an OAuth connection (`credentials: user`), in the flow of a turn.
//!
//! A call of a user-scoped connection by a principal with no token starts a flow ([`begin`]):
//! discovery, client registration and the authorization URL (PKCE S256, a fresh `state`) are
//! rmcp's, run through the guarded client; rmcp keeps the PKCE verifier under the `state` in the
//! store (`oauth-state:NAME`), and eve keeps the flow itself beside it (`oauth-flow:NAME`, keyed
//! by the same `state`): the principal, the session and the call it was started for, and the
//! client it registered. Both are store notes, so a restarted runtime finishes the flow.
//!
//! The browser comes back to `/eve/v1/connections/NAME/callback` ([`complete`]): the `state` must
//! name a stored flow of that connection (a forged one names none), the flow is deleted before
//! anything else (a replayed callback finds none), and the code is exchanged with the stored
//! verifier; the token is stored under the flow's principal only (`oauth:NAME`, key = the
//! principal id), never under the caller of the callback, which carries no credentials at all.

use std::net::SocketAddr;
use std::sync::Arc;

use eve_compile::{Connection, OAuthSettings, Transport};
use rmcp::transport::auth::{
    AuthorizationRequest, AuthorizationSession, OAuthClientConfig, OAuthHttpClient,
};
use serde::{Deserialize, Serialize};

use super::connect::{config, probe_challenge};
use super::http::{GuardedOAuthHttp, listed_rules};
use super::store::{TokenPlace, delete, put, store_error};
use super::{Authorizer, Grant, OAuthError};
use crate::mcp::EnvLookup;
use crate::mcp::error::McpError;
use crate::mcp::transport::expand_env;
use crate::store::{Store, now_ms};

/// The kind of the input request a turn parks on while its principal authorizes.
pub const REQUEST_KIND: &str = "authorization";

/// A flow not completed within this time is refused (and forgotten).
const FLOW_TTL_MS: i64 = 10 * 60 * 1000;

/// One pending authorization: who it is for, and what the callback needs to finish it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flow {
    /// The principal the token will belong to.
    pub principal: String,
    /// The session whose turn waits on it.
    pub session: String,
    /// The call that waits on it.
    pub call_id: String,
    /// The client registered (or pre-registered) for it.
    client_id: String,
    /// The redirect URI it was started with.
    redirect_uri: String,
    /// Scopes asked for.
    scopes: Vec<String>,
    /// The resource's 401 challenge it was discovered from.
    challenge: Option<String>,
    /// When it began (ms since the epoch).
    created_at: i64,
}

/// What the browser brought back to the callback route.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Callback {
    /// The authorization code.
    pub code: Option<String>,
    /// The `state` the flow was started with.
    pub state: Option<String>,
    /// RFC 9207 issuer.
    pub iss: Option<String>,
    /// An error the authorization server returned (`access_denied`: the user declined).
    pub error: Option<String>,
    /// Its description.
    pub error_description: Option<String>,
}

/// How a flow ended.
#[derive(Debug)]
pub enum Completion {
    /// A token is stored for the flow's principal.
    Authorized(Flow),
    /// The user declined at the authorization server.
    Declined(Flow, String),
    /// The code could not be exchanged, or the flow expired.
    Failed(Flow, String),
}

fn flows_namespace(connection: &str) -> String {
    format!("oauth-flow:{connection}")
}

/// Where `principal`'s tokens for `connection` are kept.
pub fn place(store: Arc<dyn Store>, connection: &str, principal: &str) -> TokenPlace {
    TokenPlace {
        store,
        connection: connection.to_owned(),
        principal: principal.to_owned(),
    }
}

/// Whether `principal` holds a token for `connection` (it may have expired: the transport
/// refreshes it).
pub async fn has_token(
    store: &Arc<dyn Store>,
    connection: &str,
    principal: &str,
) -> Result<bool, OAuthError> {
    let stored = place(store.clone(), connection, principal)
        .read()
        .await
        .map_err(OAuthError::from)?;
    Ok(stored.is_some_and(|c| c.token_response.is_some()))
}

/// The connection's URL and OAuth settings, `${VAR}`s resolved.
fn target<'a>(
    connection: &'a Connection,
    env: &EnvLookup,
) -> Result<(String, &'a OAuthSettings), McpError> {
    let name = connection.name.as_str();
    let (Transport::Http { url, .. }, Some(settings)) = (&connection.transport, &connection.oauth)
    else {
        return Err(McpError::Config {
            connection: name.to_owned(),
            reason: "`credentials: user` needs an `oauth:` block over `url:`".to_owned(),
        });
    };
    Ok((expand_env(url, env, name, "url")?, settings))
}

fn unauthorized(connection: &Connection, e: impl std::fmt::Display) -> McpError {
    McpError::Unauthorized {
        connection: connection.name.clone(),
        reason: e.to_string(),
    }
}

/// Starts `principal`'s authorization of `connection` for the call `call_id` of `session`: the
/// URL the principal must visit (its `state` names the stored flow).
#[allow(clippy::too_many_arguments)]
pub async fn begin(
    connection: &Connection,
    env: &EnvLookup,
    own: Vec<SocketAddr>,
    store: Arc<dyn Store>,
    principal: &str,
    redirect_uri: &str,
    session: &str,
    call_id: &str,
) -> Result<String, McpError> {
    let (url, settings) = target(connection, env)?;
    let fail = |e: &dyn std::fmt::Display| unauthorized(connection, e);
    let token_place = place(store.clone(), &connection.name, principal);
    let config = config(connection, settings, env, redirect_uri, Some(token_place))?;
    if config.grant == Grant::ClientCredentials {
        return Err(McpError::Config {
            connection: connection.name.clone(),
            reason: "`credentials: user` authorizes each user with the authorization code grant; \
                     `grant: client_credentials` is for `credentials: app`"
                .to_owned(),
        });
    }
    let parsed = reqwest::Url::parse(&url).map_err(|e| fail(&e))?;
    let rules = listed_rules(&parsed, &config.allow).map_err(|e| fail(&e))?;
    let http: Arc<dyn OAuthHttpClient> = Arc::new(GuardedOAuthHttp::new(rules, own.clone()));
    let mut manager = Authorizer::blank(&url, &http, &config)
        .await
        .map_err(|e| fail(&e))?;
    let challenge = probe_challenge(&url, own).await;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| fail(&OAuthError::from(e)))?;
    manager.set_metadata(resolution.metadata);
    let mut request = AuthorizationRequest::new(redirect_uri.to_owned())
        .with_client_name(config.client_name.as_deref().unwrap_or("eve"));
    if let Some(challenge) = &challenge {
        request = request.with_challenge(challenge.clone());
    }
    if !config.scopes.is_empty() {
        request = request.with_scopes(config.scopes.clone());
    }
    if let Some(id) = &config.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &config.client_secret {
            request = request.with_client_secret(secret.clone());
        }
    }
    let session_flow = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| fail(&OAuthError::from(e)))?;
    let auth_url = session_flow.get_authorization_url().to_owned();
    let (client_id, _) = session_flow
        .auth_manager
        .get_credentials()
        .await
        .map_err(|e| fail(&OAuthError::from(e)))?;
    let state = reqwest::Url::parse(&auth_url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or_else(|| fail(&"the authorization URL carries no `state`"))?;
    let flow = Flow {
        principal: principal.to_owned(),
        session: session.to_owned(),
        call_id: call_id.to_owned(),
        client_id,
        redirect_uri: redirect_uri.to_owned(),
        scopes: config.scopes.clone(),
        challenge,
        created_at: now_ms(),
    };
    let text = serde_json::to_string(&flow).map_err(|e| fail(&e))?;
    put(
        store.as_ref(),
        flows_namespace(&connection.name),
        state,
        text,
    )
    .await
    .map_err(|e| fail(&OAuthError::from(e)))?;
    Ok(auth_url)
}

/// The stored flow of `connection` named by `state`, if there is one.
pub async fn flow(
    store: &Arc<dyn Store>,
    connection: &str,
    state: &str,
) -> Result<Option<Flow>, OAuthError> {
    let note = store
        .note(&flows_namespace(connection), state)
        .await
        .map_err(|e| OAuthError::from(store_error(e)))?;
    match note {
        Some(n) => serde_json::from_str(&n.text)
            .map(Some)
            .map_err(|e| OAuthError::Failed(format!("unreadable pending authorization: {e}"))),
        None => Ok(None),
    }
}

/// Finishes the flow `callback.state` names. `Err` when it names none (forged, replayed, or
/// for another connection): nothing is stored then.
pub async fn complete(
    connection: &Connection,
    env: &EnvLookup,
    own: Vec<SocketAddr>,
    store: Arc<dyn Store>,
    callback: &Callback,
) -> Result<Completion, McpError> {
    let refused = |why: &str| unauthorized(connection, why);
    let Some(state) = callback.state.as_deref().filter(|s| !s.is_empty()) else {
        return Err(refused("the callback carries no `state`"));
    };
    let Some(flow) = flow(&store, &connection.name, state)
        .await
        .map_err(|e| unauthorized(connection, e))?
    else {
        return Err(refused(
            "the callback's `state` names no pending authorization of this connection (forged, \
             already used, or expired)",
        ));
    };
    // Single use: the flow goes before anything is exchanged.
    delete(
        store.as_ref(),
        flows_namespace(&connection.name),
        state.to_owned(),
    )
    .await
    .map_err(|e| unauthorized(connection, OAuthError::from(e)))?;
    if now_ms() - flow.created_at > FLOW_TTL_MS {
        return Ok(Completion::Failed(
            flow,
            "the sign-in took longer than 10 minutes".to_owned(),
        ));
    }
    if let Some(error) = &callback.error {
        let why = match &callback.error_description {
            Some(d) => format!("{error}: {d}"),
            None => error.clone(),
        };
        return Ok(if error == "access_denied" {
            Completion::Declined(flow, why)
        } else {
            Completion::Failed(flow, why)
        });
    }
    let Some(code) = callback.code.as_deref() else {
        return Ok(Completion::Failed(
            flow,
            "the callback carries no `code`".to_owned(),
        ));
    };
    match exchange(connection, env, own, store, &flow, state, code, callback).await {
        Ok(()) => Ok(Completion::Authorized(flow)),
        Err(e) => Ok(Completion::Failed(flow, e.to_string())),
    }
}

#[allow(clippy::too_many_arguments)]
async fn exchange(
    connection: &Connection,
    env: &EnvLookup,
    own: Vec<SocketAddr>,
    store: Arc<dyn Store>,
    flow: &Flow,
    state: &str,
    code: &str,
    callback: &Callback,
) -> Result<(), OAuthError> {
    let (url, settings) = target(connection, env).map_err(|e| OAuthError::Config(e.to_string()))?;
    let token_place = place(store, &connection.name, &flow.principal);
    let config = config(
        connection,
        settings,
        env,
        &flow.redirect_uri,
        Some(token_place),
    )
    .map_err(|e| OAuthError::Config(e.to_string()))?;
    let parsed = reqwest::Url::parse(&url).map_err(|e| OAuthError::Config(e.to_string()))?;
    let rules = listed_rules(&parsed, &config.allow).map_err(OAuthError::Config)?;
    let http: Arc<dyn OAuthHttpClient> = Arc::new(GuardedOAuthHttp::new(rules, own));
    let mut manager = Authorizer::blank(&url, &http, &config).await?;
    let resolution = manager
        .resolve_metadata_from_challenge(flow.challenge.as_deref())
        .await?;
    manager.set_metadata(resolution.metadata);
    let mut client = OAuthClientConfig::new(flow.client_id.clone(), flow.redirect_uri.clone())
        .with_scopes(flow.scopes.clone());
    if let Some(secret) = &config.client_secret {
        client = client.with_client_secret(secret.clone());
    }
    manager.configure_client(client)?;
    manager
        .exchange_code_for_token_with_issuer(code, state, callback.iss.as_deref())
        .await?;
    Ok(())
}
