//! Helpers for the crate's unit tests that build model messages.

use super::{Message, ToolCall};

impl Message {
    /// Tests: an assistant message that only calls tools, each `(id, name, input)`.
    pub(crate) fn calling(calls: &[(&str, &str, serde_json::Value)]) -> Message {
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: calls
                .iter()
                .map(|(id, name, input)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    input: input.clone(),
                })
                .collect(),
        }
    }
}
