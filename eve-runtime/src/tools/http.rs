//! Declarative HTTP tools: one templated request per call.
//!
//! An `http:` tool is the cheapest way to give an agent an API: no script, no process. The URL,
//! headers and body are templates (see [`super::template`]); an input value placed in the URL is
//! percent-encoded, and in the path it is one segment, never `.` or `..`. Only the input fields the
//! tool declares (its schema's `properties`, or a `{{input.FIELD}}` of its templates) reach the
//! request: without a body template they are sent as a JSON body for methods that carry one, as
//! query parameters (those the URL did not already use) for the others. Requests that may write
//! carry the call's idempotency key as `Idempotency-Key`, so a retried call can be recognised by
//! the server. The request obeys the tool's network policy through [`super::guarded`]: its
//! `network:`, or without one the origin its `url:` names. The response is capped like process
//! output.

use std::collections::BTreeSet;
use std::time::Instant;

use eve_compile::{HttpRequest, Network, Tool};
use eve_sandbox::egress::{EgressPolicy, Rule};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::error::ToolError;
use super::guarded::{Egress, RequestRefused, check_url, refusal_in};
use super::process::{STDERR_TAIL, capture_text, text_tail, truncation_note};
use super::template::{
    expand_env, referenced_fields, referenced_fields_json, render, render_json, render_url,
    value_text,
};
use super::{Refused, ToolContext, ToolResult, effective_limit, effective_timeout, millis};

/// The header carrying [`ToolContext::idempotency_key`].
pub(super) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A request ready to send.
pub(super) struct Prepared {
    pub(super) method: Method,
    pub(super) url: Url,
    pub(super) headers: HeaderMap,
    pub(super) body: Option<Vec<u8>>,
}

/// Renders the request of an HTTP tool for one input (already reduced to its declared fields).
fn prepare(request: &HttpRequest, input: &Value, ctx: &ToolContext) -> Result<Prepared, ToolError> {
    let lookup = |name: &str| ctx.lookup(name);
    let method = Method::from_bytes(request.method.trim().to_ascii_uppercase().as_bytes())
        .map_err(|_| ToolError::InvalidMethod(request.method.clone()))?;
    let mut used = BTreeSet::new();
    let rendered = render_url(&request.url, input, &lookup, &mut used)?;
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
    // The call's trace context, so the service's spans join the call's trace.
    if let Some(traceparent) = &ctx.traceparent
        && let Ok(value) = HeaderValue::from_str(traceparent)
    {
        headers.insert(HeaderName::from_static("traceparent"), value);
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

/// The input with only the fields the tool declares: its schema's `properties` (also within
/// top-level `allOf`/`anyOf`/`oneOf`), and those its templates name. A schema that says
/// `additionalProperties: true` (or gives it a schema) declares every field.
fn declared_input(tool: &Tool, request: &HttpRequest, input: &Value) -> Value {
    let Value::Object(fields) = input else {
        return input.clone();
    };
    let schema = &tool.input_schema;
    if matches!(
        schema.get("additionalProperties"),
        Some(Value::Bool(true) | Value::Object(_))
    ) {
        return input.clone();
    }
    let mut declared = BTreeSet::new();
    let mut add_properties = |s: &Value| {
        if let Some(properties) = s.get("properties").and_then(Value::as_object) {
            declared.extend(properties.keys().cloned());
        }
    };
    add_properties(schema);
    for key in ["allOf", "anyOf", "oneOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            add_properties(branch);
        }
    }
    referenced_fields(&request.url, &mut declared);
    for template in request.headers.values() {
        referenced_fields(template, &mut declared);
    }
    if let Some(body) = &request.body {
        referenced_fields_json(body, &mut declared);
    }
    Value::Object(
        fields
            .iter()
            .filter(|(key, _)| declared.contains(*key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
    )
}

/// The egress policy of an HTTP tool: its own `network:`, or without one the origin its `url:`
/// names as the author wrote it (`${VAR}`s expanded), which must then not come from the input.
fn policy(
    request: &HttpRequest,
    network: Option<&Network>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<EgressPolicy, ToolError> {
    match network {
        Some(Network::None) => Ok(EgressPolicy::Allow(Vec::new())),
        Some(Network::All) => Ok(EgressPolicy::All),
        Some(Network::Allow(entries)) => EgressPolicy::allow_list(entries).map_err(|errors| {
            ToolError::Network(format!(
                "this tool's `network:` cannot be used: {}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        }),
        None => {
            let template = &request.url;
            let first_input = template.find("{{");
            let written = expand_env(
                &template[..first_input.unwrap_or(template.len())],
                lookup,
                "url",
            )?;
            let whole_authority = first_input.is_none()
                || written
                    .find("://")
                    .is_some_and(|i| written[i + 3..].contains(['/', '?', '#']));
            let from_input = || {
                ToolError::Network(
                    "the host of this tool's `url` comes from its input: list the destinations it \
                     may reach with `network:` in the tool's file"
                        .to_owned(),
                )
            };
            if !whole_authority {
                return Err(from_input());
            }
            let url = Url::parse(&written).map_err(|e| ToolError::InvalidUrl {
                url: written.clone(),
                reason: e.to_string(),
            })?;
            let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
                return Err(from_input());
            };
            let rule = format!("{host}:{port}").parse::<Rule>().map_err(|e| {
                ToolError::Network(format!(
                    "the host of this tool's `url` cannot be its destination ({e}): list the \
                     destinations it may reach with `network:` in the tool's file"
                ))
            })?;
            Ok(EgressPolicy::Allow(vec![rule]))
        }
    }
}

/// A failed result for a destination the rules refused, with the refusal recorded (as
/// `sandbox.egress.refused`) like a box's.
pub(super) fn refused_result(refused: RequestRefused, url: &str, start: Instant) -> ToolResult {
    let error = ToolError::Refused {
        url: if refused.redirect {
            format!("the redirect of {url} to {}:{}", refused.host, refused.port)
        } else {
            url.to_owned()
        },
        reason: refused.reason.clone(),
    };
    let mut result = ToolResult::failure(error.to_string(), start.elapsed());
    result.refused.push(Refused {
        host: refused.host,
        port: refused.port,
        reason: refused.reason,
    });
    result
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
    let input = declared_input(tool, request, input);
    let lookup = |name: &str| ctx.lookup(name);
    let planned = policy(request, ctx.network.as_ref(), &lookup)
        .and_then(|policy| Ok((prepare(request, &input, ctx)?, policy)));
    let (prepared, policy) = match planned {
        Ok(planned) => planned,
        Err(e) => {
            let mut result = ToolResult::failure(e.to_string(), start.elapsed());
            // A value that would climb the URL path is the caller's mistake, not the tool's.
            result.input_refused = matches!(e, ToolError::PathSegment { .. });
            return result;
        }
    };
    let egress = Egress {
        policy,
        own: ctx.exec.own_listeners(),
    };
    send(prepared, egress, ctx, limit, timeout, cancel, start).await
}

/// Sends a prepared request under `egress` and reads at most `limit` bytes of the answer (the
/// rest is never read: a large response is cut while it streams); a non-2xx status is a failed
/// result with the status and the tail of the body.
pub(super) async fn send(
    prepared: Prepared,
    egress: Egress,
    ctx: &ToolContext,
    limit: usize,
    timeout: std::time::Duration,
    cancel: CancellationToken,
    start: Instant,
) -> ToolResult {
    let shown = prepared.url.to_string();
    if let Err(refused) = check_url(&prepared.url, &egress) {
        return refused_result(refused, &shown, start);
    }
    let port = prepared.url.port_or_known_default().unwrap_or(0);
    let call = async {
        let client = ctx
            .http
            .client(&egress, port)
            .map_err(|e| ToolError::Request(format!("could not create the HTTP client: {e}")))?;
        let mut builder = client
            .request(prepared.method, prepared.url)
            .headers(prepared.headers);
        if let Some(body) = prepared.body {
            builder = builder.body(body);
        }
        let mut response = builder.send().await.map_err(Failure::from)?;
        let status = response.status();
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(Failure::from)? {
            let room = limit.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(chunk.get(..room).unwrap_or_default());
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, Failure>((status, body, truncated))
    };
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Failure::Tool(ToolError::Cancelled)),
        result = tokio::time::timeout(timeout, call) => match result {
            Ok(result) => result,
            Err(_) => Err(Failure::Tool(ToolError::Timeout { ms: millis(timeout) })),
        },
    };
    let (status, body, truncated) = match outcome {
        Ok(parts) => parts,
        Err(Failure::Refused(refused)) => return refused_result(refused, &shown, start),
        Err(Failure::Tool(e)) => return ToolResult::failure(e.to_string(), start.elapsed()),
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

/// Why a request did not complete: the egress rules refused a destination (at the start, a
/// redirect hop or a connection), or anything else.
enum Failure {
    Refused(RequestRefused),
    Tool(ToolError),
}

impl From<ToolError> for Failure {
    fn from(e: ToolError) -> Self {
        Self::Tool(e)
    }
}

impl From<reqwest::Error> for Failure {
    fn from(e: reqwest::Error) -> Self {
        match refusal_in(&e) {
            Some(refused) => Self::Refused(refused),
            None => Self::Tool(ToolError::Request(error_chain(&e))),
        }
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
