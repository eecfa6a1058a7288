//! The HTTP client of every OAuth request of an MCP connection (metadata discovery, client
//! registration, the token endpoint, the headless authorization step), under the runtime's
//! egress rules ([`crate::tools::guarded`]).
//!
//! Every URL these requests reach comes from a server's answer (a `WWW-Authenticate` challenge,
//! protected-resource metadata, authorization-server metadata), so none is trusted: each request
//! is checked, and its name resolved and checked, by the guarded client. A host the connection
//! lists (its own `url:` origin and the entries of `oauth.allow`) may be anywhere, loopback
//! included; any other host must be a public address: loopback, link-local, cloud metadata,
//! private ranges and eve's own listeners are refused. Redirects are followed within one origin
//! only, and not at all where the request asks so. Bodies are capped.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http;
use eve_sandbox::egress::{EgressPolicy, Rule};
use futures::StreamExt;
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};

use crate::tools::guarded::{self, Egress};

/// Largest OAuth response body read (metadata documents and token answers are small).
const MAX_BODY: usize = 1024 * 1024;
/// Longest OAuth request, connection to last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The guarded HTTP client of one connection's OAuth requests.
#[derive(Debug, Clone)]
pub(crate) struct GuardedOAuthHttp {
    /// Hosts the connection lists: reachable even on loopback or private addresses.
    listed: Vec<Rule>,
    /// eve's own listening addresses (never reachable).
    own: Vec<SocketAddr>,
}

impl GuardedOAuthHttp {
    /// A client for which `listed` (`host:port` rules) may be reached wherever they resolve.
    pub(crate) fn new(listed: Vec<Rule>, own: Vec<SocketAddr>) -> Self {
        Self { listed, own }
    }

    /// The egress rules of a request to `url`: the listed hosts when it names one of them,
    /// otherwise the public internet.
    fn egress(&self, url: &reqwest::Url) -> Egress {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(0);
        let listed = EgressPolicy::Allow(self.listed.clone());
        let policy = if listed.permits(host, port).is_some() {
            listed
        } else {
            EgressPolicy::All
        };
        Egress {
            policy,
            own: self.own.clone(),
        }
    }

    /// Sends one request under the rules and reads its answer (status, headers, capped body).
    pub(crate) async fn send(
        &self,
        request: reqwest::Request,
        follow: bool,
    ) -> Result<http::Response<Vec<u8>>, OAuthHttpClientError> {
        let url = request.url().clone();
        let egress = self.egress(&url);
        guarded::check_url(&url, &egress)
            .map_err(|refused| Box::new(refused) as OAuthHttpClientError)?;
        let port = url.port_or_known_default().unwrap_or(0);
        let client = if follow {
            guarded::HttpClient::new().client(&egress, port)
        } else {
            guarded::no_redirect_client(&egress, port)
        }
        .map_err(Box::<dyn std::error::Error + Send + Sync>::from)?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, client.execute(request))
            .await
            .map_err(|_| format!("no answer from {url} within {REQUEST_TIMEOUT:?}"))?
            .map_err(|e| match guarded::refusal_in(&e) {
                Some(refused) => Box::new(refused) as OAuthHttpClientError,
                None => Box::new(e) as OAuthHttpClientError,
            })?;
        let mut builder = http::Response::builder()
            .status(response.status())
            .version(response.version());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            if body.len() + chunk.len() > MAX_BODY {
                return Err(format!("the answer of {url} is larger than {MAX_BODY} bytes").into());
            }
            body.extend_from_slice(&chunk);
        }
        builder
            .body(body)
            .map_err(|e| Box::new(e) as OAuthHttpClientError)
    }
}

impl OAuthHttpClient for GuardedOAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let OAuthHttpRequest {
                request,
                redirect_policy,
                ..
            } = request;
            let request = reqwest::Request::try_from(request)
                .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            let follow = matches!(redirect_policy, OAuthHttpRedirectPolicy::Follow);
            self.send(request, follow).await
        })
    }
}

/// `host:port` rules for the origin of `url` and each `host:port` entry of `extra`.
pub(crate) fn listed_rules(url: &reqwest::Url, extra: &[String]) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
        rules.push(
            format!("{host}:{port}")
                .parse::<Rule>()
                .map_err(|e| e.to_string())?,
        );
    }
    for entry in extra {
        rules.push(
            entry
                .parse::<Rule>()
                .map_err(|e| format!("`oauth.allow` entry `{entry}`: {e}"))?,
        );
    }
    Ok(rules)
}
