//! Anthropic Messages API, streamed.
//!
//! `POST {base}/v1/messages` with `stream: true`, `x-api-key` and `anthropic-version: 2023-06-01`.
//! The history is mapped to Anthropic's shape: the system prompt goes in `system`; assistant turns
//! carry their reasoning blocks first, then `text` and `tool_use` blocks; tool results travel as
//! `tool_result` blocks in a user message, consecutive results (and a user message right after them)
//! merged into one user turn, since the API wants turns to alternate.
//!
//! Extended thinking with tools: the API verifies the previous assistant turn's `thinking` blocks
//! (each by its own `signature`) and `redacted_thinking` blocks (opaque `data`) and refuses a
//! follow-up whose blocks were changed, merged, dropped or reordered. So every block of a response
//! is kept, in order, in [`Reasoning::blocks`](super::Reasoning) and sent back verbatim; the joined
//! text is only for display. Without interleaved thinking (a beta this client does not request) the
//! API puts all thinking before the text and tool calls, so "first" is their original place. A
//! message stored before blocks were kept (one text, the last signature) goes back as one block.
//!
//! The [`StreamDecoder`] follows the event protocol: `message_start` (input usage),
//! `content_block_start/delta/stop` (`text_delta`, `input_json_delta`, `thinking_delta`,
//! `signature_delta`; `redacted_thinking` blocks arrive whole in their start event),
//! `message_delta` (stop reason, output usage), `message_stop`, `ping`, and `error` events, which
//! become [`ModelError`]s with the matching HTTP status (an `overloaded_error` is a retryable 529).
//! Unknown events and block types are skipped, as the API's versioning policy asks. The decoder is
//! public so tests can feed it recorded streams split at every byte offset.

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::stream::{Assembly, SseDecoder, Wire};
use super::transport::Endpoint;
use super::{
    Attachment, FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelRequest,
    ModelResponse, ModelSettings, NativeKind, Reasoning, ThinkingBlock, ToolChoice,
};

/// The API version header value this client speaks.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Output cap sent when the request sets none (`max_tokens` is mandatory for this API).
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

/// A client for the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    endpoint: Endpoint,
}

impl AnthropicClient {
    /// Builds a client from settings.
    pub fn new(settings: &ModelSettings) -> Result<Self, ModelError> {
        let base_url = settings
            .effective_base_url()
            .unwrap_or_else(|| "https://api.anthropic.com".to_owned());
        Ok(Self {
            endpoint: Endpoint::new(settings, &base_url)?,
        })
    }

    /// The endpoint: `{base}/v1/messages`, or `{base}/messages` when the base already ends in `/v1`.
    pub(crate) fn messages_url(&self) -> String {
        let base_url = &self.endpoint.base_url;
        if base_url.ends_with("/v1") {
            format!("{base_url}/messages")
        } else {
            format!("{base_url}/v1/messages")
        }
    }
}

/// Thinking budget for a reasoning effort: `low`, `medium`, `high`, or a number of tokens.
fn thinking_budget(effort: &str) -> Option<u32> {
    match effort.trim().to_ascii_lowercase().as_str() {
        "" | "none" | "off" | "false" | "disabled" => None,
        "minimal" | "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16384),
        "max" | "xhigh" => Some(32000),
        other => other
            .parse::<u32>()
            .ok()
            .map(|n| n.max(1024))
            .or(Some(4096)),
    }
}

/// The JSON body of a streamed Messages request.
pub fn request_body(request: &ModelRequest) -> Value {
    let mut max_tokens = request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let budget = request.reasoning.as_deref().and_then(thinking_budget);
    let mut body = json!({
        "model": request.model,
        "messages": messages_json(&request.messages),
        "stream": true,
    });
    if let Some(budget) = budget {
        if max_tokens <= budget {
            max_tokens = budget.saturating_add(DEFAULT_MAX_TOKENS);
        }
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    body["max_tokens"] = json!(max_tokens);
    // Extended thinking accepts only the default temperature.
    if let Some(t) = request.temperature.filter(|_| budget.is_none()) {
        body["temperature"] = json!(t);
    }
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
        // With extended thinking the API accepts only `auto` and `none`: a forced choice is
        // dropped there rather than failing the call.
        let choice = match &request.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!({"type": "none"})),
            _ if budget.is_some() => None,
            ToolChoice::Required => Some(json!({"type": "any"})),
            ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
        };
        if let Some(choice) = choice {
            body["tool_choice"] = choice;
        }
    }
    // Anthropic's abuse detection tells users apart by this hash (never the principal itself).
    if let Some(id) = &request.safety_identifier {
        body["metadata"] = json!({"user_id": id});
    }
    // A cache breakpoint at the end of the stable prefix (tools, then system): later calls of
    // the session read it from the cache instead of paying for it again.
    if super::prefix_cache_key(request).is_some() {
        let breakpoint = json!({"type": "ephemeral"});
        if !request.system.is_empty() {
            body["system"] = json!([{"type": "text", "text": request.system,
                                     "cache_control": breakpoint}]);
        } else if let Some(last) = body["tools"].as_array_mut().and_then(|t| t.last_mut()) {
            last["cache_control"] = breakpoint;
        }
    }
    body
}

fn messages_json(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::User {
                content,
                attachments,
            } => {
                // Files first: Anthropic advises images and documents before the question.
                let mut blocks = file_blocks(attachments);
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                ("user", blocks)
            }
            Message::Assistant {
                content,
                reasoning,
                tool_calls,
            } => {
                let mut blocks = reasoning.as_ref().map(thinking_json).unwrap_or_default();
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for call in tool_calls {
                    let input = match &call.input {
                        Value::Object(_) => call.input.clone(),
                        other => json!({"input": other}),
                    };
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": input,
                    }));
                }
                ("assistant", blocks)
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                attachments,
                ..
            } => {
                let files = file_blocks(attachments);
                let content = if files.is_empty() {
                    json!(content)
                } else {
                    let mut blocks = Vec::with_capacity(files.len() + 1);
                    if !content.is_empty() {
                        blocks.push(json!({"type": "text", "text": content}));
                    }
                    blocks.extend(files);
                    Value::Array(blocks)
                };
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// The native blocks of the attachments whose bytes are loaded: `image` for images, `document`
/// for PDFs, each with a base64 source. Others were turned into a note before the call.
fn file_blocks(attachments: &[Attachment]) -> Vec<Value> {
    attachments
        .iter()
        .filter_map(|a| {
            let data = a.data.as_ref()?;
            let source = json!({"type": "base64", "media_type": a.media_type, "data": data});
            match a.native_kind()? {
                NativeKind::Image => Some(json!({"type": "image", "source": source})),
                NativeKind::Pdf => Some(json!({
                    "type": "document", "source": source, "title": a.name(),
                })),
            }
        })
        .collect()
}

/// The reasoning blocks an assistant message sends back: every kept block, verbatim and in order;
/// for a message in the older format, its text as one block if it has a signature. Thinking
/// without a signature is not sent: the API would refuse it.
fn thinking_json(reasoning: &Reasoning) -> Vec<Value> {
    if reasoning.blocks.is_empty() {
        return match &reasoning.signature {
            Some(signature) => vec![json!({
                "type": "thinking", "thinking": reasoning.text, "signature": signature,
            })],
            None => Vec::new(),
        };
    }
    reasoning
        .blocks
        .iter()
        .filter_map(|block| match block {
            ThinkingBlock::Thinking {
                thinking,
                signature,
            } => (!signature.is_empty())
                .then(|| json!({"type": "thinking", "thinking": thinking, "signature": signature})),
            ThinkingBlock::RedactedThinking { data } => {
                Some(json!({"type": "redacted_thinking", "data": data}))
            }
        })
        .collect()
}

#[async_trait::async_trait]
impl ModelClient for AnthropicClient {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let body = request_body(request);
        let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned())];
        let settings = &self.endpoint.settings;
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push(("x-api-key", key.to_owned()));
        }
        self.endpoint
            .stream(
                self.messages_url(),
                headers,
                &body,
                &request.model,
                StreamDecoder::new,
                on_event,
            )
            .await
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.endpoint
            .settings
            .context_window
            .or_else(|| super::windows::known_context_window(model))
    }
}

#[derive(Debug)]
enum BlockKind {
    Text,
    /// Position in the answer's `thinking` list (which also holds redacted blocks).
    Thinking(usize),
    /// A tool call, assembled under the block's index.
    Tool,
    Other,
}

#[derive(Debug)]
struct Block {
    index: u64,
    kind: BlockKind,
}

/// Incremental decoder of a Messages SSE body.
pub type StreamDecoder = SseDecoder<Messages>;

/// What Messages stream events mean: the [`Wire`] of [`StreamDecoder`].
#[derive(Debug, Default)]
pub struct Messages {
    blocks: Vec<Block>,
    /// A thinking block began after earlier reasoning text: its first text starts a new paragraph.
    reasoning_break: bool,
    cache_creation: u64,
}

impl Wire for Messages {
    fn describe(event: &SseEvent) -> String {
        format!("a `{}` event", event.event)
    }

    fn on_event(
        &mut self,
        event: &SseEvent,
        value: &Value,
        answer: &mut Assembly,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(&event.event);
        match kind {
            "message_start" => {
                if let Some(usage) = value.pointer("/message/usage") {
                    self.read_usage(usage, answer);
                }
            }
            "content_block_start" => self.on_block_start(value, answer, out),
            "content_block_delta" => self.on_block_delta(value, answer, out)?,
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    answer.finish = Some(map_stop_reason(reason));
                }
                if let Some(usage) = value.get("usage") {
                    self.read_usage(usage, answer);
                }
            }
            "message_stop" => answer.done = true,
            "error" => return Err(error_event(value)),
            // ping, content_block_stop, and event types added after this client was written.
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, answer: &mut Assembly) -> Result<(), ModelError> {
        if !answer.done && answer.finish.is_none() {
            return Err(ModelError::Malformed(
                "the stream ended before the response was complete (no message_stop)".to_owned(),
            ));
        }
        let usage = &mut answer.usage;
        usage.input_tokens = usage
            .input_tokens
            .saturating_add(usage.cache_read_tokens)
            .saturating_add(self.cache_creation);
        Ok(())
    }
}

impl Messages {
    fn read_usage(&mut self, usage: &Value, answer: &mut Assembly) {
        let number = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = number("input_tokens") {
            answer.usage.input_tokens = n;
        }
        if let Some(n) = number("output_tokens") {
            answer.usage.output_tokens = n;
        }
        if let Some(n) = number("cache_read_input_tokens") {
            answer.usage.cache_read_tokens = n;
        }
        if let Some(n) = number("cache_creation_input_tokens") {
            self.cache_creation = n;
        }
    }

    fn on_block_start(&mut self, value: &Value, answer: &mut Assembly, out: &mut Vec<ModelEvent>) {
        let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
        let block = value.get("content_block").unwrap_or(&Value::Null);
        let text_of = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        // A block that starts again at an index replaces the one there.
        self.blocks.retain(|b| b.index != index);
        answer.drop_call(index);
        let kind = match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                answer.push_text(&text_of("text"), out);
                BlockKind::Text
            }
            "thinking" => {
                let slot = self.start_thinking(text_of("signature"), answer);
                self.push_thinking(slot, text_of("thinking"), answer, out);
                BlockKind::Thinking(slot)
            }
            "redacted_thinking" => {
                let slot = answer.thinking.len();
                answer.thinking.push(ThinkingBlock::RedactedThinking {
                    data: text_of("data"),
                });
                BlockKind::Thinking(slot)
            }
            "tool_use" | "server_tool_use" => {
                let json = match block.get("input") {
                    Some(Value::Object(map)) if !map.is_empty() => {
                        Value::Object(map.clone()).to_string()
                    }
                    _ => String::new(),
                };
                let call = answer.call(index);
                call.id = Some(
                    Some(text_of("id"))
                        .filter(|id| !id.is_empty())
                        .unwrap_or_else(|| format!("toolu_{index}")),
                );
                call.name = text_of("name");
                call.start(out);
                call.append(&json, out);
                BlockKind::Tool
            }
            _ => BlockKind::Other,
        };
        self.blocks.push(Block { index, kind });
    }

    fn on_block_delta(
        &mut self,
        value: &Value,
        answer: &mut Assembly,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
        let delta = value.get("delta").unwrap_or(&Value::Null);
        let field = |key: &str| {
            delta
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match delta.get("type").and_then(Value::as_str).unwrap_or("") {
            "text_delta" => answer.push_text(&field("text"), out),
            "thinking_delta" => {
                let slot = self.thinking_slot(index, answer)?;
                self.push_thinking(slot, field("thinking"), answer, out);
            }
            "signature_delta" => {
                let slot = self.thinking_slot(index, answer)?;
                if let Some(ThinkingBlock::Thinking { signature, .. }) =
                    answer.thinking.get_mut(slot)
                {
                    signature.push_str(&field("signature"));
                }
            }
            "input_json_delta" => match answer.existing_call(index) {
                Some(call) => call.append(&field("partial_json"), out),
                None => {
                    return Err(ModelError::Malformed(format!(
                        "input_json_delta for content block {index}, which is not a tool_use block"
                    )));
                }
            },
            _ => {}
        }
        Ok(())
    }

    /// The thinking block a delta for content block `index` belongs to. A delta whose block was
    /// never started starts one (lenient, as the decoder was before blocks were kept); a delta for
    /// a text or tool block is malformed.
    fn thinking_slot(&mut self, index: u64, answer: &mut Assembly) -> Result<usize, ModelError> {
        match self
            .blocks
            .iter()
            .find(|b| b.index == index)
            .map(|b| &b.kind)
        {
            Some(BlockKind::Thinking(slot)) => Ok(*slot),
            None => {
                let slot = self.start_thinking(String::new(), answer);
                self.blocks.push(Block {
                    index,
                    kind: BlockKind::Thinking(slot),
                });
                Ok(slot)
            }
            Some(_) => Err(ModelError::Malformed(format!(
                "a thinking delta for content block {index}, which is not a thinking block"
            ))),
        }
    }

    /// Opens a new thinking block; its text will start a new paragraph of the displayed reasoning.
    fn start_thinking(&mut self, signature: String, answer: &mut Assembly) -> usize {
        answer.thinking.push(ThinkingBlock::Thinking {
            thinking: String::new(),
            signature,
        });
        self.reasoning_break = answer.has_reasoning();
        answer.thinking.len() - 1
    }

    /// Appends thinking text to block `slot` and to the displayed reasoning.
    fn push_thinking(
        &mut self,
        slot: usize,
        text: String,
        answer: &mut Assembly,
        out: &mut Vec<ModelEvent>,
    ) {
        if text.is_empty() {
            return;
        }
        if let Some(ThinkingBlock::Thinking { thinking, .. }) = answer.thinking.get_mut(slot) {
            thinking.push_str(&text);
        }
        let text = if std::mem::take(&mut self.reasoning_break) {
            format!("\n\n{text}")
        } else {
            text
        };
        answer.push_reasoning(&text, out);
    }
}

/// Maps an Anthropic `stop_reason`.
pub(crate) fn map_stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// An `error` event: its `error.type` gives the HTTP status it stands for.
fn error_event(value: &Value) -> ModelError {
    let kind = value
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let status = match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    };
    let message = value
        .pointer("/error/message")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(|m| format!("{m} ({kind})"))
        .unwrap_or_else(|| format!("the server sent an error event ({kind})"));
    match status {
        401 | 403 => ModelError::Auth { status, message },
        _ if super::is_context_overflow(status, &message) => {
            ModelError::ContextTooLong { status, message }
        }
        _ => ModelError::Http { status, message },
    }
}
