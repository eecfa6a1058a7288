//! Maps an MCP `tools/call` result onto eve's [`ToolResult`].
//!
//! The model sees one output value per call. `structuredContent`, when a server sends it, is the
//! machine-readable answer and wins; otherwise text blocks are joined, and blocks the model cannot
//! read as text (images, audio, binary resources) are summarised with their mime type. `isError`
//! makes the call a failure whose error is the server's text. The mapping reads the result as JSON,
//! so it does not depend on how rmcp models content blocks, and it never panics on what a server
//! sends; oversized output is cut at the default tool output cap, and the cut is said.

use std::time::Duration;

use serde_json::Value;

use crate::tools::ToolResult;

/// Characters of a text resource or block beyond which output is cut.
fn output_cap() -> usize {
    usize::try_from(eve_compile::DEFAULT_OUTPUT_LIMIT).unwrap_or(usize::MAX)
}

/// Builds the tool result of a `CallToolResult` (given as its JSON form).
pub(crate) fn map_call_result(result: &Value, elapsed: Duration) -> ToolResult {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let text = content_text(result.get("content"));
    let structured = result
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .cloned();
    let (text, truncated) = cap(text);
    if is_error {
        let message = if text.is_empty() {
            structured
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_else(|| "the tool reported an error without a message".to_owned())
        } else {
            text.clone()
        };
        let mut out = ToolResult::failure(message, elapsed);
        out.output = structured.unwrap_or(Value::String(text));
        out.truncated = truncated;
        return out;
    }
    let output = match (structured, media_content(result.get("content"))) {
        (Some(value), _) => value,
        (None, Some(content)) => content,
        (None, None) => Value::String(text),
    };
    let mut out = ToolResult::success(output, elapsed);
    out.truncated = truncated;
    out
}

/// A result with image blocks as eve's content value (`tools::content`): text blocks as text
/// parts, each image as a file part whose bytes the engine stages in the workspace, so the model
/// sees the image itself. `None` without images.
fn media_content(content: Option<&Value>) -> Option<Value> {
    let Some(Value::Array(blocks)) = content else {
        return None;
    };
    if !blocks
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("image"))
    {
        return None;
    }
    let parts: Vec<Value> = blocks
        .iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("image") => serde_json::json!({
                "type": "file",
                "data": {"type": "data", "data": block.get("data").cloned().unwrap_or_default()},
                "mediaType": block.get("mimeType").cloned().unwrap_or_else(|| "image/png".into()),
            }),
            _ => serde_json::json!({"type": "text", "text": block_text(block)}),
        })
        .collect();
    Some(serde_json::json!({"type": "content", "value": parts}))
}

/// Cuts text at the output cap, saying so.
fn cap(text: String) -> (String, bool) {
    let limit = output_cap();
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text[..end].to_owned();
    cut.push_str(&format!("\n[output truncated at {limit} bytes]"));
    (cut, true)
}

/// The content blocks as text, one block per line.
fn content_text(content: Option<&Value>) -> String {
    let Some(Value::Array(blocks)) = content else {
        return String::new();
    };
    blocks
        .iter()
        .map(block_text)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One content block as text.
fn block_text(block: &Value) -> String {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let str_field = |name: &str| block.get(name).and_then(Value::as_str);
    match kind {
        "text" => str_field("text").unwrap_or("").to_owned(),
        "image" | "audio" => format!(
            "[{kind}: {}, {} bytes]",
            str_field("mimeType").unwrap_or("unknown type"),
            base64_len(str_field("data").unwrap_or(""))
        ),
        "resource" => match block.get("resource") {
            Some(resource) => resource_text(resource),
            None => "[resource]".to_owned(),
        },
        "resource_link" => {
            let uri = str_field("uri").unwrap_or("?");
            match str_field("mimeType") {
                Some(mime) => format!("[resource link: {uri} ({mime})]"),
                None => format!("[resource link: {uri}]"),
            }
        }
        other => format!(
            "[{} content]",
            if other.is_empty() { "unknown" } else { other }
        ),
    }
}

/// An embedded resource: its text when it has one, else a summary.
fn resource_text(resource: &Value) -> String {
    let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("?");
    let mime = resource.get("mimeType").and_then(Value::as_str);
    if let Some(text) = resource.get("text").and_then(Value::as_str) {
        return match mime {
            Some(mime) => format!("[resource: {uri} ({mime})]\n{text}"),
            None => format!("[resource: {uri}]\n{text}"),
        };
    }
    let size = base64_len(resource.get("blob").and_then(Value::as_str).unwrap_or(""));
    format!(
        "[resource: {uri} ({}), {size} bytes]",
        mime.unwrap_or("unknown type")
    )
}

/// Decoded size of base64 text, without decoding it.
fn base64_len(data: &str) -> usize {
    let data = data.trim_end_matches('=');
    data.len() * 3 / 4
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn structured_content_wins_over_text() {
        let r = map_call_result(
            &json!({"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}}),
            Duration::ZERO,
        );
        assert!(r.ok);
        assert_eq!(r.output, json!({"result": 3}));
    }

    #[test]
    fn blocks_are_joined_and_summarised() {
        let r = map_call_result(
            &json!({"content": [
                {"type": "text", "text": "a"},
                {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgowMDAw"},
                {"type": "resource", "resource": {"uri": "file:///x", "mimeType": "text/plain", "text": "hi"}},
                {"type": "resource", "resource": {"uri": "file:///y", "blob": "AAAA"}},
                {"type": "resource_link", "uri": "file:///z", "name": "z"},
                {"type": "mystery"}
            ]}),
            Duration::ZERO,
        );
        // An image makes the result a content value: the image a file part (staged by the
        // engine), every other block its text.
        assert_eq!(
            r.output,
            json!({"type": "content", "value": [
                {"type": "text", "text": "a"},
                {"type": "file", "data": {"type": "data", "data": "iVBORw0KGgowMDAw"},
                 "mediaType": "image/png"},
                {"type": "text", "text": "[resource: file:///x (text/plain)]\nhi"},
                {"type": "text", "text": "[resource: file:///y (unknown type), 3 bytes]"},
                {"type": "text", "text": "[resource link: file:///z]"},
                {"type": "text", "text": "[mystery content]"},
            ]})
        );
    }

    #[test]
    fn is_error_fails_with_the_text() {
        let r = map_call_result(
            &json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
            Duration::ZERO,
        );
        assert!(!r.ok);
        assert_eq!(r.error.as_deref(), Some("boom"));
    }

    #[test]
    fn garbage_never_panics() {
        for v in [
            json!(null),
            json!(3),
            json!({"content": "x"}),
            json!({"content": [1, null, {"type": 3}]}),
        ] {
            let r = map_call_result(&v, Duration::ZERO);
            assert!(r.ok);
        }
    }
}
