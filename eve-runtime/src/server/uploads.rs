//! Files in messages: eve's `UserContent` parts read from a request, and the channel's upload
//! policy they must pass.
//!
//! A message is a string or a list of parts: `{"type": "text", "text"}`,
//! `{"type": "file", "data", "mediaType", "filename"?}` (eve's client's `createDataUrlFilePart`)
//! and the AI SDK's `{"type": "image", "image", "mediaType"?}`. A file's `data` is a `data:` URL or
//! bare base64: the bytes come with the message; a remote URL is refused (the server fetches
//! nothing for a caller). The policy is `upload_policy` in the channel's file
//! (`channels/eve.yaml`): `max_bytes` (default 25 MB, eve's) and `allowed_media_types` (`"*"` or
//! a list of exact types and `type/*` patterns), or `disabled`. As eve does, the media type is
//! checked first (`415`), then the size (`413`), and the answer lists every violation in eve's
//! shape.

use base64::Engine;
use serde_json::{Value, json};

use super::error::ApiError;
use crate::workspace::attachments::Upload;

/// eve's default upload limit: 25 MB.
pub(crate) const DEFAULT_MAX_UPLOAD_BYTES: u64 = 25 * 1024 * 1024;

/// What a channel accepts as files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPolicy {
    /// Largest decoded file, in bytes; `0` refuses every file.
    pub max_bytes: u64,
    /// Allowed media types (exact, or `type/*`); `None` allows every type.
    pub allowed: Option<Vec<String>>,
}

impl Default for UploadPolicy {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            allowed: None,
        }
    }
}

impl UploadPolicy {
    /// Reads `upload_policy` from a channel's settings: `disabled`, or
    /// `{max_bytes?, allowed_media_types?}` over the defaults.
    pub fn parse(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(s) if s == "disabled" => Ok(Self {
                max_bytes: 0,
                allowed: Some(Vec::new()),
            }),
            Value::Object(map) => {
                let mut policy = Self::default();
                for (key, v) in map {
                    match key.as_str() {
                        "max_bytes" | "maxBytes" => {
                            policy.max_bytes = v.as_u64().ok_or_else(|| {
                                format!(
                                    "`upload_policy.max_bytes` must be a number of bytes, found {v}"
                                )
                            })?;
                        }
                        "allowed_media_types" | "allowedMediaTypes" => {
                            policy.allowed = match v {
                                Value::String(s) if s == "*" => None,
                                Value::Array(items) => Some(
                                    items
                                        .iter()
                                        .map(|i| i.as_str().map(str::to_ascii_lowercase))
                                        .collect::<Option<Vec<_>>>()
                                        .ok_or_else(|| {
                                            "`upload_policy.allowed_media_types` must list media \
                                             types as strings"
                                                .to_owned()
                                        })?,
                                ),
                                other => {
                                    return Err(format!(
                                        "`upload_policy.allowed_media_types` must be \"*\" or a \
                                         list of media types, found {other}"
                                    ));
                                }
                            };
                        }
                        other => {
                            return Err(format!(
                                "`upload_policy` has no setting `{other}`: use `max_bytes` and \
                                 `allowed_media_types`"
                            ));
                        }
                    }
                }
                Ok(policy)
            }
            other => Err(format!(
                "`upload_policy` must be `disabled` or a map with `max_bytes` and \
                 `allowed_media_types`, found {other}"
            )),
        }
    }

    /// The largest request body a message with files may take: every file at the limit,
    /// base64 (4/3), with room for the rest of the body.
    pub(crate) fn body_limit(&self, base: usize) -> usize {
        let encoded = self.max_bytes.saturating_mul(4) / 3;
        usize::try_from(encoded)
            .unwrap_or(usize::MAX)
            .saturating_add(base)
    }

    fn allows(&self, media_type: &str) -> bool {
        if self.max_bytes == 0 {
            return false;
        }
        let Some(allowed) = &self.allowed else {
            return true;
        };
        let media_type = media_type.to_ascii_lowercase();
        allowed.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) if prefix.ends_with('/') => media_type.starts_with(prefix),
            _ => *p == media_type,
        })
    }

    /// Every file of `files` the policy refuses, in eve's shape; `Err` answers the first (`415`
    /// for a media type, `413` for a size) with all of them listed.
    pub(crate) fn check(&self, files: &[Upload]) -> Result<(), ApiError> {
        let mut violations = Vec::new();
        let mut first: Option<(u16, String)> = None;
        for f in files {
            let shown = f.filename.clone().unwrap_or_else(|| f.media_type.clone());
            if !self.allows(&f.media_type) {
                let allowed = self.allowed.clone().unwrap_or_default();
                let mut message = format!(
                    "{shown} has media type \"{}\" which is not allowed by this route.",
                    f.media_type
                );
                if !allowed.is_empty() {
                    message.push_str(&format!(" Allowed: {}.", allowed.join(", ")));
                }
                first.get_or_insert((415, message));
                violations.push(without_null(json!({
                    "allowedMediaTypes": allowed,
                    "filename": f.filename,
                    "kind": "disallowed-media-type",
                    "mediaType": f.media_type,
                })));
            } else if f.bytes.len() as u64 > self.max_bytes {
                first.get_or_insert((
                    413,
                    format!(
                        "{shown} ({} bytes) exceeds the {}-byte upload limit.",
                        f.bytes.len(),
                        self.max_bytes
                    ),
                ));
                violations.push(without_null(json!({
                    "byteLength": f.bytes.len(),
                    "filename": f.filename,
                    "kind": "too-large",
                    "limit": self.max_bytes,
                    "mediaType": f.media_type,
                })));
            }
        }
        match first {
            None => Ok(()),
            Some((status, message)) => Err(ApiError::Upload {
                status,
                message,
                violations,
            }),
        }
    }
}

/// An object without its `null` fields (eve's JSON leaves an absent `filename` out).
fn without_null(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.retain(|_, v| !v.is_null());
    }
    value
}

/// A message as a channel received it: its text and its files' bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UserInput {
    /// The text parts, joined by a newline.
    pub(crate) text: String,
    /// The files, in order.
    pub(crate) files: Vec<Upload>,
}

/// Reads `message`: a string, or a list of text, file and image parts.
pub(crate) fn parse_message(value: &Value) -> Result<UserInput, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_body", m);
    let parts = match value {
        Value::String(s) => {
            return Ok(UserInput {
                text: s.clone(),
                files: Vec::new(),
            });
        }
        Value::Array(parts) => parts,
        _ => {
            return Err(bad(
                "`message` must be a string or an array of text/file parts.".to_owned(),
            ));
        }
    };
    let mut input = UserInput::default();
    let mut texts = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => match part.get("text").and_then(Value::as_str) {
                Some(t) => texts.push(t.to_owned()),
                None => {
                    return Err(bad(format!(
                        "`message[{i}]`: text parts need a `text` string."
                    )));
                }
            },
            Some("file") => input.files.push(file_part(i, part, "data")?),
            Some("image") => input.files.push(file_part(i, part, "image")?),
            other => {
                return Err(bad(format!(
                    "`message[{i}]`: unsupported part type {}; use `text`, `file` or `image`.",
                    other.map_or("(none)".to_owned(), |t| format!("\"{t}\""))
                )));
            }
        }
    }
    input.text = texts.join("\n");
    Ok(input)
}

/// One file or image part: its bytes from a `data:` URL or base64, its media type from
/// `mediaType` (or the data URL).
pub(crate) fn file_part(i: usize, part: &Value, data_key: &str) -> Result<Upload, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_body", m);
    let data = part
        .get(data_key)
        .or_else(|| part.get("url"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            bad(format!(
                "`message[{i}]`: file parts need `{data_key}`: a data: URL or base64."
            ))
        })?;
    let (url_type, payload) = match data.strip_prefix("data:") {
        Some(rest) => {
            let (head, payload) = rest
                .split_once(',')
                .ok_or_else(|| bad(format!("`message[{i}]`: the data: URL has no `,`.")))?;
            let Some(media) = head.strip_suffix(";base64") else {
                return Err(bad(format!(
                    "`message[{i}]`: a data: URL must be base64 (`data:<type>;base64,…`)."
                )));
            };
            (Some(media.to_owned()), payload)
        }
        None if data.starts_with("http://") || data.starts_with("https://") => {
            return Err(bad(format!(
                "`message[{i}]`: remote files are not fetched; send the bytes as a data: URL or \
                 base64."
            )));
        }
        None => (None, data),
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .map_err(|e| {
            bad(format!(
                "`message[{i}]`: the file's data is not base64 ({e})."
            ))
        })?;
    let media_type = part
        .get("mediaType")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .or(url_type.filter(|m| !m.is_empty()))
        .ok_or_else(|| bad(format!("`message[{i}]`: file parts need a `mediaType`.")))?;
    let filename = part
        .get("filename")
        .and_then(Value::as_str)
        .filter(|f| !f.is_empty())
        .map(str::to_owned);
    Ok(Upload {
        media_type,
        filename,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(media: &str, len: usize) -> Upload {
        Upload {
            media_type: media.into(),
            filename: Some("f".into()),
            bytes: vec![0; len],
        }
    }

    #[test]
    fn parts_parse_and_the_policy_answers_415_before_413() {
        let input = parse_message(&json!([
            {"type": "text", "text": "look"},
            {"type": "file", "data": "data:image/png;base64,AQID", "mediaType": "image/png",
             "filename": "a.png"},
            {"type": "image", "image": "AQID", "mediaType": "image/jpeg"},
        ]))
        .unwrap();
        assert_eq!(input.text, "look");
        assert_eq!(input.files[0].bytes, vec![1, 2, 3]);
        assert_eq!(input.files[1].media_type, "image/jpeg");
        assert!(
            parse_message(&json!([{"type": "file", "data": "https://x/y", "mediaType": "a/b"}]))
                .is_err()
        );

        let policy =
            UploadPolicy::parse(&json!({"max_bytes": 10, "allowed_media_types": ["image/*"]}))
                .unwrap();
        assert!(policy.check(&[file("image/png", 10)]).is_ok());
        let err = policy
            .check(&[file("image/png", 11), file("application/pdf", 1)])
            .unwrap_err();
        assert_eq!(err.status().as_u16(), 413);
        let body = err.body();
        assert_eq!(body["violations"][0]["kind"], "too-large");
        assert_eq!(body["violations"][1]["kind"], "disallowed-media-type");
        let err = policy.check(&[file("application/pdf", 1)]).unwrap_err();
        assert_eq!(err.status().as_u16(), 415);
        assert!(
            UploadPolicy::parse(&json!("disabled"))
                .unwrap()
                .check(&[file("image/png", 1)])
                .is_err()
        );
    }
}
