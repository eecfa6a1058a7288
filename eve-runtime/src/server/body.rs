//! Request bodies of the session routes, parsed by hand so every mistake gets a precise 400.
//!
//! A generic JSON extractor would answer a wrong type with a message about Rust types; a client of
//! the session API needs to know which field is wrong and what to send instead. Unknown fields are
//! ignored (eve's clients send a few this server does not use, such as `turnId` on cancel).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Query};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::features::turn_input::TurnInput;

/// An answer to one input request: `{requestId, optionId?, text?}` (an approval's `optionId` is
/// `approve` or `cancel`; a question's is one of its options, or `text` answers in words). The
/// request it answers checks it (`Runtime::respond_input_by`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InputResponse {
    /// The request answered.
    pub(crate) request_id: String,
    /// The option chosen.
    pub(crate) option_id: Option<String>,
    /// Free text passed on with the answer, or the answer itself.
    pub(crate) text: Option<String>,
}

impl InputResponse {
    /// The answer, as the runtime takes it.
    pub(crate) fn answer(&self) -> crate::engine::InputAnswer {
        crate::engine::InputAnswer {
            option_id: self.option_id.clone(),
            text: self.text.clone(),
        }
    }
}

/// What `POST /eve/v1/session/:id` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionInput {
    /// A user message, with its files.
    Message(super::uploads::UserInput),
    /// Answers to pending input requests.
    InputResponses(Vec<InputResponse>),
}

/// The body bytes, or the right error for a body that could not be read (413 over the limit).
pub(crate) fn bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    // The server's own cap is the largest any route takes (a message with files); a route
    // that takes less says so here.
    if let Ok(b) = &body
        && b.len() > limit
    {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::bad_request(
                "invalid_body",
                format!(
                    "The request body could not be read: {}",
                    rejection.body_text()
                ),
            )
        }
    })
}

/// A query string read into `T`. A query that does not fit (an unknown parameter, a number that
/// is not one) is a 400 `invalid_query` in the API's JSON error shape, never axum's plain-text
/// rejection.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(query)) => Ok(Self(query)),
            Err(rejection) => {
                let text = rejection.body_text();
                let why = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                Err(ApiError::bad_request(
                    "invalid_query",
                    format!("The query does not fit this route: {why}."),
                ))
            }
        }
    }
}

/// Parses a JSON object body; an empty body is `None`.
pub(crate) fn object(bytes: &[u8]) -> Result<Option<Map<String, Value>>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("The request body is not valid JSON ({e})."),
        )
    })?;
    match value {
        Value::Object(map) => Ok(Some(map)),
        other => Err(ApiError::bad_request(
            "invalid_body",
            format!(
                "The request body must be a JSON object, found {}.",
                kind(&other)
            ),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field, treating `null` as absent.
fn field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    map.get(name).filter(|v| !v.is_null())
}

/// `message`: a string, or a list of parts whose `text` parts are joined.
pub(crate) fn message(value: &Value) -> Result<String, ApiError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = Vec::new();
            for part in parts {
                let ok = part.get("type").and_then(Value::as_str) == Some("text");
                match (ok, part.get("text").and_then(Value::as_str)) {
                    (true, Some(t)) => text.push(t),
                    _ => {
                        return Err(ApiError::bad_request(
                            "invalid_body",
                            "`message` parts must be `{\"type\": \"text\", \"text\": \"…\"}`.",
                        ));
                    }
                }
            }
            Ok(text.join("\n"))
        }
        other => Err(ApiError::bad_request(
            "invalid_body",
            format!("`message` must be a string, found {}.", kind(other)),
        )),
    }
}

/// The optional first message of `POST /eve/v1/session`.
pub(crate) fn create(bytes: &[u8]) -> Result<Option<super::uploads::UserInput>, ApiError> {
    let Some(map) = object(bytes)? else {
        return Ok(None);
    };
    if field(&map, "inputResponses").is_some() {
        return Err(ApiError::bad_request(
            "invalid_body",
            "A new session has no input requests: send `message` only.",
        ));
    }
    field(&map, "message")
        .map(super::uploads::parse_message)
        .transpose()
}

/// What a create or message body asks besides its message, as eve's client sends it:
/// `outputSchema`, `clientContext` and `turnPolicy` for the turn (see
/// `features::turn_input`), and `stubs` (a new session's tool stubs, see `features::stubs`).
#[derive(Debug, Default)]
pub(crate) struct TurnOptions {
    /// What the message asks of its turn.
    pub(crate) input: Option<TurnInput>,
    /// Tool stubs, checked.
    pub(crate) stubs: Option<Value>,
}

/// Reads [`TurnOptions`] from a body (the message itself is read by [`create`] or
/// [`session_input`]).
pub(crate) fn turn_options(bytes: &[u8]) -> Result<TurnOptions, ApiError> {
    let Some(map) = object(bytes)? else {
        return Ok(TurnOptions::default());
    };
    let input = TurnInput::from_body(&map).map_err(|(code, m)| ApiError::bad_request(code, m))?;
    let stubs = match field(&map, "stubs") {
        Some(stubs) => {
            crate::features::stubs::check(stubs)
                .map_err(|m| ApiError::bad_request("invalid_stubs", m))?;
            Some(stubs.clone())
        }
        None => None,
    };
    Ok(TurnOptions { input, stubs })
}

/// The body of `POST /eve/v1/session/:id`: exactly one of `message` or `inputResponses`.
pub(crate) fn session_input(bytes: &[u8]) -> Result<SessionInput, ApiError> {
    let exactly_one = || {
        ApiError::bad_request(
            "invalid_body",
            "Send exactly one of `message` (a string) or `inputResponses` \
             (`[{\"requestId\", \"optionId\"?, \"text\"?}]`).",
        )
    };
    let map = object(bytes)?.ok_or_else(exactly_one)?;
    match (field(&map, "message"), field(&map, "inputResponses")) {
        (Some(m), None) => Ok(SessionInput::Message(super::uploads::parse_message(m)?)),
        (None, Some(r)) => Ok(SessionInput::InputResponses(input_responses(r)?)),
        _ => Err(exactly_one()),
    }
}

/// `inputResponses`: a non-empty list of answers, each request named once.
pub(crate) fn input_responses(value: &Value) -> Result<Vec<InputResponse>, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_body", m);
    let Value::Array(items) = value else {
        return Err(bad(format!(
            "`inputResponses` must be an array, found {}.",
            kind(value)
        )));
    };
    if items.is_empty() {
        return Err(bad(
            "`inputResponses` is empty: answer at least one request.".into(),
        ));
    }
    let mut out: Vec<InputResponse> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(obj) = item else {
            return Err(bad(format!(
                "`inputResponses[{i}]` must be an object, found {}.",
                kind(item)
            )));
        };
        let request_id = match field(obj, "requestId") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(bad(format!(
                    "`inputResponses[{i}].requestId` must be the `requestId` of a pending request."
                )));
            }
        };
        let option_id = match field(obj, "optionId") {
            None => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(_) => {
                return Err(bad(format!(
                    "`inputResponses[{i}].optionId` must be the id of one of the request's \
                     options (\"approve\" or \"cancel\" for an approval)."
                )));
            }
        };
        let text = match field(obj, "text") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(bad(format!(
                    "`inputResponses[{i}].text` must be a string, found {}.",
                    kind(other)
                )));
            }
        };
        if option_id.is_none() && text.as_deref().is_none_or(|t| t.trim().is_empty()) {
            return Err(bad(format!(
                "`inputResponses[{i}]` needs `optionId` (\"approve\" or \"cancel\" for an \
                 approval, an option's id for a question) or `text`."
            )));
        }
        if out.iter().any(|r| r.request_id == request_id) {
            return Err(bad(format!(
                "`inputResponses` answers request `{request_id}` twice."
            )));
        }
        out.push(InputResponse {
            request_id,
            option_id,
            text,
        });
    }
    Ok(out)
}

/// The optional `turnId` of a cancel body.
pub(crate) fn cancel(bytes: &[u8]) -> Result<Option<String>, ApiError> {
    let Some(map) = object(bytes)? else {
        return Ok(None);
    };
    match field(&map, "turnId") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::bad_request(
            "invalid_body",
            format!("`turnId` must be a string, found {}.", kind(other)),
        )),
    }
}

/// Checks that a control body (compact, clear, reset) is empty or a JSON object.
pub(crate) fn control(bytes: &[u8]) -> Result<(), ApiError> {
    object(bytes).map(|_| ())
}
