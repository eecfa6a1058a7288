//! HTTP plumbing shared by the wire protocols: one streamed POST with retries and timeouts.
//!
//! Both providers fail the same ways (rate limits, overloaded servers, dropped connections,
//! stalls), so the policy lives here once: exponential backoff with jitter on 408/409/429/5xx
//! (529 included) and connection errors, `Retry-After`/`retry-after-ms` honoured up to a cap, a
//! connect/first-byte timeout and an idle timeout between body chunks. A call is retried only while
//! nothing has been handed to the caller: once an event is out, a failure is final, so the engine
//! never sees the same text twice. Each protocol plugs in a [`Decoder`] that turns body bytes into
//! [`ModelEvent`]s and an assembled [`ModelResponse`].
//!
//! Three limits keep a broken or hostile model server from holding a turn or the store: the whole
//! call, retries and their delays included, ends at `call_timeout` (`limits.model_call_seconds`;
//! a retry whose delay would pass it is not made); the idle timeout counts only chunks that carry
//! content (an SSE comment every few seconds is not progress); and a body larger than
//! `response_bytes` (`limits.model_response_bytes`) fails the call without retry.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use reqwest::header::{HeaderMap, RETRY_AFTER};

use super::{ModelError, ModelEvent, ModelResponse, ModelSettings, Usage};

/// Largest error body we read, to quote the provider's message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// How much of an unexpected body an error message quotes.
const QUOTE_LIMIT: usize = 300;

/// Turns a streamed body into events and, at the end, a response.
pub(crate) trait Decoder: Send {
    /// Consumes a chunk of body bytes, appending the events it completes to `out`.
    fn push(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> Result<(), ModelError>;
    /// Whether the protocol's end marker was seen (no need to wait for EOF).
    fn is_done(&self) -> bool;
    /// How many SSE events were parsed so far (0 means the body was not an event stream).
    fn sse_events(&self) -> usize;
    /// Flushes buffered bytes at EOF and assembles the response, or says why the stream is incomplete.
    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<ModelResponse, ModelError>;
}

/// A failed attempt, with what the retry loop needs to know about it.
struct Failure {
    error: ModelError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: ModelError) -> Self {
        Self {
            error,
            retryable: false,
            retry_after: None,
        }
    }

    fn transient(error: ModelError) -> Self {
        Self {
            error,
            retryable: true,
            retry_after: None,
        }
    }
}

/// What to POST and how to name things in errors.
struct Call<'a> {
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    model: &'a str,
    base_url: &'a str,
}

/// One provider's server: the HTTP client, the settings, and the base URL requests go to.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) http: reqwest::Client,
    pub(crate) settings: ModelSettings,
    /// Without a trailing `/`.
    pub(crate) base_url: String,
}

impl Endpoint {
    /// The endpoint of `settings` at `base_url`.
    pub(crate) fn new(settings: &ModelSettings, base_url: &str) -> Result<Self, ModelError> {
        Ok(Self {
            http: http_client(settings)?,
            settings: settings.clone(),
            base_url: base_url.trim_end_matches('/').to_owned(),
        })
    }

    /// POSTs `body` to `url` and streams the answer through a fresh decoder on each attempt
    /// ([`stream_with_retries`]).
    pub(crate) async fn stream<D: Decoder>(
        &self,
        url: String,
        headers: Vec<(&'static str, String)>,
        body: &serde_json::Value,
        model: &str,
        new_decoder: impl Fn() -> D,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let call = Call {
            url,
            headers,
            body: serde_json::to_vec(body)
                .map_err(|e| ModelError::Config(format!("cannot encode the request: {e}")))?,
            model,
            base_url: &self.base_url,
        };
        stream_with_retries(&self.http, &self.settings, &call, new_decoder, on_event).await
    }
}

/// Builds the reqwest client for a provider.
fn http_client(settings: &ModelSettings) -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .connect_timeout(settings.timeout)
        .user_agent(concat!("eve/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {}", chain(&e))))
}

/// Whether an HTTP status is worth another try. 501 (the server does not do this at all) and 505
/// are answers that another try would only repeat.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 425 | 429)
        || ((500..=599).contains(&status) && !matches!(status, 501 | 505))
}

/// Maps an error status and its body to a [`ModelError`].
pub(crate) fn status_error(status: u16, body: &str, model: &str, base_url: &str) -> ModelError {
    let message = match html_text(body) {
        // A web page (a UI, a proxy's error page): the base URL most likely misses the API.
        Some(text) => format!(
            "an HTML page ({}), not an API answer: is {base_url} the API's base URL? \
             (OpenAI-compatible servers usually serve it under /v1; set it with EVE_BASE_URL)",
            quote(text.as_bytes())
        ),
        None => error_message(body, status),
    };
    if super::is_context_overflow(status, body) {
        return ModelError::ContextTooLong { status, message };
    }
    match status {
        401 | 403 => ModelError::Auth { status, message },
        // A 404 that speaks of a model is about the model; any other (`Not Found`, `404 page
        // not found`) is about the path: the base URL misses the API.
        404 if !message.to_ascii_lowercase().contains("model") => ModelError::Http {
            status,
            message: format!(
                "{message}: there is no API at {base_url}; is it the API's base URL? \
                 (OpenAI-compatible servers usually serve it under /v1; set it with EVE_BASE_URL)"
            ),
        },
        404 => ModelError::UnknownModel {
            model: model.to_owned(),
            base_url: base_url.to_owned(),
            message,
        },
        _ => ModelError::Http {
            status,
            message: match server_hint(&message) {
                Some(hint) => format!("{message} ({hint})"),
                None => message,
            },
        },
    }
}

/// What to do about the errors local model servers answer when they are started without what
/// tool calls need: llama.cpp's `llama-server` without `--jinja`, vLLM without its tool-call
/// flags, an Ollama model that cannot call tools.
fn server_hint(message: &str) -> Option<&'static str> {
    let text = message.to_ascii_lowercase();
    if text.contains("--jinja") || text.contains("tools param requires") {
        Some(
            "llama.cpp's `llama-server` takes tool calls only with `--jinja`: restart it with that flag",
        )
    } else if text.contains("enable-auto-tool-choice") || text.contains("tool-call-parser") {
        Some(
            "vLLM takes tool calls only when started with `--enable-auto-tool-choice \
             --tool-call-parser NAME` (the parser of the model's family, e.g. `hermes`, `llama3_json`)",
        )
    } else if text.contains("does not support tools") {
        Some("this model cannot call tools: use one that can, or give the agent no tools")
    } else {
        None
    }
}

/// Why a connection failed, in a few words (`connection refused`), from the I/O error under
/// reqwest's and hyper's layers; the whole chain when there is none.
fn connect_reason(error: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
                std::io::ErrorKind::TimedOut => "the connection timed out".to_owned(),
                _ => io.to_string(),
            };
        }
        source = e.source();
    }
    chain(error)
}

/// The provider's message in an error body: `{"error":{"message"}}`, `{"error":"…"}`,
/// `{"message"}` or `{"detail"}`, else the body itself (shortened), else the status reason.
pub(crate) fn error_message(body: &str, status: u16) -> String {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(body) {
        let candidates = [
            json.pointer("/error/message"),
            json.get("error"),
            json.get("message"),
            json.get("detail"),
        ];
        for candidate in candidates.into_iter().flatten() {
            if let Some(text) = candidate.as_str().filter(|t| !t.trim().is_empty()) {
                return text.trim().to_owned();
            }
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("no message")
            .to_owned()
    } else {
        quote(trimmed.as_bytes())
    }
}

/// The visible text of a body that is an HTML page (tags dropped, white space collapsed), or
/// `None` when it is not one.
fn html_text(body: &str) -> Option<String> {
    let head: String = body
        .trim_start()
        .chars()
        .take(64)
        .collect::<String>()
        .to_ascii_lowercase();
    if !(head.starts_with("<!doctype html") || head.starts_with("<html")) {
        return None;
    }
    let mut text = String::new();
    let mut in_tag = false;
    let mut in_skipped = false;
    let lower = body.to_ascii_lowercase();
    let mut i = 0;
    let bytes = body.as_bytes();
    while i < bytes.len() {
        if in_skipped {
            // Inside <style> or <script>: skip to its end tag.
            match lower[i..].find("</") {
                Some(at)
                    if lower[i + at..].starts_with("</style")
                        || lower[i + at..].starts_with("</script") =>
                {
                    in_skipped = false;
                    i += at;
                }
                Some(at) => i += at + 2,
                None => break,
            }
            continue;
        }
        let Some(c) = body[i..].chars().next() else {
            break;
        };
        if c == '<' {
            in_tag = true;
            in_skipped = lower[i..].starts_with("<style") || lower[i..].starts_with("<script");
        } else if c == '>' && in_tag {
            in_tag = false;
            text.push(' ');
        } else if !in_tag {
            text.push(c);
        }
        i += c.len_utf8();
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut text = words.join(" ");
    for (entity, c) in [
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&quot;", "\""),
        ("&#39;", "'"),
        ("&#x27;", "'"),
        ("&nbsp;", " "),
        ("&amp;", "&"),
    ] {
        text = text.replace(entity, c);
    }
    Some(text)
}

/// A short, printable excerpt of some bytes.
pub(crate) fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let mut out: String = text.chars().take(QUOTE_LIMIT).collect();
    if text.chars().count() > QUOTE_LIMIT {
        out.push('…');
    }
    out
}

/// Parses a `Retry-After` value: delay seconds (integer or decimal) or an HTTP date, relative to
/// `now`. A date in the past means "now"; anything unparsable is `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::try_from_secs_f64(secs).ok())
            .flatten();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The server's requested delay, from `retry-after-ms` (OpenAI) or `Retry-After`, capped.
fn retry_after(headers: &HeaderMap, cap: Duration) -> Option<Duration> {
    let millis = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok());
    let delay = millis.or_else(|| {
        headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()))
    })?;
    Some(delay.min(cap))
}

/// Exponential backoff with "equal jitter": half the delay fixed, half random.
fn backoff(settings: &ModelSettings, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.min(20));
    let full = settings
        .backoff_base
        .saturating_mul(factor)
        .min(settings.backoff_max);
    let half = full / 2;
    let jitter: f64 = rand::random();
    half + half.mul_f64(jitter)
}

/// The error chain of a foreign error, on one line.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

/// Runs a streamed POST with retries, feeding the body to a fresh decoder on each attempt.
async fn stream_with_retries<D: Decoder>(
    http: &reqwest::Client,
    settings: &ModelSettings,
    call: &Call<'_>,
    new_decoder: impl Fn() -> D,
    on_event: &mut (dyn FnMut(ModelEvent) + Send),
) -> Result<ModelResponse, ModelError> {
    let mut attempt: u32 = 0;
    let deadline = tokio::time::Instant::now() + settings.call_timeout;
    let over_deadline = || {
        ModelError::Transport(format!(
            "the model call to {} took longer than limits.model_call_seconds ({} s)",
            call.url,
            settings.call_timeout.as_secs_f64()
        ))
    };
    loop {
        let mut emitted = false;
        let mut decoder = new_decoder();
        let attempted = tokio::time::timeout_at(
            deadline,
            attempt_once(http, settings, call, &mut decoder, on_event, &mut emitted),
        )
        .await;
        let failure = match attempted {
            Err(_) => return Err(over_deadline()),
            Ok(Ok(mut response)) => {
                if response.usage.is_missing() {
                    response.usage = Usage::estimate(call.body.len(), &response);
                }
                return Ok(response);
            }
            Ok(Err(failure)) => failure,
        };
        if emitted || !failure.retryable || attempt >= settings.max_retries {
            return Err(failure.error);
        }
        let delay = failure
            .retry_after
            .unwrap_or_else(|| backoff(settings, attempt));
        if tokio::time::Instant::now() + delay >= deadline {
            return Err(ModelError::Transport(format!(
                "{}; a retry in {:.1} s would pass limits.model_call_seconds ({} s)",
                failure.error,
                delay.as_secs_f64(),
                settings.call_timeout.as_secs_f64()
            )));
        }
        tracing::warn!(
            attempt = attempt + 1,
            max_retries = settings.max_retries,
            delay_ms = delay.as_millis() as u64,
            error = %failure.error,
            "model call failed, retrying"
        );
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

async fn attempt_once<D: Decoder>(
    http: &reqwest::Client,
    settings: &ModelSettings,
    call: &Call<'_>,
    decoder: &mut D,
    on_event: &mut (dyn FnMut(ModelEvent) + Send),
    emitted: &mut bool,
) -> Result<ModelResponse, Failure> {
    let mut request = http
        .post(&call.url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(call.body.clone());
    for (name, value) in &call.headers {
        request = request.header(*name, value);
    }
    let response = match tokio::time::timeout(settings.timeout, request.send()).await {
        Err(_) => {
            return Err(Failure::transient(ModelError::Transport(format!(
                "no response from {} within {:?}",
                call.url, settings.timeout
            ))));
        }
        Ok(Err(e)) if e.is_builder() => {
            return Err(Failure::fatal(ModelError::Config(format!(
                "invalid model request to {}: {}",
                call.url,
                chain(&e)
            ))));
        }
        Ok(Err(e)) if e.is_connect() => {
            return Err(Failure::transient(ModelError::Transport(format!(
                "{}: {}; is the model server running there? (start it, or point eve at it \
                 with EVE_BASE_URL)",
                call.url,
                connect_reason(&e)
            ))));
        }
        Ok(Err(e)) => {
            return Err(Failure::transient(ModelError::Transport(format!(
                "{}: {}",
                call.url,
                chain(&e)
            ))));
        }
        Ok(Ok(response)) => response,
    };

    let status = response.status().as_u16();
    if !response.status().is_success() {
        let retry_after = retry_after(response.headers(), settings.retry_after_cap);
        let body = read_error_body(response, settings.idle_timeout).await;
        let error = status_error(status, &body, call.model, call.base_url);
        return Err(Failure {
            // The same prompt overflows the same window again: never worth a retry.
            retryable: retryable_status(status) && !error.is_context_overflow(),
            error,
            retry_after,
        });
    }

    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    let mut head: Vec<u8> = Vec::new();
    let mut body = response.bytes_stream();
    let mut events = Vec::new();
    let mut received: usize = 0;
    let mut last_content = tokio::time::Instant::now();
    let mut seen_events = decoder.sse_events();
    loop {
        let idle_until = last_content + settings.idle_timeout;
        let next = match tokio::time::timeout_at(idle_until, body.next()).await {
            Err(_) => {
                return Err(Failure::transient(ModelError::Transport(format!(
                    "the model stream stalled: no content for {:?} (limits.model_idle_seconds; \
                     keep-alive comments do not count)",
                    settings.idle_timeout
                ))));
            }
            Ok(next) => next,
        };
        let chunk = match next {
            None => break,
            Some(Err(e)) => {
                return Err(Failure::transient(ModelError::Malformed(format!(
                    "the stream was cut: {}",
                    chain(&e)
                ))));
            }
            Some(Ok(chunk)) => chunk,
        };
        received = received.saturating_add(chunk.len());
        if received > settings.response_bytes {
            return Err(Failure::fatal(ModelError::Malformed(format!(
                "the model response is larger than limits.model_response_bytes ({} bytes)",
                settings.response_bytes
            ))));
        }
        if head.len() < QUOTE_LIMIT {
            let take = (QUOTE_LIMIT - head.len()).min(chunk.len());
            head.extend_from_slice(chunk.get(..take).unwrap_or_default());
        }
        let pushed = decoder.push(&chunk, &mut events);
        if !events.is_empty() || decoder.sse_events() != seen_events {
            seen_events = decoder.sse_events();
            last_content = tokio::time::Instant::now();
        }
        forward(&mut events, on_event, emitted);
        if let Err(error) = pushed {
            return Err(decoder_failure(error));
        }
        if decoder.is_done() {
            break;
        }
    }
    let finished = decoder.finish(&mut events);
    forward(&mut events, on_event, emitted);
    match finished {
        Ok(response) => Ok(response),
        Err(_) if decoder.sse_events() == 0 && !head.is_empty() => {
            Err(Failure::fatal(ModelError::Malformed(format!(
                "expected an event stream (content-type {content_type}), got: {}",
                quote(&head)
            ))))
        }
        // The stream ended early: like a dropped connection, worth a retry if nothing was shown.
        Err(error @ ModelError::Malformed(_)) => Err(Failure::transient(error)),
        Err(error) => Err(decoder_failure(error)),
    }
}

/// Decoder errors: provider error events are retried like their HTTP status, an incomplete
/// stream like a dropped connection, garbage never.
fn decoder_failure(error: ModelError) -> Failure {
    let retryable = match &error {
        ModelError::Http { status, .. } => retryable_status(*status),
        ModelError::Transport(_) => true,
        _ => false,
    };
    Failure {
        error,
        retryable,
        retry_after: None,
    }
}

fn forward(
    events: &mut Vec<ModelEvent>,
    on_event: &mut (dyn FnMut(ModelEvent) + Send),
    emitted: &mut bool,
) {
    for event in events.drain(..) {
        *emitted = true;
        on_event(event);
    }
}

/// Reads at most [`ERROR_BODY_LIMIT`] bytes of an error response.
async fn read_error_body(response: reqwest::Response, idle: Duration) -> String {
    let mut body = response.bytes_stream();
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_BODY_LIMIT {
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(ERROR_BODY_LIMIT);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// GETs a JSON document (used for `/models`), with the connect/first-byte timeout for the whole call.
pub(crate) async fn get_json(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&'static str, String)],
    timeout: Duration,
) -> Result<serde_json::Value, ModelError> {
    let mut request = http.get(url).header("accept", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let fetch = async {
        let response = request
            .send()
            .await
            .map_err(|e| ModelError::Transport(chain(&e)))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ModelError::Transport(chain(&e)))?;
        if !(200..300).contains(&status) {
            return Err(ModelError::Http {
                status,
                message: error_message(&String::from_utf8_lossy(&bytes), status),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ModelError::Malformed(e.to_string()))
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| ModelError::Transport(format!("no answer from {url} within {timeout:?}")))?
}
