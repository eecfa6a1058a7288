//! The AI SDK UI message stream (protocol `v1`): a session's turn as `useChat` reads it.
//!
//! `POST /eve/v1/chat` takes the body `useChat` sends (`{id, messages: [{role, parts}]}`), hands
//! the last user message to the session named by `id`, and answers with Server-Sent Events whose
//! `data:` lines are UI message chunks: `start`, `start-step`, `text-*`, `reasoning-*`,
//! `tool-input-*`, `tool-output-*`, `finish-step`, `finish`, then `[DONE]`. Chunks carry only the
//! fields the AI SDK's strict chunk schema allows. The session is the source of truth: earlier
//! messages in the body are not replayed, because the session already holds them.
//!
//! A chat id addresses a session of the caller's, the same across restarts without a mapping
//! table ([`chat_session`]): any id that is not a session id maps to a session id derived from
//! it (and, for a caller that is not an operator, from its principal); a session id (`wrun_…`)
//! addresses that session, if the caller reaches it.

use std::collections::{HashSet, VecDeque};

use axum::body::Bytes;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::body::{self, InputResponse};
use super::error::ApiError;
use crate::engine::{Caller, events as ev};
use crate::store::StoredEvent;

/// Value of the `x-vercel-ai-ui-message-stream` response header.
pub const UI_STREAM_VERSION: &str = "v1";

/// What a chat request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChatInput {
    /// The last user message: its text and its file parts (`{type: "file", mediaType, url:
    /// "data:…", filename?}`, the AI SDK's `FileUIPart`).
    Message(super::uploads::UserInput),
    /// Answers to pending approvals (an extension: `inputResponses` next to `messages`).
    InputResponses(Vec<InputResponse>),
}

/// A parsed chat request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatRequest {
    /// The chat id (`useChat`'s `id`).
    pub(crate) chat_id: String,
    /// What to do.
    pub(crate) input: ChatInput,
}

/// Parses the body `useChat` posts.
pub(crate) fn parse_chat(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
    let bad = |m: &str| ApiError::bad_request("invalid_body", m.to_owned());
    let map = body::object(bytes)?.ok_or_else(|| bad("Send `{\"id\", \"messages\": [...]}`."))?;
    let chat_id = match map.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 256 => s.clone(),
        _ => {
            return Err(bad(
                "`id` must be a non-empty string (the chat id), at most 256 bytes.",
            ));
        }
    };
    if let Some(responses) = map.get("inputResponses").filter(|v| !v.is_null()) {
        return Ok(ChatRequest {
            chat_id,
            input: ChatInput::InputResponses(body::input_responses(responses)?),
        });
    }
    let Some(Value::Array(messages)) = map.get("messages") else {
        return Err(bad("`messages` must be an array of UI messages."));
    };
    let last = messages
        .last()
        .ok_or_else(|| bad("`messages` is empty: send the user's message."))?;
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return Err(bad(
            "The last message must have `role: \"user\"`; regenerating a reply is not supported.",
        ));
    }
    let mut files = Vec::new();
    if let Some(Value::Array(parts)) = last.get("parts") {
        for (i, part) in parts.iter().enumerate() {
            if part.get("type").and_then(Value::as_str) == Some("file") {
                files.push(super::uploads::file_part(i, part, "url")?);
            }
        }
    }
    let text = match message_text(last) {
        Some(text) => text,
        None if !files.is_empty() => String::new(),
        None => {
            return Err(bad(
                "The last message must have `parts` with at least one `{\"type\": \"text\", \"text\"}` or file.",
            ));
        }
    };
    Ok(ChatRequest {
        chat_id,
        input: ChatInput::Message(super::uploads::UserInput { text, files }),
    })
}

fn message_text(message: &Value) -> Option<String> {
    if let Some(Value::Array(parts)) = message.get("parts") {
        let texts: Vec<&str> = parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        if !texts.is_empty() {
            return Some(texts.join("\n"));
        }
    }
    // AI SDK 4 style: `content` as a string.
    message
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The session a chat id addresses.
pub fn chat_session_id(chat_id: &str) -> String {
    let usable = chat_id.starts_with("wrun_")
        && chat_id.len() <= 64
        && chat_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if usable {
        return chat_id.to_owned();
    }
    let digest = hex::encode(Sha256::digest(chat_id.as_bytes()));
    format!("wrun_chat_{}", &digest[..26])
}

/// The session a chat id addresses for `caller`, and whether a message may create it. An
/// operator's chat ids map as [`chat_session_id`] says. Anyone else's chat ids are their own:
/// an id that is not a session id maps to a session derived from the caller's principal and the
/// chat id (two callers' chats `42` are two sessions); a session id (`wrun_…`) addresses that
/// session only if it exists and is the caller's, and is never created, so no caller can take
/// an id another channel derives (a Telegram chat's, a Slack thread's) before its first message.
pub(crate) fn chat_session(chat_id: &str, caller: &Caller) -> (String, bool) {
    let id = chat_session_id(chat_id);
    if caller.is_operator() {
        return (id, true);
    }
    if id == chat_id {
        return (id, false);
    }
    let mut hasher = Sha256::new();
    hasher.update(caller.id().as_bytes());
    hasher.update([0u8]);
    hasher.update(chat_id.as_bytes());
    let digest = hex::encode(hasher.finalize());
    (format!("wrun_chat_{}", &digest[..26]), true)
}

fn sse(chunk: &Value) -> Bytes {
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// Turns a session's events into UI message chunks.
#[derive(Debug, Default)]
pub(crate) struct UiStream {
    message_id: String,
    text: Option<String>,
    reasoning: Option<String>,
    parts: u64,
    step_open: bool,
    inputs_started: HashSet<String>,
    calls_known: HashSet<String>,
}

impl UiStream {
    /// A stream for one assistant message.
    pub(crate) fn new(message_id: String) -> Self {
        Self {
            message_id,
            ..Self::default()
        }
    }

    /// The `start` chunk.
    pub(crate) fn start(&mut self, out: &mut VecDeque<Bytes>) {
        out.push_back(sse(&json!({"type": "start", "messageId": self.message_id})));
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.parts += 1;
        format!("{prefix}_{}", self.parts)
    }

    fn close_text(&mut self, out: &mut VecDeque<Bytes>) {
        if let Some(id) = self.text.take() {
            out.push_back(sse(&json!({"type": "text-end", "id": id})));
        }
    }

    fn close_reasoning(&mut self, out: &mut VecDeque<Bytes>) {
        if let Some(id) = self.reasoning.take() {
            out.push_back(sse(&json!({"type": "reasoning-end", "id": id})));
        }
    }

    fn close_parts(&mut self, out: &mut VecDeque<Bytes>) {
        self.close_reasoning(out);
        self.close_text(out);
    }

    fn ensure_step(&mut self, out: &mut VecDeque<Bytes>) {
        if !self.step_open {
            self.step_open = true;
            out.push_back(sse(&json!({"type": "start-step"})));
        }
    }

    fn known_call(&mut self, call_id: &str, tool: &str, input: Value, out: &mut VecDeque<Bytes>) {
        if self.calls_known.insert(call_id.to_owned()) {
            out.push_back(sse(&json!({
                "type": "tool-input-available", "toolCallId": call_id, "toolName": tool,
                "input": input,
            })));
        }
    }

    /// The chunks of one event.
    pub(crate) fn event(&mut self, event: &StoredEvent, out: &mut VecDeque<Bytes>) {
        let data = &event.data;
        let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or_default();
        match event.kind.as_str() {
            ev::STEP_STARTED => {
                self.close_parts(out);
                if self.step_open {
                    out.push_back(sse(&json!({"type": "finish-step"})));
                    self.step_open = false;
                }
                self.ensure_step(out);
            }
            ev::MESSAGE_APPENDED => {
                self.ensure_step(out);
                self.close_reasoning(out);
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("text");
                        out.push_back(sse(&json!({"type": "text-start", "id": id})));
                        self.text = Some(id.clone());
                        id
                    }
                };
                out.push_back(sse(
                    &json!({"type": "text-delta", "id": id, "delta": text("messageDelta")}),
                ));
            }
            ev::REASONING_APPENDED => {
                self.ensure_step(out);
                self.close_text(out);
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("reasoning");
                        out.push_back(sse(&json!({"type": "reasoning-start", "id": id})));
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push_back(sse(
                    &json!({"type": "reasoning-delta", "id": id, "delta": text("reasoningDelta")}),
                ));
            }
            ev::MESSAGE_COMPLETED => self.close_parts(out),
            ev::ACTION_INPUT_APPENDED => {
                self.ensure_step(out);
                self.close_parts(out);
                let call_id = text("callId").to_owned();
                if self.inputs_started.insert(call_id.clone()) {
                    out.push_back(sse(&json!({
                        "type": "tool-input-start", "toolCallId": call_id,
                        "toolName": text("toolName"),
                    })));
                }
                out.push_back(sse(&json!({
                    "type": "tool-input-delta", "toolCallId": call_id,
                    "inputTextDelta": text("inputTextDelta"),
                })));
            }
            ev::ACTIONS_REQUESTED => {
                self.ensure_step(out);
                self.close_parts(out);
                for action in data
                    .get("actions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let call_id = action
                        .get("callId")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let tool = action_tool_name(action);
                    let input = action.get("input").cloned().unwrap_or(Value::Null);
                    self.known_call(call_id, &tool, input, out);
                }
            }
            ev::ACTION_RESULT => {
                self.ensure_step(out);
                self.close_parts(out);
                let result = data.get("result").cloned().unwrap_or(Value::Null);
                let call_id = result
                    .get("callId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let tool = action_tool_name(&result);
                self.known_call(&call_id, &tool, Value::Null, out);
                let output = result.get("output").cloned().unwrap_or(Value::Null);
                let failed = result.get("isError").and_then(Value::as_bool) == Some(true)
                    || !matches!(text("status"), "completed" | "");
                if failed {
                    let error_text = match &output {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.push_back(sse(&json!({
                        "type": "tool-output-error", "toolCallId": call_id, "errorText": error_text,
                    })));
                } else {
                    out.push_back(sse(&json!({
                        "type": "tool-output-available", "toolCallId": call_id, "output": output,
                    })));
                }
            }
            ev::INPUT_REQUESTED => {
                self.close_parts(out);
                let mut payload = Map::new();
                payload.insert(
                    "requests".into(),
                    data.get("requests").cloned().unwrap_or(Value::Null),
                );
                out.push_back(sse(&json!({
                    "type": "data-eve-input-requested", "data": Value::Object(payload),
                })));
            }
            ev::STEP_COMPLETED => {
                self.close_parts(out);
                if self.step_open {
                    out.push_back(sse(&json!({"type": "finish-step"})));
                    self.step_open = false;
                }
            }
            ev::TURN_FAILED => {
                self.close_parts(out);
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("The turn failed.");
                out.push_back(sse(&json!({"type": "error", "errorText": message})));
            }
            _ => {}
        }
    }

    /// Closes what is open, then `finish` and `[DONE]`.
    pub(crate) fn finish(&mut self, out: &mut VecDeque<Bytes>) {
        self.close_parts(out);
        if self.step_open {
            out.push_back(sse(&json!({"type": "finish-step"})));
            self.step_open = false;
        }
        out.push_back(sse(&json!({"type": "finish"})));
        out.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
    }
}

/// The tool name of an action or a result (`load_skill` for skill loads).
fn action_tool_name(action: &Value) -> String {
    match action.get("kind").and_then(Value::as_str) {
        Some("load-skill" | "load-skill-result") => crate::engine::LOAD_SKILL.to_owned(),
        _ => action
            .get("toolName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    }
}
