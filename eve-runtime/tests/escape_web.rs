//! Attacks on `web_fetch`, the requests the runtime makes for the model's URLs: it cannot reach
//! eve's own API, loopback or metadata addresses by any URL form (decimal, octal and hex IPv4,
//! short forms, IPv6 forms carrying IPv4, `0.0.0.0`, user info, names resolving to loopback,
//! redirect chains). Each attack has a twin run with the checks off (the test-only switch), which
//! reaches the target, so no test passes because the target was simply unreachable.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use eve_compile::Web;
use eve_runtime::tools::{ToolResult, WebContext, run_tool};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::tools::Fixture;
use crate::tools::web::{allowing, fetch_tool};

/// A loopback server holding a secret, counting the requests that reach it.
struct Secret {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

async fn secret_on(bind: &str) -> Secret {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().fallback(move || {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            "the secret"
        }
    });
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Secret { addr, hits }
}

async fn secret() -> Secret {
    secret_on("127.0.0.1:0").await
}

/// `web_fetch` of `url` under `web`, with eve's own listeners `own`; `checks: false` is the twin.
async fn fetch_with(web: Web, own: &[SocketAddr], url: &str, checks: bool) -> ToolResult {
    let mut fx = Fixture::new();
    fx.ctx.exec.set_own_listeners(own.to_vec());
    let context = WebContext::new(web.clone());
    fx.ctx.web = if checks {
        context
    } else {
        context.without_checks_for_tests()
    };
    run_tool(
        &fetch_tool(&web),
        &json!({"url": url}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await
}

fn error(r: &ToolResult) -> &str {
    r.error.as_deref().unwrap_or_default()
}

/// The attack is refused before anything reaches the secret; its twin, checks off, reaches it.
async fn refused_and_twin(web: Web, own: &[SocketAddr], url: &str, target: &Secret, said: &str) {
    let before = target.hits.load(Ordering::SeqCst);
    let r = fetch_with(web.clone(), own, url, true).await;
    assert!(!r.ok, "{url} was fetched: {r:?}");
    assert!(
        error(&r).starts_with("[web_fetch.refused] eve refused") && error(&r).contains(said),
        "{url}: expected a refusal saying {said:?}: {r:?}"
    );
    assert!(!r.refused.is_empty(), "the refusal is recorded: {r:?}");
    assert_eq!(
        target.hits.load(Ordering::SeqCst),
        before,
        "{url} reached the target"
    );
    let twin = fetch_with(web, own, url, false).await;
    assert!(
        twin.ok,
        "twin of {url} (checks off) should reach the target: {twin:?}"
    );
    assert!(
        twin.output.as_str().unwrap().ends_with("the secret"),
        "{twin:?}"
    );
    assert_eq!(
        target.hits.load(Ordering::SeqCst),
        before + 1,
        "twin of {url}"
    );
}

#[tokio::test]
async fn loopback_is_refused_in_every_spelling() {
    let s = secret().await;
    let p = s.addr.port();
    for (url, said) in [
        (
            format!("http://127.0.0.1:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://2130706433:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://0x7f000001:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://0177.0.0.1:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://0x7f.0.0.1:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (format!("http://127.1:{p}/"), "loopback address 127.0.0.1"),
        (
            format!("http://127.000.000.001:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{p}/"),
            "loopback address ::ffff:127.0.0.1",
        ),
        (
            format!("http://0.0.0.0:{p}/"),
            "unspecified address 0.0.0.0",
        ),
        (format!("http://0:{p}/"), "unspecified address 0.0.0.0"),
        (
            format!("http://localhost:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://LocalHost:{p}/"),
            "loopback address 127.0.0.1",
        ),
        (
            format!("http://user:pw@127.0.0.1:{p}/"),
            "user name or password",
        ),
        (
            format!("http://example.com@127.0.0.1:{p}/"),
            "user name or password",
        ),
    ] {
        refused_and_twin(Web::default(), &[], &url, &s, said).await;
    }
    // `[::1]` and a listener bound to every address.
    if let Ok(l) = std::net::TcpListener::bind("[::1]:0") {
        drop(l);
        let v6 = secret_on("[::1]:0").await;
        let url = format!("http://[::1]:{}/", v6.addr.port());
        refused_and_twin(Web::default(), &[], &url, &v6, "loopback address ::1").await;
    }
}

#[tokio::test]
async fn a_redirect_chain_ending_on_loopback_is_refused_at_the_hop() {
    let s = secret().await;
    let target = format!("http://localhost:{}/", s.addr.port());
    let to = target.clone();
    let hops = Router::new()
        .route(
            "/start",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/middle")]) }),
        )
        .route(
            "/middle",
            get(|| async { (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, "/last")]) }),
        )
        .route(
            "/last",
            get(move || {
                let to = to.clone();
                async move { (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]) }
            }),
        )
        .route(
            "/metadata",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")],
                )
            }),
        );
    let first = crate::tools::web::site(hops).await;
    // The first server is listed (it stands for a public site); the hop to loopback is not.
    let web = allowing(&[first.to_string()]);
    refused_and_twin(
        web.clone(),
        &[],
        &format!("http://{first}/start"),
        &s,
        &format!(
            "a redirect to localhost:{}: loopback address 127.0.0.1",
            s.addr.port()
        ),
    )
    .await;
    // Metadata at the end of a redirect: refused; with the checks off the request is made (and
    // fails only because nothing answers there in a test).
    let r = fetch_with(web.clone(), &[], &format!("http://{first}/metadata"), true).await;
    assert!(
        error(&r)
            .contains("a redirect to 169.254.169.254:80: cloud metadata address 169.254.169.254"),
        "{r:?}"
    );
    let twin = fetch_with(
        Web {
            timeout_ms: 500,
            ..web
        },
        &[],
        &format!("http://{first}/metadata"),
        false,
    )
    .await;
    assert!(
        !error(&twin).contains("refused"),
        "checks off: the request is attempted: {twin:?}"
    );
}

#[tokio::test]
async fn metadata_addresses_are_refused_in_their_forms() {
    for (url, said) in [
        (
            "http://169.254.169.254/latest/meta-data/",
            "cloud metadata address 169.254.169.254",
        ),
        (
            "http://2852039166/latest/meta-data/",
            "cloud metadata address 169.254.169.254",
        ),
        (
            "http://0xa9fea9fe/",
            "cloud metadata address 169.254.169.254",
        ),
        ("http://[::ffff:a9fe:a9fe]/", "cloud metadata address"),
        (
            "http://[fd00:ec2::254]/",
            "cloud metadata address fd00:ec2::254",
        ),
        (
            "http://100.100.100.200/",
            "cloud metadata address 100.100.100.200",
        ),
        ("http://10.0.0.1/", "private address 10.0.0.1"),
        ("http://[fe80::1]/", "link-local address fe80::1"),
    ] {
        let r = fetch_with(Web::default(), &[], url, true).await;
        assert!(
            error(&r).starts_with("[web_fetch.refused]") && error(&r).contains(said),
            "{url}: {r:?}"
        );
        // Twin: with the checks off the same URL is requested (nothing answers in a test, so it
        // fails otherwise than by a refusal).
        let twin = fetch_with(
            Web {
                timeout_ms: 300,
                ..Web::default()
            },
            &[],
            url,
            false,
        )
        .await;
        assert!(!error(&twin).contains("refused"), "{url}: {twin:?}");
    }
}

#[tokio::test]
async fn eves_own_api_is_never_reached_even_when_listed() {
    let api = secret().await;
    let p = api.addr.port();
    let own = [api.addr];
    for web in [
        Web::default(),
        allowing(&[api.addr.to_string()]),
        allowing(&["127.0.0.0/8".to_owned(), "localhost".to_owned()]),
    ] {
        for url in [
            format!("http://127.0.0.1:{p}/eve/v1/info"),
            format!("http://localhost:{p}/eve/v1/info"),
            format!("http://0.0.0.0:{p}/eve/v1/info"),
            format!("http://2130706433:{p}/eve/v1/info"),
        ] {
            let r = fetch_with(web.clone(), &own, &url, true).await;
            assert!(
                error(&r).contains("eve's own API") || error(&r).contains("unspecified address"),
                "{url} under {web:?}: {r:?}"
            );
        }
    }
    assert_eq!(api.hits.load(Ordering::SeqCst), 0);
    // Twin: checks off, the API answers.
    let twin = fetch_with(
        Web::default(),
        &own,
        &format!("http://127.0.0.1:{p}/eve/v1/info"),
        false,
    )
    .await;
    assert!(twin.ok, "{twin:?}");
    assert_eq!(api.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_web_policy_narrows_and_widens() {
    let s = secret().await;
    let p = s.addr.port();
    // Widened: a listed range lets a name resolving into it through.
    let r = fetch_with(
        allowing(&["127.0.0.0/8".to_owned()]),
        &[],
        &format!("http://localhost:{p}/"),
        true,
    )
    .await;
    assert!(r.ok, "{r:?}");
    // A listed host with a port matches that port only.
    refused_and_twin(
        allowing(&[format!("127.0.0.1:{}", p.wrapping_add(1).max(1))]),
        &[],
        &format!("http://127.0.0.1:{p}/"),
        &s,
        "loopback address 127.0.0.1",
    )
    .await;
    // Denied wins over allowed.
    refused_and_twin(
        Web {
            deny: vec!["127.0.0.0/8".to_owned()],
            ..allowing(&[s.addr.to_string()])
        },
        &[],
        &format!("http://127.0.0.1:{p}/"),
        &s,
        "127.0.0.1 is in this agent's `web.deny`",
    )
    .await;
    refused_and_twin(
        Web {
            deny: vec!["localhost".to_owned()],
            ..allowing(&["127.0.0.0/8".to_owned()])
        },
        &[],
        &format!("http://localhost:{p}/"),
        &s,
        "`localhost` is in this agent's `web.deny`",
    )
    .await;
    // Narrowed: `public: false` leaves only the listed hosts.
    let narrow = Web {
        public: false,
        ..allowing(&["docs.example.org".to_owned()])
    };
    let r = fetch_with(narrow, &[], "http://example.com/", true).await;
    assert!(
        error(&r).contains("not in this agent's `web.allow` (`web.public: false`)"),
        "{r:?}"
    );
    // Not http.
    let r = fetch_with(Web::default(), &[], "file:///etc/passwd", true).await;
    assert!(error(&r).contains("`file:` is not http or https"), "{r:?}");
}
