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

use super::sse::{SseEvent, SseParser};
use super::transport::{self, Call, Decoder};
use super::{
    FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse,
    ModelSettings, Provider, Reasoning, ToolCall, ToolChoice, Usage,
};

/// A client for one OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    settings: ModelSettings,
    base_url: String,
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
            http: transport::http_client(settings)?,
            settings: settings.clone(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            no_tool_choice: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The base URL requests go to (without the `/chat/completions` suffix).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    fn auth_headers(&self) -> Vec<(&'static str, String)> {
        self.settings
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
pub fn request_body(provider: Provider, request: &ModelRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        messages.push(message_json(provider, message));
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
    if let Some(max) = request.max_output_tokens {
        let key = if provider == Provider::OpenAi {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(max);
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
        Message::User { content } => json!({"role": "user", "content": content}),
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

/// Tool arguments as the wire wants them: a JSON string. Arguments kept as a string because they
/// were not valid JSON go back verbatim.
fn arguments_string(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Parses assembled tool arguments: empty means `{}`, invalid JSON is kept as a string.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

#[async_trait::async_trait]
impl ModelClient for OpenAiClient {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let mut body = request_body(self.settings.provider, request);
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
                    base_url = %self.base_url,
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
        if let Some(window) = self.settings.context_window {
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
        let call = Call {
            url: format!("{}/chat/completions", self.base_url),
            headers: self.auth_headers(),
            body: serde_json::to_vec(body)
                .map_err(|e| ModelError::Config(format!("cannot encode the request: {e}")))?,
            model: &request.model,
            base_url: &self.base_url,
        };
        transport::stream_with_retries(
            &self.http,
            &self.settings,
            &call,
            StreamDecoder::new,
            on_event,
        )
        .await
    }

    /// The window the server's `/models` listing gives for `model`, if any.
    async fn listed_context_window(&self, model: &str) -> Option<u64> {
        let url = format!("{}/models", self.base_url);
        match transport::get_json(
            &self.http,
            &url,
            &self.auth_headers(),
            self.settings.timeout,
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
pub fn context_window_from_models(list: &Value, model: &str) -> Option<u64> {
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

/// One tool call being assembled from deltas.
#[derive(Debug)]
struct CallBuilder {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
    started: bool,
}

/// Incremental decoder of a Chat Completions SSE body.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: SseParser,
    pending: Vec<SseEvent>,
    text: String,
    reasoning: String,
    calls: Vec<CallBuilder>,
    usage: Usage,
    finish: Option<FinishReason>,
    done: bool,
}

impl StreamDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds body bytes; completed events are appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        let mut pending = std::mem::take(&mut self.pending);
        self.sse.push(bytes, &mut pending);
        let result = self.drain(&mut pending, out);
        self.pending = pending;
        result
    }

    /// Whether `[DONE]` was received.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Ends the stream and assembles the response.
    pub fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<ModelResponse, ModelError> {
        let mut pending = std::mem::take(&mut self.pending);
        if !self.done {
            self.sse.finish(&mut pending);
        }
        self.drain(&mut pending, out)?;
        if self.finish.is_none() {
            // `[DONE]` alone does not make an answer whole: llama-cpp-python ends a stream it
            // stopped to serve another request with `[DONE]` and no finish reason.
            let ending = if self.done {
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
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            if call.name.is_empty() {
                return Err(ModelError::Malformed(format!(
                    "tool call #{} has no function name",
                    call.index
                )));
            }
            tool_calls.push(ToolCall {
                id: call_id(call),
                name: call.name.clone(),
                input: parse_arguments(&call.arguments),
            });
        }
        let mut finish_reason = self.finish.unwrap_or_default();
        if !tool_calls.is_empty() && finish_reason == FinishReason::Stop {
            finish_reason = FinishReason::ToolCalls;
        }
        Ok(ModelResponse {
            content: self.text.clone(),
            reasoning: (!self.reasoning.is_empty()).then(|| Reasoning {
                text: self.reasoning.clone(),
                signature: None,
                blocks: Vec::new(),
            }),
            tool_calls,
            usage: self.usage,
            finish_reason,
        })
    }

    fn drain(
        &mut self,
        pending: &mut Vec<SseEvent>,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        for event in pending.drain(..) {
            if self.done {
                continue;
            }
            self.on_data(&event.data, out)?;
        }
        Ok(())
    }

    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ModelError::Malformed(format!(
                "a stream chunk is not JSON ({e}): {}",
                transport::quote(data.as_bytes())
            ))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = parse_usage(usage);
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
                self.on_delta(delta, out);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(map_finish_reason(reason));
            }
        }
        Ok(())
    }

    fn on_delta(&mut self, delta: &Value, out: &mut Vec<ModelEvent>) {
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .filter_map(|key| delta.get(key).and_then(Value::as_str))
            .find(|text| !text.is_empty());
        if let Some(text) = reasoning {
            self.reasoning.push_str(text);
            out.push(ModelEvent::ReasoningDelta {
                text: text.to_owned(),
            });
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.text.push_str(text);
            out.push(ModelEvent::TextDelta {
                text: text.to_owned(),
            });
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.on_tool_delta(call, out);
            }
        } else if let Some(function) = delta.get("function_call").filter(|f| f.is_object()) {
            // The legacy single-call form, sent alone: call #0.
            self.on_tool_delta(&json!({"index": 0, "function": function}), out);
        }
    }

    fn on_tool_delta(&mut self, call: &Value, out: &mut Vec<ModelEvent>) {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let index = match call.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            // Servers that omit `index` send each call whole, or continue the last one.
            None => match id {
                Some(id) => self
                    .calls
                    .iter()
                    .find(|c| c.id.as_deref() == Some(id))
                    .map(|c| c.index)
                    .unwrap_or_else(|| self.next_index()),
                None => self.calls.last().map(|c| c.index).unwrap_or(0),
            },
        };
        let position = match self.calls.iter().position(|c| c.index == index) {
            Some(position) => position,
            None => {
                self.calls.push(CallBuilder {
                    index,
                    id: None,
                    name: String::new(),
                    arguments: String::new(),
                    started: false,
                });
                self.calls.len() - 1
            }
        };
        let Some(builder) = self.calls.get_mut(position) else {
            return;
        };
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
        if !builder.started && !builder.name.is_empty() {
            builder.started = true;
            let id = call_id(builder);
            out.push(ModelEvent::ToolCallStart {
                id: id.clone(),
                name: builder.name.clone(),
            });
            if !builder.arguments.is_empty() {
                out.push(ModelEvent::ToolCallDelta {
                    id,
                    delta: builder.arguments.clone(),
                });
            }
        }
        if !arguments.is_empty() {
            builder.arguments.push_str(&arguments);
            if builder.started {
                out.push(ModelEvent::ToolCallDelta {
                    id: call_id(builder),
                    delta: arguments,
                });
            }
        }
    }

    fn next_index(&self) -> u64 {
        self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0)
    }
}

/// The call id, or a stable one made up from the index when the server sent none.
fn call_id(call: &CallBuilder) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("call_{}", call.index))
}

impl Decoder for StreamDecoder {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        StreamDecoder::push(self, bytes, out)
    }
    fn is_done(&self) -> bool {
        self.done
    }
    fn sse_events(&self) -> usize {
        self.sse.dispatched()
    }
    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<ModelResponse, ModelError> {
        StreamDecoder::finish(self, out)
    }
}

/// Maps a Chat Completions `finish_reason`.
pub fn map_finish_reason(reason: &str) -> FinishReason {
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
