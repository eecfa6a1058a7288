//! `web_search` against scripted servers that check each provider's exact request (method, path,
//! query, headers, body) and answer in that provider's documented response format: Brave Search
//! API, Tavily and SearXNG; a missing key and a refused query come back as coded errors.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use eve_compile::{SearchProvider, Tool, Web, WebSearch};
use eve_runtime::tools::{ToolResult, WEB_SEARCH, WebContext, run_tool, web_tools};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Fixture;

/// One request as the provider saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: HeaderMap,
    body: Value,
}

/// A provider that records each request and answers `status` with `answer`.
async fn provider(status: StatusCode, answer: Value) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            let answer = answer.clone();
            async move {
                let query = uri.query().map(url_pairs).unwrap_or_default();
                s.lock().unwrap().push(Seen {
                    method: method.to_string(),
                    path: uri.path().to_owned(),
                    query,
                    headers,
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                });
                (status, axum::Json(answer)).into_response()
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn url_pairs(q: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://x/?{q}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn web(provider: SearchProvider, url: String, max_results: u32) -> Web {
    Web {
        search: Some(WebSearch {
            provider,
            url: Some(url),
            key_env: None,
            max_results,
        }),
        ..Web::default()
    }
}

fn search_tool(web: &Web) -> Tool {
    web_tools(web)
        .into_iter()
        .find(|t| t.name == WEB_SEARCH)
        .unwrap()
}

async fn search(web: Web, env: &[(&str, &str)], input: Value) -> ToolResult {
    let mut fx = Fixture::with_env(env);
    fx.ctx.web = WebContext::new(web.clone());
    run_tool(
        &search_tool(&web),
        &input,
        &fx.ctx,
        CancellationToken::new(),
    )
    .await
}

#[tokio::test]
async fn brave_is_asked_as_its_api_says_and_its_results_normalised() {
    // The Brave Search API's web search response (`WebSearchApiResponse`), abridged.
    let answer = json!({
        "type": "search",
        "query": {"original": "durable agents", "more_results_available": true},
        "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": false}]},
        "web": {
            "type": "search",
            "results": [
                {
                    "type": "search_result",
                    "title": "Durable <strong>agents</strong> &amp; you",
                    "url": "https://example.org/durable",
                    "is_source_local": false,
                    "description": "How <strong>durable</strong> agents resume after a crash.",
                    "profile": {"name": "Example", "url": "https://example.org"},
                    "language": "en",
                    "family_friendly": true
                },
                {
                    "type": "search_result",
                    "title": "Second",
                    "url": "https://example.com/2",
                    "description": "Another page."
                },
                {"type": "search_result", "title": "Third", "url": "https://example.com/3", "description": "x"}
            ],
            "family_friendly": true
        }
    });
    let (addr, seen) = provider(StatusCode::OK, answer).await;
    let url = format!("http://{addr}/res/v1/web/search");
    let r = search(
        web(SearchProvider::Brave, url, 5),
        &[("BRAVE_API_KEY", "brave-k3y")],
        json!({"query": "durable agents", "count": 2}),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.output,
        json!({
            "query": "durable agents",
            "provider": "brave",
            "results": [
                {"title": "Durable agents & you", "url": "https://example.org/durable",
                 "snippet": "How durable agents resume after a crash."},
                {"title": "Second", "url": "https://example.com/2", "snippet": "Another page."}
            ]
        })
    );
    let seen = seen.lock().unwrap()[0].clone();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.path, "/res/v1/web/search");
    assert_eq!(
        seen.query,
        vec![
            ("q".to_owned(), "durable agents".to_owned()),
            ("count".to_owned(), "2".to_owned())
        ]
    );
    assert_eq!(seen.headers["x-subscription-token"], "brave-k3y");
    assert_eq!(seen.headers["accept"], "application/json");
    assert!(!r.output.to_string().contains("brave-k3y"));
}

#[tokio::test]
async fn tavily_is_asked_as_its_api_says_and_its_results_normalised() {
    // Tavily's `POST /search` response.
    let answer = json!({
        "query": "durable agents",
        "follow_up_questions": null,
        "answer": null,
        "images": [],
        "results": [
            {
                "title": "Durable agents",
                "url": "https://example.org/durable",
                "content": "Agents that   resume\nafter a crash.",
                "score": 0.91,
                "raw_content": null,
                "favicon": "https://example.org/favicon.ico"
            }
        ],
        "response_time": "1.67",
        "request_id": "123e4567-e89b-12d3-a456-426614174111"
    });
    let (addr, seen) = provider(StatusCode::OK, answer).await;
    let r = search(
        web(SearchProvider::Tavily, format!("http://{addr}/search"), 3),
        &[("TAVILY_API_KEY", "tvly-k3y")],
        json!({"query": "durable agents"}),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.output["results"],
        json!([{"title": "Durable agents", "url": "https://example.org/durable",
                "snippet": "Agents that resume after a crash."}])
    );
    let seen = seen.lock().unwrap()[0].clone();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/search")
    );
    assert_eq!(seen.headers["authorization"], "Bearer tvly-k3y");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(
        seen.body,
        json!({"query": "durable agents", "max_results": 3})
    );
}

#[tokio::test]
async fn searxng_is_asked_for_json_on_its_own_instance_without_a_key() {
    // A SearXNG instance's `/search?format=json` response.
    let answer = json!({
        "query": "durable agents",
        "number_of_results": 0,
        "results": [
            {
                "url": "https://example.org/durable",
                "title": "Durable agents",
                "content": "Agents that resume.",
                "engine": "duckduckgo",
                "parsed_url": ["https", "example.org", "/durable", "", "", ""],
                "template": "default.html",
                "engines": ["duckduckgo", "brave"],
                "positions": [1, 2],
                "score": 4.0,
                "category": "general"
            }
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": ["durable functions"],
        "unresponsive_engines": []
    });
    let (addr, seen) = provider(StatusCode::OK, answer).await;
    // The instance's base URL, on a loopback address `agent.yaml` names: reached.
    let r = search(
        web(SearchProvider::Searxng, format!("http://{addr}/searx/"), 5),
        &[],
        json!({"query": "durable agents"}),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["provider"], "searxng");
    assert_eq!(r.output["results"][0]["snippet"], "Agents that resume.");
    let seen = seen.lock().unwrap()[0].clone();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/searx/search")
    );
    assert_eq!(
        seen.query,
        vec![
            ("q".to_owned(), "durable agents".to_owned()),
            ("format".to_owned(), "json".to_owned())
        ]
    );
    assert!(seen.headers.get("authorization").is_none());
}

#[tokio::test]
async fn a_missing_key_and_a_refused_query_are_coded_errors() {
    let (addr, seen) = provider(StatusCode::OK, json!({"results": []})).await;
    let r = search(
        web(SearchProvider::Brave, format!("http://{addr}/"), 5),
        &[],
        json!({"query": "q"}),
    )
    .await;
    assert!(!r.ok);
    assert_eq!(
        r.error.as_deref(),
        Some(
            "[web_search.missing_key] the brave key is read from the environment variable \
             `BRAVE_API_KEY`, which is not set where eve runs: set it (or name another with \
             `web.search.key_env`)"
        )
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
    // `key_env` names another variable.
    let mut named = web(SearchProvider::Tavily, format!("http://{addr}/"), 5);
    named.search.as_mut().unwrap().key_env = Some("MY_TAVILY".to_owned());
    let r = search(
        named.clone(),
        &[("TAVILY_API_KEY", "unused")],
        json!({"query": "q"}),
    )
    .await;
    assert!(r.error.as_deref().unwrap().contains("`MY_TAVILY`"), "{r:?}");
    let r = search(named, &[("MY_TAVILY", "k")], json!({"query": "q"})).await;
    assert!(r.ok, "{r:?}");

    // Brave's error body for a bad key.
    let (addr, _) = provider(
        StatusCode::UNAUTHORIZED,
        json!({"type": "ErrorResponse", "error": {"id": "1", "status": 401,
               "code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "The provided subscription token is invalid.",
               "meta": {}}, "time": 1}),
    )
    .await;
    let r = search(
        web(SearchProvider::Brave, format!("http://{addr}/"), 5),
        &[("BRAVE_API_KEY", "wrong")],
        json!({"query": "q"}),
    )
    .await;
    assert_eq!(
        r.error.as_deref(),
        Some(
            "[web_search.refused] brave refused the query with HTTP 401 Unauthorized: \
             SUBSCRIPTION_TOKEN_INVALID: The provided subscription token is invalid. (check the key)"
        )
    );
    // Tavily's error body.
    let (addr, _) = provider(
        StatusCode::BAD_REQUEST,
        json!({"detail": {"error": "Query is too long. Max query length is 400 characters."}}),
    )
    .await;
    let r = search(
        web(SearchProvider::Tavily, format!("http://{addr}/"), 5),
        &[("TAVILY_API_KEY", "k")],
        json!({"query": "q"}),
    )
    .await;
    assert_eq!(
        r.error.as_deref(),
        Some(
            "[web_search.refused] tavily refused the query with HTTP 400 Bad Request: \
             Query is too long. Max query length is 400 characters."
        )
    );
    // A SearXNG instance without the JSON format enabled answers 403.
    let (addr, _) = provider(StatusCode::FORBIDDEN, json!(null)).await;
    let r = search(
        web(SearchProvider::Searxng, format!("http://{addr}"), 5),
        &[],
        json!({"query": "q"}),
    )
    .await;
    assert!(
        r.error
            .as_deref()
            .unwrap()
            .starts_with("[web_search.refused] searxng refused the query with HTTP 403 Forbidden")
            && r.error
                .as_deref()
                .unwrap()
                .contains("JSON format is not enabled"),
        "{r:?}"
    );
    // An answer that is not the provider's format.
    let (addr, _) = provider(StatusCode::OK, json!({"items": []})).await;
    let r = search(
        web(SearchProvider::Searxng, format!("http://{addr}"), 5),
        &[],
        json!({"query": "q"}),
    )
    .await;
    assert!(
        r.error
            .as_deref()
            .unwrap()
            .starts_with("[web_search.bad_response]"),
        "{r:?}"
    );
}
