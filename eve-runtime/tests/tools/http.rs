//! `http:` tools against a real server on loopback.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::routing::get;
use eve_compile::{HttpRequest, Runner, Tool};
use eve_runtime::tools::run_tool;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Fixture, tool};

/// Echoes the request back as JSON.
async fn echo(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> axum::Json<Value> {
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| Value::String(v.to_str().unwrap().to_owned()))
            .unwrap_or(Value::Null)
    };
    let body = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    axum::Json(json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "authorization": header("authorization"),
        "content_type": header("content-type"),
        "idempotency_key": header("idempotency-key"),
        "body": body,
    }))
}

async fn server() -> SocketAddr {
    let app = Router::new()
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database exploded\n") }),
        )
        .route("/text", get(|| async { "plain text\n" }))
        .route("/big", get(|| async { "b".repeat(1024 * 1024) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        )
        .fallback(echo);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn http_tool(method: &str, url: String, headers: &[(&str, &str)], body: Option<Value>) -> Tool {
    tool(
        "api",
        Runner::Http(HttpRequest {
            method: method.into(),
            url,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            body,
        }),
    )
}

#[tokio::test]
async fn get_puts_unused_input_fields_in_the_query() {
    let addr = server().await;
    let fx = Fixture::with_env(&[("UNITS", "metric")]);
    let mut t = http_tool(
        "GET",
        format!("http://{addr}/weather/{{{{input.city}}}}?units=${{UNITS}}"),
        &[],
        None,
    );
    t.input_schema = json!({"type": "object", "properties": {
        "days": {"type": "integer"}, "tags": {"type": "array"}, "none": {}
    }});
    let r = run_tool(
        &t,
        &json!({"city": "São Paulo/SP", "days": 3, "tags": ["a b", "c"], "none": null, "extra": 1}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["method"], "GET");
    assert_eq!(r.output["path"], "/weather/S%C3%A3o%20Paulo%2FSP");
    assert_eq!(r.output["query"], "units=metric&days=3&tags=a+b&tags=c");
    assert_eq!(
        r.output["idempotency_key"],
        Value::Null,
        "GET does not write"
    );
}

#[tokio::test]
async fn post_renders_body_and_header_templates() {
    let addr = server().await;
    let fx = Fixture::with_env(&[("API_TOKEN", "s3cret")]);
    let t = http_tool(
        "POST",
        format!("http://{addr}/search"),
        &[("Authorization", "Bearer ${API_TOKEN}")],
        Some(json!({
            "q": "{{input.city}}",
            "days": "{{ input.days }}",
            "filters": "{{input.filters}}",
            "label": "{{input.city}} for {{input.days}} days",
            "missing": "{{input.nope}}",
            "fixed": 1
        })),
    );
    let r = run_tool(
        &t,
        &json!({"city": "Oslo", "days": 2, "filters": {"rain": true}}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["authorization"], "Bearer s3cret");
    assert_eq!(r.output["content_type"], "application/json");
    assert_eq!(r.output["idempotency_key"], "ses_01:call_01");
    assert_eq!(
        r.output["body"],
        json!({"q": "Oslo", "days": 2, "filters": {"rain": true}, "label": "Oslo for 2 days", "missing": null, "fixed": 1})
    );
}

#[tokio::test]
async fn post_without_body_template_sends_the_input() {
    let addr = server().await;
    let fx = Fixture::new();
    let mut t = http_tool("POST", format!("http://{addr}/items"), &[], None);
    t.input_schema = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "n": {"type": "array"}
    }});
    let input = json!({"name": "widget", "n": [1, 2]});
    let r = run_tool(&t, &input, &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["body"], input);
    assert_eq!(r.output["query"], Value::Null);

    let t = http_tool(
        "PUT",
        format!("http://{addr}/raw"),
        &[],
        Some(json!("id={{input.name}}")),
    );
    let r = run_tool(&t, &input, &fx.ctx, CancellationToken::new()).await;
    assert_eq!(r.output["body"], "id=widget");
    assert_eq!(r.output["content_type"], "text/plain; charset=utf-8");
}

#[tokio::test]
async fn error_status_is_a_failure_with_the_body_tail() {
    let addr = server().await;
    let fx = Fixture::new();
    let t = http_tool("GET", format!("http://{addr}/fail"), &[], None);
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    assert_eq!(r.output, json!("database exploded"));
    let error = r.error.unwrap();
    assert!(
        error.contains("500") && error.contains("database exploded"),
        "{error}"
    );

    let t = http_tool("GET", format!("http://{addr}/text"), &[], None);
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok);
    assert_eq!(r.output, json!("plain text"));
}

#[tokio::test]
async fn response_cap_timeout_and_unset_secrets() {
    let addr = server().await;
    let fx = Fixture::new();
    let mut t = http_tool("GET", format!("http://{addr}/big"), &[], None);
    t.output_limit = 1000;
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok && r.truncated);
    assert_eq!(
        r.output.as_str().unwrap(),
        format!("{}\n[output truncated at 1000 bytes]", "b".repeat(1000))
    );

    let mut t = http_tool("GET", format!("http://{addr}/slow"), &[], None);
    t.timeout_ms = 200;
    let start = Instant::now();
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "not the 30 s reply"
    );
    assert!(!r.ok);
    assert!(r.error.unwrap().contains("timed out after 200 ms"));

    let t = http_tool(
        "GET",
        format!("http://{addr}/x"),
        &[("X-Key", "${MISSING_KEY}")],
        None,
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    let error = r.error.unwrap();
    assert!(
        error.contains("`${MISSING_KEY}` in header `X-Key` is not set"),
        "{error}"
    );

    let t = http_tool("GET", "http://127.0.0.1:1/".into(), &[], None);
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    assert!(r.error.unwrap().contains("HTTP request failed"));
}

#[tokio::test]
async fn redirects_keep_templated_headers_in_their_origin() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The second origin counts every request it gets.
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let other = Router::new().fallback(move |h: HeaderMap| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            format!("{:?}", h.get("authorization"))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, other).await.unwrap() });
    // The first redirects across origins, and within its own.
    let first = Router::new()
        .route(
            "/away",
            get(move || async move {
                (
                    StatusCode::FOUND,
                    [("location", format!("http://{b}/landed?token=x"))],
                )
            }),
        )
        .route(
            "/here",
            get(|| async { (StatusCode::FOUND, [("location", "/landed")]) }),
        )
        .fallback(echo);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, first).await.unwrap() });

    let fx = Fixture::with_env(&[("API_TOKEN", "redirect-s3cret")]);
    let headers = [("Authorization", "Bearer ${API_TOKEN}")];
    let away = http_tool("GET", format!("http://{a}/away"), &headers, None);
    let r = run_tool(&away, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the other origin was contacted: {r:?}"
    );
    assert!(!format!("{r:?}").contains("redirect-s3cret"), "{r:?}");

    let here = http_tool("GET", format!("http://{a}/here"), &headers, None);
    let r = run_tool(&here, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["path"], "/landed");
    assert_eq!(r.output["authorization"], "Bearer redirect-s3cret");
}
