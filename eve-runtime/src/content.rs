//! A user message with files, as it travels from a channel through the inbox into history.
//!
//! A channel stages the files of a message in the session's workspace first
//! ([`crate::workspace::attachments`]) and hands their references to [`Runtime::accept`] as
//! [`Extra::Attachments`](crate::engine::Extra::Attachments). The inbox keeps one text per message, so a
//! message with files is stored there as an envelope: a marker no text starts with (a plain text
//! that does is wrapped too, so nothing a sender types is ever read as an envelope) and the JSON of
//! the text and the references. The turn that takes the message reads it back with
//! [`UserContent::decode`]: history gets a [`Message::User`] with the references, and
//! `message.received` gets eve's file parts (media type, name, size: never the bytes, never the
//! staged path). The bytes are read from the workspace only for the model call that sends them.
//!
//! [`Runtime::accept`]: crate::engine::Runtime::accept

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::model::{Attachment, Message};

/// What starts an envelope: a NUL, which no channel's text carries in practice, and a name.
const MARKER: &str = "\u{0}eve.content\u{0}";

/// A user message: its text and the files sent with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UserContent {
    /// The text parts, joined by a newline.
    pub(crate) text: String,
    /// The staged files, in the order they were sent.
    #[serde(default)]
    pub(crate) attachments: Vec<Attachment>,
}

impl UserContent {
    /// A message of text only.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            attachments: Vec::new(),
        }
    }

    /// The inbox text of this message: the text itself when it has no files (and does not start
    /// like an envelope), else the envelope.
    pub(crate) fn encode(&self) -> String {
        if self.attachments.is_empty() && !self.text.starts_with(MARKER) {
            return self.text.clone();
        }
        let mut out = MARKER.to_owned();
        out.push_str(&serde_json::to_string(self).unwrap_or_default());
        out
    }

    /// Reads an inbox text back. A text that is not an envelope is the message's text; an
    /// envelope that does not parse (it cannot come from [`Self::encode`]) is kept as text too.
    pub(crate) fn decode(stored: &str) -> Self {
        match stored.strip_prefix(MARKER) {
            Some(json) => serde_json::from_str(json).unwrap_or_else(|_| Self::text(stored)),
            None => Self::text(stored),
        }
    }

    /// The history message.
    pub(crate) fn message(&self) -> Message {
        Message::User {
            content: self.text.clone(),
            attachments: self.attachments.clone(),
        }
    }

    /// `parts` of `message.received`, in eve's shape: `{text, type: "text"}` and
    /// `{type: "file", mediaType, filename, size}` (no bytes, no workspace path).
    pub(crate) fn parts(&self) -> Value {
        let mut parts = Vec::with_capacity(self.attachments.len() + 1);
        if !self.text.is_empty() || self.attachments.is_empty() {
            parts.push(json!({"text": self.text, "type": "text"}));
        }
        for a in &self.attachments {
            parts.push(json!({
                "filename": a.name(),
                "mediaType": a.media_type,
                "size": a.size,
                "type": "file",
            }));
        }
        Value::Array(parts)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn png() -> Attachment {
        Attachment {
            path: ".eve/attachments/ab/x.png".into(),
            media_type: "image/png".into(),
            filename: Some("x.png".into()),
            size: 3,
            sha256: "ab".into(),
            data: None,
        }
    }

    #[test]
    fn plain_text_stays_plain_and_files_round_trip() {
        assert_eq!(UserContent::text("hi").encode(), "hi");
        assert_eq!(UserContent::decode("hi"), UserContent::text("hi"));
        let content = UserContent {
            text: "look".into(),
            attachments: vec![png()],
        };
        let stored = content.encode();
        assert!(stored.starts_with(MARKER));
        assert_eq!(UserContent::decode(&stored), content);
    }

    #[test]
    fn a_text_that_looks_like_an_envelope_is_only_text() {
        let forged = format!("{MARKER}{}", json!({"text": "x", "attachments": [png()]}));
        let stored = UserContent::text(forged.clone()).encode();
        assert_eq!(UserContent::decode(&stored), UserContent::text(forged));
    }
}
