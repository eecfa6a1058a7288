//! Model client tests against scripted HTTP servers on loopback.
//!
//! The servers speak each wire format byte for byte (SSE bodies built from the event constructors
//! in [`wire`]), record the requests the clients send, and can misbehave on cue: error statuses,
//! `Retry-After`, stalls, cut connections, garbage. Backoffs are milliseconds so the whole module
//! stays fast.

mod anthropic;
mod cache;
mod compat;
mod limits;
mod llama;
mod mock;
mod openai;
mod overflow;
pub(crate) mod server;
mod settings;
mod split;
mod sse;
mod unreported;
pub(crate) mod wire;

use std::time::Duration;

use eve_runtime::model::{
    Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse, ModelSettings,
    Provider, ToolChoice, ToolSpec,
};

/// Settings pointing at a test server, with short timeouts and millisecond backoffs.
pub fn fast_settings(provider: Provider, url: &str) -> ModelSettings {
    let mut settings = ModelSettings::new(provider, "test-model");
    settings.base_url = Some(url.to_owned());
    settings.api_key = Some("test-key".to_owned());
    settings.timeout = Duration::from_secs(3);
    settings.idle_timeout = Duration::from_secs(3);
    settings.max_retries = 2;
    settings.backoff_base = Duration::from_millis(1);
    settings.backoff_max = Duration::from_millis(4);
    settings.retry_after_cap = Duration::from_secs(5);
    settings
}

/// A request with a system prompt, one user message and one tool.
pub fn simple_request(text: &str) -> ModelRequest {
    ModelRequest {
        model: "test-model".to_owned(),
        system: "You are a test.".to_owned(),
        messages: vec![Message::user(text.to_owned())],
        tools: vec![ToolSpec {
            name: "weather".to_owned(),
            description: "Weather for a city".to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            }),
        }],
        reasoning: None,
        max_output_tokens: None,
        tool_choice: ToolChoice::Auto,
        temperature: None,
        output_schema: None,
        safety_identifier: None,
    }
}

/// Runs one call, collecting the events.
pub async fn run(
    client: &dyn ModelClient,
    request: &ModelRequest,
) -> (Vec<ModelEvent>, Result<ModelResponse, ModelError>) {
    let mut events = Vec::new();
    let result = client
        .stream(request, &mut |event| events.push(event))
        .await;
    (events, result)
}

/// Shorthand for a text delta event.
pub fn text(t: &str) -> ModelEvent {
    ModelEvent::TextDelta { text: t.to_owned() }
}

/// Shorthand for a reasoning delta event.
pub fn reasoning(t: &str) -> ModelEvent {
    ModelEvent::ReasoningDelta { text: t.to_owned() }
}

/// Shorthand for a tool-call start event.
pub fn call_start(id: &str, name: &str) -> ModelEvent {
    ModelEvent::ToolCallStart {
        id: id.to_owned(),
        name: name.to_owned(),
    }
}

/// Shorthand for a tool-call argument delta event.
pub fn call_delta(id: &str, delta: &str) -> ModelEvent {
    ModelEvent::ToolCallDelta {
        id: id.to_owned(),
        delta: delta.to_owned(),
    }
}
