//! JSON-RPC 2.0 framing for `eve acp`: one JSON message per line on stdin and stdout, as ACP's
//! stdio transport says. A line is read with a size cap, classified (request, notification or
//! response to a request of ours), and anything malformed becomes a coded JSON-RPC error: never a
//! panic, never a line on stdout that is not a frame. Every frame goes out through one writer
//! task, so frames never interleave.

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Invalid JSON was received.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// Internal error (the session API failed, a turn failed).
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// ACP: a given resource (a session) was not found.
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// The longest line read as one frame (a prompt with embedded files fits well inside).
pub(crate) const MAX_FRAME_BYTES: usize = 32 * 1024 * 1024;

/// A JSON-RPC error: its code, message and optional data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// One well-formed incoming message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The client's answer to a request of ours: its result, or its error object.
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
}

/// A line that is not a frame: the id to answer with (`null` when none could be read) and why.
/// `None` for the id's place means it was a notification: nothing is answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Malformed {
    pub(crate) id: Option<Value>,
    pub(crate) error: RpcError,
}

fn malformed(id: Value, code: i64, message: impl Into<String>) -> Box<Malformed> {
    Box::new(Malformed {
        id: Some(id),
        error: RpcError::new(code, message),
    })
}

/// Parses one line into a frame.
pub(crate) fn parse(line: &[u8]) -> Result<Frame, Box<Malformed>> {
    let text = std::str::from_utf8(line)
        .map_err(|_| malformed(Value::Null, PARSE_ERROR, "the frame is not UTF-8"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        malformed(
            Value::Null,
            PARSE_ERROR,
            format!("the frame is not JSON: {e}"),
        )
    })?;
    let Value::Object(object) = value else {
        let message = if value.is_array() {
            "batches are not supported: send one JSON-RPC message per line"
        } else {
            "a JSON-RPC message is a JSON object"
        };
        return Err(malformed(Value::Null, INVALID_REQUEST, message));
    };
    let id = match object.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id.clone()),
        Some(_) => {
            return Err(malformed(
                Value::Null,
                INVALID_REQUEST,
                "`id` must be a string, a number or null",
            ));
        }
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(malformed(
            answer_id,
            INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    match object.get("method") {
        Some(Value::String(method)) => {
            let params = match object.get("params") {
                None | Some(Value::Null) => Value::Null,
                Some(p @ (Value::Object(_) | Value::Array(_))) => p.clone(),
                Some(_) => {
                    return Err(Box::new(Malformed {
                        id,
                        error: RpcError::new(
                            INVALID_REQUEST,
                            "`params` must be an object or an array",
                        ),
                    }));
                }
            };
            Ok(match id {
                Some(id) => Frame::Request {
                    id,
                    method: method.clone(),
                    params,
                },
                None => Frame::Notification {
                    method: method.clone(),
                    params,
                },
            })
        }
        Some(_) => Err(malformed(
            answer_id,
            INVALID_REQUEST,
            "`method` must be a string",
        )),
        None => {
            let Some(id) = id else {
                return Err(malformed(
                    Value::Null,
                    INVALID_REQUEST,
                    "a message needs `method` (a request or notification) or `id` with \
                     `result` or `error` (a response)",
                ));
            };
            match (object.get("result"), object.get("error")) {
                (Some(result), None) => Ok(Frame::Response {
                    id,
                    outcome: Ok(result.clone()),
                }),
                (None, Some(error)) if error.is_object() => Ok(Frame::Response {
                    id,
                    outcome: Err(error.clone()),
                }),
                _ => Err(malformed(
                    id,
                    INVALID_REQUEST,
                    "a response has exactly one of `result` and `error` (an object)",
                )),
            }
        }
    }
}

/// What one read gave: a line, a line over the cap (skipped to its end), or the end of input.
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    Line(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads up to the next newline, keeping at most [`MAX_FRAME_BYTES`]; a longer line is read to
/// its end and dropped.
pub(crate) async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Read> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Read::TooLong,
                (false, true) => Read::Eof,
                (false, false) => Read::Line(line),
            });
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(pos) => (&available[..pos], Some(pos + 1)),
            None => (available, None),
        };
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(if too_long {
                Read::TooLong
            } else {
                Read::Line(line)
            });
        }
    }
}

/// Where frames are sent: the one writer task owns stdout.
#[derive(Clone)]
pub(crate) struct Out(mpsc::UnboundedSender<Value>);

impl Out {
    /// A writer of frames to `sink`, one JSON line each; the task ends when every sender is gone
    /// (or the sink is closed).
    pub(crate) fn spawn<W: AsyncWrite + Unpin + Send + 'static>(
        mut sink: W,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let task = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                let mut line = match serde_json::to_vec(&frame) {
                    Ok(line) => line,
                    Err(e) => {
                        tracing::warn!(error = %e, "an ACP frame could not be encoded");
                        continue;
                    }
                };
                line.push(b'\n');
                if sink.write_all(&line).await.is_err() || sink.flush().await.is_err() {
                    break;
                }
            }
        });
        (Self(tx), task)
    }

    fn send(&self, frame: Value) {
        let _ = self.0.send(frame);
    }

    pub(crate) fn result(&self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    pub(crate) fn error(&self, id: &Value, error: &RpcError) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}));
    }

    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    pub(crate) fn request(&self, id: u64, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(line: &str) -> (Option<Value>, i64) {
        match parse(line.as_bytes()) {
            Err(m) => (m.id, m.error.code),
            Ok(f) => panic!("parsed {f:?}"),
        }
    }

    #[test]
    fn malformed_frames_get_their_codes() {
        assert_eq!(code("{not json"), (Some(Value::Null), PARSE_ERROR));
        assert_eq!(code("[]"), (Some(Value::Null), INVALID_REQUEST));
        assert_eq!(code("42"), (Some(Value::Null), INVALID_REQUEST));
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#),
            (Some(json!(3)), INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#),
            (Some(Value::Null), INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4,"method":7}"#),
            (Some(json!(4)), INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":5,"method":"x","params":"s"}"#),
            (Some(json!(5)), INVALID_REQUEST)
        );
        // A notification with bad params is not answered.
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","method":"x","params":1}"#),
            (None, INVALID_REQUEST)
        );
        assert_eq!(code("\u{1}"), (Some(Value::Null), PARSE_ERROR));
        assert_eq!(
            parse(&[0xff, 0xfe]).err().map(|m| m.error.code),
            Some(PARSE_ERROR)
        );
    }

    #[test]
    fn frames_are_classified() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}"#),
            Ok(Frame::Request {
                id: json!("a"),
                method: "initialize".into(),
                params: json!({})
            })
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"session/cancel"}"#),
            Ok(Frame::Notification {
                method: "session/cancel".into(),
                params: Value::Null
            })
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            Ok(Frame::Response {
                id: json!(1),
                outcome: Ok(Value::Null)
            })
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#),
            (Some(json!(1)), INVALID_REQUEST)
        );
    }

    #[tokio::test]
    async fn long_lines_are_dropped_whole() {
        let input = b"0123456789abcdef\n{}\nlast".to_vec();
        let mut reader = tokio::io::BufReader::with_capacity(4, &input[..]);
        assert_eq!(read_frame(&mut reader, 8).await.ok(), Some(Read::TooLong));
        assert_eq!(
            read_frame(&mut reader, 8).await.ok(),
            Some(Read::Line(b"{}".to_vec()))
        );
        assert_eq!(
            read_frame(&mut reader, 8).await.ok(),
            Some(Read::Line(b"last".to_vec()))
        );
        assert_eq!(read_frame(&mut reader, 8).await.ok(), Some(Read::Eof));
    }
}
