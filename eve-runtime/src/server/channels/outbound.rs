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
                    let text = response.text().await.unwrap_or_default();
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
