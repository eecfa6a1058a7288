//! A small OAuth 2.1 authorization server for the MCP OAuth tests, on 127.0.0.1: RFC 9728
//! protected-resource metadata (for the fixture MCP server), RFC 8414 metadata, RFC 7591
//! registration, the authorization code grant with PKCE S256 (approving at once, redirecting
//! with `code` and `state`), refresh, the client credentials grant, and `/introspect` for the
//! resource server. One confidential client is registered beforehand ([`CONFIDENTIAL_ID`]): every
//! token request naming it must authenticate with its secret (HTTP Basic or the request body),
//! refreshes included.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::json;
use sha2::Digest;

/// The pre-registered confidential client.
pub const CONFIDENTIAL_ID: &str = "eve-confidential";
/// Its secret.
pub const CONFIDENTIAL_SECRET: &str = "confidential-secret-0123456789";

/// What the server has issued; shared with the test.
#[derive(Default)]
pub struct Issued {
    /// Base URL of this server.
    pub base: String,
    /// The protected resource (the MCP endpoint).
    pub resource: String,
    /// Lifetime of access tokens.
    pub lifetime: Duration,
    codes: HashMap<String, (String, String)>,
    access: HashMap<String, Instant>,
    refresh: HashMap<String, ()>,
    counter: usize,
}

/// A running server.
pub struct AuthServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// Issued state.
    pub issued: Arc<Mutex<Issued>>,
    /// Refresh grants served.
    pub refreshes: Arc<AtomicUsize>,
    /// Every access and refresh token ever issued.
    pub tokens: Arc<Mutex<Vec<String>>>,
}

type Shared = (
    Arc<Mutex<Issued>>,
    Arc<AtomicUsize>,
    Arc<Mutex<Vec<String>>>,
);

fn form(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value nobody can guess (hex of a hash of the time and a counter).
fn unguessable(counter: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let digest = sha2::Sha256::digest(format!("{nanos}-{counter}").as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

fn bad(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"error": error}))).into_response()
}

/// Starts the server; `lifetime` is how long access tokens live.
pub async fn start(lifetime: Duration) -> AuthServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let issued = Arc::new(Mutex::new(Issued {
        base: base.clone(),
        lifetime,
        ..Issued::default()
    }));
    let refreshes = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let shared: Shared = (issued.clone(), refreshes.clone(), tokens.clone());
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/introspect", get(introspect))
        .with_state(shared);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    AuthServer {
        base,
        host: addr.to_string(),
        issued,
        refreshes,
        tokens,
    }
}

async fn resource_metadata(State((issued, ..)): State<Shared>) -> Response {
    let issued = issued.lock().unwrap();
    axum::Json(json!({
        "resource": issued.resource,
        "authorization_servers": [issued.base],
        "scopes_supported": ["docs.read"],
    }))
    .into_response()
}

async fn server_metadata(State((issued, ..)): State<Shared>) -> Response {
    let base = issued.lock().unwrap().base.clone();
    axum::Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
        "scopes_supported": ["docs.read"],
    }))
    .into_response()
}

async fn register(State((issued, ..)): State<Shared>, body: String) -> Response {
    let request: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let mut issued = issued.lock().unwrap();
    issued.counter += 1;
    let id = format!("client-{}", issued.counter);
    (
        StatusCode::CREATED,
        axum::Json(json!({
            "client_id": id,
            "client_id_issued_at": 0,
            "redirect_uris": request["redirect_uris"],
            "client_name": request["client_name"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })),
    )
        .into_response()
}

async fn authorize(State((issued, ..)): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let q = form(&query.unwrap_or_default());
    let (Some(redirect), Some(state), Some(challenge)) = (
        q.get("redirect_uri"),
        q.get("state"),
        q.get("code_challenge"),
    ) else {
        return bad("invalid_request");
    };
    if q.get("code_challenge_method").map(String::as_str) != Some("S256")
        || q.get("response_type").map(String::as_str) != Some("code")
    {
        return bad("invalid_request");
    }
    let mut issued = issued.lock().unwrap();
    issued.counter += 1;
    let code = format!("code-{}-{}", issued.counter, unguessable(issued.counter));
    issued
        .codes
        .insert(code.clone(), (challenge.clone(), redirect.clone()));
    let location = format!("{redirect}?code={code}&state={}", urlencode(state));
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The client a token request authenticates as, and whether it gave the confidential client's
/// secret: HTTP Basic first, then `client_id`/`client_secret` in the body.
fn client_of(headers: &HeaderMap, f: &HashMap<String, String>) -> (Option<String>, bool) {
    if let Some(basic) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(basic.trim())
    {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((id, secret)) = text.split_once(':') {
            let (id, secret) = (decode(id), decode(secret));
            let ok = id == CONFIDENTIAL_ID && secret == CONFIDENTIAL_SECRET;
            return (Some(id), ok);
        }
    }
    let id = f.get("client_id").cloned();
    let ok = id.as_deref() == Some(CONFIDENTIAL_ID)
        && f.get("client_secret").map(String::as_str) == Some(CONFIDENTIAL_SECRET);
    (id, ok)
}

fn unauthorized_client() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"error": "invalid_client"})),
    )
        .into_response()
}

fn grant(issued: &mut Issued, tokens: &Mutex<Vec<String>>) -> Response {
    issued.counter += 1;
    let access = format!("at-{}-{}", issued.counter, unguessable(issued.counter));
    let refresh = format!("rt-{}-{}", issued.counter, unguessable(issued.counter));
    issued
        .access
        .insert(access.clone(), Instant::now() + issued.lifetime);
    issued.refresh.insert(refresh.clone(), ());
    tokens.lock().unwrap().push(access.clone());
    tokens.lock().unwrap().push(refresh.clone());
    axum::Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": issued.lifetime.as_secs(),
        "refresh_token": refresh,
        "scope": "docs.read",
    }))
    .into_response()
}

async fn token(
    State((issued, refreshes, tokens)): State<Shared>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let f = form(&body);
    let mut issued = issued.lock().unwrap();
    let (client, authenticated) = client_of(&headers, &f);
    if client.as_deref() == Some(CONFIDENTIAL_ID) && !authenticated {
        return unauthorized_client();
    }
    match f.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {
            if !authenticated {
                return unauthorized_client();
            }
            issued.counter += 1;
            let access = format!("cc-{}-{}", issued.counter, unguessable(issued.counter));
            let until = Instant::now() + issued.lifetime;
            issued.access.insert(access.clone(), until);
            tokens.lock().unwrap().push(access.clone());
            axum::Json(json!({
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": issued.lifetime.as_secs(),
                "scope": "docs.read",
            }))
            .into_response()
        }
        Some("authorization_code") => {
            let (Some(code), Some(verifier)) = (f.get("code"), f.get("code_verifier")) else {
                return bad("invalid_request");
            };
            let Some((challenge, redirect)) = issued.codes.remove(code) else {
                return bad("invalid_grant");
            };
            let digest = sha2::Sha256::digest(verifier.as_bytes());
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
            if computed != challenge || f.get("redirect_uri") != Some(&redirect) {
                return bad("invalid_grant");
            }
            grant(&mut issued, &tokens)
        }
        Some("refresh_token") => {
            let Some(refresh) = f.get("refresh_token") else {
                return bad("invalid_request");
            };
            if issued.refresh.remove(refresh).is_none() {
                return bad("invalid_grant");
            }
            refreshes.fetch_add(1, Ordering::SeqCst);
            grant(&mut issued, &tokens)
        }
        _ => bad("unsupported_grant_type"),
    }
}

async fn introspect(State((issued, ..)): State<Shared>, RawQuery(query): RawQuery) -> StatusCode {
    let q = form(&query.unwrap_or_default());
    let issued = issued.lock().unwrap();
    match q.get("token").and_then(|t| issued.access.get(t)) {
        Some(until) if *until > Instant::now() => StatusCode::OK,
        _ => StatusCode::UNAUTHORIZED,
    }
}
