//! Declarative HTTP tools: one templated request per call.
//!
//! An `http:` tool is the cheapest way to give an agent an API: no script, no process. The URL,
//! headers and body are templates (see [`super::template`]); input values placed in the URL are
//! percent-encoded. Without a body template the input itself is sent: as a JSON body for methods that
//! carry one, as query parameters (the fields the URL did not already use) for the others. Requests
//! that may write carry the call's idempotency key as `Idempotency-Key`, so a retried call can be
//! recognised by the server. The response is capped like process output.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use eve_compile::{HttpRequest, Tool};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::error::ToolError;
use super::process::{STDERR_TAIL, capture_text, text_tail, truncation_note};
use super::template::{render, render_json, value_text};
use super::{ToolContext, ToolResult, effective_limit, effective_timeout, millis};

/// The header carrying [`ToolContext::idempotency_key`].
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The HTTP client of the HTTP tools of one runtime: built on first use, then shared by every
/// call (connection pools are shared). Cheap to clone; clones share the client. Each runtime
/// holds its own, so two runtimes in one process share no connections.
#[derive(Clone, Default)]
pub struct HttpClient(Arc<OnceLock<Result<reqwest::Client, String>>>);

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client not built yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn get(&self) -> Result<&reqwest::Client, ToolError> {
        self.0
            .get_or_init(|| {
                reqwest::Client::builder()
                    .user_agent(concat!("eve/", env!("CARGO_PKG_VERSION")))
                    // Templated headers and query secrets must not follow a redirect to another
                    // origin: redirects are followed within the origin only (a cross-origin one
                    // comes back to the tool as the 3xx answer), and no `Referer` is sent.
                    .redirect(reqwest::redirect::Policy::custom(same_origin_redirects))
                    .referer(false)
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| ToolError::Request(format!("could not create the HTTP client: {e}")))
    }
}

/// A request ready to send.
struct Prepared {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
}

/// Renders the request of an HTTP tool for one input.
fn prepare(request: &HttpRequest, input: &Value, ctx: &ToolContext) -> Result<Prepared, ToolError> {
    let lookup = |name: &str| ctx.lookup(name);
    let method = Method::from_bytes(request.method.trim().to_ascii_uppercase().as_bytes())
        .map_err(|_| ToolError::InvalidMethod(request.method.clone()))?;
    let mut used = BTreeSet::new();
    let rendered = render(&request.url, input, &lookup, true, "url", &mut used)?;
    let mut url = Url::parse(&rendered).map_err(|e| ToolError::InvalidUrl {
        url: rendered.clone(),
        reason: e.to_string(),
    })?;

    let mut headers = HeaderMap::new();
    for (name, template) in &request.headers {
        let mut ignored = BTreeSet::new();
        let value = render(
            template,
            input,
            &lookup,
            false,
            &format!("header `{name}`"),
            &mut ignored,
        )?;
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| ToolError::InvalidHeader {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        let header_value = HeaderValue::from_str(&value).map_err(|e| ToolError::InvalidHeader {
            name: name.clone(),
            reason: e.to_string(),
        })?;
        headers.insert(header_name, header_value);
    }

    let carries_body = matches!(method, Method::POST | Method::PUT | Method::PATCH);
    let body = match &request.body {
        Some(Value::String(template)) => {
            let text = render(template, input, &lookup, false, "body", &mut used)?;
            if !headers.contains_key(CONTENT_TYPE) {
                let kind = if serde_json::from_str::<Value>(&text).is_ok() {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                };
                headers.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
            }
            Some(text.into_bytes())
        }
        Some(template) => Some(json_body(
            &render_json(template, input, &lookup, &mut used)?,
            &mut headers,
        )?),
        None if carries_body => Some(json_body(input, &mut headers)?),
        None => {
            add_query(&mut url, input, &used);
            None
        }
    };

    if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && !headers.contains_key(IDEMPOTENCY_KEY)
        && let Ok(value) = HeaderValue::from_str(&ctx.idempotency_key)
    {
        headers.insert(HeaderName::from_static(IDEMPOTENCY_KEY), value);
    }
    Ok(Prepared {
        method,
        url,
        headers,
        body,
    })
}

/// Serialises a JSON body, setting `Content-Type` unless the tool set one.
fn json_body(value: &Value, headers: &mut HeaderMap) -> Result<Vec<u8>, ToolError> {
    if !headers.contains_key(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    serde_json::to_vec(value).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

/// Adds the input's top-level fields (except those the URL used) as query parameters.
fn add_query(url: &mut Url, input: &Value, used: &BTreeSet<String>) {
    let Value::Object(fields) = input else {
        return;
    };
    let pairs: Vec<(&String, String)> = fields
        .iter()
        .filter(|(key, _)| !used.contains(*key))
        .flat_map(|(key, value)| match value {
            Value::Null => Vec::new(),
            Value::Array(items) => items
                .iter()
                .filter(|item| !item.is_null())
                .map(|item| (key, value_text(Some(item))))
                .collect(),
            other => vec![(key, value_text(Some(other)))],
        })
        .collect();
    if !pairs.is_empty() {
        let mut query = url.query_pairs_mut();
        for (key, value) in pairs {
            query.append_pair(key, &value);
        }
    }
}

/// Runs an `http:` tool.
pub(crate) async fn run_http_tool(
    tool: &Tool,
    request: &HttpRequest,
    input: &Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    let start = Instant::now();
    let timeout = effective_timeout(tool.timeout_ms);
    let limit = effective_limit(tool.output_limit);
    let call = async {
        let prepared = prepare(request, input, ctx)?;
        let mut builder = ctx
            .http
            .get()?
            .request(prepared.method, prepared.url)
            .headers(prepared.headers);
        if let Some(body) = prepared.body {
            builder = builder.body(body);
        }
        let mut response = builder
            .send()
            .await
            .map_err(|e| ToolError::Request(error_chain(&e)))?;
        let status = response.status();
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| ToolError::Request(error_chain(&e)))?
        {
            let room = limit.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(chunk.get(..room).unwrap_or_default());
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, ToolError>((status, body, truncated))
    };
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(ToolError::Cancelled),
        result = tokio::time::timeout(timeout, call) => match result {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout { ms: millis(timeout) }),
        },
    };
    let (status, body, truncated) = match outcome {
        Ok(parts) => parts,
        Err(e) => return ToolResult::failure(e.to_string(), start.elapsed()),
    };
    let output = response_output(&body, truncated, limit);
    let ok = status.is_success();
    let error = (!ok).then(|| {
        let tail = text_tail(&body, STDERR_TAIL);
        let tail = tail.trim();
        if tail.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {tail}")
        }
    });
    ToolResult {
        ok,
        output,
        truncated,
        exit_code: None,
        duration_ms: millis(start.elapsed()),
        error,
        refused: Vec::new(),
        input_refused: false,
    }
}

/// The response body as a result value: JSON when it parses, else text.
fn response_output(body: &[u8], truncated: bool, limit: usize) -> Value {
    if !truncated && let Ok(value) = serde_json::from_slice::<Value>(body) {
        return value;
    }
    let mut text = capture_text(body, truncated);
    let trimmed = text.trim_end_matches(['\n', '\r']).len();
    text.truncate(trimmed);
    if truncated {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&truncation_note(limit));
    }
    Value::String(text)
}

/// An error with its sources, which is where reqwest keeps the useful part ("connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The redirect policy of HTTP tools: follow up to 10 redirects that keep the scheme, host and
/// port of the first request; stop (answer the 3xx) at one that changes origin.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let origin = |u: &reqwest::Url| {
        (
            u.scheme().to_owned(),
            u.host_str().map(str::to_owned),
            u.port_or_known_default(),
        )
    };
    let same = attempt
        .previous()
        .first()
        .is_some_and(|first| origin(first) == origin(attempt.url()));
    if !same || attempt.previous().len() > 10 {
        attempt.stop()
    } else {
        attempt.follow()
    }
}
