//! Tool results beyond text: images and files a tool returns, and a projection of a large result
//! for the model while the whole result stays in the stream.
//!
//! A tool's output (a script's JSON on stdout, an MCP server's content) may take two shapes, both
//! eve's (`ToolModelOutput` of eve's `toModelOutput`):
//!
//! - **content**: `{"type": "content", "value": [parts]}`, parts being
//!   `{"type": "text", "text"}` and `{"type": "file", "data": {"type": "data", "data": <base64>},
//!   "mediaType", "filename"?}`. The model gets the text and each file as the provider's image or
//!   document part (a note with its path for a model or a type that takes none).
//! - **projection**: exactly `{"output": <the whole result>, "modelOutput": <what the model
//!   sees>}`, `modelOutput` being `{"type": "text", "value"}`, `{"type": "json", "value"}` or a
//!   content value as above. The stream and the journal keep both; the model sees only
//!   `modelOutput`.
//!
//! [`stage_files`] runs on a result before anything keeps it: every file's bytes go to the
//! session's workspace ([`crate::workspace::attachments`]) and the part keeps a reference
//! (`path`, `size`, `sha256`), so no event or history row carries the bytes. [`for_model`] then
//! reads what the model gets from the stored result.

use std::path::Path;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::model::Attachment;
use crate::workspace::attachments::{Upload, stage};

/// Whether `output` is a content value: `{"type": "content", "value": [...]}`.
fn is_content(output: &Value) -> bool {
    output.get("type").and_then(Value::as_str) == Some("content")
        && output.get("value").is_some_and(Value::is_array)
        && output.as_object().is_some_and(|o| o.len() == 2)
}

/// The projection's `(output, modelOutput)`, when `output` is one.
fn projection(output: &Value) -> Option<(&Value, &Value)> {
    let map = output.as_object()?;
    if map.len() != 2 {
        return None;
    }
    let model = map.get("modelOutput")?;
    let kind = model.get("type").and_then(Value::as_str)?;
    if !matches!(kind, "text" | "json" | "content") || model.get("value").is_none() {
        return None;
    }
    Some((map.get("output")?, model))
}

/// Stages the bytes of every file part of `output` (a content value, or a projection's
/// `modelOutput`) in the workspace at `workspace`, replacing each `data` by the staged file's
/// `path`, `size` and `sha256`. A part whose bytes cannot be read (not base64) or staged becomes
/// a text part saying so. Returns how many files were staged.
pub(crate) fn stage_files(output: &mut Value, workspace: &Path) -> usize {
    let target = if is_content(output) {
        output
    } else if projection(output).is_some() {
        match output.get_mut("modelOutput") {
            Some(model) if is_content(model) => model,
            _ => return 0,
        }
    } else {
        return 0;
    };
    let Some(Value::Array(parts)) = target.get_mut("value") else {
        return 0;
    };
    let mut staged = 0;
    for part in parts.iter_mut() {
        if part.get("type").and_then(Value::as_str) != Some("file") {
            continue;
        }
        let Some(data) = part.get("data") else {
            continue;
        };
        let b64 = match data {
            Value::Object(d) if d.get("type").and_then(Value::as_str) == Some("data") => {
                d.get("data").and_then(Value::as_str)
            }
            Value::String(s) => Some(s.as_str()),
            _ => None,
        };
        let media_type = part
            .get("mediaType")
            .and_then(Value::as_str)
            .unwrap_or("application/octet-stream")
            .to_owned();
        let filename = part
            .get("filename")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let bytes = b64.map(|b| {
            let b = b.split_once(";base64,").map_or(b, |(_, d)| d);
            base64::engine::general_purpose::STANDARD.decode(b.trim())
        });
        let upload = match bytes {
            Some(Ok(bytes)) => Upload {
                media_type,
                filename,
                bytes,
            },
            _ => {
                *part = json!({"type": "text", "text": format!(
                    "[a file of type {media_type} the tool returned could not be read: its data \
                     is not base64]"
                )});
                continue;
            }
        };
        match stage(workspace, &upload) {
            Ok(a) => {
                let mut out = Map::new();
                out.insert("type".into(), json!("file"));
                out.insert("mediaType".into(), json!(a.media_type));
                if let Some(name) = &a.filename {
                    out.insert("filename".into(), json!(name));
                }
                out.insert("path".into(), json!(a.path));
                out.insert("size".into(), json!(a.size));
                out.insert("sha256".into(), json!(a.sha256));
                *part = Value::Object(out);
                staged += 1;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot stage a file a tool returned");
                *part = json!({"type": "text", "text": format!(
                    "[a file of type {} the tool returned could not be kept: {e}]",
                    upload.media_type
                )});
            }
        }
    }
    staged
}

/// What the model gets for a stored tool result: its text, and the staged files it returned.
pub(crate) fn for_model(output: &Value) -> (String, Vec<Attachment>) {
    if is_content(output) {
        return content_for_model(output);
    }
    if let Some((_, model)) = projection(output) {
        return match model.get("type").and_then(Value::as_str) {
            Some("text") => (text_of(&model["value"]), Vec::new()),
            Some("json") => (model["value"].to_string(), Vec::new()),
            _ => content_for_model(model),
        };
    }
    (text_of(output), Vec::new())
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn content_for_model(content: &Value) -> (String, Vec<Attachment>) {
    let mut text = Vec::new();
    let mut files = Vec::new();
    for part in content["value"].as_array().into_iter().flatten() {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => text.push(text_of(part.get("text").unwrap_or(&Value::Null))),
            Some("file") => {
                let path = part.get("path").and_then(Value::as_str);
                let sha = part.get("sha256").and_then(Value::as_str);
                if let (Some(path), Some(sha)) = (path, sha) {
                    files.push(Attachment {
                        path: path.to_owned(),
                        media_type: part
                            .get("mediaType")
                            .and_then(Value::as_str)
                            .unwrap_or("application/octet-stream")
                            .to_owned(),
                        filename: part
                            .get("filename")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        size: part.get("size").and_then(Value::as_u64).unwrap_or(0),
                        sha256: sha.to_owned(),
                        data: None,
                    });
                }
            }
            _ => {}
        }
    }
    (text.join("\n"), files)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn content_files_are_staged_and_referenced() {
        let dir = tempfile::tempdir().unwrap();
        let mut output = json!({"type": "content", "value": [
            {"type": "text", "text": "a chart"},
            {"type": "file", "data": {"type": "data", "data": "aGVsbG8="},
             "mediaType": "image/png", "filename": "c.png"},
        ]});
        assert_eq!(stage_files(&mut output, dir.path()), 1);
        assert!(!output.to_string().contains("aGVsbG8="));
        let (text, files) = for_model(&output);
        assert_eq!(text, "a chart");
        assert_eq!(files.len(), 1);
        assert_eq!(
            crate::workspace::attachments::load(dir.path(), &files[0]).unwrap(),
            b"hello"
        );
    }

    #[test]
    fn a_projection_keeps_the_whole_and_shows_the_model_its_part() {
        let mut output = json!({"output": {"rows": [1, 2, 3]},
                                "modelOutput": {"type": "text", "value": "3 rows"}});
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(stage_files(&mut output, dir.path()), 0);
        assert_eq!(for_model(&output), ("3 rows".to_owned(), Vec::new()));
        // Not exactly the two keys: an ordinary result, sent whole.
        let plain = json!({"output": 1, "other": 2});
        let text = for_model(&plain).0;
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), plain);
    }
}
