//! OAuth for MCP connections over Streamable HTTP, per the MCP authorization specification
//! (2025-06-18, 2025-11-25).
//!
//! The protocol work is rmcp's `auth` module (discovery from `WWW-Authenticate` and RFC 9728
//! protected-resource metadata with its well-known fallbacks, RFC 8414 authorization-server
//! metadata with the OpenID fallback, pre-registered clients, client ID metadata documents and
//! RFC 7591 dynamic registration in the specification's order, PKCE S256, RFC 8707 resource
//! indicators, scope selection from the challenge or `scopes_supported`, refresh, client
//! credentials). eve supplies what makes it safe to run inside an agent runtime:
//!
//! - every OAuth request goes through the runtime's guarded client ([`http`]): URLs taken from
//!   metadata reach public addresses only, unless the connection lists the host;
//! - the user's part of the authorization code flow is a [`UserAgent`]: it is shown the
//!   authorization URL and returns the redirect that reached `redirect_uri`;
//! - step-up on `insufficient_scope` is bounded ([`OAuthConfig::max_step_up`]);
//! - tokens live in the [`Authorizer`] and are added to requests by the transport; they never
//!   appear in its `Debug` output, in errors or in tool results.

pub mod api;
pub mod connect;
pub(crate) mod http;
pub mod login;
pub mod store;
pub mod user;

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::AuthClient;
use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationRequest,
    AuthorizationSession, ClientCredentialsConfig, OAuthHttpClient, ScopeUpgradeConfig,
    WWWAuthenticateParams,
};
use tokio::sync::Mutex;

use http::GuardedOAuthHttp;

/// How the runtime obtains tokens for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grant {
    /// Authorization code with PKCE: a user (or the operator, for app credentials) approves.
    #[default]
    AuthorizationCode,
    /// Client credentials (machine to machine): `client_id` and `client_secret` are required.
    ClientCredentials,
}

/// The OAuth settings of one connection.
#[derive(Clone, Default)]
pub struct OAuthConfig {
    /// Grant used to obtain tokens.
    pub grant: Grant,
    /// A client registered with the authorization server beforehand (skips registration).
    pub client_id: Option<String>,
    /// The pre-registered client's secret (a confidential client).
    pub client_secret: Option<String>,
    /// HTTPS URL of eve's client ID metadata document, used when the server supports them.
    pub client_metadata_url: Option<String>,
    /// Name given in dynamic client registration.
    pub client_name: Option<String>,
    /// Scopes to ask for; empty: the challenge's, else the resource's `scopes_supported`.
    pub scopes: Vec<String>,
    /// Where the authorization server sends the user back.
    pub redirect_uri: String,
    /// `host:port` entries reachable on loopback or private addresses (besides the server's own
    /// origin): an authorization server the author runs next to the agent.
    pub allow: Vec<String>,
    /// Most step-up authorizations on `insufficient_scope` for one request before it fails.
    pub max_step_up: u32,
    /// Where tokens and pending authorizations are kept durably (`None`: in memory only).
    pub place: Option<store::TokenPlace>,
}

impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("grant", &self.grant)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .field("allow", &self.allow)
            .field("max_step_up", &self.max_step_up)
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

/// Default bound on step-up authorizations for one request: with the first authorization, at
/// most three authorization requests before the request fails.
pub const DEFAULT_MAX_STEP_UP: u32 = 2;

/// Why an authorization failed; the message names no token or secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    /// The connection's OAuth settings cannot be used.
    #[error("oauth_config: {0}")]
    Config(String),
    /// The authorization server or the resource refused, or answered what the specification
    /// does not allow.
    #[error("oauth_failed: {0}")]
    Failed(String),
    /// The user's side of the flow did not return a usable redirect.
    #[error("oauth_user_agent: {0}")]
    UserAgent(String),
    /// Step-up was asked more often than the connection allows.
    #[error("oauth_step_up_limit: the server asked for more scope {0} times; giving up")]
    StepUpLimit(u32),
}

impl From<AuthError> for OAuthError {
    fn from(e: AuthError) -> Self {
        OAuthError::Failed(crate::mcp::transport::tidy(&e.to_string()))
    }
}

/// The user's part of the authorization code flow.
#[async_trait::async_trait]
pub trait UserAgent: Send + Sync {
    /// Shows `url` to whoever approves, and returns the full URL the authorization server
    /// redirected to (`redirect_uri` with `code`, `state` and maybe `iss`).
    async fn authorize(&self, url: &str) -> Result<String, OAuthError>;
}

/// A user agent for an authorization server that approves without a person (test servers,
/// pre-consented clients): it requests the authorization URL through the guarded client, without
/// following the redirect, and returns the redirect's `Location`.
pub struct HeadlessUserAgent {
    http: GuardedOAuthHttp,
}

impl HeadlessUserAgent {
    /// A headless agent allowed to reach the hosts of `listed` (`host:port`) on any address.
    pub fn new(server_url: &str, listed: &[String]) -> Result<Self, OAuthError> {
        let url = reqwest::Url::parse(server_url).map_err(|e| OAuthError::Config(e.to_string()))?;
        let rules = http::listed_rules(&url, listed).map_err(OAuthError::Config)?;
        Ok(Self {
            http: GuardedOAuthHttp::new(rules, Vec::new()),
        })
    }
}

#[async_trait::async_trait]
impl UserAgent for HeadlessUserAgent {
    async fn authorize(&self, url: &str) -> Result<String, OAuthError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| OAuthError::UserAgent(e.to_string()))?;
        let request = reqwest::Request::new(reqwest::Method::GET, parsed.clone());
        let response = self
            .http
            .send(request, false)
            .await
            .map_err(|e| OAuthError::UserAgent(e.to_string()))?;
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                OAuthError::UserAgent(format!(
                    "the authorization endpoint answered {} without a redirect",
                    response.status()
                ))
            })?;
        parsed
            .join(location)
            .map(|u| u.to_string())
            .map_err(|e| OAuthError::UserAgent(e.to_string()))
    }
}

/// The OAuth state of one connection (for one principal): its client registration, tokens and
/// step-up count. The transport reads tokens from it on every request.
pub struct Authorizer {
    server_url: String,
    config: OAuthConfig,
    http: Arc<dyn OAuthHttpClient>,
    manager: Arc<Mutex<AuthorizationManager>>,
    agent: Arc<dyn UserAgent>,
    step_ups: Mutex<u32>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("server_url", &self.server_url)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Authorizer {
    /// The OAuth state of the connection at `server_url`, with no token yet. `own` are eve's own
    /// listening addresses (never reached).
    pub async fn new(
        server_url: &str,
        config: OAuthConfig,
        own: Vec<SocketAddr>,
        agent: Arc<dyn UserAgent>,
    ) -> Result<Self, OAuthError> {
        let url = reqwest::Url::parse(server_url).map_err(|e| OAuthError::Config(e.to_string()))?;
        let rules = http::listed_rules(&url, &config.allow).map_err(OAuthError::Config)?;
        if config.grant == Grant::ClientCredentials
            && (config.client_id.is_none() || config.client_secret.is_none())
        {
            return Err(OAuthError::Config(
                "`grant: client_credentials` needs `client_id` and `client_secret`".to_owned(),
            ));
        }
        let http: Arc<dyn OAuthHttpClient> = Arc::new(GuardedOAuthHttp::new(rules, own));
        let manager = Self::blank(server_url, &http, &config).await?;
        Ok(Self {
            server_url: server_url.to_owned(),
            config,
            http,
            manager: Arc::new(Mutex::new(manager)),
            agent,
            step_ups: Mutex::new(0),
        })
    }

    async fn blank(
        server_url: &str,
        http: &Arc<dyn OAuthHttpClient>,
        config: &OAuthConfig,
    ) -> Result<AuthorizationManager, OAuthError> {
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(server_url, http.clone()).await?;
        let mut upgrade = ScopeUpgradeConfig::default();
        upgrade.max_upgrade_attempts = config.max_step_up;
        manager.set_scope_upgrade_config(upgrade);
        if let Some(place) = &config.place {
            manager.set_credential_store(place.credentials());
            manager.set_state_store(place.states());
        }
        Ok(manager)
    }

    /// The transport's HTTP client: `client` with this state's token on every request.
    pub(crate) async fn auth_client(
        &self,
        client: reqwest::Client,
    ) -> Result<AuthClient<reqwest::Client>, OAuthError> {
        let blank = Self::blank(&self.server_url, &self.http, &self.config).await?;
        let mut auth = AuthClient::new(client, blank);
        auth.auth_manager = self.manager.clone();
        Ok(auth)
    }

    /// Obtains a token: the authorization code flow (seeded by the server's 401 `challenge` when
    /// there is one) through the user agent, or the client credentials grant.
    pub async fn authorize(&self, challenge: Option<&str>) -> Result<(), OAuthError> {
        let mut slot = self.manager.lock().await;
        let blank = Self::blank(&self.server_url, &self.http, &self.config).await?;
        let mut manager = std::mem::replace(&mut *slot, blank);
        let outcome = self.run_grant(&mut manager, challenge).await;
        *slot = manager;
        outcome
    }

    async fn run_grant(
        &self,
        manager: &mut AuthorizationManager,
        challenge: Option<&str>,
    ) -> Result<(), OAuthError> {
        let resolution = manager.resolve_metadata_from_challenge(challenge).await?;
        manager.set_metadata(resolution.metadata);
        if self.config.grant == Grant::ClientCredentials {
            let credentials = ClientCredentialsConfig::ClientSecret {
                client_id: self.config.client_id.clone().unwrap_or_default(),
                client_secret: self.config.client_secret.clone().unwrap_or_default(),
                scopes: self.config.scopes.clone(),
                resource: Some(self.server_url.clone()),
            };
            manager.validate_client_credentials_metadata(&credentials)?;
            manager.configure_client_credentials(&credentials)?;
            manager.exchange_client_credentials(&credentials).await?;
            return Ok(());
        }
        let mut request = AuthorizationRequest::new(self.config.redirect_uri.clone())
            .with_client_name(self.config.client_name.as_deref().unwrap_or("eve"));
        if let Some(challenge) = challenge {
            request = request.with_challenge(challenge);
        }
        if !self.config.scopes.is_empty() {
            request = request.with_scopes(self.config.scopes.clone());
        }
        if let Some(id) = &self.config.client_id {
            request = request.with_preregistered_client(id.clone());
            if let Some(secret) = &self.config.client_secret {
                request = request.with_client_secret(secret.clone());
            }
        }
        if let Some(url) = &self.config.client_metadata_url {
            request = request.with_client_metadata_url(url.clone());
        }
        let taken = std::mem::replace(
            manager,
            Self::blank(&self.server_url, &self.http, &self.config).await?,
        );
        let session = match AuthorizationSession::new(taken, request).await {
            Ok(session) => session,
            Err((back, e)) => {
                *manager = back;
                return Err(e.into());
            }
        };
        let url = session.get_authorization_url().to_owned();
        let outcome = match self.agent.authorize(&url).await {
            Ok(redirect) => session
                .handle_callback_url(&redirect)
                .await
                .map(|_| ())
                .map_err(OAuthError::from),
            Err(e) => Err(e),
        };
        *manager = session.auth_manager;
        outcome
    }

    /// Answers a 403 `insufficient_scope` challenge: authorizes again for the union of the
    /// granted scopes and the challenge's, at most [`OAuthConfig::max_step_up`] times.
    pub async fn step_up(&self, challenge: &str) -> Result<(), OAuthError> {
        {
            let mut count = self.step_ups.lock().await;
            if *count >= self.config.max_step_up {
                return Err(OAuthError::StepUpLimit(*count));
            }
            *count += 1;
        }
        let base =
            reqwest::Url::parse(&self.server_url).map_err(|e| OAuthError::Config(e.to_string()))?;
        let params = WWWAuthenticateParams::parse(challenge, &base);
        let Some(scope) = params.scope.filter(|s| !s.trim().is_empty()) else {
            return Err(OAuthError::Failed(
                "the server refused for insufficient scope without naming one".to_owned(),
            ));
        };
        if self.config.grant == Grant::ClientCredentials {
            return self.authorize(Some(challenge)).await;
        }
        let manager = self.manager.lock().await;
        let url = manager.request_scope_upgrade(&scope).await?;
        let redirect = self.agent.authorize(&url).await?;
        let callback = AuthorizationCallback::from_redirect_url(&redirect)?;
        manager
            .exchange_code_for_token_with_issuer(
                &callback.code,
                &callback.csrf_token,
                callback.issuer.as_deref(),
            )
            .await?;
        Ok(())
    }

    /// Forgets the step-ups counted so far (a request succeeded with the scope it has).
    pub async fn reset_step_ups(&self) {
        let mut count = self.step_ups.lock().await;
        if *count > 0 {
            *count = 0;
            self.manager
                .lock()
                .await
                .reset_scope_upgrade_attempts()
                .await;
        }
    }

    /// Loads the stored tokens, if any (the transport refreshes them when they have expired):
    /// whether there were some.
    pub async fn restore(&self) -> Result<bool, OAuthError> {
        let mut manager = self.manager.lock().await;
        let restored = manager.initialize_from_store().await?;
        // The store keeps the client's id only: a confidential client gets its secret back, or
        // its refresh after a restart would go unauthenticated (and be refused).
        if restored
            && let (Some(id), Some(secret)) = (&self.config.client_id, &self.config.client_secret)
            && manager
                .get_credentials()
                .await
                .is_ok_and(|(stored, _)| &stored == id)
        {
            let client = rmcp::transport::auth::OAuthClientConfig::new(
                id.clone(),
                self.config.redirect_uri.clone(),
            )
            .with_client_secret(secret.clone())
            .with_scopes(self.config.scopes.clone());
            manager.configure_client(client)?;
        }
        Ok(restored)
    }

    /// The access token to send: the held one, refreshed first when it has expired.
    pub async fn access_token(&self) -> Result<String, OAuthError> {
        let manager = self.manager.lock().await;
        Ok(manager.get_access_token().await?)
    }

    /// Whether a token is held (it may have expired; the transport refreshes it).
    pub async fn has_token(&self) -> bool {
        let manager = self.manager.lock().await;
        matches!(manager.get_credentials().await, Ok((_, Some(_))))
    }
}

/// The `WWW-Authenticate` challenge of a 401 or 403 somewhere in an error's chain of sources.
pub(crate) fn challenge_in(error: &(dyn std::error::Error + 'static)) -> Option<Challenge> {
    use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};
    let mut current = Some(error);
    while let Some(e) = current {
        // `initialize`'s error keeps the transport's error in a field that is not its source.
        if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
            e.downcast_ref::<rmcp::service::ClientInitializeError>()
        {
            current = Some(error as &(dyn std::error::Error + 'static));
            continue;
        }
        if let Some(e) = e.downcast_ref::<AuthRequiredError>() {
            return Some(Challenge::Unauthorized(e.www_authenticate_header.clone()));
        }
        if let Some(e) = e.downcast_ref::<InsufficientScopeError>() {
            return Some(Challenge::InsufficientScope(
                e.www_authenticate_header.clone(),
            ));
        }
        current = e.source();
    }
    None
}

/// What a protected resource answered when it refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// 401: no token, or one it does not accept. The `WWW-Authenticate` value.
    Unauthorized(String),
    /// 403 `insufficient_scope`. The `WWW-Authenticate` value.
    InsufficientScope(String),
}

#[cfg(test)]
mod tests;
