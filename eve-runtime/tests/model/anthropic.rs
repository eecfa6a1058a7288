//! Anthropic Messages over real HTTP.

use eve_runtime::model::anthropic::AnthropicClient;
use eve_runtime::model::anthropic::request_body;
use eve_runtime::model::{
    FinishReason, Message, ModelClient, ModelError, Provider, Reasoning, ThinkingBlock, ToolCall,
    Usage,
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
            cache_read_tokens: 100,
            estimated: false,
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
            blocks: vec![ThinkingBlock::Thinking {
                thinking: "The user greets me.".into(),
                signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into(),
            }],
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
                blocks: vec![],
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
            attachments: Vec::new(),
        },
        Message::Tool {
            call_id: "toolu_2".into(),
            name: "weather".into(),
            content: "denied by the user".into(),
            is_error: true,
            attachments: Vec::new(),
        },
        Message::user("and tomorrow?"),
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

/// What a real model with extended thinking and tools can send: two thinking blocks with their
/// own signatures and a redacted one between them, then text and a tool call.
const REDACTED: &str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";

fn thinking_then_tool_use() -> Reply {
    Reply::sse(&[
        an::message_start(40, 0),
        an::thinking_start(0),
        an::thinking_delta(0, "Paris is "),
        an::thinking_delta(0, "the city."),
        an::signature_delta(0, "sig-A"),
        an::block_stop(0),
        an::redacted_thinking_start(1, REDACTED),
        an::block_stop(1),
        an::thinking_start(2),
        an::thinking_delta(2, "Use the weather tool."),
        an::signature_delta(2, "sig-B"),
        an::block_stop(2),
        an::text_start(3),
        an::text_delta(3, "Checking."),
        an::block_stop(3),
        an::tool_start(4, "toolu_w", "weather"),
        an::json_delta(4, "{\"city\": \"Paris\"}"),
        an::block_stop(4),
        an::message_delta("tool_use", 60),
        an::message_stop(),
    ])
}

fn expected_blocks() -> Vec<ThinkingBlock> {
    vec![
        ThinkingBlock::Thinking {
            thinking: "Paris is the city.".into(),
            signature: "sig-A".into(),
        },
        ThinkingBlock::RedactedThinking {
            data: REDACTED.into(),
        },
        ThinkingBlock::Thinking {
            thinking: "Use the weather tool.".into(),
            signature: "sig-B".into(),
        },
    ]
}

#[tokio::test]
async fn every_thinking_block_goes_back_exactly_and_in_order_before_tool_use() {
    let server = TestServer::start(vec![
        thinking_then_tool_use(),
        Reply::sse(&[
            an::message_start(80, 0),
            an::text_start(0),
            an::text_delta(0, "Sunny."),
            an::block_stop(0),
            an::message_delta("end_turn", 3),
            an::message_stop(),
        ]),
    ])
    .await;
    let client = client(&server.url);
    let mut request = simple_request("weather in Paris?");
    request.reasoning = Some("low".into());
    let (events, result) = run(&client, &request).await;
    let response = result.unwrap();

    // Shown: the thinking text, a paragraph per block; the redacted block shows nothing.
    assert_eq!(
        events,
        vec![
            reasoning("Paris is "),
            reasoning("the city."),
            reasoning("\n\nUse the weather tool."),
            text("Checking."),
            call_start("toolu_w", "weather"),
            call_delta("toolu_w", "{\"city\": \"Paris\"}"),
        ]
    );
    assert_eq!(
        response.reasoning,
        Some(Reasoning {
            text: "Paris is the city.\n\nUse the weather tool.".into(),
            signature: Some("sig-B".into()),
            blocks: expected_blocks(),
        })
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);

    // The turn continues as the engine does it: the assistant message goes through the store's
    // JSON, then the tool result follows.
    let assistant = Message::Assistant {
        content: response.content.clone(),
        reasoning: response.reasoning.clone(),
        tool_calls: response.tool_calls.clone(),
    };
    let stored = serde_json::to_value(&assistant).unwrap();
    assert_eq!(
        stored["reasoning"]["blocks"],
        json!([
            {"type": "thinking", "thinking": "Paris is the city.", "signature": "sig-A"},
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "thinking", "thinking": "Use the weather tool.", "signature": "sig-B"},
        ])
    );
    let loaded: Message = serde_json::from_value(stored).unwrap();
    assert_eq!(loaded, assistant);
    request.messages.extend([
        loaded,
        Message::Tool {
            call_id: "toolu_w".into(),
            name: "weather".into(),
            content: "21C".into(),
            is_error: false,
            attachments: Vec::new(),
        },
    ]);
    let (_, result) = run(&client, &request).await;
    assert_eq!(result.unwrap().content, "Sunny.");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Paris is the city.", "signature": "sig-A"},
                {"type": "redacted_thinking", "data": REDACTED},
                {"type": "thinking", "thinking": "Use the weather tool.", "signature": "sig-B"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_w", "name": "weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_w", "content": "21C"},
            ]},
        ])
    );
    assert!(!response.reasoning.unwrap().text.contains(REDACTED));
}

#[test]
fn a_message_stored_in_the_old_format_loads_serialises_and_maps_as_before() {
    // As versions that kept one joined text and the last signature wrote it.
    let stored = json!({
        "role": "assistant",
        "content": "Checking.",
        "reasoning": {"text": "one joined text", "signature": "sig-last"},
        "tool_calls": [{"id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}],
    });
    let message: Message = serde_json::from_value(stored.clone()).unwrap();
    let Message::Assistant { reasoning, .. } = &message else {
        panic!("not an assistant message: {message:?}");
    };
    assert_eq!(
        reasoning,
        &Some(Reasoning {
            text: "one joined text".into(),
            signature: Some("sig-last".into()),
            blocks: vec![],
        })
    );
    assert_eq!(serde_json::to_value(&message).unwrap(), stored);

    let mut request = simple_request("weather in Oslo?");
    request.messages.push(message);
    assert_eq!(
        request_body(&request)["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "one joined text", "signature": "sig-last"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
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
    // A model the table of known windows does not name (see `compat::known_context_windows`).
    assert_eq!(client_without.context_window("my-proxy-model").await, None);
    let mut settings = fast_settings(Provider::Anthropic, "http://127.0.0.1:9");
    settings.context_window = Some(200_000);
    let configured = AnthropicClient::new(&settings).unwrap();
    assert_eq!(configured.context_window("claude").await, Some(200_000));
}

/// A user message's image and PDF, and a tool's image, go as Anthropic's own blocks: `image` and
/// `document` with a base64 source before the text; the tool's inside its `tool_result`.
#[tokio::test]
async fn files_go_as_image_and_document_blocks() {
    use eve_runtime::model::Attachment;
    let server = TestServer::start(vec![Reply::sse(&[
        an::message_start(10, 0),
        an::text_start(0),
        an::text_delta(0, "A chart."),
        an::block_stop(0),
        an::message_delta("end_turn", 3),
        an::message_stop(),
    ])])
    .await;
    let file = |path: &str, media: &str, name: &str, data: &str| Attachment {
        path: path.into(),
        media_type: media.into(),
        filename: Some(name.into()),
        size: 3,
        sha256: "ab".into(),
        data: Some(data.into()),
    };
    let mut request = simple_request("unused");
    request.messages = vec![
        Message::User {
            content: "What is in these?".into(),
            attachments: vec![
                file(
                    ".eve/attachments/ab/a.png",
                    "image/png",
                    "a.png",
                    "iVBORw==",
                ),
                file(
                    ".eve/attachments/cd/r.pdf",
                    "application/pdf",
                    "r.pdf",
                    "JVBERg==",
                ),
                // Not loaded (a note was written instead): not sent.
                Attachment {
                    data: None,
                    ..file(".eve/attachments/ef/t.csv", "text/csv", "t.csv", "")
                },
            ],
        },
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "toolu_1".into(),
                name: "chart".into(),
                input: json!({}),
            }],
        },
        Message::Tool {
            call_id: "toolu_1".into(),
            name: "chart".into(),
            content: "the chart".into(),
            is_error: false,
            attachments: vec![file(
                ".eve/attachments/gh/c.png",
                "image/png",
                "c.png",
                "R0lG",
            )],
        },
    ];
    let response = run(&client(&server.url), &request).await.1.unwrap();
    assert_eq!(response.content, "A chart.");
    let body = server.single_request().body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERg=="},
                 "title": "r.pdf"},
                {"type": "text", "text": "What is in these?"},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "text", "text": "the chart"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "R0lG"}},
                ]},
            ]},
        ])
    );
}
