//! The session stream against eve's captures: envelope, event order and data keys (a tool call, a
//! skill load, an approval, a compaction and a clear), `startIndex`, `follow=false` with the tail
//! index, live follow, Server-Sent Events with `Last-Event-ID`, and the AI SDK UI message stream.

use std::collections::BTreeSet;
use std::time::Duration;

use eve_test_support::capture::{capture, compare, parse_ndjson, types};
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const WEATHER: &str = "/tool get_weather {\"city\": \"Paris\"}";

fn assert_matches(ours: &[Value], capture_name: &str, skip: usize) {
    let theirs = capture(capture_name);
    if let Err(e) = compare(ours, &theirs[skip..]) {
        panic!(
            "{capture_name} does not match:\n{e}\nours: {:?}",
            types(ours)
        );
    }
}

fn assert_envelope(event: &Value) {
    let obj = event.as_object().unwrap();
    let keys: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["data", "meta", "type"]), "{event}");
    let id = event["meta"]["id"].as_str().unwrap();
    assert!(id.starts_with("evt_") && id.len() == 30, "meta.id {id}");
    let at = event["meta"]["at"].as_str().unwrap();
    assert!(
        at.len() == 24 && at.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(at).is_ok(),
        "meta.at {at}"
    );
}

#[tokio::test]
async fn tool_call_and_skill_load_match_the_captures() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create(WEATHER).await;

    // Headers exactly as eve sends them.
    let response = server.stream_response(&id, "?startIndex=0").await;
    let h = response.headers().clone();
    assert_eq!(h["content-type"], "application/x-ndjson; charset=utf-8");
    assert_eq!(h["cache-control"], "no-store, no-transform");
    assert_eq!(h["x-accel-buffering"], "no");
    assert_eq!(h["x-eve-session-id"], id.as_str());
    assert_eq!(h["x-eve-stream-format"], "ndjson");
    assert_eq!(h["x-eve-stream-version"], "26");
    assert!(
        h.get("x-eve-stream-tail-index").is_none(),
        "a follow without includeTailIndex"
    );
    let text = response.text().await.unwrap();
    assert!(text.starts_with("\n{"), "blank first line, then events");
    let turn0 = parse_ndjson(&text);
    turn0.iter().for_each(assert_envelope);
    assert_matches(&turn0, "stream1.ndjson", 0);
    assert_eq!(turn0[6]["data"]["result"]["output"]["condition"], "Sunny");

    // A follow-up turn that loads a skill, read from where the first one ended.
    let from = server.count(&id).await;
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "/tool load_skill {\"name\": \"release\"}"}),
        )
        .await;
    assert_eq!(status, 202);
    // eve answers a message with its delivery id (eve's client needs it to find the turn).
    let delivery = body["deliveryId"].as_str().unwrap().to_owned();
    assert_eq!(
        body,
        json!({"ok": true, "sessionId": id, "status": "accepted", "deliveryId": delivery})
    );
    let turn1 = server.until_rest(&id, from).await;
    assert!(
        turn1
            .iter()
            .all(|e| e["meta"]["deliveryIds"] == json!([delivery])),
        "every event of the turn carries the delivery id"
    );
    assert_matches(&turn1, "stream2.ndjson", 0);
    let result = turn1.iter().find(|e| e["type"] == "action.result").unwrap();
    assert!(
        result["data"]["result"]["output"]
            .as_str()
            .unwrap()
            .contains("Release checklist")
    );
    server.stop().await;
}

#[tokio::test]
async fn approval_flow_matches_the_captures() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    let from = server.until_rest(&id, 0).await.len() as u64;
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "/tool refund_charge {\"chargeId\": \"ch_1\", \"amount\": 5}"}),
        )
        .await;
    assert_eq!(status, 202);
    // Like stream3: from the last event stored before the message (a `session.waiting`).
    let parked = server
        .stream(&id, &format!("?startIndex={}", from - 1))
        .await;
    assert_eq!(parked[0]["type"], "session.waiting");
    assert_eq!(server.count(&id).await, from + parked.len() as u64 - 1);
    assert_matches(&parked, "stream3.ndjson", 0);
    let request_id = parked
        .iter()
        .find(|e| e["type"] == "input.requested")
        .unwrap()["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();

    // Wrong answers: unknown request, not waiting.
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": "nope", "optionId": "approve"}]}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("request_not_pending"))
    );

    let before = server.count(&id).await;
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": request_id, "optionId": "approve"}]}),
        )
        .await;
    assert_eq!(status, 202);
    // Like stream4: from the `turn.waiting` on.
    let resumed = server
        .stream(&id, &format!("?startIndex={}", before - 1))
        .await;
    assert_matches(&resumed, "stream4.ndjson", 0);
    let result = resumed
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap();
    assert_eq!(result["data"]["result"]["output"]["refunded"], true);

    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": request_id, "optionId": "approve"}]}),
        )
        .await;
    // A second answer to an answered request: the first counts, and the 409 says which it was.
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("input_already_answered"))
    );
    assert_eq!(body["outcome"], "approved", "{body}");
    assert_eq!(body["responderPrincipalId"], "anonymous", "{body}");
    server.stop().await;
}

#[tokio::test]
async fn compact_and_clear_match_the_capture() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello there").await;
    server.until_rest(&id, 0).await;
    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/compact"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"ok": true, "sessionId": id, "status": "accepted"})
    );
    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/clear"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "accepted");
    let tail = server.stream(&id, "?startIndex=-4&follow=false").await;
    assert_matches(&tail, "stream5.ndjson", 0);

    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/reset"), json!({}))
        .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("reset")));
    let last = server.stream(&id, "?startIndex=-2&follow=false").await;
    assert_eq!(types(&last), ["session.reset", "session.waiting"]);
    server.stop().await;
}

#[tokio::test]
async fn start_index_and_bounded_reads() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create(WEATHER).await;
    let all = server.until_rest(&id, 0).await;
    let n = all.len();
    assert_eq!(n as u64, server.count(&id).await);

    // follow=false: the stored events, the tail index, and the end.
    let response = server.stream_response(&id, "?follow=false").await;
    assert_eq!(
        response.headers()["x-eve-stream-tail-index"],
        (n - 1).to_string().as_str()
    );
    assert_eq!(parse_ndjson(&response.text().await.unwrap()), all);

    // Absolute and negative start indexes.
    let from5 = server.stream(&id, "?startIndex=5&follow=false").await;
    assert_eq!(from5, all[5..]);
    let last3 = server.stream(&id, "?startIndex=-3&follow=false").await;
    assert_eq!(last3, all[n - 3..]);
    let everything = server.stream(&id, "?startIndex=-1000&follow=0").await;
    assert_eq!(everything, all);
    let past = server
        .stream_response(&id, "?startIndex=999&follow=false")
        .await;
    assert_eq!(
        past.headers()["x-eve-stream-tail-index"],
        (n - 1).to_string().as_str()
    );
    assert_eq!(past.text().await.unwrap(), "\n");

    // includeTailIndex on a follow reports the tail too.
    let response = server
        .stream_response(&id, "?startIndex=-1&includeTailIndex=1")
        .await;
    assert_eq!(
        response.headers()["x-eve-stream-tail-index"],
        (n - 1).to_string().as_str()
    );
    assert_eq!(parse_ndjson(&response.text().await.unwrap()), all[n - 1..]);

    // A session with no events: tail -1.
    let (_, body) = server.post("/eve/v1/session", json!({})).await;
    let empty = body["sessionId"].as_str().unwrap();
    let response = server.stream_response(empty, "?follow=false").await;
    assert_eq!(response.headers()["x-eve-stream-tail-index"], "-1");
    assert_eq!(response.text().await.unwrap(), "\n");

    for bad in ["?startIndex=abc", "?startIndex=1.5", "?follow=maybe"] {
        let response = server.stream_response(&id, bad).await;
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "invalid_query");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_follow_at_rest_waits_for_the_next_turn() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("first").await;
    let first = server.until_rest(&id, 0).await;
    let at = first.len();
    let follower = {
        let url = server.url(&format!("/eve/v1/session/{id}/stream?startIndex={at}"));
        let http = server.http.clone();
        tokio::spawn(async move { http.get(url).send().await.unwrap().text().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!follower.is_finished(), "a follow at rest waits");
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "second"}),
        )
        .await;
    assert_eq!(status, 202);
    let text = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .unwrap()
        .unwrap();
    let events = parse_ndjson(&text);
    assert_eq!(events.first().unwrap()["type"], "turn.started");
    assert_eq!(events.last().unwrap()["type"], "session.waiting");
    let received = events
        .iter()
        .find(|e| e["type"] == "message.received")
        .unwrap();
    assert_eq!(received["data"]["message"], "second");
    server.stop().await;
}

fn parse_sse(text: &str) -> Vec<(Option<u64>, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse().unwrap());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_owned());
                }
            }
            data.map(|d| (id, serde_json::from_str(&d).unwrap_or(Value::String(d))))
        })
        .collect()
}

#[tokio::test]
async fn server_sent_events_resume_from_last_event_id() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create(WEATHER).await;
    let all = server.until_rest(&id, 0).await;
    let url = server.url(&format!("/eve/v1/session/{id}/stream?follow=false"));
    let response = server
        .http
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    assert_eq!(response.headers()["x-eve-stream-format"], "sse");
    let events = parse_sse(&response.text().await.unwrap());
    let ids: Vec<u64> = events.iter().map(|(i, _)| i.unwrap()).collect();
    assert_eq!(ids, (0..all.len() as u64).collect::<Vec<_>>());
    let data: Vec<Value> = events.into_iter().map(|(_, d)| d).collect();
    assert_eq!(data, all, "the same envelopes as NDJSON");

    // Resume after event 10: `Last-Event-ID` wins over `startIndex`.
    let response = server
        .http
        .get(format!("{url}&startIndex=0"))
        .header("accept", "text/event-stream")
        .header("last-event-id", "10")
        .send()
        .await
        .unwrap();
    let resumed = parse_sse(&response.text().await.unwrap());
    assert_eq!(resumed.first().unwrap().0, Some(11));
    assert_eq!(resumed.len(), all.len() - 11);

    // A live SSE follow resumed at the tail sends keep-alives, then the next turn.
    let mut response = server
        .http
        .get(server.url(&format!("/eve/v1/session/{id}/stream")))
        .header("accept", "text/event-stream")
        .header("last-event-id", (all.len() - 1).to_string())
        .send()
        .await
        .unwrap();
    let mut head = String::new();
    while !head.contains(": keep-alive") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("a keep-alive while the follow waits")
            .unwrap()
            .expect("the follow ended at rest");
        head.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let reader = tokio::spawn(async move { head + &response.text().await.unwrap() });
    server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "again"}),
        )
        .await;
    let text = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .unwrap()
        .unwrap();
    assert!(text.contains(": keep-alive"), "{text}");
    let live = parse_sse(&text);
    assert_eq!(live.first().unwrap().0, Some(all.len() as u64));
    assert_eq!(live.last().unwrap().1["type"], "session.waiting");
    server.stop().await;
}

/// Fields each UI message chunk type may carry (the AI SDK's chunk schema is strict).
fn allowed_chunk_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "start" => &["type", "messageId"],
        "start-step" | "finish-step" | "finish" => &["type"],
        "text-start" | "text-end" | "reasoning-start" | "reasoning-end" => &["type", "id"],
        "text-delta" | "reasoning-delta" => &["type", "id", "delta"],
        "tool-input-start" => &["type", "toolCallId", "toolName"],
        "tool-input-delta" => &["type", "toolCallId", "inputTextDelta"],
        "tool-input-available" => &["type", "toolCallId", "toolName", "input"],
        "tool-output-available" => &["type", "toolCallId", "output"],
        "tool-output-error" => &["type", "toolCallId", "errorText"],
        "error" => &["type", "errorText"],
        k if k.starts_with("data-") => &["type", "data"],
        other => panic!("unexpected chunk type {other}"),
    }
}

async fn chat(
    server: &TestServer,
    body: Value,
) -> (reqwest::header::HeaderMap, Vec<Value>, String) {
    let response = server
        .http
        .post(server.url("/eve/v1/chat"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let chunks: Vec<Value> = parse_sse(&text).into_iter().map(|(_, d)| d).collect();
    (headers, chunks, text)
}

#[tokio::test]
async fn ui_message_stream_for_use_chat() {
    let server = TestServer::start(AgentDir::standard()).await;
    let body = json!({
        "id": "chat-123",
        "trigger": "submit-message",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": WEATHER}]}],
    });
    let (headers, chunks, text) = chat(&server, body).await;
    assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let session = headers["x-eve-session-id"].to_str().unwrap().to_owned();
    let kinds: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c.get("type").and_then(Value::as_str))
        .collect();
    let mut folded: Vec<&str> = Vec::new();
    for k in &kinds {
        if folded.last() != Some(k) || !k.ends_with("-delta") {
            folded.push(k);
        }
    }
    assert_eq!(
        folded,
        [
            "start",
            "start-step",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-available",
            "tool-output-available",
            "finish-step",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish",
        ]
    );
    for chunk in chunks.iter().filter(|c| c.is_object()) {
        let kind = chunk["type"].as_str().unwrap();
        let allowed = allowed_chunk_keys(kind);
        for key in chunk.as_object().unwrap().keys() {
            assert!(allowed.contains(&key.as_str()), "{kind} has `{key}`");
        }
    }
    let available = chunks
        .iter()
        .find(|c| c["type"] == "tool-input-available")
        .unwrap();
    assert_eq!(available["input"], json!({"city": "Paris"}));
    let reply: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert!(reply.starts_with("get_weather returned:"), "{reply}");

    // The same chat id reaches the same session.
    let body = json!({
        "id": "chat-123",
        "messages": [
            {"id": "m1", "role": "user", "parts": [{"type": "text", "text": WEATHER}]},
            {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": reply}]},
            {"id": "m2", "role": "user", "parts": [{"type": "text", "text": "thanks"}]},
        ],
    });
    let (headers, chunks, _) = chat(&server, body).await;
    assert_eq!(headers["x-eve-session-id"], session.as_str());
    let reply: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reply, "You said: thanks");
    let events = server.all(&session).await;
    let received: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.received")
        .map(|e| &e["data"]["message"])
        .collect();
    assert_eq!(received.len(), 2, "earlier messages are not replayed");

    // Approvals over the chat endpoint: the turn parks, then an answer resumes it.
    let body = json!({"id": "chat-approve", "messages": [{"role": "user", "parts": [
        {"type": "text", "text": "/tool refund_charge {\"chargeId\": \"ch_2\"}"}]}]});
    let (_, chunks, text) = chat(&server, body).await;
    assert!(text.ends_with("data: [DONE]\n\n"));
    let input = chunks
        .iter()
        .find(|c| c["type"] == "data-eve-input-requested")
        .unwrap();
    let request_id = input["data"]["requests"][0]["requestId"].as_str().unwrap();
    let body = json!({"id": "chat-approve", "messages": [],
                      "inputResponses": [{"requestId": request_id, "optionId": "cancel"}]});
    let (_, chunks, _) = chat(&server, body).await;
    let error = chunks
        .iter()
        .find(|c| c["type"] == "tool-output-error")
        .unwrap();
    assert!(!error["errorText"].as_str().unwrap().is_empty());
    assert_eq!(chunks.last().unwrap(), "[DONE]");

    for (bad, code) in [
        (json!({"messages": []}), "invalid_body"),
        (json!({"id": "x", "messages": []}), "invalid_body"),
        (
            json!({"id": "x", "messages": [{"role": "assistant", "parts": []}]}),
            "invalid_body",
        ),
        (json!({"id": 5, "messages": []}), "invalid_body"),
    ] {
        let (status, body) = server.post("/eve/v1/chat", bad).await;
        assert_eq!((status, body["code"].as_str()), (400, Some(code)));
    }
    server.stop().await;
}

#[tokio::test]
async fn open_streams_end_when_the_server_shuts_down() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    let n = server.until_rest(&id, 0).await.len();
    let response = server
        .stream_response(&id, &format!("?startIndex={n}"))
        .await;
    let reader = tokio::spawn(async move { response.text().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!reader.is_finished());
    server.shutdown.cancel();
    let text = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the stream ended on shutdown")
        .unwrap()
        .unwrap();
    assert_eq!(text, "\n");
}

/// A message steered into a running turn is answered by it: from its `message.received` on, the
/// turn's events carry its delivery id beside the one that started the turn (eve's client waits
/// for the turn boundary tagged with its own id), and a stream joining mid-turn sees both.
#[tokio::test]
async fn a_steered_message_is_in_the_delivery_ids_of_the_turn_that_takes_it() {
    let agent = AgentDir::standard();
    agent.file("agent.yaml", "default_tools: false\nturn_policy: steer\n");
    let server = TestServer::start(agent).await;
    let (status, body) = server
        .post("/eve/v1/session", json!({"message": "/tool slow {}"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let first = body["deliveryId"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server
        .runtime
        .store()
        .tool_calls(&id, 0)
        .await
        .unwrap()
        .iter()
        .any(|c| c.status.as_str() == "running")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow tool never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "and this too"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let steered = body["deliveryId"].as_str().unwrap().to_owned();
    let events = server.until_rest(&id, 0).await;
    let ids = |e: &Value| e["meta"]["deliveryIds"].clone();
    let at = events
        .iter()
        .position(|e| e["type"] == "message.received" && e["data"]["message"] == "and this too")
        .expect("the steered message joined the turn");
    assert_eq!(events[at]["data"]["turnId"], "turn_0");
    for e in &events[..at] {
        assert_eq!(ids(e), json!([first]), "{e}");
    }
    for e in &events[at..] {
        assert_eq!(ids(e), json!([first, steered]), "{e}");
    }
    assert_eq!(events.last().unwrap()["type"], "session.waiting");
    // A stream that joins after the steered message lists both from its first event.
    let tail = server.until_rest(&id, (at + 1) as u64).await;
    assert!(!tail.is_empty());
    for e in &tail {
        assert_eq!(ids(e), json!([first, steered]), "{e}");
    }
    server.stop().await;
}
