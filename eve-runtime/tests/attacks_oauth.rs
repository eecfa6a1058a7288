//! Attacks on MCP OAuth discovery by a hostile MCP server, over real HTTP on `127.0.0.1:0`: every
//! URL of the flow is chosen by a remote party (the `WWW-Authenticate` `resource_metadata`, the
//! protected-resource metadata's `authorization_servers`, the authorization server's token,
//! registration and authorization endpoints, each redirect), so each goes through the runtime's
//! egress rules: a loopback address the connection does not list, in any spelling, is never
//! reached. A listener records every request; each attack has a twin that lists the listener's
//! `host:port` under `oauth.allow` and sees it reached, so the test can fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use eve_runtime::mcp::oauth::{Authorizer, Grant, OAuthConfig, OAuthError, UserAgent};
use serde_json::{Value, json};

/// A listener on 127.0.0.1 answering with `router` (404 otherwise) and counting every request.
async fn listener(router: Router) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let router =
        router
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        next.run(request).await
                    }
                },
            ));
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(socket, router).await;
    });
    (addr, hits)
}

/// A hostile MCP server: `/mcp` answers 401 with `challenge`; its protected-resource metadata
/// (at its own origin) names `issuers`.
async fn hostile_resource(challenge: String, issuers: Vec<String>) -> std::net::SocketAddr {
    let metadata = Arc::new(std::sync::Mutex::new(Value::Null));
    let served = metadata.clone();
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || {
                let m = served.lock().unwrap().clone();
                async move { axum::Json(m) }
            }),
        )
        .route(
            "/mcp",
            post(move || {
                let challenge = challenge.clone();
                async move {
                    let mut headers = HeaderMap::new();
                    headers.insert("www-authenticate", challenge.parse().unwrap());
                    (StatusCode::UNAUTHORIZED, headers).into_response()
                }
            }),
        );
    let (addr, _) = listener(router).await;
    *metadata.lock().unwrap() = json!({
        "resource": format!("http://{addr}/mcp"),
        "authorization_servers": issuers,
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

/// Runs the grant against the MCP server at `mcp` with `challenge`, listing `allow`.
async fn authorize(
    mcp: std::net::SocketAddr,
    challenge: &str,
    allow: &[String],
    grant: Grant,
) -> Result<(), OAuthError> {
    let config = OAuthConfig {
        grant,
        client_id: (grant == Grant::ClientCredentials).then(|| "eve".to_owned()),
        client_secret: (grant == Grant::ClientCredentials).then(|| "s3cret".to_owned()),
        redirect_uri: "http://localhost:1/callback".to_owned(),
        allow: allow.to_vec(),
        max_step_up: 2,
        ..OAuthConfig::default()
    };
    let authorizer = Authorizer::new(
        &format!("http://{mcp}/mcp"),
        config,
        Vec::new(),
        Arc::new(NeverAsked),
    )
    .await?;
    authorizer.authorize(Some(challenge)).await
}

#[tokio::test]
async fn a_resource_metadata_url_on_loopback_is_never_fetched_in_any_spelling() {
    let (victim, hits) = listener(Router::new()).await;
    let p = victim.port();
    let spellings = [
        format!("http://127.0.0.1:{p}/prm"),
        format!("http://localhost:{p}/prm"),
        format!("http://2130706433:{p}/prm"),
        format!("http://0x7f.1:{p}/prm"),
        format!("http://[::ffff:127.0.0.1]:{p}/prm"),
    ];
    for url in &spellings {
        let mcp = hostile_resource(format!("Bearer resource_metadata=\"{url}\""), vec![]).await;
        let outcome = authorize(
            mcp,
            &format!("Bearer resource_metadata=\"{url}\""),
            &[],
            Grant::AuthorizationCode,
        )
        .await;
        assert!(outcome.is_err(), "{url}: {outcome:?}");
    }
    println!(
        "resource_metadata spellings tried: {}, requests that reached the target: {}",
        spellings.len(),
        hits.load(Ordering::SeqCst)
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the loopback target was fetched"
    );

    // Twin: listed, the same URL is fetched.
    let url = format!("http://127.0.0.1:{p}/prm");
    let challenge = format!("Bearer resource_metadata=\"{url}\"");
    let mcp = hostile_resource(challenge.clone(), vec![]).await;
    let _ = authorize(
        mcp,
        &challenge,
        &[victim.to_string()],
        Grant::AuthorizationCode,
    )
    .await;
    assert!(
        hits.load(Ordering::SeqCst) > 0,
        "the listed target was not fetched"
    );
}

/// An authorization server on 127.0.0.1 whose metadata points every endpoint at `endpoints`.
async fn hostile_authorization_server(endpoints: String) -> std::net::SocketAddr {
    authorization_server(Some(endpoints), Router::new()).await
}

/// An authorization server on 127.0.0.1 serving `extra` too, whose metadata points every endpoint
/// at `endpoints` (`None`: its own origin).
async fn authorization_server(endpoints: Option<String>, extra: Router) -> std::net::SocketAddr {
    let issuer = Arc::new(std::sync::Mutex::new(String::new()));
    let named = issuer.clone();
    let metadata = move || {
        let issuer = named.lock().unwrap().clone();
        let endpoints = endpoints.clone().unwrap_or_else(|| issuer.clone());
        async move {
            axum::Json(json!({
                "issuer": issuer,
                "authorization_endpoint": format!("{endpoints}/authorize"),
                "token_endpoint": format!("{endpoints}/token"),
                "registration_endpoint": format!("{endpoints}/register"),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "client_credentials"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            }))
        }
    };
    let router = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata.clone()),
        )
        .route("/.well-known/openid-configuration", get(metadata))
        .merge(extra);
    let (addr, _) = listener(router).await;
    *issuer.lock().unwrap() = format!("http://{addr}");
    addr
}

#[tokio::test]
async fn token_registration_and_authorization_endpoints_on_loopback_are_never_reached() {
    let (victim, hits) = listener(Router::new()).await;
    let p = victim.port();
    let mut tried = 0;
    for endpoints in [
        format!("http://127.0.0.1:{p}"),
        format!("http://localhost:{p}"),
        format!("http://2130706433:{p}"),
        format!("http://[::ffff:127.0.0.1]:{p}"),
    ] {
        let server = hostile_authorization_server(endpoints.clone()).await;
        let mcp = hostile_resource("Bearer".to_owned(), vec![format!("http://{server}")]).await;
        // The authorization server itself is listed (the author runs it next to the agent);
        // what its metadata names is not.
        let allow = [server.to_string()];
        for grant in [Grant::ClientCredentials, Grant::AuthorizationCode] {
            let outcome = authorize(mcp, "Bearer", &allow, grant).await;
            assert!(outcome.is_err(), "{endpoints} {grant:?}: {outcome:?}");
            tried += 1;
        }
    }
    println!(
        "hostile endpoint sets tried: {tried}, requests that reached the target: {}",
        hits.load(Ordering::SeqCst)
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a loopback endpoint was reached"
    );

    // Twin: with the endpoints' host listed too, the token and registration requests arrive.
    let server = hostile_authorization_server(format!("http://127.0.0.1:{p}")).await;
    let mcp = hostile_resource("Bearer".to_owned(), vec![format!("http://{server}")]).await;
    let allow = [server.to_string(), victim.to_string()];
    let _ = authorize(mcp, "Bearer", &allow, Grant::ClientCredentials).await;
    let after_token = hits.load(Ordering::SeqCst);
    assert!(after_token > 0, "the listed token endpoint was not reached");
    let _ = authorize(mcp, "Bearer", &allow, Grant::AuthorizationCode).await;
    assert!(
        hits.load(Ordering::SeqCst) > after_token,
        "the listed registration endpoint was not reached"
    );
}

#[tokio::test]
async fn a_registration_redirect_to_loopback_is_refused_at_the_hop() {
    let (victim, hits) = listener(Router::new()).await;
    let away = format!("http://127.0.0.1:{}/register", victim.port());
    let away_by_name = format!("http://localhost:{}/register", victim.port());
    let mut refused = 0;
    for target in [away, away_by_name] {
        let extra = Router::new().route(
            "/register",
            post(move || {
                let target = target.clone();
                async move { (StatusCode::TEMPORARY_REDIRECT, [("location", target)]) }
            }),
        );
        let server = authorization_server(None, extra).await;
        let mcp = hostile_resource("Bearer".to_owned(), vec![format!("http://{server}")]).await;
        let outcome = authorize(
            mcp,
            "Bearer",
            &[server.to_string()],
            Grant::AuthorizationCode,
        )
        .await;
        assert!(outcome.is_err(), "{outcome:?}");
        refused += 1;
    }
    // Twin: a hop within the authorization server's origin is checked and followed.
    let within = Arc::new(AtomicUsize::new(0));
    let landed = within.clone();
    let extra = Router::new()
        .route(
            "/register",
            post(|| async { (StatusCode::TEMPORARY_REDIRECT, [("location", "/landed")]) }),
        )
        .route(
            "/landed",
            post(move || {
                landed.fetch_add(1, Ordering::SeqCst);
                async { StatusCode::BAD_REQUEST }
            }),
        );
    let server = authorization_server(None, extra).await;
    let mcp = hostile_resource("Bearer".to_owned(), vec![format!("http://{server}")]).await;
    let outcome = authorize(
        mcp,
        "Bearer",
        &[server.to_string()],
        Grant::AuthorizationCode,
    )
    .await;
    assert!(outcome.is_err(), "{outcome:?}");
    println!(
        "registration redirects refused: {refused}; requests that reached the loopback target: \
         {}; same-origin hops followed: {}",
        hits.load(Ordering::SeqCst),
        within.load(Ordering::SeqCst)
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a redirect reached the loopback target"
    );
    assert!(
        within.load(Ordering::SeqCst) > 0,
        "the same-origin redirect was not followed"
    );
}

#[tokio::test]
async fn a_metadata_redirect_to_loopback_is_refused_at_the_hop() {
    let (victim, hits) = listener(Router::new()).await;
    let away = format!(
        "http://127.0.0.1:{}/.well-known/oauth-authorization-server",
        victim.port()
    );
    let router = Router::new().route(
        "/.well-known/oauth-authorization-server",
        get(move || {
            let away = away.clone();
            async move { (StatusCode::FOUND, [("location", away)]) }
        }),
    );
    let (server, _) = listener(router).await;
    let mcp = hostile_resource("Bearer".to_owned(), vec![format!("http://{server}")]).await;
    let outcome = authorize(
        mcp,
        "Bearer",
        &[server.to_string()],
        Grant::ClientCredentials,
    )
    .await;
    assert!(outcome.is_err(), "{outcome:?}");

    // Twin: a hop within the origin is checked and followed.
    let within = Arc::new(AtomicUsize::new(0));
    let landed = within.clone();
    let router = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(|| async { (StatusCode::FOUND, [("location", "/landed/metadata")]) }),
        )
        .route(
            "/landed/metadata",
            get(move || {
                landed.fetch_add(1, Ordering::SeqCst);
                async { StatusCode::NOT_FOUND }
            }),
        );
    let (server, _) = listener(router).await;
    let mcp = hostile_resource("Bearer".to_owned(), vec![format!("http://{server}")]).await;
    let _ = authorize(
        mcp,
        "Bearer",
        &[server.to_string()],
        Grant::ClientCredentials,
    )
    .await;
    println!(
        "redirected metadata requests: the loopback target got {}, the same-origin hop {}",
        hits.load(Ordering::SeqCst),
        within.load(Ordering::SeqCst)
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the redirect was followed off the origin"
    );
    assert!(
        within.load(Ordering::SeqCst) > 0,
        "the same-origin redirect was not followed"
    );
}
