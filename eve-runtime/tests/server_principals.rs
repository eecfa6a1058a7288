//! Approvals answered over the session API carry the authenticated principal: the bearer token's
//! variable name, the JWT `sub`, `anonymous` without auth; in `approval.settled`,
//! `input.resolved` and the stored request.

use eve_runtime::server::sign_hs256;
use eve_test_support::capture::parse_ndjson;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

fn with_channel(yaml: &str) -> AgentDir {
    let agent = AgentDir::standard();
    agent.file("channels/eve.yaml", yaml);
    agent
}

async fn post(server: &TestServer, auth: Option<&str>, path: &str, body: Value) -> (u16, Value) {
    let mut request = server.http.post(server.url(path)).json(&body);
    if let Some(a) = auth {
        request = request.header("authorization", a);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The session's events from `from` until it is at rest, read with `auth`.
async fn stream(server: &TestServer, auth: Option<&str>, id: &str, from: u64) -> Vec<Value> {
    let url = server.url(&format!("/eve/v1/session/{id}/stream?startIndex={from}"));
    let mut request = server.http.get(url);
    if let Some(a) = auth {
        request = request.header("authorization", a);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    parse_ndjson(&response.text().await.unwrap())
}

/// Calls `refund_charge` (approval: always), answers it with `answer_auth`, and returns the
/// `responderPrincipalId` of `approval.settled`, of `input.resolved`, and the stored responder.
async fn approve_as(
    server: &TestServer,
    auth: Option<&str>,
    answer_auth: Option<&str>,
) -> (Value, Value, Option<String>) {
    let (status, body) = post(
        server,
        auth,
        "/eve/v1/session",
        json!({"message": "/tool refund_charge {\"chargeId\": \"ch_1\"}"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let parked = stream(server, auth, &id, 0).await;
    let request_id = parked
        .iter()
        .find(|e| e["type"] == "input.requested")
        .expect("the call waits for approval")["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let from = server.count(&id).await;
    let (status, body) = post(
        server,
        answer_auth,
        &format!("/eve/v1/session/{id}"),
        json!({"inputResponses": [{"requestId": request_id, "optionId": "approve"}]}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let resumed = stream(server, auth, &id, from).await;
    let settled = resumed
        .iter()
        .find(|e| e["type"] == "approval.settled")
        .expect("approval.settled")["data"]["responderPrincipalId"]
        .clone();
    let resolved = resumed
        .iter()
        .find(|e| e["type"] == "input.resolved")
        .expect("input.resolved")["data"]["resolutions"][0]["responderPrincipalId"]
        .clone();
    assert!(
        resumed.iter().any(|e| e["type"] == "action.result"),
        "the approved call ran"
    );
    let stored = server
        .runtime
        .store()
        .input_requests(&id, false)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == request_id)
        .unwrap()
        .responder;
    (settled, resolved, stored)
}

#[tokio::test]
async fn a_bearer_token_answers_as_its_variable_name_or_position() {
    let server = TestServer::start_with(
        with_channel(
            "kind: http\nauth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\", \"${OPS_TOKEN}\"]\n\
             operators:\n  tokens: [OPS_TOKEN]\n",
        ),
        &[("EVE_API_TOKEN", "alpha-secret-token"), ("OPS_TOKEN", "ops-secret-token")],
        |c| c,
    )
    .await;
    let a = Some("Bearer alpha-secret-token");
    let (settled, resolved, stored) = approve_as(&server, a, a).await;
    assert_eq!(settled, "token:EVE_API_TOKEN");
    assert_eq!(resolved, "token:EVE_API_TOKEN");
    assert_eq!(stored.as_deref(), Some("token:EVE_API_TOKEN"));
    // Asked with one token, answered with the other (an operator's): the answer's principal is
    // recorded.
    let (settled, _, stored) = approve_as(&server, a, Some("Bearer ops-secret-token")).await;
    assert_eq!(settled, "token:OPS_TOKEN");
    assert_eq!(stored.as_deref(), Some("token:OPS_TOKEN"));
    server.stop().await;
}

#[tokio::test]
async fn a_jwt_answers_as_its_subject() {
    let secret = "jwt-principal-secret-0123456789";
    let server = TestServer::start_with(
        with_channel(
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  claims: {role: operator}\n",
        ),
        &[("JWT_SECRET", secret)],
        |c| c,
    )
    .await;
    let now = chrono::Utc::now().timestamp();
    let alice = format!(
        "Bearer {}",
        sign_hs256(
            &json!({"sub": "alice", "exp": now + 300}),
            secret.as_bytes()
        )
    );
    // An operator's token without a `sub` answers as `jwt`.
    let nobody = format!(
        "Bearer {}",
        sign_hs256(
            &json!({"exp": now + 300, "role": "operator"}),
            secret.as_bytes()
        )
    );
    let (settled, resolved, stored) = approve_as(&server, Some(&alice), Some(&alice)).await;
    assert_eq!(
        (settled, resolved),
        (json!("jwt:alice"), json!("jwt:alice"))
    );
    assert_eq!(stored.as_deref(), Some("jwt:alice"));
    let (settled, _, _) = approve_as(&server, Some(&alice), Some(&nobody)).await;
    assert_eq!(settled, "jwt");
    server.stop().await;
}

#[tokio::test]
async fn basic_and_no_auth_answer_as_the_user_and_anonymous() {
    use base64::Engine as _;
    let server = TestServer::start_with(
        with_channel("auth:\n  type: basic\n  username: ops\n  password: ${OPS_PASSWORD}\n"),
        &[("OPS_PASSWORD", "pw-ops-123")],
        |c| c,
    )
    .await;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("ops:pw-ops-123")
    );
    let (settled, _, _) = approve_as(&server, Some(&basic), Some(&basic)).await;
    assert_eq!(settled, "basic:ops");
    server.stop().await;

    let server = TestServer::start(AgentDir::standard()).await;
    let (settled, resolved, stored) = approve_as(&server, None, None).await;
    assert_eq!(
        (settled, resolved),
        (json!("anonymous"), json!("anonymous"))
    );
    assert_eq!(stored.as_deref(), Some("anonymous"));
    server.stop().await;
}
