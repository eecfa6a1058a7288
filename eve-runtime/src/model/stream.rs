//! The decoding every streamed wire protocol shares, so each protocol keeps only its own events.
//!
//! [`SseDecoder`] owns the SSE framing (bytes cut anywhere, events out), the event loop (nothing
//! after the protocol's end), the JSON of each event's data (a payload that is not JSON is a
//! malformed stream), and the [`Assembly`] of the answer: text and reasoning as they grow, tool
//! calls built from pieces and announced once their name is known, usage, and the finish reason
//! (a `stop` with tool calls is a tool-call finish). A protocol implements [`Wire`]: what its
//! events mean, and when a stream that ended is whole.

use serde_json::{Value, json};

use super::sse::{SseEvent, SseParser};
use super::transport::{self, Decoder};
use super::{
    FinishReason, ModelError, ModelEvent, ModelResponse, Reasoning, ThinkingBlock, ToolCall, Usage,
};

/// One wire protocol's reading of its stream events.
pub trait Wire: Default + Send + std::fmt::Debug {
    /// A data line that ends the stream by itself, not JSON (`[DONE]`), if the protocol has one.
    const END_MARKER: Option<&'static str> = None;

    /// How an error names `event` (`a stream chunk`, ``a `message_start` event``).
    fn describe(event: &SseEvent) -> String;

    /// Reads one event's JSON payload into `answer`, appending the events it completes to `out`.
    fn on_event(
        &mut self,
        event: &SseEvent,
        payload: &Value,
        answer: &mut Assembly,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError>;

    /// At the end of the stream: says why the answer is incomplete or malformed, or completes
    /// what the protocol reports in its own way (usage, for one).
    fn finish(&mut self, answer: &mut Assembly) -> Result<(), ModelError>;
}

/// The answer as it is being streamed.
#[derive(Debug, Default)]
pub struct Assembly {
    text: String,
    /// Displayed reasoning.
    reasoning: String,
    /// Reasoning blocks to send back verbatim (Anthropic), in arrival order.
    pub(super) thinking: Vec<ThinkingBlock>,
    calls: Vec<CallBuilder>,
    /// Usage as last reported.
    pub(super) usage: Usage,
    /// The finish reason, once the stream gave one.
    pub(super) finish: Option<FinishReason>,
    /// The protocol's end was received: later events are ignored.
    pub(super) done: bool,
}

/// One tool call being assembled from pieces.
#[derive(Debug)]
pub(super) struct CallBuilder {
    /// The protocol's position of the call (a Chat Completions `index`, a content block index).
    pub(super) index: u64,
    /// The provider's call id, once sent.
    pub(super) id: Option<String>,
    pub(super) name: String,
    arguments: String,
    /// `ToolCallStart` was sent.
    started: bool,
}

impl CallBuilder {
    /// The call id, or a stable one made up from the index when the server sent none.
    pub(super) fn id(&self) -> String {
        self.id
            .clone()
            .unwrap_or_else(|| format!("call_{}", self.index))
    }

    /// Announces the call, once: `ToolCallStart`, then the arguments received before it.
    pub(super) fn start(&mut self, out: &mut Vec<ModelEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        let id = self.id();
        out.push(ModelEvent::ToolCallStart {
            id: id.clone(),
            name: self.name.clone(),
        });
        if !self.arguments.is_empty() {
            out.push(ModelEvent::ToolCallDelta {
                id,
                delta: self.arguments.clone(),
            });
        }
    }

    /// Appends a piece of the arguments, passed on at once when the call is announced.
    pub(super) fn append(&mut self, piece: &str, out: &mut Vec<ModelEvent>) {
        if piece.is_empty() {
            return;
        }
        self.arguments.push_str(piece);
        if self.started {
            out.push(ModelEvent::ToolCallDelta {
                id: self.id(),
                delta: piece.to_owned(),
            });
        }
    }
}

impl Assembly {
    /// Appends visible text.
    pub(super) fn push_text(&mut self, text: &str, out: &mut Vec<ModelEvent>) {
        if !text.is_empty() {
            self.text.push_str(text);
            out.push(ModelEvent::TextDelta {
                text: text.to_owned(),
            });
        }
    }

    /// Appends displayed reasoning.
    pub(super) fn push_reasoning(&mut self, text: &str, out: &mut Vec<ModelEvent>) {
        if !text.is_empty() {
            self.reasoning.push_str(text);
            out.push(ModelEvent::ReasoningDelta {
                text: text.to_owned(),
            });
        }
    }

    /// Whether any reasoning text was displayed.
    pub(super) fn has_reasoning(&self) -> bool {
        !self.reasoning.is_empty()
    }

    /// The tool calls so far, in the order they began.
    pub(super) fn calls(&self) -> &[CallBuilder] {
        &self.calls
    }

    /// The call at `index`, begun when there is none yet.
    pub(super) fn call(&mut self, index: u64) -> &mut CallBuilder {
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
        &mut self.calls[position]
    }

    /// The call at `index`, if one began.
    pub(super) fn existing_call(&mut self, index: u64) -> Option<&mut CallBuilder> {
        self.calls.iter_mut().find(|c| c.index == index)
    }

    /// Forgets the call at `index` (its place was taken by another part of the answer).
    pub(super) fn drop_call(&mut self, index: u64) {
        self.calls.retain(|c| c.index != index);
    }

    /// The response as assembled.
    fn response(&self) -> ModelResponse {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .iter()
            .map(|call| ToolCall {
                id: call.id(),
                name: call.name.clone(),
                input: parse_arguments(&call.arguments),
            })
            .collect();
        let mut finish_reason = self.finish.unwrap_or_default();
        if !tool_calls.is_empty() && finish_reason == FinishReason::Stop {
            finish_reason = FinishReason::ToolCalls;
        }
        let signature = self.thinking.iter().rev().find_map(|block| match block {
            ThinkingBlock::Thinking { signature, .. } if !signature.is_empty() => {
                Some(signature.clone())
            }
            _ => None,
        });
        let reasoning =
            (!self.reasoning.is_empty() || !self.thinking.is_empty()).then(|| Reasoning {
                text: self.reasoning.clone(),
                signature,
                blocks: self.thinking.clone(),
            });
        ModelResponse {
            content: self.text.clone(),
            reasoning,
            tool_calls,
            usage: self.usage,
            finish_reason,
        }
    }
}

/// Parses assembled tool arguments: empty means `{}`, invalid JSON is kept as a string.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Incremental decoder of one protocol's SSE body.
#[derive(Debug, Default)]
pub struct SseDecoder<W> {
    sse: SseParser,
    pending: Vec<SseEvent>,
    wire: W,
    answer: Assembly,
}

impl<W: Wire> SseDecoder<W> {
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

    /// Ends the stream and assembles the response.
    pub fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<ModelResponse, ModelError> {
        let mut pending = std::mem::take(&mut self.pending);
        if !self.answer.done {
            self.sse.finish(&mut pending);
        }
        self.drain(&mut pending, out)?;
        self.wire.finish(&mut self.answer)?;
        Ok(self.answer.response())
    }

    fn drain(
        &mut self,
        pending: &mut Vec<SseEvent>,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        for event in pending.drain(..) {
            if self.answer.done {
                continue;
            }
            self.on_event(&event, out)?;
        }
        Ok(())
    }

    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if W::END_MARKER == Some(data) {
            self.answer.done = true;
            return Ok(());
        }
        let payload: Value = serde_json::from_str(data).map_err(|e| {
            ModelError::Malformed(format!(
                "{} is not JSON ({e}): {}",
                W::describe(event),
                transport::quote(data.as_bytes())
            ))
        })?;
        self.wire.on_event(event, &payload, &mut self.answer, out)
    }
}

impl<W: Wire> Decoder for SseDecoder<W> {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        SseDecoder::push(self, bytes, out)
    }
    fn is_done(&self) -> bool {
        self.answer.done
    }
    fn sse_events(&self) -> usize {
        self.sse.dispatched()
    }
    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<ModelResponse, ModelError> {
        SseDecoder::finish(self, out)
    }
}
