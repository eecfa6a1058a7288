//! Calls to the platforms' APIs (replies), with bounded retries.
//!
//! A reply is sent after the turn finished, outside any request, so nobody waits on it: failures
//! are retried a few times (connection errors, 5xx, 429 with its `Retry-After`, capped), then
//! logged. The session keeps the answer either way; a lost reply never loses the turn.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Attempts per reply.
const ATTEMPTS: u32 = 3;
/// Longest wait between attempts, whatever `Retry-After` says.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Timeout of one attempt.
const TIMEOUT: Duration = Duration::from_secs(15);
/// The most of a platform's answer read (its JSON is a few kilobytes).
const MAX_ANSWER: usize = 1024 * 1024;

/// A request to a platform API.
pub(crate) struct Call {
    /// Method.
    pub(crate) method: Method,
    /// Full URL.
    pub(crate) url: String,
    /// `Authorization` header value, if any.
    pub(crate) authorization: Option<String>,
    /// Extra headers.
    pub(crate) headers: Vec<(&'static str, String)>,
    /// JSON body, serialised (a signature may cover these exact bytes).
    pub(crate) body: Vec<u8>,
    /// What the call does, for logs (`slack chat.postMessage`).
    pub(crate) what: &'static str,
}

/// The HTTP client of the platform replies.
#[derive(Clone)]
pub(crate) struct Outbound {
    client: reqwest::Client,
}

impl Outbound {
    /// A client with eve's user agent and a per-attempt timeout.
    pub(crate) fn new() -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("eve/", env!("CARGO_PKG_VERSION")))
            .timeout(TIMEOUT)
            .build()?;
        Ok(Self { client })
    }

    /// Sends `call`, retrying transient failures; returns the response's JSON body (`Null` when
    /// it has none), or what went wrong.
    pub(crate) async fn send(&self, call: &Call) -> Result<Value, String> {
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            let mut request = self
                .client
                .request(call.method.clone(), &call.url)
                .header("content-type", "application/json; charset=utf-8")
                .body(call.body.clone());
            if let Some(auth) = &call.authorization {
                request = request.header("authorization", auth);
            }
            for (name, value) in &call.headers {
                request = request.header(*name, value);
            }
            let wait = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .map(Duration::from_secs_f64);
                    // A platform's answer is small JSON; a longer one is read no further.
                    let text = crate::tools::guarded::read_capped(response, MAX_ANSWER)
                        .await
                        .map_or_else(
                            |e| match e {
                                crate::tools::guarded::CappedRead::TooLarge => {
                                    format!("(the answer is longer than {MAX_ANSWER} bytes)")
                                }
                                crate::tools::guarded::CappedRead::Failed(_) => String::new(),
                            },
                            |body| String::from_utf8_lossy(&body).into_owned(),
                        );
                    if status.is_success() {
                        return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
                    }
                    last = format!("{status}: {}", snippet(&text));
                    let transient =
                        status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
                    if !transient {
                        break;
                    }
                    retry_after.unwrap_or(backoff(attempt))
                }
                Err(e) => {
                    // The URL may hold a token (Telegram, Discord): keep it out of logs.
                    last = e.without_url().to_string();
                    backoff(attempt)
                }
            };
            if attempt < ATTEMPTS {
                tokio::time::sleep(wait.min(MAX_BACKOFF)).await;
            }
        }
        tracing::warn!(what = call.what, error = %last, "platform reply failed");
        Err(last)
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250 * 2u64.pow(attempt.saturating_sub(1)))
}

fn snippet(text: &str) -> String {
    text.chars().take(300).collect()
}

/// `text` cut to at most `max` characters, with a note when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    const NOTE: &str = "\n… (cut)";
    let keep = max.saturating_sub(NOTE.chars().count());
    let mut out: String = text.chars().take(keep).collect();
    out.push_str(NOTE);
    out
}

/// `value` as JSON bytes.
pub(crate) fn json_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A platform (or something posing as one at the operator's `api_base_url`) answering a reply
    /// with an endless body: the reply is read up to the cap and no further, so the server could
    /// write only a little more than the cap before the connection closed.
    #[tokio::test]
    async fn an_endless_answer_is_read_no_further_than_the_cap() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let written = Arc::new(AtomicUsize::new(0));
        let counter = written.clone();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"ok\":true,\"pad\":\"",
            );
            let chunk = vec![b'x'; 64 * 1024];
            // 256 MiB at most; the client's closing the connection ends it much sooner.
            for _ in 0..4096 {
                if conn.write_all(&chunk).is_err() {
                    break;
                }
                counter.fetch_add(chunk.len(), Ordering::Relaxed);
            }
        });
        let outbound = Outbound::new().unwrap();
        let call = Call {
            method: Method::POST,
            url: format!("http://127.0.0.1:{port}/chat.postMessage"),
            authorization: None,
            headers: Vec::new(),
            body: b"{}".to_vec(),
            what: "test reply",
        };
        let answer = outbound.send(&call).await;
        assert_eq!(answer, Ok(Value::Null), "an unreadable answer is no JSON");
        // The socket buffers let the server get ahead of the reader by a few MiB at most; a
        // reader without the cap takes all 256 MiB.
        std::thread::sleep(Duration::from_millis(200));
        let sent = written.load(Ordering::Relaxed);
        assert!(
            sent < 32 * 1024 * 1024,
            "the client read on: {sent} bytes were sent"
        );
        eprintln!("bytes the server could send before the reply stopped reading: {sent}");
    }
}
