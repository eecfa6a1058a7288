//! The deterministic mock provider.

use std::time::{Duration, Instant};

use eve_runtime::model::mock::MockClient;
use eve_runtime::model::{
    FinishReason, Message, ModelError, ModelSettings, Reasoning, ToolCall, Usage, client,
};
use serde_json::json;

use super::{call_delta, call_start, reasoning, run, simple_request, text};

fn assistant(content: &str) -> Message {
    Message::Assistant {
        content: content.into(),
        reasoning: None,
        tool_calls: vec![],
    }
}

fn user(content: &str) -> Message {
    Message::user(content)
}

#[tokio::test]
async fn echo_streams_the_last_user_message_word_by_word() {
    let mock = client(&ModelSettings::from_model_string("mock/echo").unwrap()).unwrap();
    let mut request = simple_request("first");
    request
        .messages
        .extend([assistant("You said: first"), user("hello  there, world")]);
    let (events, result) = run(mock.as_ref(), &request).await;
    let response = result.unwrap();
    assert_eq!(
        events,
        vec![
            text("You "),
            text("said: "),
            text("hello  "),
            text("there, "),
            text("world")
        ]
    );
    assert_eq!(response.content, "You said: hello  there, world");
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert!(response.tool_calls.is_empty());
}

#[tokio::test]
async fn echo_calls_a_tool_and_reports_its_result() {
    let mock = MockClient::new("echo", None).unwrap();
    let mut request = simple_request("/tool weather {\"city\": \"Paris\"}");
    let (events, result) = run(&mock, &request).await;
    let response = result.unwrap();
    let call = ToolCall {
        id: "mock_call_0_0".into(),
        name: "weather".into(),
        input: json!({"city": "Paris"}),
    };
    assert_eq!(response.tool_calls, vec![call.clone()]);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.content, "");
    assert_eq!(
        events,
        vec![
            call_start("mock_call_0_0", "weather"),
            call_delta("mock_call_0_0", "{\"city\":\"Paris\"}")
        ]
    );

    request.messages.extend([
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![call],
        },
        Message::Tool {
            call_id: "mock_call_0_0".into(),
            name: "weather".into(),
            content: "{\"temp\":21}".into(),
            is_error: false,
            attachments: Vec::new(),
        },
    ]);
    let response = run(&mock, &request).await.1.unwrap();
    assert_eq!(response.content, "weather returned: {\"temp\":21}");
    assert_eq!(response.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn echo_tool_input_defaults_to_an_object_and_keeps_broken_json() {
    let mock = MockClient::new("echo", None).unwrap();
    let response = run(&mock, &simple_request("/tool clock")).await.1.unwrap();
    assert_eq!(response.tool_calls[0].name, "clock");
    assert_eq!(response.tool_calls[0].input, json!({}));
    let response = run(&mock, &simple_request("/tool clock {oops"))
        .await
        .1
        .unwrap();
    assert_eq!(response.tool_calls[0].input, json!("{oops"));
    // Not a command: echoed.
    let response = run(&mock, &simple_request("/toolbox")).await.1.unwrap();
    assert_eq!(response.content, "You said: /toolbox");
    let response = run(&mock, &simple_request("/tool")).await.1.unwrap();
    assert_eq!(response.content, "You said: /tool");
}

#[tokio::test]
async fn usage_is_a_deterministic_estimate() {
    let mock = MockClient::new("echo", None).unwrap();
    let mut request = simple_request("abcd");
    request.system = "12345678".into();
    request.tools.clear();
    let response = run(&mock, &request).await.1.unwrap();
    // 8 + 4 characters in, "You said: abcd" (14 characters) out, both / 4 rounded up.
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 3,
            output_tokens: 4,
            cache_read_tokens: 0,
            estimated: false,
        }
    );
    assert_eq!(run(&mock, &request).await.1.unwrap(), response);
}

const SCRIPT: &str = r#"[
  {"reasoning": "plan it", "text": "Calling.", "tool_calls": [
     {"name": "weather", "input": {"city": "Oslo"}},
     {"name": "clock", "id": "fixed-id"}]},
  {"text": "Done.", "usage": {"input_tokens": 100, "output_tokens": 5}},
  {"error": "scripted failure"},
  {"text": "cut", "finish": "length"}
]"#;

#[tokio::test]
async fn a_script_plays_the_step_chosen_by_history() {
    let mut settings = ModelSettings::from_model_string("mock/echo").unwrap();
    settings.mock_script = Some(SCRIPT.to_owned());
    let mock = client(&settings).unwrap();

    let mut request = simple_request("go");
    let (events, result) = run(mock.as_ref(), &request).await;
    let first = result.unwrap();
    assert_eq!(
        events,
        vec![
            reasoning("plan "),
            reasoning("it"),
            text("Calling."),
            call_start("mock_call_0_0", "weather"),
            call_delta("mock_call_0_0", "{\"city\":\"Oslo\"}"),
            call_start("fixed-id", "clock"),
            call_delta("fixed-id", "{}"),
        ]
    );
    assert_eq!(
        first.reasoning,
        Some(Reasoning {
            text: "plan it".into(),
            signature: None,
            blocks: vec![],
        })
    );
    assert_eq!(first.tool_calls.len(), 2);
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);

    // Same history, same answer: a pure function of the request.
    assert_eq!(run(mock.as_ref(), &request).await.1.unwrap(), first);

    request.messages.push(assistant("Calling."));
    let second = run(mock.as_ref(), &request).await.1.unwrap();
    assert_eq!(second.content, "Done.");
    assert_eq!(second.usage.input_tokens, 100);
    assert_eq!(second.usage.output_tokens, 5);

    request.messages.push(assistant("Done."));
    match run(mock.as_ref(), &request).await.1.unwrap_err() {
        ModelError::Http { status, message } => {
            assert_eq!(status, 500);
            assert_eq!(message, "scripted failure");
        }
        other => panic!("unexpected {other:?}"),
    }

    request.messages.push(assistant(""));
    let fourth = run(mock.as_ref(), &request).await.1.unwrap();
    assert_eq!(fourth.finish_reason, FinishReason::Length);

    request.messages.push(assistant("cut"));
    let (events, result) = run(mock.as_ref(), &request).await;
    let past_end = result.unwrap();
    assert!(events.is_empty());
    assert_eq!(past_end.content, "");
    assert_eq!(past_end.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn a_script_file_is_named_by_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.json");
    std::fs::write(&path, r#"[{"text": "from a file"}]"#).unwrap();
    let settings =
        ModelSettings::from_model_string(&format!("mock/script:{}", path.display())).unwrap();
    let mock = client(&settings).unwrap();
    let response = run(mock.as_ref(), &simple_request("x")).await.1.unwrap();
    assert_eq!(response.content, "from a file");

    // EVE_MOCK_SCRIPT may be a path too.
    let mut settings = ModelSettings::from_model_string("mock/echo").unwrap();
    settings.mock_script = Some(path.display().to_string());
    let response = run(client(&settings).unwrap().as_ref(), &simple_request("x"))
        .await
        .1
        .unwrap();
    assert_eq!(response.content, "from a file");
}

#[tokio::test]
async fn bad_scripts_and_models_are_config_errors() {
    let missing = MockClient::new("script:/nonexistent/script.json", None).unwrap_err();
    assert!(
        matches!(&missing, ModelError::Config(m) if m.contains("/nonexistent/script.json")),
        "{missing:?}"
    );
    let invalid = MockClient::new("echo", Some("[{\"txt\": 1}]")).unwrap_err();
    assert!(
        matches!(&invalid, ModelError::Config(m) if m.contains("txt")),
        "{invalid:?}"
    );
    let unknown = MockClient::new("gpt-5", None).unwrap_err();
    assert!(
        matches!(&unknown, ModelError::Config(m) if m.contains("mock/echo")),
        "{unknown:?}"
    );
}

#[tokio::test]
async fn delay_ms_spaces_the_events() {
    let mock = MockClient::new(
        "echo",
        Some(r#"[{"text": "one two three", "delay_ms": 40}]"#),
    )
    .unwrap();
    let started = Instant::now();
    let mut stamps = Vec::new();
    let response =
        eve_runtime::model::ModelClient::stream(&mock, &simple_request("x"), &mut |_| {
            stamps.push(started.elapsed())
        })
        .await
        .unwrap();
    assert_eq!(response.content, "one two three");
    assert_eq!(stamps.len(), 3);
    assert!(stamps[0] >= Duration::from_millis(40), "{stamps:?}");
    assert!(stamps[2] >= Duration::from_millis(120), "{stamps:?}");
}
