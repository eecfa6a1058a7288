//! MCP connections with `oauth:`: a real authorization server ([`super::oauth_server`]) in front
//! of the real fixture MCP server. Before the operator logs in, calls fail with a coded error
//! saying how to authorize; `login` (what `eve connections login` runs) completes the
//! authorization code flow over a loopback redirect; tools then work; the token is kept in the
//! store, so a restarted runtime uses it and refreshes it when it has expired; a callback with a
//! forged `state` is refused (and its twin, the untampered callback, accepted); no token appears
//! in tool results or connection status.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use eve_compile::{Connection, OAuthSettings, Transport};
use eve_runtime::mcp::McpManager;
use eve_runtime::mcp::oauth::login::login;
use eve_runtime::mcp::oauth::store::{APP_PRINCIPAL, TokenPlace};
use eve_runtime::store::{SqliteStore, Store};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::oauth_server::{self, AuthServer};
use super::{call, connection, env, error, python, server_script};

pub(super) struct Protected {
    pub(super) auth: AuthServer,
    pub(super) url: String,
    _child: tokio::process::Child,
}

pub(super) async fn protected(lifetime: Duration) -> Protected {
    let auth = oauth_server::start(lifetime).await;
    let mut child = tokio::process::Command::new(python())
        .args([server_script().as_str(), "oauth", auth.base.as_str()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("the OAuth MCP server did not print its port")
        .unwrap()
        .unwrap();
    let port = line.strip_prefix("PORT ").unwrap().trim().to_owned();
    let url = format!("http://127.0.0.1:{port}/mcp");
    auth.issued.lock().unwrap().resource = url.clone();
    Protected {
        auth,
        url,
        _child: child,
    }
}

fn docs(p: &Protected) -> Connection {
    let mut c = connection(
        "docs",
        Transport::Http {
            url: p.url.clone(),
            headers: Default::default(),
        },
    );
    c.oauth = Some(OAuthSettings {
        scopes: vec!["docs.read".to_owned()],
        allow: vec![p.auth.host.clone()],
        ..OAuthSettings::default()
    });
    c
}

fn open(dir: &std::path::Path) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(dir.join("eve.db")).unwrap())
}

fn manager(c: &Connection, store: &Arc<dyn Store>, dir: &std::path::Path) -> McpManager {
    McpManager::with_exec(
        std::slice::from_ref(c),
        env(&[]),
        dir.to_path_buf(),
        Arc::default(),
        Default::default(),
        Some(store.clone()),
    )
}

/// A browser: follows the authorization URL to its redirect, optionally changes the `state` in
/// it, then requests the redirect (the loopback callback).
fn browser(forge: bool) -> Box<dyn Fn(&str) + Send + Sync> {
    Box::new(move |url: &str| {
        let url = url.to_owned();
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            let response = client.get(&url).send().await.unwrap();
            let mut location = response.headers()["location"].to_str().unwrap().to_owned();
            if forge {
                let at = location.find("state=").unwrap();
                location = format!("{}state=forged-by-an-attacker", &location[..at]);
            }
            let _ = client.get(&location).send().await;
        });
    })
}

async fn stored(store: &Arc<dyn Store>) -> bool {
    let place = TokenPlace {
        store: store.clone(),
        connection: "docs".to_owned(),
        principal: APP_PRINCIPAL.to_owned(),
    };
    place
        .read()
        .await
        .unwrap()
        .is_some_and(|c| c.token_response.is_some())
}

#[tokio::test]
async fn oauth_connection_authorizes_once_survives_a_restart_and_refreshes() {
    let p = protected(Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let conn = docs(&p);
    let store = open(dir.path());

    let before = manager(&conn, &store, dir.path());
    let refused = call(&before, "docs__echo", json!({"text": "hi"})).await;
    let message = error(&refused);
    assert!(
        message.contains("oauth_unauthorized") && message.contains("eve connections login docs"),
        "{message}"
    );
    before.shutdown().await;

    login(
        &conn,
        &env(&[]),
        store.clone(),
        browser(false),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(stored(&store).await);

    let mcp = manager(&conn, &store, dir.path());
    let result = call(&mcp, "docs__echo", json!({"text": "hi"})).await;
    assert!(result.ok, "{result:?}");
    assert_eq!(result.output, json!({"result": "hi"}));
    let status = format!("{:?}", mcp.status().await);
    let tokens = p.auth.tokens.lock().unwrap().clone();
    assert!(!tokens.is_empty());
    for token in &tokens {
        assert!(!format!("{result:?}").contains(token.as_str()));
        assert!(!status.contains(token.as_str()));
    }
    mcp.shutdown().await;
    drop(mcp);
    drop(store);

    // A restart after the token expired: the stored token is read and refreshed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(p.auth.refreshes.load(Ordering::SeqCst), 0);
    let store = open(dir.path());
    let mcp = manager(&conn, &store, dir.path());
    let result = call(&mcp, "docs__echo", json!({"text": "again"})).await;
    assert!(result.ok, "{result:?}");
    assert!(p.auth.refreshes.load(Ordering::SeqCst) >= 1);
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_forged_state_on_the_login_callback_is_refused_and_the_real_one_accepted() {
    let p = protected(Duration::from_secs(60)).await;
    let dir = tempfile::tempdir().unwrap();
    let conn = docs(&p);
    let store = open(dir.path());

    let forged = login(
        &conn,
        &env(&[]),
        store.clone(),
        browser(true),
        Duration::from_secs(20),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(forged.contains("oauth_unauthorized"), "{forged}");
    assert!(!stored(&store).await, "a forged state must store no token");

    // The twin: the same flow with the callback as the server sent it.
    login(
        &conn,
        &env(&[]),
        store.clone(),
        browser(false),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(stored(&store).await);
}
