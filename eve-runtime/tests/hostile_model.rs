//! Model servers that misbehave, through the engine: a scripted OpenAI-compatible server on
//! 127.0.0.1:0 answers the first model call of a session badly (a stream that stops mid-event and
//! hangs, garbage SSE, a 200 with an HTML page, a tool call whose arguments are not JSON, an
//! unknown `finish_reason`, no usage, a 429 with `retry-after`), then well. Each turn ends, with a
//! `turn.failed` that says what went wrong when the answer is unusable, and the session answers
//! its next message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_runtime::engine::{FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig};
use eve_runtime::model::Provider;
use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::store::StoredEvent;

use crate::model::fast_settings;
use crate::model::server::{Reply, TestServer};
use crate::model::wire::oa;
use crate::server_support::AgentDir;

fn good(text: &str) -> Reply {
    Reply::sse(&[oa::role(), oa::text(text), oa::finish("stop"), oa::done()])
}

/// A runtime of an agent with a `get_weather` tool whose model is the scripted server.
fn runtime(agent: &AgentDir, server: &TestServer, retries: u32) -> Runtime {
    runtime_at(agent, &server.url, retries)
}

/// The same, with the model server at `url`.
fn runtime_at(agent: &AgentDir, url: &str, retries: u32) -> Runtime {
    let mut settings = fast_settings(Provider::Vllm, url);
    settings.idle_timeout = Duration::from_millis(500);
    settings.max_retries = retries;
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
    Runtime::new(config)
}

fn agent() -> AgentDir {
    let agent = AgentDir::new();
    agent.tool(
        "get_weather",
        "description: Get the weather for a city.\neffect: read\nsandbox: host\ninput:\n  type: object\n  \
         properties:\n    city: {type: string}\n  required: [city]",
        "cat >/dev/null\necho '{\"condition\":\"Sunny\"}'\n",
    );
    agent.build();
    agent
}

/// Runs one session: `hello` against `first` (and whatever follows it in `replies`), then `again`,
/// whose answer is the last reply. Returns the events of the first turn and of the whole session.
async fn session(replies: Vec<Reply>, retries: u32) -> (Vec<StoredEvent>, Vec<StoredEvent>) {
    let server = TestServer::start(replies).await;
    let agent = agent();
    let rt = runtime(&agent, &server, retries);
    let started = Instant::now();
    let id = rt.create_session(Some("hello".to_owned())).await.unwrap();
    rt.drive(&id).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let first = rt.store().events(&id, 0, 10_000).await.unwrap();
    rt.post_message(&id, "again").await.unwrap();
    rt.drive(&id).await.unwrap();
    let all = rt.store().events(&id, 0, 10_000).await.unwrap();
    let answered = all
        .iter()
        .skip(first.len())
        .any(|e| e.kind == "turn.completed" || e.data.to_string().contains("back again"));
    assert!(
        answered,
        "the session answered its next message: {:#?}",
        &all[first.len()..]
    );
    assert!(
        all.iter()
            .any(|e| e.data.to_string().contains("back again")),
        "the next answer is there"
    );
    (first, all)
}

fn failure(events: &[StoredEvent]) -> String {
    events
        .iter()
        .find(|e| e.kind == "turn.failed")
        .map(|e| e.data.to_string())
        .unwrap_or_else(|| panic!("no turn.failed: {events:#?}"))
}

#[tokio::test]
async fn a_stream_that_stops_mid_event_and_hangs_fails_the_turn_at_the_idle_timeout() {
    let cut = format!(
        "{}data: {{\"choices\": [{{\"index\": 0, \"delta\": {{\"cont",
        oa::role()
    );
    let stalled = Reply::sse(&[cut, "ent\": \"late\"}}]}\n\n".to_owned()])
        .between_parts(Duration::from_secs(60));
    let (first, _) = session(vec![stalled, good("back again")], 0).await;
    let why = failure(&first);
    assert!(
        why.contains("stalled") && why.contains("limits.model_idle_seconds"),
        "{why}"
    );
}

#[tokio::test]
async fn garbage_sse_fails_the_turn_quoting_it() {
    let garbage = Reply::sse(&["data: <<<not json>>>\n\n"]);
    let (first, _) = session(vec![garbage, good("back again")], 0).await;
    let why = failure(&first);
    assert!(why.contains("not json"), "{why}");
}

#[tokio::test]
async fn a_200_with_an_html_page_fails_the_turn_saying_it_is_not_an_event_stream() {
    let page = Reply::raw(
        200,
        "text/html",
        "<!doctype html><html><body><h1>Sign in</h1></body></html>",
    );
    let (first, _) = session(vec![page, good("back again")], 0).await;
    let why = failure(&first);
    assert!(why.contains("expected an event stream"), "{why}");
    assert!(why.contains("text/html"), "{why}");
}

#[tokio::test]
async fn a_tool_call_with_arguments_that_are_not_json_is_answered_as_a_failed_call() {
    let broken = Reply::sse(&[
        oa::role(),
        oa::tool_start(0, "call_1", "get_weather", "{\"city\": \"Par"),
        oa::finish("tool_calls"),
        oa::done(),
    ]);
    let (first, _) = session(vec![broken, good("the call failed"), good("back again")], 0).await;
    assert!(
        first.iter().any(|e| e.kind == "turn.completed"),
        "{first:#?}"
    );
    let result = first
        .iter()
        .find(|e| e.kind == "action.result")
        .expect("the call has a result");
    let text = result.data.to_string();
    assert!(text.contains("\"isError\":true"), "{text}");
    assert!(
        text.contains("Invalid input for `get_weather`; nothing ran"),
        "{text}"
    );
    assert!(
        !text.contains("Sunny"),
        "the tool did not run on broken input: {text}"
    );
}

#[tokio::test]
async fn an_unknown_finish_reason_and_missing_usage_still_complete_the_turn() {
    let odd = Reply::sse(&[
        oa::role(),
        oa::text("odd but fine"),
        oa::finish("eaten_by_a_grue"),
        oa::done(),
    ]);
    let (first, _) = session(vec![odd, good("back again")], 0).await;
    assert!(
        first.iter().any(|e| e.kind == "turn.completed"),
        "{first:#?}"
    );
    assert!(
        first
            .iter()
            .any(|e| e.data.to_string().contains("odd but fine"))
    );
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_for_then_answered() {
    let limited = Reply::json(429, serde_json::json!({"error": {"message": "slow down"}}))
        .header("retry-after", "1");
    let started = Instant::now();
    let (first, _) = session(vec![limited, good("first answer"), good("back again")], 2).await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(
        first.iter().any(|e| e.kind == "turn.completed"),
        "{first:#?}"
    );
    assert!(
        first
            .iter()
            .any(|e| e.data.to_string().contains("first answer"))
    );
}

#[tokio::test]
async fn a_server_started_without_tool_support_is_named_with_the_flag_it_needs() {
    for (body, hint) in [
        (
            serde_json::json!({"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}),
            "restart it with that flag",
        ),
        (
            serde_json::json!({"object": "error", "message": "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set", "type": "BadRequestError", "code": 400}),
            "--tool-call-parser NAME",
        ),
        (
            serde_json::json!({"error": {"message": "registry.ollama.ai/library/gemma:2b does not support tools"}}),
            "use one that can",
        ),
    ] {
        let status = body
            .pointer("/error/code")
            .and_then(|c| c.as_u64())
            .unwrap_or(400) as u16;
        let (first, _) = session(vec![Reply::json(status, body), good("back again")], 0).await;
        let why = failure(&first);
        assert!(why.contains(hint), "{why}");
    }
}

#[tokio::test]
async fn a_server_that_is_not_running_is_named_in_a_few_words() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let agent = agent();
    let rt = runtime_at(&agent, &format!("http://127.0.0.1:{port}/v1"), 0);
    let id = rt.create_session(Some("hello".to_owned())).await.unwrap();
    rt.drive(&id).await.unwrap();
    let why = failure(&rt.store().events(&id, 0, 10_000).await.unwrap());
    assert!(why.contains("connection refused"), "{why}");
    assert!(why.contains("is the model server running there?"), "{why}");
    assert!(!why.contains("client error (Connect)"), "{why}");
}
