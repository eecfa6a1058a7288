//! Anthropic Messages over real HTTP.

use eve_runtime::model::anthropic::AnthropicClient;
use eve_runtime::model::{
    FinishReason, Message, ModelClient, ModelError, Provider, Reasoning, ToolCall, Usage,
};
use serde_json::json;

use super::server::{End, Reply, TestServer};
use super::wire::an;
use super::{call_delta, call_start, fast_settings, reasoning, run, simple_request, text};

fn client(server_url: &str) -> AnthropicClient {
    AnthropicClient::new(&fast_settings(Provider::Anthropic, server_url)).unwrap()
}

#[tokio::test]
async fn streams_text_with_usage_and_sends_the_request() {
    let server = TestServer::start(vec![Reply::sse(&[
        an::message_start(25, 100),
        an::ping(),
        an::text_start(0),
        an::text_delta(0, "Hello"),
        an::ping(),
        an::text_delta(0, " there"),
        an::block_stop(0),
        an::message_delta("end_turn", 12),
        an::message_stop(),
    ])])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    let response = result.unwrap();
    assert_eq!(events, vec![text("Hello"), text(" there")]);
    assert_eq!(response.content, "Hello there");
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 125,
            output_tokens: 12,
            cache_read_tokens: 100
        }
    );
    assert!(response.reasoning.is_none());

    let request = server.single_request();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], "test-key");
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(
        request.body,
        json!({
            "model": "test-model",
            "max_tokens": 8192,
            "stream": true,
            "system": "You are a test.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "tools": [{
                "name": "weather",
                "description": "Weather for a city",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }],
        })
    );
}

#[tokio::test]
async fn assembles_tool_use_blocks() {
    let server = TestServer::start(vec![Reply::sse(&[
        an::message_start(10, 0),
        an::text_start(0),
        an::text_delta(0, "Let me check."),
        an::block_stop(0),
        an::tool_start(1, "toolu_a", "weather"),
        an::json_delta(1, ""),
        an::json_delta(1, "{\"city\": \"Pa"),
        an::json_delta(1, "ris\"}"),
        an::block_stop(1),
        an::tool_start(2, "toolu_b", "clock"),
        an::block_stop(2),
        an::message_delta("tool_use", 40),
        an::message_stop(),
    ])])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    let response = result.unwrap();
    assert_eq!(
        events,
        vec![
            text("Let me check."),
            call_start("toolu_a", "weather"),
            call_delta("toolu_a", "{\"city\": \"Pa"),
            call_delta("toolu_a", "ris\"}"),
            call_start("toolu_b", "clock"),
        ]
    );
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "toolu_a".into(),
                name: "weather".into(),
                input: json!({"city": "Paris"})
            },
            ToolCall {
                id: "toolu_b".into(),
                name: "clock".into(),
                input: json!({})
            },
        ]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn thinking_comes_back_with_its_signature() {
    let server = TestServer::start(vec![Reply::sse(&[
        an::message_start(10, 0),
        an::thinking_start(0),
        an::thinking_delta(0, "The user "),
        an::thinking_delta(0, "greets me."),
        an::signature_delta(0, "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"),
        an::block_stop(0),
        an::text_start(1),
        an::text_delta(1, "Hi!"),
        an::block_stop(1),
        an::message_delta("end_turn", 30),
        an::message_stop(),
    ])])
    .await;
    let mut request = simple_request("hi");
    request.reasoning = Some("low".into());
    let (events, result) = run(&client(&server.url), &request).await;
    let response = result.unwrap();
    assert_eq!(
        events,
        vec![reasoning("The user "), reasoning("greets me."), text("Hi!")]
    );
    assert_eq!(
        response.reasoning,
        Some(Reasoning {
            text: "The user greets me.".into(),
            signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into()),
        })
    );
    let body = server.single_request().body;
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    assert!(body["max_tokens"].as_u64().unwrap() > 1024);
}

#[tokio::test]
async fn history_maps_thinking_tool_use_and_merged_tool_results() {
    let server = TestServer::start(vec![Reply::sse(&[
        an::message_start(1, 0),
        an::message_delta("end_turn", 1),
        an::message_stop(),
    ])])
    .await;
    let mut request = simple_request("weather in Paris and Oslo?");
    request.system = String::new();
    request.tools.clear();
    request.max_output_tokens = Some(1000);
    request.messages.extend([
        Message::Assistant {
            content: "Checking both.".into(),
            reasoning: Some(Reasoning {
                text: "two calls".into(),
                signature: Some("sig-1".into()),
            }),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_1".into(),
                    name: "weather".into(),
                    input: json!({"city": "Paris"}),
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "weather".into(),
                    input: json!({"city": "Oslo"}),
                },
            ],
        },
        Message::Tool {
            call_id: "toolu_1".into(),
            name: "weather".into(),
            content: "21C".into(),
            is_error: false,
        },
        Message::Tool {
            call_id: "toolu_2".into(),
            name: "weather".into(),
            content: "denied by the user".into(),
            is_error: true,
        },
        Message::User {
            content: "and tomorrow?".into(),
        },
    ]);
    let response = run(&client(&server.url), &request).await.1.unwrap();
    assert_eq!(response.content, "");
    let body = server.single_request().body;
    assert!(body.get("system").is_none());
    assert!(body.get("thinking").is_none());
    assert_eq!(body["max_tokens"], 1000);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "weather in Paris and Oslo?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "two calls", "signature": "sig-1"},
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Oslo"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21C"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "denied by the user",
                 "is_error": true},
                {"type": "text", "text": "and tomorrow?"},
            ]},
        ])
    );
}

#[tokio::test]
async fn an_overloaded_error_event_before_any_output_is_retried() {
    let server = TestServer::start(vec![
        Reply::sse(&[
            an::message_start(1, 0),
            an::error("overloaded_error", "Overloaded"),
        ]),
        Reply::sse(&[
            an::message_start(1, 0),
            an::text_start(0),
            an::text_delta(0, "ok"),
            an::message_delta("end_turn", 1),
            an::message_stop(),
        ]),
    ])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(result.unwrap().content, "ok");
    assert_eq!(events, vec![text("ok")]);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_error_event_after_output_is_final() {
    let server = TestServer::start(vec![Reply::sse(&[
        an::message_start(1, 0),
        an::text_start(0),
        an::text_delta(0, "Hal"),
        an::error("overloaded_error", "Overloaded"),
    ])])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(events, vec![text("Hal")]);
    match result.unwrap_err() {
        ModelError::Http { status, message } => {
            assert_eq!(status, 529);
            assert!(message.contains("Overloaded"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn status_529_is_retried_and_401_is_auth() {
    let server = TestServer::start(vec![
        Reply::json(
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        Reply::sse(&[
            an::message_start(1, 0),
            an::text_start(0),
            an::text_delta(0, "ok"),
            an::message_delta("end_turn", 1),
            an::message_stop(),
        ]),
        Reply::json(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
        ),
    ])
    .await;
    let client = client(&server.url);
    assert_eq!(
        run(&client, &simple_request("hi")).await.1.unwrap().content,
        "ok"
    );
    match run(&client, &simple_request("hi")).await.1.unwrap_err() {
        ModelError::Auth { status, message } => {
            assert_eq!(status, 401);
            assert_eq!(message, "invalid x-api-key");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_cut_stream_is_malformed() {
    let server = TestServer::start(vec![
        Reply::sse(&[
            an::message_start(1, 0),
            an::text_start(0),
            an::text_delta(0, "Hal"),
        ])
        .end(End::Close),
    ])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(events, vec![text("Hal")]);
    assert!(
        matches!(result, Err(ModelError::Malformed(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn context_window_is_only_what_is_configured() {
    let client_without = client("http://127.0.0.1:9");
    assert_eq!(client_without.context_window("claude").await, None);
    let mut settings = fast_settings(Provider::Anthropic, "http://127.0.0.1:9");
    settings.context_window = Some(200_000);
    let configured = AnthropicClient::new(&settings).unwrap();
    assert_eq!(configured.context_window("claude").await, Some(200_000));
}
