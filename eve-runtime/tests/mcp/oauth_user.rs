//! A user-scoped OAuth MCP connection (`credentials: user`) used by two JWT users through the
//! real `eve serve` HTTP API, against a real authorization server ([`super::oauth_server`]) in
//! front of the real fixture MCP server.
//!
//! Each user's first call parks the turn with `authorization.required`; the user's browser signs
//! in and comes back to `/eve/v1/connections/docs/callback`; `authorization.completed` follows
//! and the call runs with that user's token. Neither user sees the other's token, session or
//! results; a restart of the runtime between `authorization.required` and the callback resumes
//! the flow; a forged or replayed `state` is refused (its twin, the genuine callback, accepted);
//! no token value appears in any stored event, the stream, or any file of the runtime other
//! than its store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_runtime::server::sign_hs256;
use eve_runtime::telemetry::TelemetryConfig;
use eve_runtime::telemetry::config::{LOCAL_FILE, Local, Sampling};
use serde_json::{Value, json};

use super::oauth::protected;
use crate::server_support::{AgentDir, TestServer};

const SECRET: &str = "oauth-user-jwt-secret-0123456789";

pub(super) fn agent(mcp_url: &str, auth_host: &str) -> AgentDir {
    let agent = AgentDir::new();
    agent
        .file(
            "channels/eve.yaml",
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\n",
        )
        .file(
            "connections/docs.yaml",
            &format!(
                "url: {mcp_url}\ncredentials: user\noauth:\n  scopes: [docs.read]\n  allow: \
                 [\"{auth_host}\"]\n"
            ),
        );
    agent
}

pub(super) fn bearer(sub: &str) -> String {
    let now = chrono::Utc::now().timestamp();
    format!(
        "Bearer {}",
        sign_hs256(&json!({"sub": sub, "exp": now + 600}), SECRET.as_bytes())
    )
}

/// Serves `agent` with the JWT secret, and `EVE_PUBLIC_URL` set to the server's own address
/// once it listens (what an operator sets to the URL browsers reach the runtime at).
pub(super) async fn serve(agent: AgentDir) -> TestServer {
    let public: Arc<Mutex<String>> = Arc::default();
    let seen = public.clone();
    let server = TestServer::start_full(
        agent,
        &[("JWT_SECRET", SECRET)],
        |c| c,
        move |config| {
            config.env = Arc::new(move |name: &str| match name {
                "EVE_PUBLIC_URL" => Some(seen.lock().unwrap().clone()),
                _ => std::env::var(name).ok(),
            });
        },
        |_| Default::default(),
    )
    .await;
    *public.lock().unwrap() = server.base.clone();
    // The local trace store, with content captured: what a developer reads with `eve traces`.
    let telemetry = eve_runtime::telemetry::Telemetry::new(
        TelemetryConfig {
            service_name: "oauth-user".into(),
            otlp: None,
            local: Some(Local {
                path: server.agent.root().join(".eve").join(LOCAL_FILE),
                max_age: Duration::from_secs(3600),
                max_bytes: 1 << 30,
                retain: 100,
            }),
            sampling: Sampling::AlwaysOn,
            capture_content: true,
        },
        Arc::new(eve_runtime::redact::Secrets::new()),
    )
    .unwrap();
    server.runtime.set_telemetry(telemetry);
    server
}

async fn post_as(server: &TestServer, auth: &str, path: &str, body: Value) -> (u16, Value) {
    let response = server
        .http
        .post(server.url(path))
        .header("authorization", auth)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(super) async fn start_session(server: &TestServer, auth: &str, message: &str) -> String {
    let (status, body) =
        post_as(server, auth, "/eve/v1/session", json!({"message": message})).await;
    assert_eq!(status, 202, "{body}");
    body["sessionId"].as_str().unwrap().to_owned()
}

async fn say(server: &TestServer, auth: &str, session: &str, message: &str) {
    let (status, body) = post_as(
        server,
        auth,
        &format!("/eve/v1/session/{session}"),
        json!({"message": message}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

pub(super) fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The browser: asks the authorization server (which approves at once) and returns the
/// callback URL it redirects to, on `base` (the runtime's public URL now).
pub(super) async fn sign_in(authorization_url: &str, base: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client.get(authorization_url).send().await.unwrap();
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let path = &location[location.find("/eve/v1/").unwrap()..];
    format!("{base}{path}")
}

pub(super) async fn visit(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

/// The `authorization.required` a session parked on: its URL.
fn required_url(events: &[Value], principal: &str) -> String {
    let required = of_type(events, "authorization.required");
    assert_eq!(required.len(), 1, "{events:#?}");
    let data = &required[0]["data"];
    assert_eq!(data["name"], "docs");
    assert_eq!(data["principalId"], principal);
    assert!(data["attemptId"].is_string() && data["turnId"].is_string());
    assert!(
        of_type(events, "input.requested").is_empty(),
        "a sign-in is not an approval: {events:#?}"
    );
    let waiting = of_type(events, "turn.waiting");
    assert_eq!(waiting.last().unwrap()["data"]["on"], "input");
    data["authorization"]["url"].as_str().unwrap().to_owned()
}

pub(super) fn completed(events: &[Value]) -> Vec<String> {
    of_type(events, "authorization.completed")
        .iter()
        .map(|e| e["data"]["outcome"].as_str().unwrap_or_default().to_owned())
        .collect()
}

pub(super) fn results(events: &[Value]) -> Vec<Value> {
    of_type(events, "action.result")
        .iter()
        .map(|e| e["data"].clone())
        .collect()
}

#[tokio::test]
async fn two_users_authorize_separately_and_a_restart_mid_flow_resumes_it() {
    let p = protected(Duration::from_secs(600)).await;
    let server = serve(agent(&p.url, &p.auth.host)).await;
    let (alice, bob) = (bearer("alice"), bearer("bob"));

    // Alice's first call parks her turn on her sign-in.
    let a = start_session(&server, &alice, "/tool docs__authorize {}").await;
    let events = server.until_rest_as(&alice, &a, 0).await;
    let url = required_url(&events, "jwt:alice");
    assert!(
        results(&events).is_empty(),
        "nothing ran before the sign-in"
    );

    // A forged `state` is refused and changes nothing.
    let callback = sign_in(&url, &server.base).await;
    let at = callback.find("state=").unwrap();
    let forged = format!("{}state=forged-by-an-attacker", &callback[..at]);
    let (status, body) = visit(&forged).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        server
            .stored_as(&alice, &a, events.len() as u64)
            .await
            .is_empty()
    );

    // The twin: the callback as the authorization server sent it completes the sign-in.
    let (status, body) = visit(&callback).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Signed in to docs"), "{body}");
    let events = server.until_rest_as(&alice, &a, events.len() as u64).await;
    assert_eq!(completed(&events), ["authorized"]);
    let done = results(&events);
    assert_eq!(done.len(), 1, "{events:#?}");
    assert_eq!(done[0]["status"], "completed", "{done:?}");

    // Replayed, the same callback is refused: its `state` was single-use.
    let (status, _) = visit(&callback).await;
    assert_eq!(status, 400);

    // Alice's tools now run with her token.
    let from = server.count(&a).await;
    say(
        &server,
        &alice,
        &a,
        "/tool docs__echo {\"text\": \"alice's secret notes\"}",
    )
    .await;
    let events = server.until_rest_as(&alice, &a, from).await;
    let done = results(&events);
    assert_eq!(done.len(), 1, "{events:#?}");
    assert!(
        done[0].to_string().contains("alice's secret notes"),
        "{done:?}"
    );
    assert!(of_type(&events, "authorization.required").is_empty());

    // Bob calls a tool of the connection directly: Alice's token is not his, so he is asked.
    let b = start_session(&server, &bob, "/tool docs__echo {\"text\": \"bob here\"}").await;
    let events = server.until_rest_as(&bob, &b, 0).await;
    let bob_url = required_url(&events, "jwt:bob");
    let parked_at = events.len() as u64;
    // Neither sees the other's session.
    let (status, _) = post_as(
        &server,
        &bob,
        &format!("/eve/v1/session/{a}"),
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!(status, 404);
    let response = server
        .http
        .get(server.url(&format!("/eve/v1/session/{a}/stream?follow=false")))
        .header("authorization", &bob)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    // The runtime restarts between Bob's `authorization.required` and his callback.
    let root = server.agent.root();
    let agent = server.stop_keeping().await;
    let server = serve(agent).await;
    let callback = sign_in(&bob_url, &server.base).await;
    let (status, body) = visit(&callback).await;
    assert_eq!(status, 200, "{body}");
    let events = server.until_rest_as(&bob, &b, parked_at).await;
    assert_eq!(completed(&events), ["authorized"]);
    let done = results(&events);
    assert_eq!(done.len(), 1, "{events:#?}");
    assert_eq!(done[0]["status"], "completed", "{done:?}");
    assert!(done[0].to_string().contains("bob here"), "{done:?}");
    assert!(!done[0].to_string().contains("alice"), "{done:?}");

    // Each principal holds a token of its own, under its own key.
    let notes = server.runtime.store().notes("oauth:docs").await.unwrap();
    let keys: Vec<&str> = notes.iter().map(|n| n.key.as_str()).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.contains(&"jwt:alice") && keys.contains(&"jwt:bob"));
    let token_of = |key: &str| {
        let note = notes.iter().find(|n| n.key == key).unwrap();
        let stored: Value = serde_json::from_str(&note.text).unwrap();
        stored["token_response"]["access_token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(token_of("jwt:alice"), token_of("jwt:bob"));

    // No token value in any stored event or stream of either session, nor in any file of the
    // runtime besides its store (trace stores, logs, checkpoints).
    let tokens = p.auth.tokens.lock().unwrap().clone();
    assert!(tokens.len() >= 4, "{tokens:?}");
    let mut streams: HashMap<&str, String> = HashMap::new();
    streams.insert(
        "alice",
        json!(server.stored_as(&alice, &a, 0).await).to_string(),
    );
    streams.insert(
        "bob",
        json!(server.stored_as(&bob, &b, 0).await).to_string(),
    );
    for (who, text) in &streams {
        for token in &tokens {
            assert!(
                !text.contains(token.as_str()),
                "{who}'s stream holds a token"
            );
        }
    }
    assert!(
        root.join(".eve").join(LOCAL_FILE).exists(),
        "the trace store was written"
    );
    let mut files = vec![root.join(".eve")];
    while let Some(dir) = files.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("eve.db") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            for token in &tokens {
                assert!(
                    !text.contains(token.as_str()),
                    "{} holds a token",
                    path.display()
                );
            }
        }
    }
    server.stop().await;
}
