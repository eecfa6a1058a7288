//! Attack tests of the OAuth egress rules: a protected resource whose metadata names an
//! authorization server on a loopback address the connection does not list is refused before
//! any request reaches that server; the twin, which lists it, reaches it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::json;

use super::*;

/// A listener on 127.0.0.1 serving `router`; its address.
async fn serve(router: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// An "authorization server" that counts every request it receives.
async fn counting_server(hits: Arc<AtomicUsize>) -> std::net::SocketAddr {
    let router = Router::new().fallback(move || {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            StatusCode::NOT_FOUND
        }
    });
    serve(router).await
}

/// A protected MCP resource whose metadata names `issuer` as its authorization server.
async fn resource(issuer: String) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let metadata = json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [issuer],
    });
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || {
                let metadata = metadata.clone();
                async move { axum::Json(metadata) }
            }),
        )
        .route(
            "/mcp",
            post(move || {
                let base = base.clone();
                async move {
                    let mut headers = HeaderMap::new();
                    let challenge = format!(
                        "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                    );
                    headers.insert("www-authenticate", challenge.parse().unwrap());
                    (StatusCode::UNAUTHORIZED, headers).into_response()
                }
            }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

struct NeverAsked;

#[async_trait::async_trait]
impl UserAgent for NeverAsked {
    async fn authorize(&self, _url: &str) -> Result<String, OAuthError> {
        Err(OAuthError::UserAgent("not in this test".to_owned()))
    }
}

async fn attempt(allow: Vec<String>) -> (Result<(), OAuthError>, usize) {
    let hits = Arc::new(AtomicUsize::new(0));
    let issuer = counting_server(hits.clone()).await;
    let mcp = resource(format!("http://{issuer}")).await;
    let url = format!("http://{mcp}/mcp");
    let config = OAuthConfig {
        redirect_uri: "http://localhost:1/callback".to_owned(),
        allow: allow
            .into_iter()
            .map(|a| a.replace("ISSUER", &issuer.to_string()))
            .collect(),
        max_step_up: DEFAULT_MAX_STEP_UP,
        ..OAuthConfig::default()
    };
    let authorizer = Authorizer::new(&url, config, Vec::new(), Arc::new(NeverAsked))
        .await
        .unwrap();
    let challenge = format!(
        "Bearer resource_metadata=\"http://{mcp}/.well-known/oauth-protected-resource/mcp\""
    );
    let outcome = authorizer.authorize(Some(&challenge)).await;
    (outcome, hits.load(Ordering::SeqCst))
}

#[tokio::test]
async fn an_unlisted_loopback_authorization_server_is_never_reached() {
    let (outcome, hits) = attempt(Vec::new()).await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(hits, 0, "the unlisted loopback server was reached");
}

#[tokio::test]
async fn twin_a_listed_loopback_authorization_server_is_reached() {
    let (outcome, hits) = attempt(vec!["ISSUER".to_owned()]).await;
    // The server answers 404 to everything, so discovery fails; what matters is that it was asked.
    assert!(outcome.is_err());
    assert!(hits > 0, "the listed authorization server was not reached");
}

#[tokio::test]
async fn the_guarded_client_refuses_metadata_addresses_even_by_ip() {
    let http = GuardedOAuthHttp::new(Vec::new(), Vec::new());
    let url = reqwest::Url::parse("http://169.254.169.254/latest/meta-data/").unwrap();
    let error = http
        .send(reqwest::Request::new(reqwest::Method::GET, url), true)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("eve refused"), "{error}");
}

#[test]
fn a_config_debug_shows_no_secret() {
    let config = OAuthConfig {
        client_secret: Some("s3cr3t-value".to_owned()),
        ..OAuthConfig::default()
    };
    assert!(!format!("{config:?}").contains("s3cr3t-value"));
}

#[tokio::test]
async fn client_credentials_without_a_secret_is_a_config_error() {
    let config = OAuthConfig {
        grant: Grant::ClientCredentials,
        client_id: Some("id".to_owned()),
        ..OAuthConfig::default()
    };
    let error = Authorizer::new(
        "http://127.0.0.1:9/mcp",
        config,
        Vec::new(),
        Arc::new(NeverAsked),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, OAuthError::Config(_)), "{error}");
}
