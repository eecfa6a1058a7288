//! Attacks on the requests a remote agent (`subagents/NAME.yaml` `url:`) makes, over real HTTP on
//! `127.0.0.1:0`: the URL and every redirect hop go through the runtime's egress rules, so a
//! remote named at a loopback or metadata address, in any spelling, is refused before anything
//! reaches it, and a remote that redirects to one is refused at the hop. A listener records each
//! request it gets; the twin (the test-only `EVE_TEST_REMOTE_LOOPBACK`, which lists the URL's
//! host by name) reaches the same listener, so each test can fail. A hostile remote's endless
//! answer, endless stream line and path-climbing session id are faults, not memory or paths.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

/// A listener on 127.0.0.1 that counts every request and answers with `router` (or a 404).
async fn listener(router: Router) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let router =
        router
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        next.run(request).await
                    }
                },
            ));
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(socket, router).await;
    });
    (addr, hits)
}

/// A parent whose subagents `r0`, `r1`… are remote agents at `urls`; `loopback` turns on the
/// test-only switch that lists each URL's host by name.
async fn parent(urls: &[String], loopback: bool) -> TestServer {
    let agent = AgentDir::new();
    for i in 0..urls.len() {
        agent.file(
            &format!("subagents/r{i}.yaml"),
            &format!("url: ${{R{i}_URL}}\ndescription: A remote helper.\n"),
        );
    }
    let urls = urls.to_vec();
    TestServer::start_full(
        agent,
        &[],
        |c| c,
        move |config| {
            config.env = Arc::new(move |name: &str| {
                if name == "EVE_TEST_REMOTE_LOOPBACK" {
                    return loopback.then(|| "1".to_owned());
                }
                let i: usize = name.strip_prefix('R')?.strip_suffix("_URL")?.parse().ok()?;
                urls.get(i).cloned()
            });
        },
        |_| eve_runtime::server::RouterOptions::default(),
    )
    .await
}

/// Asks subagent `name` once; the `task.settled` event once the session rests.
async fn ask(parent: &TestServer, name: &str) -> Value {
    let input = json!({"message": "what is the balance?"});
    let id = parent.create(&format!("/tool {name} {input}")).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = parent.all(&id).await;
        if let Some(settled) = events.iter().find(|e| e["type"] == "task.settled")
            && events
                .last()
                .is_some_and(|e| e["type"] == "session.waiting")
        {
            return settled.clone();
        }
        assert!(std::time::Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_remote_agent_on_loopback_or_metadata_is_refused_in_every_spelling() {
    let (addr, hits) = listener(Router::new()).await;
    let p = addr.port();
    let urls = [
        format!("http://127.0.0.1:{p}/"),
        format!("http://localhost:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://0x7f.1:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://[::1]:{p}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://[::ffff:a9fe:a9fe]/".to_owned(),
        "http://10.0.0.1:9/".to_owned(),
    ];
    let server = parent(&urls, false).await;
    let mut refused = 0;
    for (i, url) in urls.iter().enumerate() {
        let settled = ask(&server, &format!("r{i}")).await;
        assert_eq!(settled["data"]["status"], "failed", "{url}: {settled}");
        let said = settled.to_string();
        assert!(
            said.contains("eve refused") || said.contains("cannot be reached"),
            "{url}: {settled}"
        );
        refused += 1;
    }
    println!(
        "remote agent urls tried: {}, refused: {refused}",
        urls.len()
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a refused remote was reached"
    );
    server.stop().await;

    // Twin: the same listener, with the URL's host listed by name, is reached.
    let twin = parent(&[format!("http://127.0.0.1:{p}/")], true).await;
    let settled = ask(&twin, "r0").await;
    assert_eq!(settled["data"]["status"], "failed", "{settled}");
    assert!(
        hits.load(Ordering::SeqCst) > 0,
        "the twin never reached the listener: {settled}"
    );
    twin.stop().await;
}

#[tokio::test]
async fn a_remote_that_redirects_to_loopback_is_refused_at_the_hop() {
    let (inner, inner_hits) = listener(Router::new()).await;
    let away = format!("http://127.0.0.1:{}/eve/v1/session", inner.port());
    let away_by_name = format!("http://localhost:{}/eve/v1/session", inner.port());
    let remote = Router::new()
        .route(
            "/a/eve/v1/session",
            axum::routing::post(move || {
                let away = away.clone();
                async move { (StatusCode::TEMPORARY_REDIRECT, [("location", away)]) }
            }),
        )
        .route(
            "/b/eve/v1/session",
            axum::routing::post(move || {
                let away = away_by_name.clone();
                async move { (StatusCode::TEMPORARY_REDIRECT, [("location", away)]) }
            }),
        )
        .route(
            "/c/eve/v1/session",
            axum::routing::post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [("location", "http://169.254.169.254/latest/meta-data/")],
                )
            }),
        )
        // Within its own origin, a hop is checked and followed.
        .route(
            "/d/eve/v1/session",
            axum::routing::post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [("location", "/landed/eve/v1/session")],
                )
            }),
        )
        .route(
            "/landed/eve/v1/session",
            axum::routing::post(|| async {
                (StatusCode::BAD_REQUEST, "landed within the origin").into_response()
            }),
        );
    let (outer, outer_hits) = listener(remote).await;
    let base = format!("http://{outer}");
    let urls = [
        format!("{base}/a/"),
        format!("{base}/b/"),
        format!("{base}/c/"),
        format!("{base}/d/"),
    ];
    // The switch lists the remote's own host and port, nothing else.
    let server = parent(&urls, true).await;
    for i in 0..3 {
        let settled = ask(&server, &format!("r{i}")).await;
        assert_eq!(settled["data"]["status"], "failed", "{settled}");
        assert!(
            settled.to_string().contains("a redirect to"),
            "r{i}: {settled}"
        );
    }
    let settled = ask(&server, "r3").await;
    assert!(
        settled.to_string().contains("landed within the origin"),
        "the same-origin hop was not followed: {settled}"
    );
    println!(
        "redirects tried: 4, the remote answered {} requests, the loopback target {}",
        outer_hits.load(Ordering::SeqCst),
        inner_hits.load(Ordering::SeqCst)
    );
    assert_eq!(
        inner_hits.load(Ordering::SeqCst),
        0,
        "a redirect reached the loopback target"
    );
    assert!(outer_hits.load(Ordering::SeqCst) >= 5);
    server.stop().await;
}

#[tokio::test]
async fn a_hostile_remotes_endless_answers_and_climbing_session_ids_are_faults() {
    // An answer of 64 MiB to the session start, a stream line that never ends, and a session
    // id that climbs the path.
    let huge = Router::new().route(
        "/eve/v1/session",
        axum::routing::post(|| async {
            let chunk = bytes::Bytes::from(vec![b'x'; 1024 * 1024]);
            let stream =
                futures::stream::iter((0..64).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
            (StatusCode::OK, Body::from_stream(stream))
        }),
    );
    let climbing = Router::new().route(
        "/eve/v1/session",
        axum::routing::post(|| async { axum::Json(json!({"sessionId": ".."})) }),
    );
    let endless = Router::new()
        .route(
            "/eve/v1/session",
            axum::routing::post(|| async { axum::Json(json!({"sessionId": "s1"})) }),
        )
        .route(
            "/eve/v1/session/s1",
            axum::routing::post(|| async { (StatusCode::ACCEPTED, axum::Json(json!({}))) }),
        )
        .route(
            "/eve/v1/session/s1/stream",
            axum::routing::get(|| async {
                let chunk = bytes::Bytes::from(vec![b'y'; 1024 * 1024]);
                let stream = futures::stream::iter(
                    (0..64).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
                );
                (StatusCode::OK, Body::from_stream(stream))
            }),
        );
    let (a, _) = listener(huge).await;
    let (b, b_hits) = listener(climbing).await;
    let (c, _) = listener(endless).await;
    let urls = [
        format!("http://{a}/"),
        format!("http://{b}/"),
        format!("http://{c}/"),
    ];
    let server = parent(&urls, true).await;
    let settled = ask(&server, "r0").await;
    assert!(
        settled.to_string().contains("answered more than"),
        "{settled}"
    );
    let settled = ask(&server, "r1").await;
    assert!(
        settled.to_string().contains("created no usable session"),
        "{settled}"
    );
    assert_eq!(b_hits.load(Ordering::SeqCst), 1, "only the start was sent");
    let settled = ask(&server, "r2").await;
    assert!(
        settled.to_string().contains("stream line longer than"),
        "{settled}"
    );
    server.stop().await;
}
