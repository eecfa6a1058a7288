//! Claims as principal attributes, over real HTTP with real JWTs: `channels/eve.yaml` names
//! `attributes: [org_id]`, and the claim goes with the principal into the session it creates (its
//! owner, shown by `GET /eve/v1/sessions/{id}`), the approval it answers (`approval.settled`
//! `responderAttributes`, the stored record), its `user` memory, and ownership: the same subject
//! under another organisation does not reach the session (`404`, as an unknown id) and does not
//! see its list entry or its user memory. The twin matches owners by id alone (the test-only
//! switch) and shows the other organisation's principal reading the session and approving its
//! refund, so the test can fail.

use eve_runtime::server::sign_hs256;
use eve_test_support::capture::parse_ndjson;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const SECRET: &str = "attributes-test-secret-0123456789";

fn agent() -> AgentDir {
    let agent = AgentDir::standard();
    agent
        .file("agent.yaml", "memory:\n  scopes: [agent, user, session]\n")
        .file(
            "channels/eve.yaml",
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\n  attributes: [org_id]\n",
        );
    agent
}

/// `Bearer` and a JWT of `sub` in organisation `org`.
fn token(sub: &str, org: &str) -> String {
    let claims = json!({
        "sub": sub,
        "org_id": org,
        "email": format!("{sub}@{org}.test"),
        "exp": chrono::Utc::now().timestamp() + 3600,
    });
    format!("Bearer {}", sign_hs256(&claims, SECRET.as_bytes()))
}

async fn start() -> TestServer {
    TestServer::start_with(agent(), &[("JWT_SECRET", SECRET)], |c| c).await
}

async fn call(
    server: &TestServer,
    auth: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = match method {
        "GET" => server.http.get(server.url(path)),
        _ => server.http.post(server.url(path)),
    }
    .header("authorization", auth);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// The session's events from `from` until it is at rest, read as `auth`.
async fn stream(server: &TestServer, auth: &str, id: &str, from: u64) -> (u16, Vec<Value>) {
    let url = server.url(&format!("/eve/v1/session/{id}/stream?startIndex={from}"));
    let response = server
        .http
        .get(url)
        .header("authorization", auth)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        if status == 200 {
            parse_ndjson(&text)
        } else {
            Vec::new()
        },
    )
}

/// Starts a refund (approval: always) as `auth`; the session id and the pending request's id.
async fn refund(server: &TestServer, auth: &str) -> (String, String) {
    let (status, body) = call(
        server,
        auth,
        "POST",
        "/eve/v1/session",
        Some(json!({"message": "/tool refund_charge {\"chargeId\": \"ch_1\"}"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let (_, parked) = stream(server, auth, &id, 0).await;
    let request = parked
        .iter()
        .find(|e| e["type"] == "input.requested")
        .expect("the call waits for approval")["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    (id, request)
}

fn approve(request: &str) -> Option<Value> {
    Some(json!({"inputResponses": [{"requestId": request, "optionId": "approve"}]}))
}

#[tokio::test]
async fn the_attributes_go_with_the_session_the_approval_and_user_memory() {
    let server = start().await;
    let alice = token("alice", "acme");
    let (id, request) = refund(&server, &alice).await;
    let from = server.count(&id).await;
    let (status, body) = call(
        &server,
        &alice,
        "POST",
        &format!("/eve/v1/session/{id}"),
        approve(&request),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (_, resumed) = stream(&server, &alice, &id, from).await;
    let settled = resumed
        .iter()
        .find(|e| e["type"] == "approval.settled")
        .expect("approval.settled");
    assert_eq!(settled["data"]["responderPrincipalId"], "jwt:alice");
    assert_eq!(
        settled["data"]["responderAttributes"],
        json!({"org_id": "acme"}),
        "only the claims the file names: {settled}"
    );

    let (status, shown) = call(
        &server,
        &alice,
        "GET",
        &format!("/eve/v1/sessions/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["session"]["owner"], "jwt:alice");
    assert_eq!(
        shown["session"]["ownerAttributes"],
        json!({"org_id": "acme"})
    );
    let answered = &shown["inputRequests"][0];
    assert_eq!(answered["responder"], "jwt:alice");
    assert_eq!(answered["responderAttributes"], json!({"org_id": "acme"}));

    // The `user` memory scope is the principal with its attributes.
    let (status, body) = call(
        &server,
        &alice,
        "POST",
        "/eve/v1/memory",
        Some(json!({"action": "add", "scope": "user", "text": "Acme bills in euros"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, mine) = call(&server, &alice, "GET", "/eve/v1/memory?scope=user", None).await;
    assert_eq!(mine["notes"].as_array().unwrap().len(), 1, "{mine}");
    let globex = token("alice", "globex");
    let (_, theirs) = call(&server, &globex, "GET", "/eve/v1/memory?scope=user", None).await;
    assert!(
        theirs["notes"].as_array().unwrap().is_empty(),
        "the same subject in another organisation is another user: {theirs}"
    );
}

/// What alice of globex gets when she goes for alice of acme's session: the statuses of reading
/// it, streaming it, sending to it and approving its refund, whether the list showed it, and
/// whether the refund ran.
struct Attempt {
    show: u16,
    stream: u16,
    send: u16,
    approve: u16,
    listed: bool,
    refunded: bool,
}

async fn other_tenant(by_id_only: bool) -> Attempt {
    let server = start().await;
    if by_id_only {
        server.runtime.set_owners_by_id_only_for_tests(true);
    }
    let acme = token("alice", "acme");
    let (id, request) = refund(&server, &acme).await;
    // The same subject, signed by the same provider, in another organisation.
    let globex = token("alice", "globex");
    let (show, _) = call(
        &server,
        &globex,
        "GET",
        &format!("/eve/v1/sessions/{id}"),
        None,
    )
    .await;
    let (stream_status, _) = stream(&server, &globex, &id, 0).await;
    let (send, _) = call(
        &server,
        &globex,
        "POST",
        &format!("/eve/v1/session/{id}"),
        Some(json!({"message": "what did they refund?"})),
    )
    .await;
    let (approve_status, _) = call(
        &server,
        &globex,
        "POST",
        &format!("/eve/v1/session/{id}"),
        approve(&request),
    )
    .await;
    let (_, list) = call(&server, &globex, "GET", "/eve/v1/sessions", None).await;
    let listed = list.to_string().contains(&id);
    // Its owner still reaches it.
    let (status, _) = call(
        &server,
        &acme,
        "GET",
        &format!("/eve/v1/sessions/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (_, list) = call(&server, &acme, "GET", "/eve/v1/sessions", None).await;
    assert!(list.to_string().contains(&id), "{list}");
    let requests = server
        .runtime
        .store()
        .input_requests(&id, false)
        .await
        .unwrap();
    let refunded = requests
        .iter()
        .any(|r| r.id == request && r.status == eve_runtime::store::RequestStatus::Approved);
    Attempt {
        show,
        stream: stream_status,
        send,
        approve: approve_status,
        listed,
        refunded,
    }
}

#[tokio::test]
async fn the_same_subject_in_another_organisation_does_not_reach_the_session() {
    let a = other_tenant(false).await;
    assert_eq!(
        (a.show, a.stream, a.send, a.approve),
        (404, 404, 404, 404),
        "every route answers as for an unknown session"
    );
    assert!(!a.listed);
    assert!(!a.refunded);
}

#[tokio::test]
async fn with_owners_matched_by_id_alone_the_other_organisation_approves_the_refund() {
    let a = other_tenant(true).await;
    assert_eq!(a.show, 200);
    assert_eq!(a.stream, 200);
    assert!(a.listed);
    assert!(a.refunded, "the protection off, the attack succeeds");
}
