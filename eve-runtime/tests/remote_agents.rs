//! Remote agents, both sides over real HTTP on `127.0.0.1:0`.
//!
//! The receiving side: a forwarded principal (`forwardedPrincipal`, or the header on the stream)
//! is taken only from a caller listed under `trusted_forwarders`. Mallory, an authenticated
//! caller the deployment does not trust, forges Alice's principal to read and drive Alice's
//! session and is refused; the twin (the test-only switch that trusts every caller) lets the
//! same forgery through, so the test can fail.
//!
//! The calling side: a parent whose subagent is the other server (`forward_principal: true`,
//! bearer token from the environment) starts a task; the remote session belongs to the parent
//! session's principal, and the task's answer is the remote child's.

use std::time::Duration;

use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const ALICE: &str = "alice-token-0123456789";
const MALLORY: &str = "mallory-token-0123456789";
const ROUTER: &str = "router-token-0123456789";

fn receiving_agent() -> AgentDir {
    let agent = AgentDir::standard();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${ALICE_TOKEN}\", \"${MALLORY_TOKEN}\", \"${ROUTER_TOKEN}\"]\n\
         trusted_forwarders: [token:ROUTER_TOKEN]\n",
    );
    agent
}

async fn receiving(unchecked: bool) -> TestServer {
    TestServer::start_with(
        receiving_agent(),
        &[
            ("ALICE_TOKEN", ALICE),
            ("MALLORY_TOKEN", MALLORY),
            ("ROUTER_TOKEN", ROUTER),
        ],
        |mut c| {
            c.forwarders_unchecked_for_tests = unchecked;
            c
        },
    )
    .await
}

fn principal(id: &str) -> Value {
    json!({"current": {"principalId": id, "principalType": "user", "authenticator": "token", "attributes": {}}})
}

async fn call(
    server: &TestServer,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    header: Option<&Value>,
) -> (u16, Value) {
    let mut request = match method {
        "GET" => server.http.get(server.url(path)),
        _ => server.http.post(server.url(path)),
    };
    request = request.header("authorization", format!("Bearer {token}"));
    if let Some(h) = header {
        request = request.header("x-eve-forwarded-principal", h["current"].to_string());
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .unwrap()
        .unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Alice's session, and what Mallory's forgery of Alice gets: on a message, on the stream.
async fn forge(server: &TestServer) -> (u16, u16) {
    let (status, body) = call(
        server,
        ALICE,
        "POST",
        "/eve/v1/session",
        Some(json!({"message": "my private note"})),
        None,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let alice_session = body["sessionId"].as_str().unwrap().to_owned();
    // Without forging anything, Mallory does not reach it.
    let (status, _) = call(
        server,
        MALLORY,
        "GET",
        &format!("/eve/v1/session/{alice_session}/stream?follow=false"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 404);
    let forged = principal("token:ALICE_TOKEN");
    let mut message = json!({"message": "send me everything"});
    message["forwardedPrincipal"] = forged.clone();
    let (post, _) = call(
        server,
        MALLORY,
        "POST",
        &format!("/eve/v1/session/{alice_session}"),
        Some(message),
        None,
    )
    .await;
    let (read, _) = call(
        server,
        MALLORY,
        "GET",
        &format!("/eve/v1/session/{alice_session}/stream?follow=false"),
        None,
        Some(&forged),
    )
    .await;
    (post, read)
}

#[tokio::test]
async fn a_principal_forwarded_by_an_untrusted_caller_is_refused() {
    let server = receiving(false).await;
    let (post, read) = forge(&server).await;
    assert_eq!(post, 403, "Mallory's forged message was taken");
    assert_eq!(read, 403, "Mallory's forged read was taken");

    // The trusted forwarder's assertion is taken: the session it creates belongs to the
    // forwarded principal, whom it reaches only by forwarding.
    let mut create = json!({"message": "hello"});
    create["forwardedPrincipal"] = principal("jwt:dave");
    let (status, body) = call(
        &server,
        ROUTER,
        "POST",
        "/eve/v1/session",
        Some(create),
        None,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let dave_session = body["sessionId"].as_str().unwrap().to_owned();
    let stream = format!("/eve/v1/session/{dave_session}/stream?follow=false");
    let (status, _) = call(&server, ROUTER, "GET", &stream, None, None).await;
    assert_eq!(status, 404, "the forwarder itself does not own the session");
    let (status, _) = call(
        &server,
        ROUTER,
        "GET",
        &stream,
        None,
        Some(&principal("jwt:dave")),
    )
    .await;
    assert_eq!(status, 200);
    let owner = server
        .runtime
        .session(&dave_session)
        .await
        .unwrap()
        .unwrap()
        .owner;
    assert_eq!(owner.as_deref(), Some("jwt:dave"));
    // A malformed assertion is a coded 400.
    let (status, body) = call(
        &server,
        ROUTER,
        "POST",
        "/eve/v1/session",
        Some(json!({"message": "x", "forwardedPrincipal": {"current": {}}})),
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_body", "{body}");
    server.stop().await;
}

#[tokio::test]
async fn twin_a_deployment_that_trusts_every_caller_lets_the_forgery_through() {
    let server = receiving(true).await;
    let (post, read) = forge(&server).await;
    assert_eq!(
        post, 202,
        "with the check off, Mallory drives Alice's session"
    );
    assert_eq!(
        read, 200,
        "with the check off, Mallory reads Alice's session"
    );
    server.stop().await;
}

const USER: &str = "user-token-0123456789";

/// A parent whose `helper` is the server at `url`, forwarding its caller's principal.
async fn parent_of(url: &str) -> TestServer {
    let agent = AgentDir::new();
    agent
        .file(
            "subagents/helper.yaml",
            "url: ${HELPER_URL}\ndescription: Answers questions.\nforward_principal: true\n\
             auth:\n  type: bearer\n  token: ${HELPER_TOKEN}\n",
        )
        .file(
            "channels/eve.yaml",
            "auth:\n  type: bearer\n  tokens: [\"${USER_TOKEN}\"]\n",
        );
    let url = url.to_owned();
    TestServer::start_full(
        agent,
        &[("USER_TOKEN", USER)],
        |c| c,
        move |config| {
            config.env = std::sync::Arc::new(move |name: &str| match name {
                "HELPER_URL" => Some(url.clone()),
                "HELPER_TOKEN" => Some(ROUTER.to_owned()),
                "EVE_TEST_REMOTE_LOOPBACK" => Some("1".to_owned()),
                _ => None,
            });
        },
        |_| eve_runtime::server::RouterOptions::default(),
    )
    .await
}

/// Asks the parent's `helper` `message` as the user; the parent's events once the task settled
/// and the session rests.
async fn ask_helper(parent: &TestServer, message: &str) -> Vec<Value> {
    let auth = format!("Bearer {USER}");
    let input = json!({"message": message});
    let (status, body) = call(
        parent,
        USER,
        "POST",
        "/eve/v1/session",
        Some(json!({"message": format!("/tool helper {input}")})),
        None,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = parent.stored_as(&auth, &id, 0).await;
        if events.iter().any(|e| e["type"] == "task.settled")
            && events
                .last()
                .is_some_and(|e| e["type"] == "session.waiting")
        {
            return events;
        }
        assert!(std::time::Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_remote_agent_forwards_its_callers_principal_to_a_deployment_that_trusts_it() {
    let remote = receiving(false).await;
    let parent = parent_of(&remote.base).await;
    let events = ask_helper(&parent, "what is the balance?").await;
    let settled = events.iter().find(|e| e["type"] == "task.settled").unwrap();
    assert_eq!(settled["data"]["status"], "completed", "{settled}");
    assert!(
        settled
            .to_string()
            .contains("You said: what is the balance?"),
        "{settled}"
    );
    // The remote session belongs to the parent's caller, not to the forwarder's token.
    let owned = remote
        .runtime
        .sessions(&eve_runtime::store::SessionFilter {
            owner: Some("token:USER_TOKEN".to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(owned.len(), 1, "{owned:?}");
    parent.stop().await;
    remote.stop().await;
}

#[tokio::test]
async fn a_deployment_that_does_not_trust_the_caller_refuses_its_forwarded_principal() {
    // The same remote, but its `trusted_forwarders` names someone else.
    let agent = receiving_agent();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${ALICE_TOKEN}\", \"${ROUTER_TOKEN}\"]\n\
         trusted_forwarders: [token:ALICE_TOKEN]\n",
    );
    let remote = TestServer::start_with(
        agent,
        &[("ALICE_TOKEN", ALICE), ("ROUTER_TOKEN", ROUTER)],
        |c| c,
    )
    .await;
    let parent = parent_of(&remote.base).await;
    let events = ask_helper(&parent, "what is the balance?").await;
    let settled = events.iter().find(|e| e["type"] == "task.settled").unwrap();
    assert_eq!(settled["data"]["status"], "failed", "{settled}");
    assert!(settled.to_string().contains("403"), "{settled}");
    let all = remote
        .runtime
        .sessions(&eve_runtime::store::SessionFilter::default())
        .await
        .unwrap();
    assert!(all.is_empty(), "a session was made: {all:?}");
    parent.stop().await;
    remote.stop().await;
}
