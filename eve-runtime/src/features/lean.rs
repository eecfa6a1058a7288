//! Lean context (`lean_context:`): keeping what each model call sends small without losing what
//! the model needs.
//!
//! - **Automatic catalogue**: above `max_inline_tools` tools, the build's tools are offered
//!   through the deferred-tools catalogue (`search_tools`/`call_tool`) and only the
//!   `keep_inline` most used of them (by the calls in the session's context; ties in the
//!   build's order) keep their schemas in the request.
//! - **Old outputs cut**: a tool result from before the latest user message that is longer than
//!   `cut_lines` lines is sent as its head and tail around `[N lines cut]`.
//! - **Repeated calls folded**: when the context holds the same call (name and input) more than
//!   once, each earlier result becomes one line pointing at the latest, which keeps its text.
//!
//! All of it is computed from the stored context when a request is made and never written back:
//! the journal keeps every output whole, and a resumed turn sends the same request.

use std::collections::HashMap;

use async_trait::async_trait;

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Shaped, TurnExtension, TurnView};
use crate::model::{Message, ModelRequest};
use crate::store::Batch;

/// Lean context as a feature of the turn: the request's messages, leaned.
pub(crate) struct Lean;

#[async_trait]
impl TurnExtension for Lean {
    fn name(&self) -> &'static str {
        "lean"
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        let cut_lines = view.build.manifest.agent.config.lean_context.cut_lines as usize;
        request.messages = lean_messages(&request.messages, cut_lines);
        Ok(Shaped::Call)
    }
}

/// The context as sent: old long outputs cut, repeated identical calls folded.
pub(crate) fn lean_messages(messages: &[Message], cut_lines: usize) -> Vec<Message> {
    let last_user = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    // Each call's key (tool and canonical input) by call id, and the last call id per key.
    let mut key_of: HashMap<&str, String> = HashMap::new();
    let mut latest: HashMap<String, (String, String)> = HashMap::new();
    for message in messages {
        if let Message::Assistant { tool_calls, .. } = message {
            for call in tool_calls {
                let key = format!("{}\u{0}{}", call.name, call.input);
                key_of.insert(call.id.as_str(), key.clone());
                latest.insert(key, (call.id.clone(), call.name.clone()));
            }
        }
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let Message::Tool {
                call_id,
                name,
                content,
                is_error,
                attachments,
            } = message
            else {
                return message.clone();
            };
            let folded = key_of
                .get(call_id.as_str())
                .and_then(|k| latest.get(k))
                .filter(|(last, _)| last != call_id);
            let content = if let Some((last, _)) = folded {
                format!(
                    "[the same `{name}` call was made again later ({last}); its result is there]"
                )
            } else if cut_lines > 0 && i < last_user {
                cut(content, cut_lines)
            } else {
                content.clone()
            };
            Message::Tool {
                call_id: call_id.clone(),
                name: name.clone(),
                content,
                is_error: *is_error,
                attachments: attachments.clone(),
            }
        })
        .collect()
}

/// `text` cut to its first and last lines around `[N lines cut]` when it has more than `max`.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max {
        return text.to_owned();
    }
    let head = max / 2;
    let tail = max - head - 1;
    let cut = lines.len() - head - tail;
    let mut out = lines[..head].join("\n");
    out.push_str(&format!("\n[{cut} lines cut]\n"));
    out.push_str(&lines[lines.len() - tail..].join("\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(id: &str, name: &str, content: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: name.into(),
            content: content.into(),
            is_error: false,
            attachments: Vec::new(),
        }
    }

    fn user(text: &str) -> Message {
        Message::user(text)
    }

    #[test]
    fn a_long_output_is_cut_to_head_and_tail() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let out = cut(&text, 10);
        assert_eq!(out.lines().count(), 10);
        assert!(out.starts_with("line 1\nline 2\nline 3\nline 4\nline 5\n[91 lines cut]\n"));
        assert!(out.ends_with("\n[91 lines cut]\nline 97\nline 98\nline 99\nline 100"));
        assert_eq!(cut("a\nb", 10), "a\nb");
    }

    #[test]
    fn only_outputs_before_the_latest_user_message_are_cut_and_repeats_fold() {
        let long: String = (1..=50).map(|i| format!("row {i}\n")).collect();
        let messages = vec![
            user("first"),
            Message::calling(&[("a", "ls", json!({"dir": "/"}))]),
            result("a", "ls", &long),
            Message::calling(&[("b", "cat", json!({}))]),
            result("b", "cat", &long),
            user("second"),
            Message::calling(&[("c", "ls", json!({"dir": "/"}))]),
            result("c", "ls", &long),
        ];
        let lean = lean_messages(&messages, 10);
        let content = |m: &Message| match m {
            Message::Tool { content, .. } => content.clone(),
            _ => String::new(),
        };
        assert!(content(&lean[2]).starts_with("[the same `ls` call was made again later (c)"));
        assert!(content(&lean[4]).contains("[41 lines cut]"));
        assert_eq!(
            content(&lean[7]),
            long,
            "the current turn's output stays whole"
        );
    }
}
