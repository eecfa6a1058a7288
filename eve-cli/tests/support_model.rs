//! A scripted OpenAI-compatible model server on `127.0.0.1:0`, for tests of the real binary
//! against real HTTP: it keeps every request's body, and a function of the request's number and
//! body chooses each answer (a stream, an error status, a stream cut short).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What the server answers to one `/chat/completions` request.
pub enum Answer {
    /// `200` with this Server-Sent-Events body.
    Stream(String),
    /// This status with this JSON body.
    Status(u16, Value),
}

/// The running server.
pub struct ModelServer {
    /// Its base URL (`http://127.0.0.1:PORT/v1`).
    pub base: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl ModelServer {
    /// Serves `answer(n, body)` to the `n`-th completion request (from 0); any other path is a
    /// plain `404 Not Found`.
    pub fn start(answer: impl Fn(usize, &str) -> Answer + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let Some((path, body)) = read_request(&mut stream) else {
                    continue;
                };
                let (status, content_type, text) = if path.ends_with("/chat/completions") {
                    let n = {
                        let mut all = seen.lock().unwrap();
                        all.push(body.clone());
                        all.len() - 1
                    };
                    match answer(n, &body) {
                        Answer::Stream(sse) => (200, "text/event-stream", sse),
                        Answer::Status(status, json) => {
                            (status, "application/json", json.to_string())
                        }
                    }
                } else {
                    (404, "text/plain", "Not Found".to_owned())
                };
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Self { base, requests }
    }

    /// The bodies of the completion requests so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request; `(path, body)`.
fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    Some((path, String::from_utf8_lossy(&body).into_owned()))
}

/// One `chat.completion.chunk` event.
pub fn chunk(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
        "created": 1_700_000_000, "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

/// An answer `text`, finished, with usage unless `usage` is false.
pub fn text_stream(text: &str, usage: bool) -> Answer {
    let mut body = chunk(json!({"role": "assistant", "content": text}), None);
    body.push_str(&chunk(json!({}), Some("stop")));
    if usage {
        let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": "test-model", "choices": [],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}});
        body.push_str(&format!("data: {usage}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    Answer::Stream(body)
}

/// One tool call `name(arguments)` with call id `id`, finished.
pub fn tool_call_stream(id: &str, name: &str, arguments: &str) -> Answer {
    let mut body = chunk(
        json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
            "function": {"name": name, "arguments": arguments}}]}),
        None,
    );
    body.push_str(&chunk(json!({}), Some("tool_calls")));
    body.push_str("data: [DONE]\n\n");
    Answer::Stream(body)
}

/// A stream a server stopped half way: text, then `[DONE]` with no finish reason.
pub fn cut_stream(text: &str) -> Answer {
    let mut body = chunk(json!({"role": "assistant", "content": text}), None);
    body.push_str("data: [DONE]\n\n");
    Answer::Stream(body)
}

/// The provider's answer to a prompt longer than the window.
pub fn context_too_long(window: u64) -> Answer {
    Answer::Status(
        400,
        json!({"error": {"message": format!("This model's maximum context length is {window} tokens. However, your messages resulted in more tokens."),
            "type": "invalid_request_error", "code": "context_length_exceeded"}}),
    )
}
