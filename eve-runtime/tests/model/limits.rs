//! Model-call limits against scripted servers that misbehave: a stream of keep-alive comments, a
//! server that never sends its headers, a huge reply, a `Retry-After` of an hour. Each call ends
//! within its limit with an error naming the limit.

use std::time::{Duration, Instant};

use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::model::{ModelError, Provider};

use super::server::{Reply, TestServer};
use super::wire::oa;
use super::{fast_settings, run, simple_request};

fn message(result: &Result<eve_runtime::model::ModelResponse, ModelError>) -> String {
    match result {
        Ok(r) => panic!("the call succeeded: {r:?}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn keep_alive_comments_are_not_progress() {
    // One chunk, then a comment every 50 ms for 10 s: only the comments keep the socket busy.
    let mut parts = vec![oa::role()];
    parts.extend(std::iter::repeat_n(": keep-alive\n\n".to_owned(), 200));
    let server = TestServer::start(vec![
        Reply::sse(&parts).between_parts(Duration::from_millis(50)),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.idle_timeout = Duration::from_millis(400);
    settings.max_retries = 0;
    let started = Instant::now();
    let (_, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    let error = message(&result);
    assert!(error.contains("limits.model_idle_seconds"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_server_that_never_sends_headers_ends_at_the_call_deadline() {
    let server = TestServer::start(vec![
        Reply::sse(&[oa::text("late"), oa::done()]).before_headers(Duration::from_secs(30)),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.timeout = Duration::from_secs(20);
    settings.call_timeout = Duration::from_millis(600);
    let started = Instant::now();
    let (_, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    let error = message(&result);
    assert!(error.contains("limits.model_call_seconds"), "{error}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_fifty_mib_reply_is_refused_past_the_byte_cap() {
    let big = "x".repeat(50 * 1024 * 1024);
    let server = TestServer::start(vec![Reply::sse(&[oa::text(&big), oa::done()])]).await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.response_bytes = 1024 * 1024;
    let (_, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    let error = message(&result);
    assert!(error.contains("limits.model_response_bytes"), "{error}");
    // Not retried: a reply that large is not a passing fault.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_retry_after_past_the_call_deadline_is_not_waited_for() {
    let server = TestServer::start(vec![
        Reply::json(429, serde_json::json!({"error": {"message": "quota"}}))
            .header("retry-after", "3600"),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.retry_after_cap = Duration::from_secs(60);
    settings.call_timeout = Duration::from_secs(2);
    let started = Instant::now();
    let (_, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    let error = message(&result);
    assert!(error.contains("limits.model_call_seconds"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_limit_ends_the_turn_with_turn_failed_naming_it_and_the_session_answers_next() {
    use eve_runtime::engine::{FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig};
    use std::sync::Arc;

    let mut parts = vec![oa::role()];
    parts.extend(std::iter::repeat_n(": keep-alive\n\n".to_owned(), 200));
    let server = TestServer::start(vec![
        Reply::sse(&parts).between_parts(Duration::from_millis(50)),
        Reply::sse(&[oa::text("back again"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.idle_timeout = Duration::from_millis(400);
    settings.max_retries = 0;
    let agent = crate::server_support::AgentDir::new();
    agent.build();
    let model = ResolvedModel {
        client: Arc::new(OpenAiClient::new(&settings).unwrap()),
        model: "test-model".to_owned(),
        model_id: "vllm/test-model".to_owned(),
        context_window: Some(100_000),
        price_per_million: None,
    };
    let mut config = RuntimeConfig::new(
        agent.root().join(".eve"),
        Arc::new(FixedModelProvider(model)),
    )
    .unwrap();
    config.sandbox_helper = std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox"));
    let rt = Runtime::new(config);
    let started = Instant::now();
    let id = rt.create_session(Some("hello".to_owned())).await.unwrap();
    rt.drive(&id).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let events = rt.store().events(&id, 0, 10_000).await.unwrap();
    let failed = events
        .iter()
        .find(|e| e.kind == "turn.failed")
        .expect("the turn failed");
    assert!(
        failed
            .data
            .to_string()
            .contains("limits.model_idle_seconds"),
        "{}",
        failed.data
    );
    rt.post_message(&id, "again").await.unwrap();
    rt.drive(&id).await.unwrap();
    let events = rt.store().events(&id, 0, 10_000).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.data.to_string().contains("back again")),
        "the session answered its next message"
    );
}
