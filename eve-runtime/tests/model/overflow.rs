//! "Context too long" from a real HTTP server: the step compacts once and calls the model again;
//! a second overflow in the same step, or nothing older to compact, fails the turn clearly.

use std::sync::Arc;

use eve_runtime::engine::DriveOutcome;
use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::model::{Message, Provider};
use serde_json::{Value, json};

use super::fast_settings;
use super::server::{Reply, TestServer};
use super::wire::oa;
use crate::engine_support::{TestProject, agent, all_events, kinds, run_prompt};

fn answer(text: &str) -> Reply {
    Reply::sse(&[oa::text(text), oa::finish("stop"), oa::done()])
}

/// OpenAI's answer to a prompt longer than the window.
fn too_long() -> Reply {
    Reply::json(
        400,
        json!({"error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }}),
    )
}

/// A runtime whose model is an OpenAI-compatible client of `server`. The window is configured
/// large, so only the provider's answer (never the estimate) triggers compaction.
fn runtime(p: &TestProject, server: &TestServer) -> eve_runtime::engine::Runtime {
    p.write_build(&agent(), &[]);
    let settings = fast_settings(Provider::Vllm, &format!("{}/v1", server.url));
    p.runtime_on(
        Arc::new(OpenAiClient::new(&settings).unwrap()),
        Some(1_000_000),
    )
}

fn turn_failed(events: &[eve_runtime::store::StoredEvent]) -> Option<Value> {
    events
        .iter()
        .find(|e| e.kind == "turn.failed")
        .map(|e| e.data.clone())
}

#[tokio::test]
async fn context_length_exceeded_once_compacts_and_completes_the_turn() {
    let server = TestServer::start(vec![
        answer("first answer"),
        too_long(),
        answer("SUMMARY: the user said hello"),
        answer("second answer"),
    ])
    .await;
    let p = TestProject::new();
    let rt = runtime(&p, &server);
    let (id, outcome) = run_prompt(&rt, "hello").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    rt.post_message(&id, "and now?").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);

    let events = all_events(&rt, &id).await;
    assert_eq!(turn_failed(&events), None, "{:?}", kinds(&events));
    let kinds = kinds(&events);
    let compacted = kinds.iter().position(|k| k == "compaction.completed");
    let completed: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == "turn.completed")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(completed.len(), 2, "{kinds:?}");
    assert!(
        compacted.is_some_and(|c| c < completed[1] && c > completed[0]),
        "{kinds:?}"
    );
    let last_text = events
        .iter()
        .rev()
        .find(|e| e.kind == "message.completed")
        .map(|e| e.data.clone())
        .unwrap();
    assert!(
        last_text.to_string().contains("second answer"),
        "{last_text}"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // The summary call got the older turn; the retried call got the summary and the new message.
    let summary_call = requests[2].body["messages"].to_string();
    assert!(summary_call.contains("first answer"), "{summary_call}");
    let retried = requests[3].body["messages"].as_array().unwrap();
    let retried_text = serde_json::to_string(retried).unwrap();
    assert!(
        retried_text.contains("SUMMARY: the user said hello"),
        "{retried_text}"
    );
    assert!(!retried_text.contains("first answer"), "{retried_text}");
    assert_eq!(retried.last().unwrap()["content"], "and now?");

    // The stored context starts with the checkpoint.
    let context = rt.store().context(&id).await.unwrap();
    assert_eq!(context[0].kind, "checkpoint");
    let second: Message = serde_json::from_value(context[1].body.clone()).unwrap();
    assert_eq!(second, Message::user("and now?"));
}

#[tokio::test]
async fn a_second_overflow_in_the_same_step_fails_the_turn_clearly() {
    let server = TestServer::start(vec![
        answer("first answer"),
        too_long(),
        answer("SUMMARY"),
        too_long(),
    ])
    .await;
    let p = TestProject::new();
    let rt = runtime(&p, &server);
    let (id, _) = run_prompt(&rt, "hello").await;
    rt.post_message(&id, "more").await.unwrap();
    let outcome = rt.drive(&id).await.unwrap();
    assert!(
        matches!(outcome, DriveOutcome::Failed { .. }),
        "{outcome:?}"
    );
    let events = all_events(&rt, &id).await;
    let failed = turn_failed(&events).expect("the turn failed");
    assert_eq!(failed["error"]["code"], "context_too_long");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("maximum context length is 8192"),
        "{message}"
    );
    assert!(message.contains("still did not fit"), "{message}");
    assert_eq!(server.requests().len(), 4, "one compaction, one retry");
    // The session stays usable.
    let session = rt.store().session(&id).await.unwrap().unwrap();
    assert_eq!(
        serde_json::to_value(session.status).unwrap(),
        json!("idle"),
        "{:?}",
        session.status
    );
}

#[tokio::test]
async fn an_overflow_with_nothing_older_fails_without_a_summary_call() {
    let server = TestServer::start(vec![too_long()]).await;
    let p = TestProject::new();
    let rt = runtime(&p, &server);
    let (id, _) = run_prompt(&rt, "a very long first message").await;
    let events = all_events(&rt, &id).await;
    let failed = turn_failed(&events).expect("the turn failed");
    assert_eq!(failed["error"]["code"], "context_too_long");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("nothing older to compact"), "{message}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_summary_call_that_overflows_too_summarizes_the_newer_part() {
    let server = TestServer::start(vec![
        answer("one"),
        answer("two"),
        too_long(),
        too_long(),
        answer("SUMMARY of the second turn"),
        answer("three"),
    ])
    .await;
    let p = TestProject::new();
    let rt = runtime(&p, &server);
    let (id, _) = run_prompt(&rt, "first").await;
    rt.post_message(&id, "second").await.unwrap();
    rt.drive(&id).await.unwrap();
    rt.post_message(&id, "third").await.unwrap();
    rt.drive(&id).await.unwrap();
    let events = all_events(&rt, &id).await;
    assert_eq!(turn_failed(&events), None, "{:?}", kinds(&events));
    let requests = server.requests();
    assert_eq!(requests.len(), 6);
    // The second summary call left the first turn out, starting at a user message.
    let smaller = requests[4].body["messages"].as_array().unwrap();
    assert_eq!(smaller[1]["content"], "second");
    assert!(
        !serde_json::to_string(smaller)
            .unwrap()
            .contains("\"first\"")
    );
    let context = rt.store().context(&id).await.unwrap();
    let summary = context[0].body["summary"].as_str().unwrap();
    assert!(summary.contains("were left out"), "{summary}");
    assert!(summary.contains("SUMMARY of the second turn"), "{summary}");
}
