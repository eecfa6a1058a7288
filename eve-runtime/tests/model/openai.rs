//! OpenAI-compatible Chat Completions over real HTTP.

use std::time::{Duration, Instant};

use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::model::{
    FinishReason, Message, ModelClient, ModelError, Provider, Reasoning, ToolCall, Usage,
};
use serde_json::json;

use super::server::{End, Reply, TestServer, dead_url};
use super::wire::oa;
use super::{call_delta, call_start, fast_settings, reasoning, run, simple_request, text};

fn client(server_url: &str) -> OpenAiClient {
    OpenAiClient::new(&fast_settings(Provider::Vllm, &format!("{server_url}/v1"))).unwrap()
}

#[tokio::test]
async fn streams_text_reasoning_and_usage_and_sends_the_request() {
    let server = TestServer::start(vec![Reply::sse(&[
        oa::role(),
        oa::reasoning_content("Let me "),
        oa::reasoning("think."),
        oa::text("Hello"),
        oa::text(", world"),
        oa::finish("stop"),
        oa::usage(42, 7, 30),
        oa::done(),
    ])])
    .await;
    let client = client(&server.url);
    let (events, result) = run(&client, &simple_request("hi")).await;
    let response = result.unwrap();

    assert_eq!(
        events,
        vec![
            reasoning("Let me "),
            reasoning("think."),
            text("Hello"),
            text(", world")
        ]
    );
    assert_eq!(response.content, "Hello, world");
    assert_eq!(
        response.reasoning,
        Some(Reasoning {
            text: "Let me think.".into(),
            signature: None,
            blocks: vec![],
        })
    );
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 42,
            output_tokens: 7,
            cache_read_tokens: 30,
            estimated: false,
        }
    );
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert!(response.tool_calls.is_empty());

    let request = server.single_request();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], "Bearer test-key");
    assert_eq!(
        request.body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "hi"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {
                "name": "weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }}],
        })
    );
}

#[tokio::test]
async fn assembles_two_tool_calls_with_split_arguments() {
    let server = TestServer::start(vec![Reply::sse(&[
        oa::role(),
        oa::text("Checking."),
        oa::tool_start(0, "call_a", "weather", ""),
        oa::tool_args(0, "{\"ci"),
        oa::tool_args(0, "ty\": \"Par"),
        oa::tool_start(1, "call_b", "weather", "{\"city\""),
        oa::tool_args(0, "is\"}"),
        oa::tool_args(1, ": \"Oslo\"}"),
        oa::finish("tool_calls"),
        oa::usage(10, 20, 0),
        oa::done(),
    ])])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("weather?")).await;
    let response = result.unwrap();
    assert_eq!(
        events,
        vec![
            text("Checking."),
            call_start("call_a", "weather"),
            call_delta("call_a", "{\"ci"),
            call_delta("call_a", "ty\": \"Par"),
            call_start("call_b", "weather"),
            call_delta("call_b", "{\"city\""),
            call_delta("call_a", "is\"}"),
            call_delta("call_b", ": \"Oslo\"}"),
        ]
    );
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "weather".into(),
                input: json!({"city": "Paris"})
            },
            ToolCall {
                id: "call_b".into(),
                name: "weather".into(),
                input: json!({"city": "Oslo"})
            },
        ]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage.output_tokens, 20);
}

#[tokio::test]
async fn maps_history_tool_calls_and_results() {
    let server = TestServer::start(vec![
        Reply::sse(&[oa::text("ok"), oa::finish("stop"), oa::done()]),
        Reply::sse(&[oa::text("ok"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let mut request = simple_request("weather in Paris?");
    request.tools.clear();
    request.reasoning = Some("high".into());
    request.max_output_tokens = Some(500);
    request.messages.extend([
        Message::Assistant {
            content: String::new(),
            reasoning: Some(Reasoning {
                text: "hidden".into(),
                signature: None,
                blocks: vec![],
            }),
            tool_calls: vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "weather".into(),
                    input: json!({"city": "Paris"}),
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "broken".into(),
                    input: json!("{not json"),
                },
            ],
        },
        Message::Tool {
            call_id: "call_1".into(),
            name: "weather".into(),
            content: "{\"temp\":21}".into(),
            is_error: false,
            attachments: Vec::new(),
        },
        Message::Tool {
            call_id: "call_2".into(),
            name: "broken".into(),
            content: "invalid arguments".into(),
            is_error: true,
            attachments: Vec::new(),
        },
    ]);
    // A local server gets `max_tokens`.
    run(&client(&server.url), &request).await.1.unwrap();
    // OpenAI itself gets `max_completion_tokens`.
    let mut settings = fast_settings(Provider::OpenAi, &server.url);
    settings.base_url = Some(format!("{}/v1", server.url));
    run(&OpenAiClient::new(&settings).unwrap(), &request)
        .await
        .1
        .unwrap();

    let requests = server.requests();
    let body = &requests[0].body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "broken", "arguments": "{not json"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments"},
        ])
    );
    assert!(body.get("tools").is_none());
    assert_eq!(body["reasoning_effort"], "high");
    assert_eq!(body["max_tokens"], 500);
    assert_eq!(requests[1].body["max_completion_tokens"], 500);
    assert!(requests[1].body.get("max_tokens").is_none());
    assert!(
        requests[1].body["messages"][2]
            .get("reasoning_content")
            .is_none()
    );
}

#[tokio::test]
async fn deepseek_gets_its_reasoning_back() {
    let server = TestServer::start(vec![Reply::sse(&[oa::finish("stop"), oa::done()])]).await;
    let mut request = simple_request("q");
    request.messages.push(Message::Assistant {
        content: String::new(),
        reasoning: Some(Reasoning {
            text: "need a tool".into(),
            signature: None,
            blocks: vec![],
        }),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "weather".into(),
            input: json!({}),
        }],
    });
    let settings = fast_settings(Provider::DeepSeek, &server.url);
    run(&OpenAiClient::new(&settings).unwrap(), &request)
        .await
        .1
        .unwrap();
    let body = server.single_request().body;
    assert_eq!(body["messages"][2]["reasoning_content"], "need a tool");
}

#[tokio::test]
async fn retries_a_500_then_succeeds() {
    let server = TestServer::start(vec![
        Reply::json(500, json!({"error": {"message": "upstream hiccup"}})),
        Reply::sse(&[oa::text("fine"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(result.unwrap().content, "fine");
    assert_eq!(events, vec![text("fine")]);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let server = TestServer::start(vec![
        Reply::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "1"),
        Reply::sse(&[oa::text("after the wait"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let started = Instant::now();
    let (_, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(result.unwrap().content, "after the wait");
    // The backoff is milliseconds; only the header explains a one-second wait.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn caps_retry_after_and_reads_retry_after_ms() {
    let server = TestServer::start(vec![
        Reply::json(503, json!({})).header("retry-after", "3600"),
        Reply::json(429, json!({})).header("retry-after-ms", "150"),
        Reply::sse(&[oa::text("ok"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.retry_after_cap = Duration::from_millis(100);
    settings.max_retries = 3;
    let started = Instant::now();
    let (_, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    assert_eq!(result.unwrap().content, "ok");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(190), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn gives_up_after_max_retries_with_the_provider_message() {
    let server = TestServer::start(vec![
        Reply::json(503, json!({"error": {"message": "overloaded"}})),
        Reply::json(503, json!({"error": {"message": "overloaded"}})),
        Reply::json(503, json!({"error": {"message": "still overloaded"}})),
    ])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert!(events.is_empty());
    match result.unwrap_err() {
        ModelError::Http { status, message } => {
            assert_eq!(status, 503);
            assert_eq!(message, "still overloaded");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 3, "one attempt + max_retries (2)");
}

#[tokio::test]
async fn a_stream_cut_midway_is_malformed_and_not_retried() {
    let server = TestServer::start(vec![
        Reply::sse(&[oa::role(), oa::text("Hel"), oa::text("lo")]).end(End::Close),
        Reply::sse(&[oa::text("second"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(events, vec![text("Hel"), text("lo")]);
    assert!(
        matches!(result, Err(ModelError::Malformed(_))),
        "{result:?}"
    );
    assert_eq!(server.requests().len(), 1, "events were out: no retry");
}

#[tokio::test]
async fn a_connection_dropped_mid_body_is_malformed() {
    let server = TestServer::start(vec![
        Reply::sse(&[oa::text("partial"), "data: {\"choi".into()]).end(End::ChunkedCut),
    ])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(events, vec![text("partial")]);
    let error = result.unwrap_err();
    assert!(matches!(error, ModelError::Malformed(_)), "{error:?}");
}

#[tokio::test]
async fn an_empty_stream_before_any_event_is_retried() {
    let server = TestServer::start(vec![
        Reply::sse::<&str>(&[]).end(End::Close),
        Reply::sse(&[oa::text("ok"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let (_, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(result.unwrap().content, "ok");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn finish_reason_without_done_is_complete() {
    let server = TestServer::start(vec![
        Reply::sse(&[oa::text("short"), oa::finish("length")]).end(End::Close),
    ])
    .await;
    let response = run(&client(&server.url), &simple_request("hi"))
        .await
        .1
        .unwrap();
    assert_eq!(response.finish_reason, FinishReason::Length);
}

#[tokio::test]
async fn status_401_is_auth_and_404_is_unknown_model() {
    let server = TestServer::start(vec![
        Reply::json(
            401,
            json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}),
        ),
        Reply::json(404, json!({"error": {"message": "The model `nope` does not exist"}})),
    ])
    .await;
    let client = client(&server.url);
    match run(&client, &simple_request("hi")).await.1.unwrap_err() {
        ModelError::Auth { status, message } => {
            assert_eq!(status, 401);
            assert_eq!(message, "Incorrect API key provided");
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut request = simple_request("hi");
    request.model = "nope".into();
    let error = run(&client, &request).await.1.unwrap_err();
    match &error {
        ModelError::UnknownModel {
            model,
            base_url,
            message,
        } => {
            assert_eq!(model, "nope");
            assert_eq!(base_url, &format!("{}/v1", server.url));
            assert_eq!(message, "The model `nope` does not exist");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(error.to_string().contains("`nope`"));
    assert_eq!(server.requests().len(), 2, "neither is retried");
}

#[tokio::test]
async fn plain_text_error_bodies_are_quoted() {
    let server =
        TestServer::start(vec![Reply::raw(400, "text/plain", "bad request: no model")]).await;
    match run(&client(&server.url), &simple_request("hi"))
        .await
        .1
        .unwrap_err()
    {
        ModelError::Http { status, message } => {
            assert_eq!(status, 400);
            assert_eq!(message, "bad request: no model");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_garbage_body_is_malformed_and_quoted() {
    let server = TestServer::start(vec![Reply::raw(
        200,
        "text/html",
        "<html>captive portal</html>",
    )])
    .await;
    let error = run(&client(&server.url), &simple_request("hi"))
        .await
        .1
        .unwrap_err();
    let ModelError::Malformed(message) = &error else {
        panic!("unexpected {error:?}");
    };
    assert!(message.contains("text/html"), "{message}");
    assert!(message.contains("captive portal"), "{message}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_garbage_chunk_is_malformed() {
    let server = TestServer::start(vec![Reply::sse(&[
        oa::text("a"),
        "data: {this is not json}\n\n".into(),
        oa::done(),
    ])])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("hi")).await;
    assert_eq!(events, vec![text("a")]);
    let error = result.unwrap_err();
    assert!(
        matches!(&error, ModelError::Malformed(m) if m.contains("not JSON")),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_error_object_in_the_stream_is_an_error() {
    let server = TestServer::start(vec![Reply::sse(&[
        oa::text("a"),
        "data: {\"error\":{\"message\":\"invalid request\",\"code\":400}}\n\n".into(),
    ])])
    .await;
    match run(&client(&server.url), &simple_request("hi"))
        .await
        .1
        .unwrap_err()
    {
        ModelError::Http { status, message } => {
            assert_eq!(status, 400);
            assert_eq!(message, "invalid request");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn connection_refused_is_transport_after_retries() {
    let url = dead_url().await;
    let (_, result) = run(&client(&url), &simple_request("hi")).await;
    assert!(
        matches!(result, Err(ModelError::Transport(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_slow_first_byte_times_out_and_is_retried() {
    let server = TestServer::start(vec![
        Reply::sse(&[oa::text("late"), oa::finish("stop"), oa::done()])
            .before_headers(Duration::from_secs(2)),
        Reply::sse(&[oa::text("on time"), oa::finish("stop"), oa::done()]),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.timeout = Duration::from_millis(200);
    let (events, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    assert_eq!(result.unwrap().content, "on time");
    assert_eq!(events, vec![text("on time")]);
}

#[tokio::test]
async fn an_idle_stream_times_out() {
    // Stalls before any event: retried. Stalls after an event: a final error.
    let server = TestServer::start(vec![
        Reply::sse(&[oa::role(), oa::text("x")]).between_parts(Duration::from_secs(2)),
        Reply::sse(&[oa::text("a"), oa::text("b")]).between_parts(Duration::from_secs(2)),
    ])
    .await;
    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.idle_timeout = Duration::from_millis(200);
    let started = Instant::now();
    let (events, result) = run(
        &OpenAiClient::new(&settings).unwrap(),
        &simple_request("hi"),
    )
    .await;
    assert_eq!(events, vec![text("a")]);
    assert!(
        matches!(result, Err(ModelError::Transport(ref m)) if m.contains("stalled")),
        "{result:?}"
    );
    assert_eq!(server.requests().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn network_chunking_does_not_change_the_result() {
    let body = [
        oa::reasoning_content("é🌍 "),
        oa::text("héllo 🌍"),
        oa::tool_start(0, "call_a", "weather", "{\"city\":"),
        oa::tool_args(0, "\"Zürich\"}"),
        oa::finish("tool_calls"),
        oa::usage(1, 2, 0),
        oa::done(),
    ]
    .concat();
    // Whole body, then 7-byte pieces (some cut inside UTF-8 characters) with pauses.
    let whole = TestServer::start(vec![Reply::sse(std::slice::from_ref(&body))]).await;
    let (whole_events, whole_result) = run(&client(&whole.url), &simple_request("hi")).await;
    let mut reply = Reply::sse::<&str>(&[]).between_parts(Duration::from_millis(1));
    reply.parts = body.as_bytes().chunks(7).map(<[u8]>::to_vec).collect();
    let split = TestServer::start(vec![reply]).await;
    let (split_events, split_result) = run(&client(&split.url), &simple_request("hi")).await;
    assert_eq!(whole_events, split_events);
    let whole_response = whole_result.unwrap();
    assert_eq!(whole_response, split_result.unwrap());
    assert_eq!(whole_response.content, "héllo 🌍");
    assert_eq!(
        whole_response.tool_calls[0].input,
        json!({"city": "Zürich"})
    );
}

#[tokio::test]
async fn context_window_comes_from_models() {
    let server = TestServer::start(vec![
        Reply::json(
            200,
            json!({"object": "list", "data": [
                {"id": "other", "object": "model", "max_model_len": 1024},
                {"id": "test-model", "object": "model", "owned_by": "vllm", "max_model_len": 32768},
            ]}),
        ),
        Reply::json(
            200,
            json!({"data": [{"id": "test-model", "context_length": 131072}]}),
        ),
        Reply::json(200, json!({"data": [{"id": "test-model"}]})),
        Reply::json(500, json!({"error": {"message": "nope"}})),
    ])
    .await;
    let client = client(&server.url);
    assert_eq!(client.context_window("test-model").await, Some(32768));
    assert_eq!(client.context_window("test-model").await, Some(131072));
    assert_eq!(client.context_window("test-model").await, None);
    assert_eq!(client.context_window("test-model").await, None);
    let request = &server.requests()[0];
    assert_eq!(request.method, "GET");
    assert_eq!(request.path, "/v1/models");
    assert_eq!(request.headers["authorization"], "Bearer test-key");

    let mut settings = fast_settings(Provider::Vllm, &server.url);
    settings.context_window = Some(8000);
    let configured = OpenAiClient::new(&settings).unwrap();
    assert_eq!(configured.context_window("anything").await, Some(8000));
    assert_eq!(
        server.requests().len(),
        4,
        "a configured window asks nobody"
    );
}

/// A user message's image and PDF go as `image_url` and `file` parts; a tool's image follows the
/// tool results in a user message (Chat Completions takes files in user messages only).
#[tokio::test]
async fn files_go_as_image_url_and_file_parts() {
    use eve_runtime::model::Attachment;
    let server = TestServer::start(vec![Reply::sse(&[
        oa::role(),
        oa::text("ok"),
        oa::finish("stop"),
        oa::done(),
    ])])
    .await;
    let file = |media: &str, name: &str, data: &str| Attachment {
        path: format!(".eve/attachments/ab/{name}"),
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
                file("image/png", "a.png", "iVBORw=="),
                file("application/pdf", "r.pdf", "JVBERg=="),
            ],
        },
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "chart".into(),
                input: json!({}),
            }],
        },
        Message::Tool {
            call_id: "call_1".into(),
            name: "chart".into(),
            content: "the chart".into(),
            is_error: false,
            attachments: vec![file("image/png", "c.png", "R0lG")],
        },
    ];
    run(&client(&server.url), &request).await.1.unwrap();
    let body = server.single_request().body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
                {"type": "file", "file": {"filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBERg=="}},
            ]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "chart", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "the chart"},
            {"role": "user", "content": [
                {"type": "text", "text": "Files `chart` returned:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,R0lG"}},
            ]},
        ])
    );
}
