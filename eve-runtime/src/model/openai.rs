//! OpenAI-compatible Chat Completions, streamed.
//!
//! One protocol serves OpenAI, DeepSeek, vLLM, llama.cpp, Ollama and any other server that speaks
//! `POST {base}/chat/completions` with `stream: true`. The request asks for usage in the stream
//! (`stream_options.include_usage`). The [`StreamDecoder`] turns the SSE body into [`ModelEvent`]s:
//! text from `delta.content`, reasoning from `delta.reasoning_content` (DeepSeek, vLLM) or
//! `delta.reasoning` (OpenRouter, Ollama), tool calls assembled by `index` (id and name come in the
//! first chunk of a call, arguments in pieces), usage from the final chunk, and `[DONE]`. A stream
//! that ends before a `finish_reason` is malformed: the answer may be cut short.
//!
//! Servers as they are, not only as OpenAI documents them (llama-cpp-python, llama.cpp, vLLM,
//! Ollama): an assistant message that only calls tools carries `content: ""` (llama-cpp-python
//! answers 500 to `null` or a missing `content`), and text content is always a plain string; the
//! call id and name repeated in every chunk of a call are taken once, never appended; a legacy
//! `delta.function_call` without `tool_calls` is call #0; no usage chunk means zero usage;
//! `finish_reason` may be `tool_calls`, `function_call`, `stop` (with calls: tool calls),
//! `length` or `eos`, and must come: a stream that ends without one, even with `[DONE]`, was cut
//! short (llama-cpp-python ends an answer it stops that way) and fails like a dropped connection. A forced `tool_choice` that a server refuses (a 400
//! or 422 naming `tool_choice`) is dropped, the call is made once more without it, and the client
//! stops sending it to that server.
//!
//! The context window comes from configuration, else the server's `/models` listing, else the
//! table of well-known models in [`super::windows`].
//!
//! The decoder is public so tests can feed it recorded streams split at every byte offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::stream::{Assembly, SseDecoder, Wire};
use super::transport::{self, Endpoint};
use super::{
    Attachment, FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelRequest,
    ModelResponse, ModelSettings, NativeKind, Provider, ToolChoice, Usage,
};

/// A client for one OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    endpoint: Endpoint,
    /// Set once the server refused `tool_choice`: it is not sent to this server again.
    no_tool_choice: Arc<AtomicBool>,
}

impl OpenAiClient {
    /// Builds a client from settings (base URL: the override, else the provider's default).
    pub fn new(settings: &ModelSettings) -> Result<Self, ModelError> {
        let base_url = settings.effective_base_url().ok_or_else(|| {
            ModelError::Config(format!(
                "provider `{}` needs a base URL: set {} (for example http://localhost:8000/v1)",
                settings.provider,
                super::env::EVE_BASE_URL
            ))
        })?;
        Ok(Self {
            endpoint: Endpoint::new(settings, &base_url)?,
            no_tool_choice: Arc::new(AtomicBool::new(false)),
        })
    }

    fn auth_headers(&self) -> Vec<(&'static str, String)> {
        self.endpoint
            .settings
            .api_key
            .as_deref()
            .filter(|key| !key.is_empty())
            .map(|key| vec![("authorization", format!("Bearer {key}"))])
            .unwrap_or_default()
    }
}

/// The JSON body of a streamed Chat Completions request.
///
/// OpenAI itself gets `max_completion_tokens` (its reasoning models refuse `max_tokens`); other
/// servers get the widely supported `max_tokens`. Reasoning goes back (as `reasoning_content`)
/// only to DeepSeek, which requires it after tool calls.
pub(crate) fn request_body(provider: Provider, request: &ModelRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    // Chat Completions takes images and files in user messages only: what tools returned goes
    // in one user message after the run of tool results it belongs to.
    let mut from_tools: Vec<Value> = Vec::new();
    for message in &request.messages {
        if !matches!(message, Message::Tool { .. }) && !from_tools.is_empty() {
            messages.push(tool_files_message(std::mem::take(&mut from_tools)));
        }
        if let Message::Tool {
            name, attachments, ..
        } = message
        {
            let parts = file_parts(attachments);
            if !parts.is_empty() {
                from_tools
                    .push(json!({"type": "text", "text": format!("Files `{name}` returned:")}));
                from_tools.extend(parts);
            }
        }
        messages.push(message_json(provider, message));
    }
    if !from_tools.is_empty() {
        messages.push(tool_files_message(from_tools));
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    }
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
        let choice = match &request.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(json!("required")),
            ToolChoice::None => Some(json!("none")),
            ToolChoice::Tool(name) => Some(json!({"type": "function", "function": {"name": name}})),
        };
        if let Some(choice) = choice {
            body["tool_choice"] = choice;
        }
    }
    if let Some(effort) = &request.reasoning {
        body["reasoning_effort"] = json!(effort);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(schema) = &request.output_schema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "result", "schema": schema, "strict": false},
        });
    }
    if let Some(max) = request.max_output_tokens {
        let key = if provider == Provider::OpenAi {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(max);
    }
    // OpenAI's abuse detection tells users apart by this hash (never the principal itself).
    if provider == Provider::OpenAi
        && let Some(id) = &request.safety_identifier
    {
        body["safety_identifier"] = json!(id);
    }
    // OpenAI routes calls with the same key to the same prompt cache.
    if provider == Provider::OpenAi
        && let Some(key) = super::prefix_cache_key(request)
    {
        body["prompt_cache_key"] = json!(key);
    }
    body
}

fn message_json(provider: Provider, message: &Message) -> Value {
    match message {
        Message::User {
            content,
            attachments,
        } => {
            let files = file_parts(attachments);
            if files.is_empty() {
                return json!({"role": "user", "content": content});
            }
            let mut parts = Vec::with_capacity(files.len() + 1);
            if !content.is_empty() {
                parts.push(json!({"type": "text", "text": content}));
            }
            parts.extend(files);
            json!({"role": "user", "content": parts})
        }
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => {
            let mut out = json!({"role": "assistant"});
            // DeepSeek's thinking mode refuses a tool-calling history without its reasoning;
            // other servers get none (OpenAI rejects unknown message fields).
            if provider == Provider::DeepSeek
                && let Some(reasoning) = reasoning.as_ref().filter(|r| !r.text.is_empty())
            {
                out["reasoning_content"] = json!(reasoning.text);
            }
            // Always a string: OpenAI accepts `""` beside tool calls, and llama-cpp-python
            // refuses `null` and a missing `content`.
            out["content"] = json!(content);
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": arguments_string(&call.input)},
                        })
                    })
                    .collect();
                out["tool_calls"] = Value::Array(calls);
            }
            out
        }
        Message::Tool {
            call_id, content, ..
        } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
    }
}

/// The native parts of the attachments whose bytes are loaded: `image_url` for images, `file`
/// (with `file_data` as a data URL) for PDFs. Others were turned into a note before the call.
fn file_parts(attachments: &[Attachment]) -> Vec<Value> {
    attachments
        .iter()
        .filter_map(|a| {
            let url = a.data_url()?;
            match a.native_kind()? {
                NativeKind::Image => Some(json!({"type": "image_url", "image_url": {"url": url}})),
                NativeKind::Pdf => Some(json!({
                    "type": "file",
                    "file": {"filename": a.name(), "file_data": url},
                })),
            }
        })
        .collect()
}

fn tool_files_message(parts: Vec<Value>) -> Value {
    json!({"role": "user", "content": parts})
}

/// Tool arguments as the wire wants them: a JSON string. Arguments kept as a string because they
/// were not valid JSON go back verbatim.
fn arguments_string(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

#[async_trait::async_trait]
impl ModelClient for OpenAiClient {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let mut body = request_body(self.endpoint.settings.provider, request);
        if self.no_tool_choice.load(Ordering::Relaxed)
            && let Some(map) = body.as_object_mut()
        {
            map.remove("tool_choice");
        }
        let result = self.post(&body, request, on_event).await;
        match result {
            Err(ModelError::Http { status, message })
                if body.get("tool_choice").is_some() && refuses_tool_choice(status, &message) =>
            {
                tracing::warn!(
                    base_url = %self.endpoint.base_url,
                    status,
                    %message,
                    "the model server refused `tool_choice`; calling again without it"
                );
                self.no_tool_choice.store(true, Ordering::Relaxed);
                if let Some(map) = body.as_object_mut() {
                    map.remove("tool_choice");
                }
                self.post(&body, request, on_event).await
            }
            other => other,
        }
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        if let Some(window) = self.endpoint.settings.context_window {
            return Some(window);
        }
        if let Some(window) = self.listed_context_window(model).await {
            return Some(window);
        }
        super::windows::known_context_window(model)
    }
}

impl OpenAiClient {
    async fn post(
        &self,
        body: &Value,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let endpoint = &self.endpoint;
        endpoint
            .stream(
                format!("{}/chat/completions", endpoint.base_url),
                self.auth_headers(),
                body,
                &request.model,
                StreamDecoder::new,
                on_event,
            )
            .await
    }

    /// The window the server's `/models` listing gives for `model`, if any.
    async fn listed_context_window(&self, model: &str) -> Option<u64> {
        let endpoint = &self.endpoint;
        let url = format!("{}/models", endpoint.base_url);
        match transport::get_json(
            &endpoint.http,
            &url,
            &self.auth_headers(),
            endpoint.settings.timeout,
        )
        .await
        {
            Ok(list) => context_window_from_models(&list, model),
            Err(error) => {
                tracing::debug!(%url, %error, "cannot read the context window from /models");
                None
            }
        }
    }
}

/// Whether an error answer says the server does not support `tool_choice` (or the value sent):
/// a 400, 422 or 500 whose message names it (llama.cpp answers 500 to parameters it lacks).
fn refuses_tool_choice(status: u16, message: &str) -> bool {
    matches!(status, 400 | 422 | 500) && message.to_ascii_lowercase().contains("tool_choice")
}

/// Finds `model` in a `/models` listing and reads its context window: `max_model_len` (vLLM),
/// `context_length` or `context_window` (others), on the entry or its `top_provider`.
pub(crate) fn context_window_from_models(list: &Value, model: &str) -> Option<u64> {
    let entries = list
        .get("data")
        .or_else(|| list.get("models"))
        .unwrap_or(list)
        .as_array()?;
    let entry = entries.iter().find(|entry| {
        ["id", "name", "model"]
            .iter()
            .any(|key| entry.get(key).and_then(Value::as_str) == Some(model))
    })?;
    let keys = ["max_model_len", "context_length", "context_window"];
    let places = [Some(entry), entry.get("top_provider")];
    places
        .into_iter()
        .flatten()
        .flat_map(|place| keys.iter().map(move |key| place.get(key)))
        .flatten()
        .find_map(|value| {
            value
                .as_u64()
                .or_else(|| value.as_f64().filter(|f| *f >= 1.0).map(|f| f as u64))
        })
        .filter(|window| *window > 0)
}

/// Incremental decoder of a Chat Completions SSE body.
pub type StreamDecoder = SseDecoder<ChatCompletions>;

/// What Chat Completions stream chunks mean: the [`Wire`] of [`StreamDecoder`].
#[derive(Debug, Default)]
pub struct ChatCompletions;

impl Wire for ChatCompletions {
    const END_MARKER: Option<&'static str> = Some("[DONE]");

    fn describe(_: &SseEvent) -> String {
        "a stream chunk".to_owned()
    }

    fn on_event(
        &mut self,
        _: &SseEvent,
        chunk: &Value,
        answer: &mut Assembly,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            answer.usage = parse_usage(usage);
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
                on_delta(delta, answer, out);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                answer.finish = Some(map_finish_reason(reason));
            }
        }
        Ok(())
    }

    fn finish(&mut self, answer: &mut Assembly) -> Result<(), ModelError> {
        if answer.finish.is_none() {
            // `[DONE]` alone does not make an answer whole: llama-cpp-python ends a stream it
            // stopped to serve another request with `[DONE]` and no finish reason.
            let ending = if answer.done {
                "[DONE] without a finish_reason"
            } else {
                "no finish_reason, no [DONE]"
            };
            return Err(ModelError::Malformed(format!(
                "the stream ended before the response was complete ({ending}); a server that \
                 serves one request at a time stops an answer when another arrives: send it one \
                 call at a time (`eve eval --max-concurrency 1`) or give it more parallel slots"
            )));
        }
        if let Some(call) = answer.calls().iter().find(|call| call.name.is_empty()) {
            return Err(ModelError::Malformed(format!(
                "tool call #{} has no function name",
                call.index
            )));
        }
        Ok(())
    }
}

fn on_delta(delta: &Value, answer: &mut Assembly, out: &mut Vec<ModelEvent>) {
    let reasoning = ["reasoning_content", "reasoning"]
        .iter()
        .filter_map(|key| delta.get(key).and_then(Value::as_str))
        .find(|text| !text.is_empty());
    if let Some(text) = reasoning {
        answer.push_reasoning(text, out);
    }
    if let Some(text) = delta.get("content").and_then(Value::as_str) {
        answer.push_text(text, out);
    }
    if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            on_tool_delta(call, answer, out);
        }
    } else if let Some(function) = delta.get("function_call").filter(|f| f.is_object()) {
        // The legacy single-call form, sent alone: call #0.
        on_tool_delta(&json!({"index": 0, "function": function}), answer, out);
    }
}

fn on_tool_delta(call: &Value, answer: &mut Assembly, out: &mut Vec<ModelEvent>) {
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty());
    let calls = answer.calls();
    let index = match call.get("index").and_then(Value::as_u64) {
        Some(index) => index,
        // Servers that omit `index` send each call whole, or continue the last one.
        None => match id {
            Some(id) => calls
                .iter()
                .find(|c| c.id.as_deref() == Some(id))
                .map(|c| c.index)
                .unwrap_or_else(|| calls.iter().map(|c| c.index + 1).max().unwrap_or(0)),
            None => calls.last().map(|c| c.index).unwrap_or(0),
        },
    };
    let builder = answer.call(index);
    if builder.id.is_none() {
        builder.id = id.map(str::to_owned);
    }
    let function = call.get("function");
    if builder.name.is_empty()
        && let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
    {
        builder.name = name.to_owned();
    }
    let arguments = match function.and_then(|f| f.get("arguments")) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    // Announced once its name is known: the id and name may come after the first pieces.
    if !builder.name.is_empty() {
        builder.start(out);
    }
    builder.append(&arguments, out);
}

/// Maps a Chat Completions `finish_reason`.
pub(crate) fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "end_turn" | "eos" => FinishReason::Stop,
        "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
        "length" | "max_tokens" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

fn parse_usage(usage: &Value) -> Usage {
    let number = |path: &str| usage.pointer(path).and_then(Value::as_u64);
    Usage {
        input_tokens: number("/prompt_tokens").unwrap_or(0),
        output_tokens: number("/completion_tokens").unwrap_or(0),
        cache_read_tokens: number("/prompt_tokens_details/cached_tokens")
            .or_else(|| number("/prompt_cache_hit_tokens"))
            .unwrap_or(0),
        estimated: false,
    }
}

/// An `{"error": …}` object sent inside a 200 stream.
fn stream_error(error: &Value) -> ModelError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .unwrap_or("the server reported an error mid-stream")
        .to_owned();
    let status = ["code", "status"]
        .iter()
        .filter_map(|key| error.get(key))
        .find_map(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|code| (400..600).contains(code))
        .and_then(|code| u16::try_from(code).ok())
        .unwrap_or(500);
    if super::is_context_overflow(status, &error.to_string()) {
        return ModelError::ContextTooLong { status, message };
    }
    ModelError::Http { status, message }
}
