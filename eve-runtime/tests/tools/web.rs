//! `web_fetch` against real servers on loopback: an article page to Markdown, text and JSON as
//! they are, binary content described, a 50 MB page capped with memory staying small, a slow
//! server stopped at the time limit, redirects and error statuses. Loopback is refused by
//! default, so each test lists its server's address in `web.allow`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use eve_compile::{Tool, Web};
use eve_runtime::tools::{ToolResult, WEB_FETCH, WebContext, run_tool, web_tools};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Fixture;

/// An article as a real site serves it: head, scripts, navigation, the article, an aside and a
/// footer.
pub const ARTICLE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Durable agents, explained | The Example Journal</title>
  <link rel="stylesheet" href="/site.css">
  <style>body { font-family: serif; } .ad { display: block; }</style>
  <script>window.tracking = { id: "UA-000" }; console.log("tracking loaded");</script>
</head>
<body>
  <header class="site"><a href="/">The Example Journal</a></header>
  <nav><ul><li><a href="/">Home</a></li><li><a href="/archive">Archive</a></li></ul></nav>
  <main>
    <article>
      <h1>Durable agents, explained</h1>
      <p class="byline">By <a href="/authors/ada">Ada</a>, 3 March</p>
      <p>An agent is <strong>durable</strong> when a crash does not lose its work. Every step is
         committed with the events that announce it, as <a href="https://example.org/wal">the
         write-ahead log</a> does for a database.</p>
      <h2>What survives a restart</h2>
      <ul>
        <li>the session and its turns</li>
        <li>approvals still waiting</li>
      </ul>
      <blockquote>Nothing is replayed; everything resumes.</blockquote>
      <pre><code>eve run --resume</code></pre>
      <form action="/subscribe"><input name="email"><button>Subscribe</button></form>
    </article>
  </main>
  <aside class="ad">Buy our newsletter</aside>
  <footer>Copyright 2026 The Example Journal</footer>
</body>
</html>"#;

/// A server on loopback with the pages these tests fetch.
pub async fn site(extra: Router) -> SocketAddr {
    let app = extra
        .route(
            "/article",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    ARTICLE,
                )
            }),
        )
        .route(
            "/data.json",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"name":"eve","tags":["a","b"]}"#,
                )
            }),
        )
        .route("/notes.txt", get(|| async { "line one\nline two\n" }))
        .route(
            "/logo.png",
            get(|| async {
                let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
                png.resize(5000, 0);
                ([(header::CONTENT_TYPE, "image/png")], png)
            }),
        )
        .route(
            "/untyped",
            get(|| async {
                let mut body = b"\x00\x01\x02binary".to_vec();
                body.resize(300, 7);
                axum::response::Response::new(Body::from(body))
            }),
        )
        .route(
            "/missing",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    [(header::CONTENT_TYPE, "text/html")],
                    "<h1>Not here</h1><p>Try the archive.</p>",
                )
            }),
        )
        .route(
            "/hop/{n}",
            get(
                |axum::extract::Path(n): axum::extract::Path<u32>| async move {
                    let to = if n == 0 {
                        "/article".to_owned()
                    } else {
                        format!("/hop/{}", n - 1)
                    };
                    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
                },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The `web_fetch` tool as the runtime offers it.
pub fn fetch_tool(web: &Web) -> Tool {
    web_tools(web)
        .into_iter()
        .find(|t| t.name == WEB_FETCH)
        .unwrap()
}

/// `web:` allowing `entries` (and otherwise the defaults).
pub fn allowing(entries: &[String]) -> Web {
    Web {
        allow: entries.to_vec(),
        ..Web::default()
    }
}

/// Runs `web_fetch` for `url` under `web`.
pub async fn fetch(web: Web, url: &str) -> ToolResult {
    let mut fx = Fixture::new();
    fx.ctx.web = WebContext::new(web.clone());
    run_tool(
        &fetch_tool(&web),
        &json!({"url": url}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await
}

fn text(r: &ToolResult) -> &str {
    r.output.as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_article_page_becomes_readable_markdown() {
    let addr = site(Router::new()).await;
    let r = fetch(
        allowing(&[addr.to_string()]),
        &format!("http://{addr}/article"),
    )
    .await;
    assert!(r.ok, "{r:?}");
    let out = text(&r);
    assert!(
        out.starts_with(&format!("URL: http://{addr}/article\nStatus: 200 OK\n")),
        "{out}"
    );
    assert!(
        out.contains("Content-Type: text/html; charset=utf-8 (converted to Markdown)"),
        "{out}"
    );
    assert!(
        out.contains("Title: Durable agents, explained | The Example Journal"),
        "{out}"
    );
    assert!(
        out.contains("Limits: 2 MiB per page (`web.max_bytes`), 30 s per call (`web.timeout`)"),
        "{out}"
    );
    let body = out.split_once("\n\n").unwrap().1;
    assert!(body.starts_with("# Durable agents, explained\n"), "{body}");
    let byline = format!("By [Ada](http://{addr}/authors/ada), 3 March");
    for expected in [
        byline.as_str(),
        "An agent is **durable** when a crash does not lose its work.",
        "[the write-ahead log](https://example.org/wal)",
        "## What survives a restart",
        "- the session and its turns\n- approvals still waiting",
        "> Nothing is replayed; everything resumes.",
        "```\neve run --resume\n```",
    ] {
        assert!(body.contains(expected), "missing {expected:?} in:\n{body}");
    }
    for furniture in [
        "tracking",
        "font-family",
        "Archive",
        "Buy our newsletter",
        "Copyright",
        "Subscribe",
        "<",
    ] {
        assert!(!body.contains(furniture), "{furniture:?} kept in:\n{body}");
    }
    assert!(!r.truncated);
}

#[tokio::test]
async fn text_and_json_come_as_they_are_and_binary_is_described() {
    let addr = site(Router::new()).await;
    let web = allowing(&[addr.to_string()]);
    let r = fetch(web.clone(), &format!("http://{addr}/data.json")).await;
    assert!(r.ok, "{r:?}");
    assert!(
        text(&r).ends_with("\n\n{\"name\":\"eve\",\"tags\":[\"a\",\"b\"]}"),
        "{r:?}"
    );
    assert!(text(&r).contains("Size: 31 bytes"), "{r:?}");
    let r = fetch(web.clone(), &format!("http://{addr}/notes.txt")).await;
    assert!(text(&r).ends_with("\n\nline one\nline two\n"), "{r:?}");

    let r = fetch(web.clone(), &format!("http://{addr}/logo.png")).await;
    assert!(r.ok, "{r:?}");
    let out = text(&r);
    assert!(out.contains("Content-Type: image/png\n"), "{out}");
    assert!(out.contains("Size: 5000 bytes (4.9 KiB)"), "{out}");
    assert!(
        out.contains("This is binary content (image/png), not shown"),
        "{out}"
    );
    assert!(
        !out.contains("PNG"),
        "the bytes themselves are not shown: {out}"
    );
    // No type at all: the first bytes decide.
    let r = fetch(web, &format!("http://{addr}/untyped")).await;
    assert!(
        text(&r).contains("binary content (unknown type), not shown"),
        "{r:?}"
    );
}

#[tokio::test]
async fn an_error_status_fails_with_the_page_and_redirects_are_followed() {
    let addr = site(Router::new()).await;
    let web = allowing(&[addr.to_string()]);
    let r = fetch(web.clone(), &format!("http://{addr}/missing")).await;
    assert!(!r.ok, "{r:?}");
    assert_eq!(
        r.error.as_deref(),
        Some(
            format!("[web_fetch.status] http://{addr}/missing answered HTTP 404 Not Found")
                .as_str()
        )
    );
    assert!(
        text(&r).ends_with("# Not here\n\nTry the archive."),
        "{r:?}"
    );

    let r = fetch(web.clone(), &format!("http://{addr}/hop/3")).await;
    assert!(r.ok, "{r:?}");
    assert!(
        text(&r).starts_with(&format!(
            "URL: http://{addr}/article\nRedirected from: http://{addr}/hop/3\n"
        )),
        "{r:?}"
    );
    let r = fetch(web, &format!("http://{addr}/hop/11")).await;
    assert!(
        r.error
            .as_deref()
            .unwrap()
            .starts_with("[web_fetch.redirects]"),
        "{r:?}"
    );
}

/// A line of `/proc/self/status` (`VmRSS`, `VmHWM`), in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// Where the child process of the 50 MB test fetches from.
const HUGE_URL: &str = "EVE_TEST_WEB_FETCH_HUGE_URL";

/// The 50 MB page is fetched in a process of its own (this test binary, running this test
/// alone), so what its memory shows is the fetch's and no other test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mb_page_is_capped_and_never_sits_in_memory() {
    const MB: usize = 1024 * 1024;
    if let Ok(url) = std::env::var(HUGE_URL) {
        // The child: fetch, then say how far the resident set rose above where it was.
        let addr = reqwest::Url::parse(&url).unwrap();
        let listed = format!("{}:{}", addr.host_str().unwrap(), addr.port().unwrap());
        // A first, small fetch sets up what every fetch uses (threads, the TLS roots).
        let warm = fetch(
            allowing(std::slice::from_ref(&listed)),
            &url.replace("/huge", "/article"),
        )
        .await;
        assert!(warm.ok, "{warm:?}");
        let before = status_bytes("VmHWM");
        let r = fetch(allowing(&[listed]), &url).await;
        let peak = status_bytes("VmHWM");
        println!("GROWTH={}", peak.saturating_sub(before));
        println!("TRUNCATED={}", r.truncated);
        println!("OK={}", r.ok);
        for line in text(&r).lines().take(6) {
            println!("LINE={line}");
        }
        return;
    }
    let sent = Arc::new(AtomicUsize::new(0));
    let s = sent.clone();
    let app = Router::new().route(
        "/huge",
        get(move || {
            let s = s.clone();
            async move {
                // 50 chunks of 1 MiB of article text, made as they are sent.
                let chunks = futures::stream::iter(0..50).map(move |i| {
                    s.fetch_add(1, Ordering::SeqCst);
                    let mut chunk = if i == 0 {
                        b"<html><body><p>".to_vec()
                    } else {
                        Vec::new()
                    };
                    chunk.resize(MB, b'a');
                    for at in (100..MB).step_by(100) {
                        chunk[at] = b' ';
                    }
                    Ok::<_, std::io::Error>(chunk)
                });
                (
                    [
                        (header::CONTENT_TYPE, "text/html".to_owned()),
                        (header::CONTENT_LENGTH, (50 * MB).to_string()),
                    ],
                    Body::from_stream(chunks),
                )
            }
        }),
    );
    use futures::StreamExt as _;
    let addr = site(app).await;
    let child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "tools::web::a_50_mb_page_is_capped_and_never_sits_in_memory",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HUGE_URL, format!("http://{addr}/huge"))
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout).into_owned();
    assert!(
        child.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let value = |key: &str| {
        out.lines()
            .find_map(|l| l.find(key).map(|i| &l[i + key.len()..]))
            .unwrap_or_else(|| panic!("no {key} in {out}"))
            .to_owned()
    };
    assert_eq!(value("OK="), "true", "{out}");
    assert_eq!(value("TRUNCATED="), "true", "{out}");
    assert!(
        out.contains(&format!(
            "LINE=Size: the first {} bytes of {}: the 2 MiB cap was reached, the rest was not downloaded",
            2 * MB,
            50 * MB
        )),
        "{out}"
    );
    let growth: u64 = value("GROWTH=").parse().unwrap();
    eprintln!(
        "the 50 MiB fetch raised the peak resident set by {} KiB",
        growth / 1024
    );
    assert!(
        growth < 20 * MB as u64,
        "resident memory rose by {} KiB while fetching a 50 MiB page",
        growth / 1024
    );
    // The server stopped being read soon after the cap: most of the page was never made.
    assert!(
        sent.load(Ordering::SeqCst) < 20,
        "{} MiB were sent",
        sent.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn a_slow_server_is_stopped_at_the_time_limit() {
    let app = Router::new()
        .route(
            "/stall",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        )
        .route(
            "/drip",
            get(|| async {
                let drip = futures::stream::unfold(0u32, |n| async move {
                    if n > 0 {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    Some((Ok::<_, std::io::Error>(format!("part {n}\n")), n + 1))
                });
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    Body::from_stream(drip),
                )
            }),
        );
    let addr = site(app).await;
    let web = Web {
        timeout_ms: 1_000,
        ..allowing(&[addr.to_string()])
    };
    let start = Instant::now();
    let r = fetch(web.clone(), &format!("http://{addr}/stall")).await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(!r.ok);
    assert_eq!(
        r.error.as_deref(),
        Some(
            format!(
                "[web_fetch.timeout] http://{addr}/stall did not answer within 1 s (the time limit, `web.timeout`)"
            )
            .as_str()
        )
    );

    let start = Instant::now();
    let r = fetch(web, &format!("http://{addr}/drip")).await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(r.ok, "{r:?}");
    assert!(r.truncated);
    let out = text(&r);
    assert!(
        out.contains("the time limit of 1 s ran out, the rest was not downloaded"),
        "{out}"
    );
    assert!(out.contains("\n\npart 0\npart 1\n"), "{out}");
}
