//! A `session/prompt`'s content blocks as the message eve's session takes: text as it is, an
//! embedded resource (a file the editor attached) as its text in a `<resource>` block the model
//! can tell apart from the request, a resource link as a line naming it. Images and audio are not
//! taken (`initialize` says so: `promptCapabilities.image` and `audio` are false), nor are
//! binary resources; each is a clear invalid-params error naming the block.

use base64::Engine as _;
use serde_json::Value;

use super::rpc::RpcError;

/// The message text of `prompt` (an array of content blocks).
pub(crate) fn prompt_text(prompt: &Value) -> Result<String, RpcError> {
    let Some(blocks) = prompt.as_array() else {
        return Err(RpcError::params(
            "`prompt` must be an array of content blocks",
        ));
    };
    let mut parts: Vec<String> = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let kind = block["type"].as_str().unwrap_or_default();
        let text = match kind {
            "text" => block["text"]
                .as_str()
                .ok_or_else(|| RpcError::params(format!("prompt[{i}]: a text block needs `text`")))?
                .to_owned(),
            "resource_link" => {
                let uri = block["uri"].as_str().ok_or_else(|| {
                    RpcError::params(format!("prompt[{i}]: a resource link needs `uri`"))
                })?;
                let name = block["name"].as_str().unwrap_or(uri);
                format!("[resource: {name} <{uri}>]")
            }
            "resource" => resource(i, &block["resource"])?,
            "image" | "audio" => {
                return Err(RpcError::params(format!(
                    "prompt[{i}]: {kind} content is not supported by this agent \
                     (promptCapabilities.{kind} is false)"
                )));
            }
            other => {
                return Err(RpcError::params(format!(
                    "prompt[{i}]: unknown content block type `{other}`"
                )));
            }
        };
        parts.push(text);
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(RpcError::params("the prompt is empty"));
    }
    Ok(text)
}

/// An embedded resource as text the model reads.
fn resource(i: usize, resource: &Value) -> Result<String, RpcError> {
    let uri = resource["uri"]
        .as_str()
        .ok_or_else(|| RpcError::params(format!("prompt[{i}]: a resource needs `uri`")))?;
    let text = match (resource["text"].as_str(), resource["blob"].as_str()) {
        (Some(text), _) => text.to_owned(),
        (None, Some(blob)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(blob.trim())
                .map_err(|_| {
                    RpcError::params(format!("prompt[{i}]: the resource's `blob` is not base64"))
                })?;
            String::from_utf8(bytes).map_err(|_| {
                RpcError::params(format!(
                    "prompt[{i}]: the resource `{uri}` is binary; only text resources are taken"
                ))
            })?
        }
        (None, None) => {
            return Err(RpcError::params(format!(
                "prompt[{i}]: a resource needs `text` or `blob`"
            )));
        }
    };
    let uri = uri.replace('"', "%22");
    Ok(match resource["mimeType"].as_str() {
        Some(mime) => format!(
            "<resource uri=\"{uri}\" mimeType=\"{}\">\n{text}\n</resource>",
            mime.replace('"', "%22")
        ),
        None => format!("<resource uri=\"{uri}\">\n{text}\n</resource>"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_and_resources_become_one_message() {
        let text = prompt_text(&json!([
            {"type": "text", "text": "Review this"},
            {"type": "resource", "resource": {"uri": "file:///p/a.py", "text": "print(1)"}},
            {"type": "resource", "resource": {"uri": "file:///p/b.txt", "blob": "aGk="}},
            {"type": "resource_link", "uri": "file:///p/c.pdf", "name": "c.pdf"},
        ]));
        assert_eq!(
            text.ok().as_deref(),
            Some(
                "Review this\n\n<resource uri=\"file:///p/a.py\">\nprint(1)\n</resource>\n\n\
                 <resource uri=\"file:///p/b.txt\">\nhi\n</resource>\n\n[resource: c.pdf <file:///p/c.pdf>]"
            )
        );
    }

    #[test]
    fn what_is_not_taken_is_an_invalid_params_error() {
        for prompt in [
            json!("text"),
            json!([]),
            json!([{"type": "image", "data": "", "mimeType": "image/png"}]),
            json!([{"type": "resource", "resource": {"uri": "x", "blob": "//79"}}]),
            json!([{"type": "video"}]),
            json!([{"type": "text"}]),
        ] {
            let error = prompt_text(&prompt).err();
            assert_eq!(
                error.map(|e| e.code),
                Some(super::super::rpc::INVALID_PARAMS)
            );
        }
    }
}
