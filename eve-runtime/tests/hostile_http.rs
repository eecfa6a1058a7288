//! The HTTP API against hostile requests, as a tester with curl would send them, on the real
//! server on 127.0.0.1:0: ids that do not decode, queries that do not fit, answers to requests of
//! another session. Every answer is a 4xx in the API's JSON error shape (`{ok: false, code,
//! error}`, `application/json`), never axum's plain-text rejection, never a 500, and nothing
//! already accepted is lost.

use serde_json::{Value, json};

use crate::server_support::{AgentDir, TestServer};

/// Sends `method path` with `body`; returns the status, whether the answer is JSON, and its body.
async fn send(server: &TestServer, method: &str, path: &str, body: &str) -> (u16, bool, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = server
        .http
        .request(method, server.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let json = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, json, value)
}

#[tokio::test]
async fn ids_and_queries_that_do_not_fit_get_json_errors() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let long = "a".repeat(10_000);
    let deep = "[".repeat(10_000);
    let cases: Vec<(&str, String, &str, u16, &str)> = vec![
        // Axum's own rejections answered these in plain text before.
        (
            "GET",
            "/eve/v1/memory?key=x".into(),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/eve/v1/memory?scope=agent&scope=user".into(),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/eve/v1/releases/stream?startIndex=-1&follow=false".into(),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/eve/v1/releases/stream?startIndex=99999999999999999999999".into(),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/eve/v1/releases/%FF".into(),
            "",
            404,
            "release_not_found",
        ),
        (
            "POST",
            "/eve/v1/releases/%FF%FE/activate".into(),
            "{}",
            404,
            "release_not_found",
        ),
        // Already answered well; kept so they stay so.
        (
            "GET",
            "/eve/v1/releases/..%2F..%2Fetc".into(),
            "",
            404,
            "release_not_found",
        ),
        (
            "GET",
            format!("/eve/v1/releases/{long}"),
            "",
            404,
            "release_not_found",
        ),
        (
            "POST",
            "/eve/v1/releases/%00/activate".into(),
            "{}",
            404,
            "release_not_found",
        ),
        (
            "POST",
            "/eve/v1/session/..%2F..%2Fetc".into(),
            "{\"message\":\"x\"}",
            404,
            "session_not_found",
        ),
        (
            "POST",
            "/eve/v1/session/a%00b/cancel".into(),
            "{}",
            404,
            "session_not_found",
        ),
        (
            "GET",
            "/eve/v1/sessions/%FF".into(),
            "",
            404,
            "session_not_found",
        ),
        (
            "GET",
            format!("/eve/v1/sessions/{long}"),
            "",
            404,
            "session_not_found",
        ),
        (
            "GET",
            format!("/eve/v1/session/{id}/stream?startIndex=abc"),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            format!("/eve/v1/session/{id}/stream?startIndex=%FF"),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/eve/v1/sessions?limit=-1".into(),
            "",
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/eve/v1/memory?scope=..%2F".into(),
            "",
            400,
            "invalid_scope",
        ),
        (
            "POST",
            "/eve/v1/memory".into(),
            "[[[[[[[[[[",
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/eve/v1/memory".into(),
            "{\"action\":\"add\",\"scope\":5}",
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/eve/v1/rollback".into(),
            "{\"to\":[1]}",
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/eve/v1/releases/x/activate".into(),
            "{\"force\":\"yes\"}",
            400,
            "invalid_body",
        ),
        ("POST", "/eve/v1/chat".into(), &deep, 400, "invalid_json"),
        (
            "POST",
            "/eve/v1/channels/%FF".into(),
            "{}",
            404,
            "not_found",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (got, json, reply) = send(&server, method, &path, body).await;
        let shown = &path[..path.len().min(80)];
        assert_eq!(got, status, "{method} {shown}: {reply}");
        assert!(json, "{method} {shown}: not JSON: {reply}");
        assert_eq!(reply["ok"], false, "{method} {shown}: {reply}");
        assert_eq!(reply["code"], code, "{method} {shown}: {reply}");
        assert!(
            reply["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{method} {shown}: {reply}"
        );
    }
    // What the query error says: the parameter, so the caller can fix it.
    let (_, _, reply) = send(&server, "GET", "/eve/v1/memory?key=x", "").await;
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains("`key`"), "{error}");
    let (status, _, _) = send(&server, "GET", "/eve/v1/health", "").await;
    assert_eq!(status, 200);
    server.stop().await;
}

#[tokio::test]
async fn an_answer_to_another_sessions_request_is_refused_and_the_request_stays_pending() {
    let server = TestServer::start(AgentDir::standard()).await;
    let waiting = server
        .create("/tool refund_charge {\"chargeId\": \"ch_1\"}")
        .await;
    let events = server.until_rest(&waiting, 0).await;
    let request = events
        .iter()
        .find(|e| e["type"] == "input.requested")
        .expect("the refund asks for approval")["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = server.create("hello").await;
    server.until_rest(&other, 0).await;

    let answer = json!({"inputResponses": [{"requestId": request, "optionId": "approve"}]});
    let (status, body) = server
        .post(&format!("/eve/v1/session/{other}"), answer.clone())
        .await;
    assert_eq!((status, body["ok"].as_bool()), (409, Some(false)), "{body}");
    // A third session that waits too: the id still is not its own.
    let third = server
        .create("/tool refund_charge {\"chargeId\": \"ch_2\"}")
        .await;
    server.until_rest(&third, 0).await;
    let (status, body) = server
        .post(&format!("/eve/v1/session/{third}"), answer.clone())
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "request_not_pending", "{body}");

    // Nothing was lost: the request is still pending where it belongs and can be answered there.
    let from = server.count(&waiting).await;
    let (status, body) = server
        .post(&format!("/eve/v1/session/{waiting}"), answer)
        .await;
    assert_eq!(status, 202, "{body}");
    let after = server.until_rest(&waiting, from).await;
    let kinds: Vec<&str> = after.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"turn.completed"), "{kinds:?}");
    server.stop().await;
}
