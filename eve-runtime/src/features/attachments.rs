//! Attachments: the files of user messages and tool results, sent to the model on each call.
//!
//! History keeps references to files staged in the session's workspace
//! ([`crate::workspace::attachments`]), never their bytes. Before each model call this feature
//! goes over the request's messages: a file the model takes natively (an image or a PDF, to a
//! model spoken to over OpenAI's or Anthropic's protocol) is read from the workspace (race-free,
//! its hash checked) and its bytes put on the request only, for the client to send as the
//! provider's own part; any other file, or one a model takes no files of (the `mock` provider),
//! becomes a note in the message's text with its path in the workspace, where the agent's tools
//! can read it. A file no longer in the workspace gets a note saying so.

use async_trait::async_trait;

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Shaped, TurnExtension, TurnView};
use crate::model::{Attachment, Message, ModelRequest, Protocol, Provider};
use crate::store::Batch;
use crate::workspace::attachments::load_base64;

/// The feature (always on; it does nothing to a request without files).
pub(crate) struct Attachments;

/// Whether the model of `model_id` (`provider/model`) takes images and PDFs as native parts.
pub(crate) fn takes_files(model_id: &str) -> bool {
    let provider = model_id.split_once('/').map_or(model_id, |(p, _)| p);
    Provider::parse(provider).is_some_and(|p| p.protocol() != Protocol::Mock)
}

/// The note a model gets in place of a file it is not sent.
fn note(a: &Attachment, why: Option<&str>) -> String {
    let mut out = format!(
        "[Attached file `{}` ({}, {} bytes) is in the workspace at {}",
        a.name(),
        a.media_type,
        a.size,
        a.path
    );
    if let Some(why) = why {
        out.push_str(&format!("; {why}"));
    }
    out.push(']');
    out
}

/// Fills the bytes of every file the model takes natively and turns the others into notes.
pub(crate) fn prepare(messages: &mut [Message], workspace: Option<&std::path::Path>, native: bool) {
    for message in messages {
        let (content, attachments) = match message {
            Message::User {
                content,
                attachments,
            }
            | Message::Tool {
                content,
                attachments,
                ..
            } => (content, attachments),
            Message::Assistant { .. } => continue,
        };
        if attachments.is_empty() {
            continue;
        }
        let mut notes = Vec::new();
        for a in attachments.iter_mut() {
            if !native || a.native_kind().is_none() {
                notes.push(note(a, None));
                continue;
            }
            match workspace.map(|w| load_base64(w, a)) {
                Some(Ok(data)) => a.data = Some(data),
                Some(Err(e)) => {
                    tracing::warn!(path = %a.path, error = %e, "an attached file cannot be read");
                    notes.push(note(a, Some("it can no longer be read")));
                }
                None => notes.push(note(a, Some("the workspace is not available"))),
            }
        }
        attachments.retain(|a| a.data.is_some());
        if !notes.is_empty() {
            if !content.is_empty() {
                content.push_str("\n\n");
            }
            content.push_str(&notes.join("\n"));
        }
    }
}

#[async_trait]
impl TurnExtension for Attachments {
    fn name(&self) -> &'static str {
        "attachments"
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        let has_files = request.messages.iter().any(|m| match m {
            Message::User { attachments, .. } | Message::Tool { attachments, .. } => {
                !attachments.is_empty()
            }
            Message::Assistant { .. } => false,
        });
        if !has_files {
            return Ok(Shaped::Call);
        }
        let native = takes_files(&view.model.model_id);
        let workspace = view.workspace().ok();
        prepare(&mut request.messages, workspace.as_deref(), native);
        Ok(Shaped::Call)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::workspace::attachments::{Upload, stage};

    #[test]
    fn native_files_get_bytes_and_others_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let png = stage(
            dir.path(),
            &Upload {
                media_type: "image/png".into(),
                filename: Some("a.png".into()),
                bytes: vec![1, 2, 3],
            },
        )
        .unwrap();
        let csv = stage(
            dir.path(),
            &Upload {
                media_type: "text/csv".into(),
                filename: Some("t.csv".into()),
                bytes: b"a,b".to_vec(),
            },
        )
        .unwrap();
        let message = Message::User {
            content: "see".into(),
            attachments: vec![png.clone(), csv.clone()],
        };
        let mut messages = vec![message.clone()];
        prepare(&mut messages, Some(dir.path()), true);
        let Message::User {
            content,
            attachments,
        } = &messages[0]
        else {
            panic!()
        };
        assert_eq!(attachments.len(), 1);
        assert_eq!(attachments[0].data.as_deref(), Some("AQID"));
        assert!(content.starts_with("see\n\n[Attached file `t.csv` (text/csv, 3 bytes)"));
        assert!(content.contains(&csv.path));

        let mut messages = vec![message];
        prepare(&mut messages, Some(dir.path()), false);
        let Message::User {
            content,
            attachments,
        } = &messages[0]
        else {
            panic!()
        };
        assert!(attachments.is_empty());
        assert!(content.contains(&png.path) && content.contains(&csv.path));
        assert!(takes_files("openai/gpt-4.1") && takes_files("anthropic/claude"));
        assert!(!takes_files("mock/echo"));
    }
}
