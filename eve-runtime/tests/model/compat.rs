//! OpenAI-compatible servers as they are: llama-cpp-python's chunk shapes (id, name and the
//! legacy `function_call` repeated in every chunk, no usage chunk), `finish_reason` variants,
//! 500s with a body, `tool_choice` sent and dropped when refused, "context too long" answers in
//! every provider's wording, and the table of known context windows.

use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::model::windows::known_context_window;
use eve_runtime::model::{
    FinishReason, Message, ModelClient, ModelError, Provider, ToolCall, ToolChoice, ToolSpec,
    Usage, is_context_overflow,
};
use serde_json::{Value, json};

use super::server::{Reply, TestServer};
use super::wire::oa;
use super::{call_delta, call_start, fast_settings, run, simple_request};

fn client(server_url: &str) -> OpenAiClient {
    OpenAiClient::new(&fast_settings(
        Provider::LlamaCpp,
        &format!("{server_url}/v1"),
    ))
    .unwrap()
}

/// A chunk exactly as llama-cpp-python's server streams a forced tool call
/// (`_convert_completion_to_chat_function`): the id and name, and the legacy `function_call`,
/// repeated with every piece of the arguments.
fn llama_chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-5f2c",
        "object": "chat.completion.chunk",
        "created": 1_733_000_000,
        "model": "smollm2",
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": null, "delta": delta}],
    });
    format!("data: {body}\r\n\r\n")
}

fn llama_tool_piece(args: &str) -> String {
    llama_chunk(
        json!({
            "role": null,
            "content": null,
            "function_call": {"name": "weather", "arguments": args},
            "tool_calls": [{
                "index": 0,
                "id": "call__0_weather_cmpl-5f2c",
                "type": "function",
                "function": {"name": "weather", "arguments": args},
            }],
        }),
        None,
    )
}

fn llama_tool_stream(pieces: &[&str]) -> Vec<String> {
    let mut parts = vec![llama_chunk(
        json!({"role": "assistant", "content": null, "function_call": null, "tool_calls": null}),
        None,
    )];
    parts.extend(pieces.iter().map(|p| llama_tool_piece(p)));
    parts.push(llama_chunk(
        json!({"role": null, "content": null, "function_call": null, "tool_calls": null}),
        Some("tool_calls"),
    ));
    parts.push("data: [DONE]\r\n\r\n".to_owned());
    parts
}

#[tokio::test]
async fn llama_cpp_python_tool_chunks_repeating_id_and_name_are_merged_once() {
    let server = TestServer::start(vec![Reply::sse(&llama_tool_stream(&[
        "{\"city\"",
        ": \"Pa",
        "ris\"}",
    ]))])
    .await;
    let (events, result) = run(&client(&server.url), &simple_request("weather?")).await;
    let response = result.unwrap();
    let id = "call__0_weather_cmpl-5f2c";
    assert_eq!(
        events,
        vec![
            call_start(id, "weather"),
            call_delta(id, "{\"city\""),
            call_delta(id, ": \"Pa"),
            call_delta(id, "ris\"}"),
        ]
    );
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: id.into(),
            name: "weather".into(),
            input: json!({"city": "Paris"}),
        }]
    );
    assert_eq!(response.content, "");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    // No usage chunk: an estimate from the request and the answer, marked as one, not an error.
    assert!(response.usage.estimated, "{:?}", response.usage);
    assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0);
    assert_ne!(response.usage, Usage::default());
}

#[tokio::test]
async fn a_legacy_function_call_alone_is_call_zero() {
    let piece = |args: &str| {
        llama_chunk(
            json!({"function_call": {"name": "weather", "arguments": args}}),
            None,
        )
    };
    let server = TestServer::start(vec![Reply::sse(&[
        piece("{\"city\":"),
        piece("\"Oslo\"}"),
        llama_chunk(json!({}), Some("function_call")),
        "data: [DONE]\n\n".to_owned(),
    ])])
    .await;
    let response = run(&client(&server.url), &simple_request("weather?"))
        .await
        .1
        .unwrap();
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "call_0".into(),
            name: "weather".into(),
            input: json!({"city": "Oslo"}),
        }]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn finish_reason_variants() {
    let with_call = |finish: Option<&str>| {
        let mut parts = vec![oa::tool_start(0, "call_x", "weather", "{}")];
        parts.push(match finish {
            Some(reason) => oa::finish(reason),
            None => oa::text(""),
        });
        parts.push(oa::done());
        parts
    };
    let text_only = |finish: Option<&str>| {
        let mut parts = vec![oa::text("hi")];
        if let Some(reason) = finish {
            parts.push(oa::finish(reason));
        }
        parts.push(oa::done());
        parts
    };
    let cases: Vec<(Vec<String>, FinishReason)> = vec![
        (with_call(Some("tool_calls")), FinishReason::ToolCalls),
        (with_call(Some("function_call")), FinishReason::ToolCalls),
        (with_call(Some("stop")), FinishReason::ToolCalls),
        (text_only(Some("length")), FinishReason::Length),
        (text_only(Some("eos")), FinishReason::Stop),
        (text_only(Some("stop")), FinishReason::Stop),
    ];
    let expected: Vec<FinishReason> = cases.iter().map(|(_, f)| *f).collect();
    let server = TestServer::start(cases.iter().map(|(p, _)| Reply::sse(p)).collect()).await;
    let client = client(&server.url);
    let mut got = Vec::new();
    for _ in &expected {
        got.push(
            run(&client, &simple_request("q"))
                .await
                .1
                .unwrap()
                .finish_reason,
        );
    }
    assert_eq!(got, expected);
}

/// llama-cpp-python stops an answer when another request arrives and closes the stream with
/// `[DONE]` and no finish reason: that answer was cut short, never a complete one.
#[tokio::test]
async fn a_stream_ended_by_done_without_a_finish_reason_was_cut_short() {
    let text_cut = vec![oa::text("The answer is 4"), oa::done()];
    let call_cut = vec![oa::tool_start(0, "call_x", "weather", "{\"ci"), oa::done()];
    let server = TestServer::start(vec![Reply::sse(&text_cut), Reply::sse(&call_cut)]).await;
    let client = client(&server.url);
    for _ in 0..2 {
        let error = run(&client, &simple_request("q")).await.1.unwrap_err();
        let ModelError::Malformed(message) = &error else {
            panic!("expected a cut stream, got {error:?}");
        };
        assert!(message.contains("without a finish_reason"), "{message}");
        assert!(
            message.contains("--max-concurrency 1"),
            "names what to change: {message}"
        );
    }
    // Text was already streamed: no retry that would show it twice.
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_500_with_a_body_is_surfaced_with_the_body() {
    let body = json!({"error": {
        "message": "llama_decode returned -3: the KV cache is full",
        "type": "internal_server_error",
    }});
    let server = TestServer::start(vec![
        Reply::json(500, body.clone()),
        Reply::json(500, body.clone()),
        Reply::json(500, body),
    ])
    .await;
    let error = run(&client(&server.url), &simple_request("q"))
        .await
        .1
        .unwrap_err();
    assert_eq!(server.requests().len(), 3, "retried, then gave up");
    match &error {
        ModelError::Http { status, message } => {
            assert_eq!(*status, 500);
            assert_eq!(message, "llama_decode returned -3: the KV cache is full");
        }
        other => panic!("expected an HTTP error, got {other:?}"),
    }
    assert!(error.to_string().contains("KV cache is full"), "{error}");
}

#[tokio::test]
async fn an_html_page_is_reported_as_a_wrong_base_url_and_a_501_is_not_retried() {
    // What Python's `http.server` answers a POST: a web server, not a model API.
    let page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">\
                <style type=\"text/css\">body { color: red; }</style>\
                <title>Error response</title></head>\n<body>\n<h1>Error response</h1>\n\
                <p>Message: Unsupported method (&#x27;POST&#x27;).</p>\n</body>\n</html>\n";
    let server = TestServer::start(vec![Reply::raw(501, "text/html", page)]).await;
    let error = run(&client(&server.url), &simple_request("q"))
        .await
        .1
        .unwrap_err();
    assert_eq!(
        server.requests().len(),
        1,
        "a 501 is an answer, not a hiccup"
    );
    let text = error.to_string();
    assert!(
        text.contains("HTTP 501")
            && text.contains("an HTML page")
            && text.contains("Unsupported method ('POST')")
            && text.contains(&server.url)
            && text.contains("/v1")
            && !text.contains("<p>")
            && !text.contains("color: red"),
        "{text}"
    );
}

#[tokio::test]
async fn a_404_about_the_path_names_the_base_url_not_the_model() {
    // vLLM, llama.cpp and Ollama on a base URL without `/v1`.
    let server = TestServer::start(vec![
        Reply::json(404, json!({"detail": "Not Found"})),
        Reply::json(
            404,
            json!({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}),
        ),
        Reply::raw(404, "text/plain", "404 page not found"),
    ])
    .await;
    let client = client(&server.url);
    for seen in ["Not Found", "File Not Found", "404 page not found"] {
        let error = run(&client, &simple_request("q")).await.1.unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, ModelError::Http { status: 404, .. })
                && text.contains(seen)
                && text.contains("there is no API at")
                && !text.contains("was not found on"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn assistant_tool_call_messages_carry_empty_string_content_and_text_is_a_string() {
    let server = TestServer::start(vec![Reply::sse(&[
        oa::text("ok"),
        oa::finish("stop"),
        oa::done(),
    ])])
    .await;
    let mut request = simple_request("weather in Paris?");
    request.messages.extend([
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "weather".into(),
                input: json!({"city": "Paris"}),
            }],
        },
        Message::Tool {
            call_id: "call_1".into(),
            name: "weather".into(),
            content: "sunny".into(),
            is_error: false,
            attachments: Vec::new(),
        },
        Message::Assistant {
            content: "It is sunny.".into(),
            reasoning: None,
            tool_calls: vec![],
        },
    ]);
    run(&client(&server.url), &request).await.1.unwrap();
    let body = server.single_request().body;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5);
    assert_eq!(messages[2]["content"], json!(""));
    for message in messages {
        assert!(
            message["content"].is_string(),
            "content must be a plain string: {message}"
        );
    }
}

fn forced(name: &str) -> eve_runtime::model::ModelRequest {
    let mut request = simple_request("weather in Paris?");
    request.tool_choice = ToolChoice::Tool(name.into());
    request
}

#[tokio::test]
async fn tool_choice_is_sent_in_openai_form() {
    let ok = || Reply::sse(&[oa::text("ok"), oa::finish("stop"), oa::done()]);
    let server = TestServer::start(vec![ok(), ok(), ok(), ok()]).await;
    let client = client(&server.url);
    run(&client, &forced("weather")).await.1.unwrap();
    for choice in [ToolChoice::Required, ToolChoice::None, ToolChoice::Auto] {
        let mut request = simple_request("q");
        request.tool_choice = choice;
        run(&client, &request).await.1.unwrap();
    }
    let requests = server.requests();
    assert_eq!(
        requests[0].body["tool_choice"],
        json!({"type": "function", "function": {"name": "weather"}})
    );
    assert_eq!(requests[1].body["tool_choice"], "required");
    assert_eq!(requests[2].body["tool_choice"], "none");
    assert!(requests[3].body.get("tool_choice").is_none());
}

#[tokio::test]
async fn a_server_refusing_tool_choice_is_called_again_without_it() {
    let ok = || Reply::sse(&[oa::text("ok"), oa::finish("stop"), oa::done()]);
    let server = TestServer::start(vec![
        Reply::json(
            400,
            json!({"error": {"message": "Unsupported parameter: 'tool_choice'", "type": "invalid_request_error"}}),
        ),
        ok(),
        ok(),
    ])
    .await;
    let client = client(&server.url);
    let response = run(&client, &forced("weather")).await.1.unwrap();
    assert_eq!(response.content, "ok");
    // A later call does not try again.
    run(&client, &forced("weather")).await.1.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].body.get("tool_choice").is_some());
    assert!(requests[1].body.get("tool_choice").is_none());
    assert!(requests[2].body.get("tool_choice").is_none());
    assert_eq!(requests[1].body["tools"], requests[0].body["tools"]);
}

#[tokio::test]
async fn other_400s_are_not_retried_without_tool_choice() {
    let server = TestServer::start(vec![Reply::json(
        400,
        json!({"error": {"message": "messages must not be empty"}}),
    )])
    .await;
    let error = run(&client(&server.url), &forced("weather"))
        .await
        .1
        .unwrap_err();
    assert!(
        matches!(error, ModelError::Http { status: 400, .. }),
        "{error:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn tool_choice_forces_only_the_first_step_and_only_offered_tools() {
    let specs = vec![ToolSpec {
        name: "weather".into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
    }];
    let tool = ToolChoice::Tool("weather".into());
    assert_eq!(ToolChoice::for_step(Some("weather"), 0, &specs), tool);
    assert_eq!(
        ToolChoice::for_step(Some("weather"), 1, &specs),
        ToolChoice::Auto
    );
    assert_eq!(
        ToolChoice::for_step(Some("missing"), 0, &specs),
        ToolChoice::Auto
    );
    assert_eq!(
        ToolChoice::for_step(Some("required"), 0, &specs),
        ToolChoice::Required
    );
    assert_eq!(
        ToolChoice::for_step(Some("required"), 0, &[]),
        ToolChoice::Auto
    );
    assert_eq!(
        ToolChoice::for_step(Some("none"), 3, &specs),
        ToolChoice::None
    );
    assert_eq!(ToolChoice::for_step(None, 0, &specs), ToolChoice::Auto);
    assert_eq!(
        ToolChoice::for_step(Some("auto"), 0, &specs),
        ToolChoice::Auto
    );
}

#[tokio::test]
async fn context_length_exceeded_is_its_own_error_and_not_retried() {
    let server = TestServer::start(vec![Reply::json(
        400,
        json!({"error": {
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (5000 in the messages, 120 in the completion). Please reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }}),
    )])
    .await;
    let error = run(&client(&server.url), &simple_request("q"))
        .await
        .1
        .unwrap_err();
    assert!(error.is_context_overflow(), "{error:?}");
    assert!(
        error.to_string().contains("maximum context length is 4096"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_overflow_reported_as_500_is_not_retried() {
    // llama.cpp's llama-server and some proxies answer 500 for a prompt that does not fit.
    let server = TestServer::start(vec![Reply::json(
        500,
        json!({"error": {"code": 500, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}}),
    )])
    .await;
    let error = run(&client(&server.url), &simple_request("q"))
        .await
        .1
        .unwrap_err();
    assert!(error.is_context_overflow(), "{error:?}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn overflow_wordings_of_every_provider_are_recognised() {
    let overflows = [
        (
            400,
            r#"{"error":{"code":"context_length_exceeded","message":"x"}}"#,
        ),
        (400, "This model's maximum context length is 128000 tokens."),
        (
            400,
            "Input tokens exceed the configured limit of 272000 tokens.",
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
        ),
        (413, "Request exceeds the maximum allowed number of bytes"),
        (
            400,
            "the request exceeds the available context size, try increasing it",
        ),
        (
            500,
            "input is too large to process. increase the physical batch size",
        ),
        (400, "Requested tokens (5000) exceed context window of 4096"),
        (
            400,
            "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
        ),
        (
            400,
            "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
        ),
        (
            400,
            "The input token count (2000000) exceeds the maximum number of tokens allowed (1048576).",
        ),
        (
            400,
            "This endpoint's maximum context length is 8192 tokens.",
        ),
    ];
    for (status, text) in overflows {
        assert!(is_context_overflow(status, text), "{status} {text}");
    }
    let others = [
        (
            429,
            "Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000, Requested 50000. Please reduce the length of the messages",
        ),
        (400, "messages must not be empty"),
        (500, "upstream hiccup"),
        (401, "invalid api key"),
    ];
    for (status, text) in others {
        assert!(!is_context_overflow(status, text), "{status} {text}");
    }
}

#[tokio::test]
async fn anthropic_prompt_too_long_is_an_overflow() {
    let server = TestServer::start(vec![Reply::json(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 208310 tokens > 200000 maximum"}}),
    )])
    .await;
    let client = eve_runtime::model::anthropic::AnthropicClient::new(&fast_settings(
        Provider::Anthropic,
        &server.url,
    ))
    .unwrap();
    let error = run(&client, &simple_request("q")).await.1.unwrap_err();
    assert!(error.is_context_overflow(), "{error:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn anthropic_gets_its_own_tool_choice_and_none_with_thinking() {
    let ok = || {
        Reply::json(
            500,
            json!({"type": "error", "error": {"type": "api_error", "message": "stop here"}}),
        )
    };
    let mut settings = fast_settings(Provider::Anthropic, "");
    settings.max_retries = 0;
    let server = TestServer::start(vec![ok(), ok(), ok()]).await;
    settings.base_url = Some(server.url.clone());
    let client = eve_runtime::model::anthropic::AnthropicClient::new(&settings).unwrap();
    let _ = run(&client, &forced("weather")).await;
    let mut required = simple_request("q");
    required.tool_choice = ToolChoice::Required;
    let _ = run(&client, &required).await;
    let mut thinking = forced("weather");
    thinking.reasoning = Some("high".into());
    let _ = run(&client, &thinking).await;
    let requests = server.requests();
    assert_eq!(
        requests[0].body["tool_choice"],
        json!({"type": "tool", "name": "weather"})
    );
    assert_eq!(requests[1].body["tool_choice"], json!({"type": "any"}));
    // Extended thinking accepts only `auto`/`none`: the forced choice is left out.
    assert!(requests[2].body.get("tool_choice").is_none());
    assert!(requests[2].body.get("thinking").is_some());
}

#[test]
fn known_context_windows() {
    let cases: &[(&str, Option<u64>)] = &[
        ("gpt-4.1", Some(1_047_576)),
        ("gpt-4.1-mini-2025-04-14", Some(1_047_576)),
        ("gpt-4o", Some(128_000)),
        ("gpt-4o-mini", Some(128_000)),
        ("gpt-4-turbo", Some(128_000)),
        ("gpt-4-0613", Some(8_192)),
        ("gpt-3.5-turbo", Some(16_385)),
        ("gpt-5", Some(400_000)),
        ("gpt-5-mini", Some(400_000)),
        ("gpt-5-chat-latest", Some(128_000)),
        ("o1", Some(200_000)),
        ("o1-mini", Some(128_000)),
        ("o3-mini", Some(200_000)),
        ("o4-mini", Some(200_000)),
        ("gpt-oss-20b", Some(131_072)),
        ("claude-3-5-sonnet-20241022", Some(200_000)),
        ("claude-3-haiku-20240307", Some(200_000)),
        ("claude-sonnet-4-5", Some(200_000)),
        ("claude-opus-4-1-20250805", Some(200_000)),
        ("anthropic/claude-3.7-sonnet", Some(200_000)),
        ("deepseek-chat", Some(128_000)),
        ("deepseek-reasoner", Some(128_000)),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", Some(131_072)),
        ("meta-llama/Llama-3.1-8B-Instruct", Some(131_072)),
        ("llama3.2:3b", Some(131_072)),
        ("Meta-Llama-3-8B-Instruct", Some(8_192)),
        ("llama3:8b", Some(8_192)),
        ("Qwen/Qwen2.5-7B-Instruct", Some(32_768)),
        ("qwen2.5:7b", Some(32_768)),
        ("Qwen2.5-7B-Instruct-1M", Some(1_010_000)),
        ("qwen3:8b", Some(32_768)),
        ("Qwen3-235B-A22B-Instruct-2507", Some(262_144)),
        ("mistral-large-latest", Some(131_072)),
        ("mistralai/Mistral-7B-Instruct-v0.1", Some(8_192)),
        ("mistral:7b", Some(32_768)),
        ("open-mistral-nemo", Some(131_072)),
        ("mixtral-8x22b-instruct", Some(65_536)),
        ("gemma3:27b", Some(131_072)),
        ("gemma-3-1b-it", Some(32_768)),
        ("gemma2:9b", Some(8_192)),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", Some(8_192)),
        ("gemini-2.5-flash", Some(1_048_576)),
        ("my-finetune", None),
        ("echo", None),
        ("", None),
    ];
    for (model, window) in cases {
        assert_eq!(known_context_window(model), *window, "{model}");
    }
}

#[tokio::test]
async fn the_window_falls_back_to_the_table_when_models_does_not_say() {
    // OpenAI's `/models` lists ids only.
    let server = TestServer::start(vec![Reply::json(
        200,
        json!({"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "openai"}]}),
    )])
    .await;
    let mut settings = fast_settings(Provider::OpenAi, &format!("{}/v1", server.url));
    settings.model = "gpt-4o".into();
    let client = OpenAiClient::new(&settings).unwrap();
    assert_eq!(client.context_window("gpt-4o").await, Some(128_000));
    assert_eq!(server.requests()[0].path, "/v1/models");
    // Configuration wins over both.
    settings.context_window = Some(9_000);
    let client = OpenAiClient::new(&settings).unwrap();
    assert_eq!(client.context_window("gpt-4o").await, Some(9_000));
    // Anthropic has no listing: the table answers.
    let anthropic = eve_runtime::model::anthropic::AnthropicClient::new(&fast_settings(
        Provider::Anthropic,
        &server.url,
    ))
    .unwrap();
    assert_eq!(
        anthropic.context_window("claude-sonnet-4-5").await,
        Some(200_000)
    );
    assert_eq!(anthropic.context_window("unknown-model").await, None);
}

#[tokio::test]
async fn an_overflow_error_object_in_the_stream_is_an_overflow() {
    let server = TestServer::start(vec![Reply::sse(&[
        "data: {\"error\":{\"message\":\"context length exceeded\",\"code\":400}}\n\n",
    ])])
    .await;
    let error = run(&client(&server.url), &simple_request("hi"))
        .await
        .1
        .unwrap_err();
    match error {
        ModelError::ContextTooLong { status, message } => {
            assert_eq!(status, 400);
            assert_eq!(message, "context length exceeded");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 1, "not retried");
}
