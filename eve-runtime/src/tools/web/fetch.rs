//! `web_fetch`: one page, fetched under the egress rules, read under a byte cap and a time limit.
//!
//! Redirects are followed here, one hop at a time, each new URL checked before it is requested
//! (a redirect to another origin is normal on the web; no header of the agent's travels with
//! it). The body is streamed: once `web.max_bytes` are in, the connection is dropped, so a 50 MB
//! page never sits in memory. What was cut, and why, is said in the result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::rules::{WebRules, client};
use super::{WEB_FETCH, bytes, page};
use crate::tools::guarded::{RequestRefused, refusal_in};
use crate::tools::{Refused, ToolContext, ToolResult};

/// Redirects followed at most.
const MAX_HOPS: usize = 10;
/// What the page is asked as.
const ACCEPTS: &str = "text/html, application/xhtml+xml, text/markdown, text/plain, application/json;q=0.9, */*;q=0.5";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    url: String,
}

/// How the body is given to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
    Binary,
}

/// Why a fetch ended without a page.
struct Failed {
    code: &'static str,
    message: String,
    refused: Option<RequestRefused>,
    input: bool,
}

impl Failed {
    fn new(code: &'static str, message: String) -> Self {
        Self {
            code,
            message,
            refused: None,
            input: false,
        }
    }
}

pub(super) async fn run(input: &Value, ctx: &ToolContext, cancel: CancellationToken) -> ToolResult {
    let start = Instant::now();
    let result = fetch(input, ctx, &cancel, start).await;
    match result {
        Ok(result) => result,
        Err(failed) => {
            let mut result = ToolResult::failure(
                format!("[{}.{}] {}", WEB_FETCH, failed.code, failed.message),
                start.elapsed(),
            );
            result.input_refused = failed.input;
            if let Some(r) = failed.refused {
                result.refused.push(Refused {
                    host: r.host,
                    port: r.port,
                    reason: r.reason,
                });
            }
            result
        }
    }
}

async fn fetch(
    input: &Value,
    ctx: &ToolContext,
    cancel: &CancellationToken,
    start: Instant,
) -> Result<ToolResult, Failed> {
    let input = Input::deserialize(input).map_err(|e| Failed {
        input: true,
        ..Failed::new("invalid_input", e.to_string())
    })?;
    let web = &ctx.web;
    let config = web.config();
    let first = Url::parse(input.url.trim()).map_err(|e| Failed {
        input: true,
        ..Failed::new(
            "bad_url",
            format!("`{}` is not a URL: {e}", input.url.trim()),
        )
    })?;
    let rules = if web.unchecked {
        None
    } else {
        Some(Arc::new(
            WebRules::new(config, ctx.exec.own_listeners())
                .map_err(|e| Failed::new("bad_settings", e))?,
        ))
    };
    let limit = Duration::from_millis(config.timeout_ms.max(1));
    let deadline = tokio::time::Instant::now() + limit;
    let timed_out = |url: &Url| {
        Failed::new(
            "timeout",
            format!(
                "{url} did not answer within {} (the time limit, `web.timeout`)",
                seconds(limit)
            ),
        )
    };
    let mut url = first.clone();
    let mut hops = 0;
    let response = loop {
        if let Some(rules) = &rules {
            rules
                .check_url(&url)
                .map_err(|refused| refusal(refused, hops > 0))?;
        }
        let port = url.port_or_known_default().unwrap_or(0);
        let client = client(rules.clone(), port)
            .map_err(|e| Failed::new("client", format!("could not create the client: {e}")))?;
        let send = client.get(url.clone()).header(ACCEPT, ACCEPTS).send();
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(Failed::new("cancelled", "the call was cancelled".to_owned())),
            () = sleep_until(deadline) => return Err(timed_out(&url)),
            sent = send => sent.map_err(|e| match refusal_in(&e) {
                Some(refused) => refusal(refused, hops > 0),
                None => Failed::new("request", format!("{url}: {}", error_chain(&e))),
            })?,
        };
        if !response.status().is_redirection() {
            break response;
        }
        let Some(next) = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| url.join(l).ok())
        else {
            break response;
        };
        hops += 1;
        if hops > MAX_HOPS {
            return Err(Failed::new(
                "redirects",
                format!("{first} redirected more than {MAX_HOPS} times"),
            ));
        }
        url = next;
    };

    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let length = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut kind = kind_of(content_type.as_deref());
    let cap = usize::try_from(config.max_bytes).unwrap_or(usize::MAX);
    let mut head = vec![format!("URL: {url}")];
    if url != first {
        head.push(format!("Redirected from: {first}"));
    }
    head.push(format!("Status: {status}"));
    let type_line = head.len();
    head.push(format!(
        "Content-Type: {}",
        content_type.as_deref().unwrap_or("(none)")
    ));
    let limits = format!(
        "Limits: {} per page (`web.max_bytes`), {} per call (`web.timeout`)",
        bytes(config.max_bytes),
        seconds(limit)
    );

    let mut body = Vec::new();
    let mut cut = None;
    if kind != Some(Kind::Binary) {
        let mut response = response;
        body.reserve(length.map_or(64 * 1024, |l| l.min(config.max_bytes)) as usize);
        loop {
            let chunk = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Failed::new("cancelled", "the call was cancelled".to_owned())),
                () = sleep_until(deadline) => {
                    cut = Some(format!("the time limit of {} ran out", seconds(limit)));
                    break;
                }
                chunk = response.chunk() => chunk,
            };
            match chunk {
                Ok(Some(chunk)) => {
                    // At the cap, one more chunk tells whether there was more.
                    let room = cap - body.len();
                    if chunk.len() > room {
                        body.extend_from_slice(&chunk[..room]);
                        cut = Some(format!("the {} cap was reached", bytes(config.max_bytes)));
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    cut = Some(format!("the connection failed: {}", error_chain(&e)));
                    break;
                }
            }
        }
        // Dropping the response here closes the connection: the rest is never read.
        if body.is_empty() && cut.as_deref().is_some_and(|c| c.starts_with("the time")) {
            return Err(timed_out(&url));
        }
        if kind.is_none() {
            kind = Some(sniff(&body));
        }
    }

    let read = body.len() as u64;
    let total = length.map(|l| format!(" of {l}")).unwrap_or_default();
    let text = match kind.unwrap_or(Kind::Binary) {
        Kind::Binary => {
            head.push(match length {
                Some(l) => format!("Size: {l} bytes ({})", bytes(l)),
                None => "Size: unknown (no Content-Length)".to_owned(),
            });
            head.push(limits);
            head.push(String::new());
            head.push(format!(
                "This is binary content ({}), not shown.",
                content_type.as_deref().unwrap_or("unknown type")
            ));
            head.join("\n")
        }
        Kind::Text => {
            head.push(size_line(read, &total, cut.as_deref()));
            head.push(limits);
            head.push(String::new());
            head.push(
                String::from_utf8(body)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            );
            head.join("\n")
        }
        Kind::Html => {
            let html = String::from_utf8(body)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            let base = url.clone();
            let converted =
                tokio::task::spawn_blocking(move || page::to_markdown(&html, Some(&base)))
                    .await
                    .map_err(|e| Failed::new("convert", e.to_string()))?;
            head[type_line].push_str(" (converted to Markdown)");
            if let Some(title) = &converted.title {
                head.push(format!("Title: {title}"));
            }
            head.push(size_line(read, &total, cut.as_deref()));
            head.push(limits);
            head.push(String::new());
            head.push(converted.markdown);
            head.join("\n")
        }
    };
    let elapsed = start.elapsed();
    let mut result = if status.is_success() {
        ToolResult::success(Value::String(text), elapsed)
    } else {
        ToolResult {
            output: Value::String(text),
            ..ToolResult::failure(
                format!("[{WEB_FETCH}.status] {url} answered HTTP {status}"),
                elapsed,
            )
        }
    };
    result.truncated = cut.is_some();
    Ok(result)
}

/// The `Size:` line of a page read: its bytes, and what cut it short.
fn size_line(read: u64, total: &str, cut: Option<&str>) -> String {
    match cut {
        Some(why) => {
            format!("Size: the first {read} bytes{total}: {why}, the rest was not downloaded")
        }
        None => format!("Size: {read} bytes"),
    }
}

fn refusal(refused: RequestRefused, redirect: bool) -> Failed {
    let refused = RequestRefused {
        redirect: redirect || refused.redirect,
        ..refused
    };
    Failed {
        refused: Some(refused.clone()),
        ..Failed::new("refused", refused.to_string())
    }
}

/// The kind a `Content-Type` names; `None` when there is none, so the body is sniffed.
fn kind_of(content_type: Option<&str>) -> Option<Kind> {
    let mime = content_type?
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    Some(match mime.as_str() {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        "" => return None,
        m if m.starts_with("text/")
            || m.ends_with("+json")
            || m.ends_with("+xml")
            || matches!(
                m,
                "application/json"
                    | "application/xml"
                    | "application/javascript"
                    | "application/ecmascript"
                    | "application/x-ndjson"
                    | "application/yaml"
                    | "application/x-yaml"
                    | "application/toml"
                    | "application/sql"
                    | "application/graphql"
            ) =>
        {
            Kind::Text
        }
        _ => Kind::Binary,
    })
}

/// The kind of an untyped body by its first bytes.
fn sniff(body: &[u8]) -> Kind {
    let head = &body[..body.len().min(1024)];
    let lower = String::from_utf8_lossy(head).to_ascii_lowercase();
    let trimmed = lower.trim_start();
    if trimmed.starts_with("<!doctype html") || trimmed.starts_with("<html") {
        Kind::Html
    } else if head.contains(&0) || std::str::from_utf8(head).is_err_and(|e| e.error_len().is_some())
    {
        Kind::Binary
    } else {
        Kind::Text
    }
}

fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// An error and its sources, in one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
