//! Every route of the session API with good and hostile input: status codes and bodies as eve's,
//! no panic, nothing accepted is lost.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

#[tokio::test]
async fn health_info_and_create() {
    let server = TestServer::start(AgentDir::standard()).await;
    let (status, body) = server.get("/eve/v1/health").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "status": "ready", "workflowId": server.hash})
    );

    let (status, info) = server.get("/eve/v1/agent").await;
    assert_eq!(status, 200);
    assert_eq!(info["build"]["hash"], server.hash.as_str());
    let tools: Vec<&str> = info["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["get_weather", "refund_charge", "slow"]);
    assert_eq!(info["tools"][1]["approval"], "always");
    assert_eq!(info["tools"][1]["deferred"], false);
    assert_eq!(info["skills"][0]["name"], "release");
    assert_eq!(info["stream"]["version"], "26");

    // `/info` is eve's agent-info v5 document (what `Client.info()` of eve's npm client accepts:
    // scripts/test-eve-client.sh checks it with the client's own validator).
    let (status, v5) = server.get("/eve/v1/info").await;
    assert_eq!(status, 200);
    assert_eq!(v5["kind"], "eve-agent-info");
    assert_eq!(v5["version"], 5);
    let keys: Vec<&str> = v5.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "agent",
            "capabilities",
            "channels",
            "composition",
            "connections",
            "diagnostics",
            "hooks",
            "instructions",
            "kernelEffects",
            "kind",
            "memories",
            "mode",
            "remoteAgents",
            "sandbox",
            "schedules",
            "skills",
            "subagents",
            "tools",
            "version",
            "workspace"
        ]
    );
    let v5_tools: Vec<&str> = v5["tools"]["static"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(v5_tools, tools);
    assert_eq!(v5["tools"]["static"][1]["requiresApproval"], true);
    assert_eq!(v5["tools"]["static"][0]["requiresApproval"], false);
    assert_eq!(v5["skills"]["static"][0]["name"], "release");
    assert_eq!(v5["agent"]["config"]["sourceKind"], "module");
    assert_eq!(v5["mode"], "production");
    assert_eq!(v5["sandbox"]["revisionHash"], server.hash.as_str());
    // eve's schema takes a missing optional field, never a `null` one (only `resourceRoot` is
    // `unknown` there).
    fn nulls(v: &Value, path: String, out: &mut Vec<String>) {
        match v {
            Value::Null => out.push(path),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| nulls(v, format!("{path}.{i}"), out)),
            Value::Object(o) => o
                .iter()
                .for_each(|(k, v)| nulls(v, format!("{path}.{k}"), out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    nulls(&v5, String::new(), &mut found);
    assert_eq!(found, [".workspace.resourceRoot"]);

    // Without a message: 202, the id in the body and the header, no events yet.
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let header = response.headers()["x-eve-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"ok": true, "sessionId": header, "status": "accepted"})
    );
    assert!(header.starts_with("wrun_"));
    assert_eq!(server.count(&header).await, 0);

    // Its first message later starts the first turn.
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{header}"),
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(status, 202);
    let events = server.until_rest(&header, 0).await;
    assert_eq!(events[0]["type"], "session.started");
    let reply = events
        .iter()
        .find(|e| e["type"] == "message.completed")
        .unwrap();
    assert_eq!(reply["data"]["message"], "You said: hi");

    // With a message as text parts.
    let (status, body) = server
        .post(
            "/eve/v1/session",
            json!({"message": [{"type": "text", "text": "parts work"}]}),
        )
        .await;
    assert_eq!(status, 202);
    let id = body["sessionId"].as_str().unwrap();
    let events = server.until_rest(id, 0).await;
    let received = events
        .iter()
        .find(|e| e["type"] == "message.received")
        .unwrap();
    assert_eq!(received["data"]["message"], "parts work");
    server.stop().await;
}

#[tokio::test]
async fn unknown_sessions_and_routes() {
    let server = TestServer::start(AgentDir::standard()).await;
    let not_found =
        json!({"code": "session_not_found", "error": "Session not found.", "ok": false});
    let id = "wrun_01NOPE";
    for path in ["", "/cancel", "/compact", "/clear", "/reset"] {
        let (status, body) = server
            .post(
                &format!("/eve/v1/session/{id}{path}"),
                json!({"message": "x"}),
            )
            .await;
        assert_eq!((status, &body), (404, &not_found), "POST {path}");
    }
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": "r", "optionId": "approve"}]}),
        )
        .await;
    assert_eq!((status, &body), (404, &not_found));
    let response = server.stream_response(id, "").await;
    assert_eq!(response.status(), 404);
    assert_eq!(response.json::<Value>().await.unwrap(), not_found);
    let (status, body) = server
        .post("/eve/v1/session/%FF%FE/cancel", json!({}))
        .await;
    assert_eq!(
        (status, &body),
        (404, &not_found),
        "an id that is not UTF-8"
    );
    let long = "x".repeat(5000);
    let (status, _) = server
        .post(&format!("/eve/v1/session/{long}"), json!({"message": "x"}))
        .await;
    assert_eq!(status, 404);

    let (status, body) = server.get("/eve/v1/nothing").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = server.get("/eve/v1/session").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    server.stop().await;
}

#[tokio::test]
async fn hostile_bodies_get_400_with_a_reason() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let path = format!("/eve/v1/session/{id}");
    let cases: Vec<(&str, Vec<u8>, &str)> =
        vec![
        ("malformed", "{\"message\": ".into(), "invalid_json"),
        ("not json", "message=hi".into(), "invalid_json"),
        ("invalid utf-8", b"{\"message\": \"\xff\"}".to_vec(), "invalid_json"),
        ("array", "[]".into(), "invalid_body"),
        ("string", "\"hi\"".into(), "invalid_body"),
        ("empty", "".into(), "invalid_body"),
        ("neither", "{}".into(), "invalid_body"),
        ("nulls", "{\"message\": null, \"inputResponses\": null}".into(), "invalid_body"),
        ("both", "{\"message\": \"a\", \"inputResponses\": []}".into(), "invalid_body"),
        ("number", "{\"message\": 5}".into(), "invalid_body"),
        ("object", "{\"message\": {\"text\": \"a\"}}".into(), "invalid_body"),
        ("bad parts", "{\"message\": [{\"type\": \"image\"}]}".into(), "invalid_body"),
        ("empty text", "{\"message\": \"   \"}".into(), "empty_message"),
        ("responses type", "{\"inputResponses\": {}}".into(), "invalid_body"),
        ("responses empty", "{\"inputResponses\": []}".into(), "invalid_body"),
        ("response type", "{\"inputResponses\": [1]}".into(), "invalid_body"),
        (
            "no request id",
            "{\"inputResponses\": [{\"optionId\": \"approve\"}]}".into(),
            "invalid_body",
        ),
        (
            "option type",
            "{\"inputResponses\": [{\"requestId\": \"r\", \"optionId\": 5}]}".into(),
            "invalid_body",
        ),
        (
            "no answer",
            "{\"inputResponses\": [{\"requestId\": \"r\"}]}".into(),
            "invalid_body",
        ),
        (
            "text type",
            "{\"inputResponses\": [{\"requestId\": \"r\", \"optionId\": \"cancel\", \"text\": 1}]}"
                .into(),
            "invalid_body",
        ),
        (
            "twice",
            "{\"inputResponses\": [{\"requestId\": \"r\", \"optionId\": \"cancel\"}, \
             {\"requestId\": \"r\", \"optionId\": \"approve\"}]}"
                .into(),
            "invalid_body",
        ),
        ("deep", format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into(), "invalid_json"),
    ];
    for (name, body, code) in cases {
        let (status, reply) = server.post_raw(&path, body).await;
        assert_eq!(status, 400, "{name}: {reply}");
        assert_eq!(reply["code"], code, "{name}: {reply}");
        assert_eq!(reply["ok"], false, "{name}");
        assert!(!reply["error"].as_str().unwrap().is_empty(), "{name}");
    }
    for (name, body) in [
        ("create with responses", "{\"inputResponses\": []}"),
        ("create with number", "{\"message\": 1}"),
        ("create malformed", "{"),
    ] {
        let (status, reply) = server.post_raw("/eve/v1/session", body).await;
        assert_eq!(status, 400, "{name}: {reply}");
    }
    let (status, reply) = server
        .post_raw(&format!("{path}/cancel"), "{\"turnId\": 3}")
        .await;
    assert_eq!(
        (status, reply["code"].as_str()),
        (400, Some("invalid_body"))
    );
    let (status, reply) = server.post_raw(&format!("{path}/clear"), "nope").await;
    assert_eq!(
        (status, reply["code"].as_str()),
        (400, Some("invalid_json"))
    );

    // The server is still fine.
    let (status, _) = server.get("/eve/v1/health").await;
    assert_eq!(status, 200);
    server.stop().await;
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    let big = format!("{{\"message\": \"{}\"}}", "a".repeat(10 * 1024 * 1024));
    for path in [
        "/eve/v1/session".to_owned(),
        format!("/eve/v1/session/{id}"),
    ] {
        let (status, body) = server.post_raw(&path, big.clone()).await;
        assert_eq!(status, 413, "{path}");
        assert_eq!(body["code"], "payload_too_large");
        assert_eq!(body["ok"], false);
    }
    // Just under the limit is fine.
    let fits = format!("{{\"message\": \"{}\"}}", "b".repeat(1024 * 1024 - 64));
    let (status, _) = server
        .post_raw(&format!("/eve/v1/session/{id}"), fits)
        .await;
    assert_eq!(status, 202);

    // The limit is configurable.
    let small = TestServer::start_with(AgentDir::standard(), &[], |mut c| {
        c.body_limit = 64;
        c
    })
    .await;
    let (status, _) = small
        .post("/eve/v1/session", json!({"message": "x".repeat(100)}))
        .await;
    assert_eq!(status, 413);
    small.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn controls_need_an_idle_session() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;

    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"ok": true, "status": "no_active_turn"}));

    // A slow tool keeps the turn busy: controls answer 409, cancel stops it.
    let from = server.count(&id).await;
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "/tool slow {}"}),
        )
        .await;
    assert_eq!(status, 202);
    let mut busy = false;
    for _ in 0..100 {
        if server.count(&id).await > from + 3 {
            busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(busy, "the turn started");
    for control in ["compact", "clear", "reset"] {
        let (status, body) = server
            .post(&format!("/eve/v1/session/{id}/{control}"), json!({}))
            .await;
        assert_eq!(status, 409, "{control}: {body}");
        assert_eq!(body["code"], "session_not_active");
        assert_eq!(body["ok"], false);
    }
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}/cancel"),
            json!({"turnId": "turn_99"}),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("no_active_turn"))
    );
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}/cancel"),
            json!({"turnId": "turn_1"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        json!({"ok": true, "sessionId": id, "status": "accepted"})
    );
    let events = server.until_rest(&id, from).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"turn.cancelled"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"session.waiting"));
    server.stop().await;
}

#[tokio::test]
async fn concurrent_posts_to_one_session_all_land() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("start").await;
    let n = 32;
    let mut tasks = Vec::new();
    for i in 0..n {
        let http = server.http.clone();
        let url = server.url(&format!("/eve/v1/session/{id}"));
        tasks.push(tokio::spawn(async move {
            let response = http
                .post(url)
                .json(&json!({"message": format!("message {i}")}))
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        }));
    }
    // Readers at the same time must not disturb anything.
    let reader = {
        let http = server.http.clone();
        let url = server.url(&format!("/eve/v1/session/{id}/stream?follow=false"));
        tokio::spawn(async move {
            for _ in 0..10 {
                let r = http.get(&url).send().await.unwrap();
                assert_eq!(r.status(), 200);
                let _ = r.text().await.unwrap();
            }
        })
    };
    for task in tasks {
        assert_eq!(task.await.unwrap(), 202);
    }
    reader.await.unwrap();
    // A live stream ends when the session comes to rest; between two queued turns it may rest for
    // a moment before the driver takes the next accepted message, so read until every turn is in.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let events = loop {
        let events = server.until_rest(&id, 0).await;
        let done = events
            .iter()
            .filter(|e| e["type"] == "turn.completed")
            .count();
        if done > n || std::time::Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mut seen: HashMap<String, usize> = HashMap::new();
    for e in events.iter().filter(|e| e["type"] == "message.received") {
        *seen
            .entry(e["data"]["message"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), n + 1, "every accepted message became a turn");
    assert!(seen.values().all(|c| *c == 1), "no message twice");
    let completed = events
        .iter()
        .filter(|e| e["type"] == "turn.completed")
        .count();
    assert_eq!(completed, n + 1);
    // Indexes are dense and turns never interleave.
    let all = server.all(&id).await;
    assert_eq!(all.len() as u64, server.count(&id).await);
    let mut open = false;
    for e in &all {
        match e["type"].as_str().unwrap() {
            "turn.started" => {
                assert!(!open, "turns interleave");
                open = true;
            }
            "turn.completed" => open = false,
            _ => {}
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn random_and_mutated_bodies_never_fail_the_server() {
    use rand::{Rng, SeedableRng};
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let seeds: [&[u8]; 4] = [
        br#"{"message": "hi there"}"#,
        br#"{"inputResponses": [{"requestId": "apr_1", "optionId": "approve", "text": "ok"}]}"#,
        br#"{"id": "c", "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]}"#,
        br#"{"turnId": "turn_0"}"#,
    ];
    let paths = [
        format!("/eve/v1/session/{id}"),
        "/eve/v1/session".to_owned(),
        format!("/eve/v1/session/{id}/cancel"),
        format!("/eve/v1/session/{id}/clear"),
        "/eve/v1/chat".to_owned(),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..150 {
        let mut body = seeds[i % seeds.len()].to_vec();
        match i % 3 {
            0 => {
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..body.len());
                    body[at] = rng.random();
                }
            }
            1 => body.truncate(rng.random_range(0..body.len())),
            _ => body = (0..rng.random_range(0..64)).map(|_| rng.random()).collect(),
        }
        let path = &paths[i % paths.len()];
        let (status, reply) = server.post_raw(path, body.clone()).await;
        assert!(
            [200, 202, 400, 404, 409].contains(&status),
            "{path} {:?} -> {status} {reply}",
            String::from_utf8_lossy(&body)
        );
        if status >= 400 {
            assert_eq!(reply["ok"], false, "{reply}");
        }
    }
    let (status, _) = server.get("/eve/v1/health").await;
    assert_eq!(status, 200);
    server.stop().await;
}
