//! `web_search`: one query to the provider `web.search` names, in that provider's own request
//! format, its answer normalised to `{title, url, snippet}` results.
//!
//! - Brave Search API: `GET <url>?q=…&count=N`, `Accept: application/json`,
//!   `X-Subscription-Token: <key>`; results in `web.results[]` (`title`, `url`, `description`);
//!   errors as `{"error": {"code", "detail", "status"}}`.
//! - Tavily: `POST <url>` with `{"query", "max_results"}`, `Authorization: Bearer <key>`;
//!   results in `results[]` (`title`, `url`, `content`); errors as `{"detail": {"error"}}`.
//! - SearXNG: `GET <url>/search?q=…&format=json` (the instance must enable the JSON format);
//!   results in `results[]` (`title`, `url`, `content`); a bearer token only when `key_env` is set.
//!
//! The request goes to the origin the author configured, through the guarded client limited to
//! it (`guarded::origin_client`): a self-hosted SearXNG on a private address is reached because
//! `agent.yaml` names it, and redirects never leave it. The key never appears in a result.

use std::time::{Duration, Instant};

use eve_compile::{SearchProvider, WebSearch};
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::WEB_SEARCH;
use crate::tools::guarded::{origin_client, refusal_in};
use crate::tools::{ToolContext, ToolResult};

/// Bytes of a provider's answer read at most.
const MAX_ANSWER: usize = 4 * 1024 * 1024;
/// Characters of a snippet kept.
const MAX_SNIPPET: usize = 600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    query: String,
    count: Option<u32>,
}

/// A coded failure of a search.
struct Failed {
    code: &'static str,
    message: String,
    input: bool,
}

fn fail(code: &'static str, message: String) -> Failed {
    Failed {
        code,
        message,
        input: false,
    }
}

pub(super) async fn run(input: &Value, ctx: &ToolContext, cancel: CancellationToken) -> ToolResult {
    let start = Instant::now();
    match search(input, ctx, &cancel).await {
        Ok(output) => ToolResult::success(output, start.elapsed()),
        Err(f) => ToolResult {
            input_refused: f.input,
            ..ToolResult::failure(
                format!("[{WEB_SEARCH}.{}] {}", f.code, f.message),
                start.elapsed(),
            )
        },
    }
}

async fn search(
    input: &Value,
    ctx: &ToolContext,
    cancel: &CancellationToken,
) -> Result<Value, Failed> {
    let input = Input::deserialize(input).map_err(|e| Failed {
        input: true,
        ..fail("invalid_input", e.to_string())
    })?;
    let query = input.query.trim().to_owned();
    if query.is_empty() {
        return Err(Failed {
            input: true,
            ..fail("invalid_input", "the query is empty".to_owned())
        });
    }
    let web = ctx.web.config();
    let Some(config) = &web.search else {
        return Err(fail(
            "not_configured",
            "no search provider is set: add `web: {search: {provider: …}}` to agent.yaml"
                .to_owned(),
        ));
    };
    let provider = config.provider.as_str();
    let key = match config
        .key_env
        .as_deref()
        .or(config.provider.default_key_env())
    {
        None => None,
        Some(name) => match ctx.lookup(name).filter(|k| !k.trim().is_empty()) {
            Some(key) => Some(key),
            None => {
                return Err(fail(
                    "missing_key",
                    format!(
                        "the {provider} key is read from the environment variable `{name}`, \
                         which is not set where eve runs: set it (or name another with \
                         `web.search.key_env`)"
                    ),
                ));
            }
        },
    };
    let count = input.count.unwrap_or(config.max_results).clamp(1, 20);
    let url = endpoint(config)?;
    let client = origin_client(&url, ctx.exec.own_listeners())
        .map_err(|e| fail("refused", format!("{url}: {e}")))?;
    let request = match config.provider {
        SearchProvider::Brave => client
            .get(with_query(
                &url,
                &[("q", &query), ("count", &count.to_string())],
            ))
            .header("Accept", "application/json")
            .header("X-Subscription-Token", key.unwrap_or_default()),
        SearchProvider::Tavily => client
            .post(url.clone())
            .bearer_auth(key.unwrap_or_default())
            .json(&json!({"query": query, "max_results": count})),
        SearchProvider::Searxng => {
            let mut request = client
                .get(with_query(&url, &[("q", &query), ("format", "json")]))
                .header("Accept", "application/json");
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            request
        }
    };
    let limit = Duration::from_millis(web.timeout_ms.max(1));
    let answer = async {
        let mut response = request.send().await?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            let room = MAX_ANSWER.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if room <= chunk.len() {
                break;
            }
        }
        Ok::<_, reqwest::Error>((status, body))
    };
    let (status, body) = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(fail("cancelled", "the call was cancelled".to_owned())),
        () = tokio::time::sleep(limit) => {
            return Err(fail(
                "timeout",
                format!("{provider} did not answer within {} s (`web.timeout`)", limit.as_secs_f64()),
            ));
        }
        answer = answer => answer.map_err(|e| match refusal_in(&e) {
            Some(refused) => fail("refused", refused.to_string()),
            None => fail("unreachable", format!("{provider} at {}: {e}", origin(&url))),
        })?,
    };
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        let said = parsed
            .as_ref()
            .and_then(|v| provider_error(config.provider, v))
            .unwrap_or_else(|| snippet(&String::from_utf8_lossy(&body), 300));
        let code = if status.is_client_error() {
            "refused"
        } else {
            "provider_error"
        };
        let hint = match status.as_u16() {
            401 | 403 if config.provider == SearchProvider::Searxng => {
                " (a SearXNG instance answers 403 when its JSON format is not enabled: add `json` to `search.formats` in its settings.yml)"
            }
            401 | 403 => " (check the key)",
            429 => " (rate limited: try again later)",
            _ => "",
        };
        return Err(fail(
            code,
            format!("{provider} refused the query with HTTP {status}: {said}{hint}"),
        ));
    }
    let Some(parsed) = parsed else {
        return Err(fail(
            "bad_response",
            format!(
                "{provider} answered something that is not JSON: {}",
                snippet(&String::from_utf8_lossy(&body), 200)
            ),
        ));
    };
    let results = normalise(config.provider, &parsed).ok_or_else(|| {
        fail(
            "bad_response",
            format!("{provider}'s answer has no result list where its API puts one"),
        )
    })?;
    let results: Vec<Value> = results.into_iter().take(count as usize).collect();
    Ok(json!({"query": query, "provider": provider, "results": results}))
}

/// The URL asked: the configured one or the provider's own; SearXNG's `/search` added to its
/// base URL.
fn endpoint(config: &WebSearch) -> Result<Url, Failed> {
    let raw = config
        .url
        .as_deref()
        .or(config.provider.default_url())
        .unwrap_or_default();
    let mut url = Url::parse(raw)
        .map_err(|e| fail("bad_settings", format!("`web.search.url` `{raw}`: {e}")))?;
    if config.provider == SearchProvider::Searxng
        && !url.path().trim_end_matches('/').ends_with("/search")
    {
        let path = format!("{}/search", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url)
}

/// `url` with `pairs` added to its query, each percent-encoded.
fn with_query(url: &Url, pairs: &[(&str, &str)]) -> Url {
    let mut url = url.clone();
    url.query_pairs_mut().extend_pairs(pairs);
    url
}

fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// The results of a provider's answer as `{title, url, snippet}`; `None` when the list is not
/// where the provider's API puts it.
fn normalise(provider: SearchProvider, answer: &Value) -> Option<Vec<Value>> {
    let (list, snippet_key) = match provider {
        // A query Brave finds nothing for has no `web` section at all.
        SearchProvider::Brave => match answer.get("web") {
            None if answer.get("type").and_then(Value::as_str) == Some("search") => {
                return Some(Vec::new());
            }
            web => (web?.get("results")?, "description"),
        },
        SearchProvider::Tavily | SearchProvider::Searxng => (answer.get("results")?, "content"),
    };
    Some(
        list.as_array()?
            .iter()
            .filter_map(|r| {
                let url = r.get("url")?.as_str()?;
                let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                Some(json!({
                    "title": strip_tags(text("title")),
                    "url": url,
                    "snippet": snippet(&strip_tags(text(snippet_key)), MAX_SNIPPET),
                }))
            })
            .collect(),
    )
}

/// What a provider's error body says.
fn provider_error(provider: SearchProvider, v: &Value) -> Option<String> {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    match provider {
        SearchProvider::Brave => {
            let e = v.get("error")?;
            let detail = s(e.get("detail")).unwrap_or_default();
            Some(match s(e.get("code")) {
                Some(code) => format!("{code}: {detail}"),
                None => detail,
            })
        }
        SearchProvider::Tavily => s(v.pointer("/detail/error"))
            .or_else(|| s(v.get("detail")))
            .or_else(|| s(v.get("error"))),
        SearchProvider::Searxng => s(v.get("error")),
    }
}

/// Brave marks matches with `<strong>`; the model reads text.
fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
}

/// At most `max` characters of `s`, whitespace squeezed.
fn snippet(s: &str, max: usize) -> String {
    let squeezed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if squeezed.chars().count() <= max {
        return squeezed;
    }
    let mut cut: String = squeezed.chars().take(max).collect();
    cut.push('…');
    cut
}
