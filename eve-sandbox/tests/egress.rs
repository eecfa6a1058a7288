//! The egress proxy over real sockets: an upstream on 127.0.0.1:0, the proxy on a Unix socket in
//! a temp dir, clients on that socket (and real `curl` through a TCP relay, as the sandbox's
//! forwarder does).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_sandbox::egress::{
    self, EgressConfig, EgressHandle, EgressLimits, EgressPolicy, Refusal, Rule,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

/// An HTTP server that records each request head, answers `hello` and honours
/// `Connection: close`.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) seen: Arc<Mutex<Vec<String>>>,
    pub(crate) accepted: Arc<AtomicUsize>,
}

pub(crate) async fn http_upstream() -> Upstream {
    http_upstream_on("127.0.0.1:0").await
}

pub(crate) async fn http_upstream_on(bind: &str) -> Upstream {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (s, a) = (seen.clone(), accepted.clone());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let seen = s.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let close = head
                    .to_ascii_lowercase()
                    .contains("\r\nconnection: close\r\n");
                seen.lock().unwrap().push(head);
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\nhello")
                    .await;
                if !close {
                    // Keep the connection as a keep-alive server would.
                    let _ = conn.read(&mut chunk).await;
                }
            });
        }
    });
    Upstream {
        addr,
        seen,
        accepted,
    }
}

/// A TCP server that echoes every byte.
pub(crate) async fn echo_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = conn.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, accepted)
}

pub(crate) struct Proxy {
    _dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
    handle: Option<EgressHandle>,
    refusals: Arc<Mutex<Vec<Refusal>>>,
}

pub(crate) fn allow(entries: &[&str]) -> EgressPolicy {
    EgressPolicy::allow_list(entries).unwrap()
}

pub(crate) async fn proxy(policy: EgressPolicy, own: Vec<SocketAddr>) -> Proxy {
    proxy_with(policy, own, EgressLimits::default()).await
}

async fn proxy_with(policy: EgressPolicy, own: Vec<SocketAddr>, limits: EgressLimits) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress.sock");
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let r = refusals.clone();
    let config = EgressConfig {
        policy,
        own_listeners: own,
        on_refused: Arc::new(move |refusal| r.lock().unwrap().push(refusal)),
        limits,
    };
    let handle = egress::start(&path, config).await.unwrap();
    Proxy {
        _dir: dir,
        path,
        handle: Some(handle),
        refusals,
    }
}

impl Proxy {
    pub(crate) fn refusals(&self) -> Vec<Refusal> {
        self.refusals.lock().unwrap().clone()
    }
}

/// Like [`exchange`], but `None` when the proxy dropped the connection unanswered (what it does
/// far over its connection cap).
async fn try_exchange(path: &Path, bytes: &[u8]) -> Option<String> {
    let mut conn = UnixStream::connect(path).await.ok()?;
    conn.write_all(bytes).await.ok()?;
    let mut out = Vec::new();
    timeout(WAIT, conn.read_to_end(&mut out)).await.ok()?.ok()?;
    Some(String::from_utf8_lossy(&out).to_string())
}

/// Sends `bytes` and reads until the proxy closes the connection.
pub(crate) async fn exchange(path: &Path, bytes: &[u8]) -> String {
    let mut conn = UnixStream::connect(path).await.unwrap();
    conn.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    timeout(WAIT, conn.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection")
        .unwrap();
    String::from_utf8_lossy(&out).to_string()
}

pub(crate) fn connect_req(target: &str) -> Vec<u8> {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes()
}

pub(crate) fn get_req(url: &str) -> Vec<u8> {
    format!("GET {url} HTTP/1.1\r\nHost: ignored.example\r\nUser-Agent: test\r\n\r\n").into_bytes()
}

pub(crate) fn status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

pub(crate) async fn read_exactly(conn: &mut UnixStream, n: usize) -> String {
    let mut buf = vec![0u8; n];
    timeout(WAIT, conn.read_exact(&mut buf))
        .await
        .expect("bytes arrive")
        .unwrap();
    String::from_utf8_lossy(&buf).to_string()
}

#[tokio::test]
async fn connect_to_a_listed_loopback_server_tunnels_both_ways() {
    let (echo, _) = echo_upstream().await;
    let p = proxy(allow(&[&format!("127.0.0.1:{}", echo.port())]), vec![]).await;
    let mut conn = UnixStream::connect(&p.path).await.unwrap();
    // Bytes sent right behind the head (a TLS ClientHello would be) must reach the upstream too.
    let mut req = connect_req(&echo.to_string());
    req.extend_from_slice(b"early");
    conn.write_all(&req).await.unwrap();
    let established = "HTTP/1.1 200 Connection established\r\n\r\n";
    assert_eq!(
        read_exactly(&mut conn, established.len()).await,
        established
    );
    assert_eq!(read_exactly(&mut conn, 5).await, "early");
    conn.write_all(b"ping pong").await.unwrap();
    assert_eq!(read_exactly(&mut conn, 9).await, "ping pong");
    assert!(p.refusals().is_empty());
}

#[tokio::test]
async fn plain_get_is_forwarded_in_origin_form_without_proxy_headers() {
    let up = http_upstream().await;
    let port = up.addr.port();
    let p = proxy(allow(&[&format!("127.0.0.1:{port}")]), vec![]).await;
    let req = format!(
        "GET http://127.0.0.1:{port}/a/b?c=1 HTTP/1.1\r\nHost: elsewhere.example\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Keep: yes\r\n\r\n"
    );
    let resp = exchange(&p.path, req.as_bytes()).await;
    assert_eq!(status(&resp), 200, "{resp}");
    assert!(resp.ends_with("\r\n\r\nhello"), "{resp}");
    let lower = resp.to_ascii_lowercase();
    assert!(lower.contains("\r\nconnection: close\r\n"), "{resp}");
    assert!(!lower.contains("keep-alive"), "{resp}");

    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let head = &seen[0];
    assert!(head.starts_with("GET /a/b?c=1 HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(!lower.contains("proxy-"), "{head}");
    assert!(!lower.contains("x-hop"), "{head}");
    assert!(
        lower.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
        "{head}"
    );
    assert!(!lower.contains("elsewhere.example"), "{head}");
    assert!(lower.contains("\r\nx-keep: yes\r\n"), "{head}");
    assert!(lower.contains("\r\nconnection: close\r\n"), "{head}");
}

#[tokio::test]
async fn a_host_not_listed_is_refused_with_403_and_reported() {
    let (echo, accepted) = echo_upstream().await;
    let p = proxy(allow(&["api.github.com", "127.0.0.1:1"]), vec![]).await;

    let resp = exchange(&p.path, &connect_req(&echo.to_string())).await;
    assert_eq!(status(&resp), 403, "{resp}");
    let expected = format!(
        "eve egress: refused 127.0.0.1:{}: not in this tool's network allowlist",
        echo.port()
    );
    assert!(resp.contains(&expected), "{resp}");

    let resp = exchange(&p.path, &get_req("http://api.example.com/x")).await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(resp.contains("refused api.example.com:80: not in this tool's network allowlist"));

    assert_eq!(
        p.refusals(),
        vec![
            Refusal {
                host: "127.0.0.1".into(),
                port: echo.port(),
                reason: "not in this tool's network allowlist".into()
            },
            Refusal {
                host: "api.example.com".into(),
                port: 80,
                reason: "not in this tool's network allowlist".into()
            },
        ]
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "never connected upstream"
    );
}

#[tokio::test]
async fn all_refuses_loopback_link_local_and_metadata() {
    let (echo, accepted) = echo_upstream().await;
    let port = echo.port();
    let p = proxy(EgressPolicy::All, vec![]).await;
    for (target, reason) in [
        (
            format!("127.0.0.1:{port}"),
            "loopback address 127.0.0.1 not listed by name",
        ),
        (
            format!("[::ffff:127.0.0.1]:{port}"),
            "loopback address ::ffff:127.0.0.1 not listed by name",
        ),
        (
            format!("localhost:{port}"),
            "loopback address 127.0.0.1 not listed by name",
        ),
        (
            "[::1]:80".to_string(),
            "loopback address ::1 not listed by name",
        ),
        (
            "169.254.169.254:80".to_string(),
            "cloud metadata address 169.254.169.254 not listed by name",
        ),
        (
            "100.100.100.200:80".to_string(),
            "cloud metadata address 100.100.100.200 not listed by name",
        ),
        (
            "[fd00:ec2::254]:80".to_string(),
            "cloud metadata address fd00:ec2::254 not listed by name",
        ),
        (
            "169.254.1.2:80".to_string(),
            "link-local address 169.254.1.2 not listed by name",
        ),
        (
            "[fe80::1]:80".to_string(),
            "link-local address fe80::1 not listed by name",
        ),
        (
            "0.0.0.0:80".to_string(),
            "unspecified address 0.0.0.0 not listed by name",
        ),
        (
            "224.0.0.1:80".to_string(),
            "multicast or broadcast address 224.0.0.1 not listed by name",
        ),
    ] {
        let resp = exchange(&p.path, &connect_req(&target)).await;
        assert_eq!(status(&resp), 403, "{target}: {resp}");
        assert!(resp.contains(reason), "{target}: {resp}");
        let last = p.refusals().pop().unwrap();
        assert_eq!(last.reason, reason);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "never connected upstream"
    );
}

#[tokio::test]
async fn a_listed_name_resolving_to_loopback_is_allowed_but_all_is_not() {
    let up = http_upstream().await;
    let port = up.addr.port();
    let url = format!("http://localhost:{port}/");

    let listed = proxy(allow(&[&format!("localhost:{port}")]), vec![]).await;
    let resp = exchange(&listed.path, &get_req(&url)).await;
    assert_eq!(status(&resp), 200, "{resp}");
    assert!(resp.ends_with("hello"));
    // Listed by name for that port only.
    let resp = exchange(
        &listed.path,
        &get_req(&format!("http://localhost:{}/", port ^ 1)),
    )
    .await;
    assert_eq!(status(&resp), 403, "{resp}");

    let all = proxy(EgressPolicy::All, vec![]).await;
    let resp = exchange(&all.path, &get_req(&url)).await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(resp.contains("loopback address"), "{resp}");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn eves_own_listener_is_refused_even_when_listed() {
    let up = http_upstream().await;
    let port = up.addr.port();
    let policy = allow(&[
        &format!("127.0.0.1:{port}"),
        &format!("localhost:{port}"),
        "[::1]",
    ]);
    let url = format!("http://127.0.0.1:{port}/v1/sessions/x/input");

    // Allowed while the address is not one of eve's own (this shows the test can fail).
    let plain = proxy(policy.clone(), vec![]).await;
    assert_eq!(status(&exchange(&plain.path, &get_req(&url)).await), 200);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);

    for own in [up.addr, SocketAddr::from(([0, 0, 0, 0], port))] {
        let p = proxy(policy.clone(), vec![own]).await;
        for target in [
            url.clone(),
            format!("http://localhost:{port}/"),
            format!("http://[::1]:{port}/"),
        ] {
            let resp = exchange(&p.path, &get_req(&target)).await;
            assert_eq!(status(&resp), 403, "{target}: {resp}");
            assert!(resp.contains("eve's own API"), "{target}: {resp}");
        }
        let reasons: Vec<String> = p.refusals().into_iter().map(|r| r.reason).collect();
        assert_eq!(reasons.len(), 3);
        assert!(
            reasons.iter().all(|r| r.contains("eve's own API")),
            "{reasons:?}"
        );
    }
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "never connected to eve's own API"
    );
}

#[tokio::test]
async fn own_listener_on_a_local_non_loopback_address_is_refused() {
    // An address of this host other than loopback, if the machine has one.
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    if probe.connect("192.0.2.1:9").is_err() {
        eprintln!("no route off loopback on this machine: skipped");
        return;
    }
    let local = probe.local_addr().unwrap().ip();
    if local.is_loopback() || local.is_unspecified() {
        eprintln!("no local address off loopback on this machine: skipped");
        return;
    }
    let up = http_upstream_on("0.0.0.0:0").await;
    let port = up.addr.port();
    let url = format!("http://{local}:{port}/");
    // A rule listing the address reaches it (`all` never does: it is this host's own)...
    let listed = allow(&[&format!("{local}:{port}")]);
    let plain = proxy(listed.clone(), vec![]).await;
    assert_eq!(status(&exchange(&plain.path, &get_req(&url)).await), 200);
    // ...but not when it is one of eve's own listeners.
    let own = SocketAddr::from(([0, 0, 0, 0], port));
    let p = proxy(listed, vec![own]).await;
    let resp = exchange(&p.path, &get_req(&url)).await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(resp.contains("eve's own API"), "{resp}");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
    assert!(!egress::is_own_listener(
        SocketAddr::new(local, port ^ 1),
        &[own]
    ));
    assert!(!egress::is_own_listener(
        SocketAddr::from(([192, 0, 2, 1], port)),
        &[own]
    ));
}

#[tokio::test]
async fn suffix_rules_match_subdomains_only() {
    let rule: Rule = "*.slack.com:443".parse().unwrap();
    assert!(rule.matches("hooks.slack.com", 443));
    assert!(rule.matches("A.B.Slack.COM.", 443));
    assert!(!rule.matches("slack.com", 443));
    assert!(!rule.matches("evilslack.com", 443));
    assert!(!rule.matches("hooks.slack.com", 80));
    assert!(!rule.matches("hooks.slack.com.evil.net", 443));
    assert!(!rule.is_explicit());

    let any_port: Rule = "*.slack.com".parse().unwrap();
    assert!(any_port.matches("files.slack.com", 8443));

    let policy = allow(&["*.slack.com:443", "api.github.com"]);
    assert_eq!(
        policy.permits("x.slack.com", 443).map(|p| p.explicit),
        Some(false)
    );
    assert_eq!(
        policy.permits("API.GitHub.com", 22).map(|p| p.explicit),
        Some(true)
    );
    assert_eq!(policy.permits("github.com", 443), None);

    // Over the proxy: a suffix rule does not cover the bare name, and a subdomain it covers is
    // not refused by the allowlist (it does not resolve here, so the answer is 502).
    let (echo, _) = echo_upstream().await;
    let port = echo.port();
    let p = proxy(allow(&[&format!("*.localhost:{port}")]), vec![]).await;
    let resp = exchange(&p.path, &connect_req(&format!("localhost:{port}"))).await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(
        resp.contains("not in this tool's network allowlist"),
        "{resp}"
    );
    let resp = exchange(&p.path, &connect_req(&format!("sub.localhost:{port}"))).await;
    assert_ne!(status(&resp), 200, "{resp}");
    assert!(!resp.contains("allowlist"), "{resp}");
    if status(&resp) == 403 {
        // A resolver that maps *.localhost to loopback: still refused, a suffix is not a name.
        assert!(resp.contains("loopback address"), "{resp}");
    }
}

#[tokio::test]
async fn rules_parse_and_bad_entries_say_why() {
    for (entry, shown, explicit) in [
        ("api.github.com", "api.github.com", true),
        ("API.GitHub.com.", "api.github.com", true),
        (
            "\"*.slack.com:443\"".trim_matches('"'),
            "*.slack.com:443",
            false,
        ),
        ("127.0.0.1:8123", "127.0.0.1:8123", true),
        ("localhost:9000", "localhost:9000", true),
        ("[::1]:9000", "[::1]:9000", true),
        ("[::1]", "[::1]", true),
        ("fd00::1", "[fd00::1]", true),
    ] {
        let rule: Rule = entry.parse().unwrap_or_else(|e| panic!("{entry}: {e}"));
        assert_eq!(rule.to_string(), shown);
        assert_eq!(rule.is_explicit(), explicit, "{entry}");
    }
    assert!(
        "127.0.0.1:8123"
            .parse::<Rule>()
            .unwrap()
            .matches("127.0.0.1", 8123)
    );
    assert!(
        !"127.0.0.1:8123"
            .parse::<Rule>()
            .unwrap()
            .matches("127.0.0.1", 8124)
    );
    assert!("[::1]:9000".parse::<Rule>().unwrap().matches("[::1]", 9000));

    for (entry, why) in [
        ("", "empty"),
        ("https://api.github.com", "URL"),
        ("api.github.com:99999", "not a port"),
        ("api.github.com:0", "port 0"),
        ("*", "network: all"),
        ("a*.slack.com", "leading `*.`"),
        ("*.com", "two labels"),
        ("a..b", "empty label"),
        ("[::1", "without `]`"),
        ("[nope]:80", "IPv6"),
        ("ex ample.com", "spaces"),
        ("user@host", "`@`"),
        ("bücher.de", "xn--"),
        ("10.0.0.300", "IPv4"),
        (":443", "no host"),
    ] {
        let err = entry.parse::<Rule>().expect_err(entry);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("network entry `{entry}`: ")),
            "{text}"
        );
        assert!(text.contains(why), "{entry}: {text}");
    }
    let errors = EgressPolicy::allow_list(["ok.example", "bad:port", "*"]).unwrap_err();
    assert_eq!(
        errors.iter().map(|e| e.entry.as_str()).collect::<Vec<_>>(),
        ["bad:port", "*"]
    );
}

#[tokio::test]
async fn garbage_oversized_and_slow_heads_do_not_stop_the_proxy() {
    let up = http_upstream().await;
    let port = up.addr.port();
    let limits = EgressLimits {
        head_timeout: Duration::from_secs(2),
        ..EgressLimits::default()
    };
    let p = proxy_with(allow(&[&format!("127.0.0.1:{port}")]), vec![], limits).await;
    let good = get_req(&format!("http://127.0.0.1:{port}/"));

    // A slow client that never finishes its head holds a connection open...
    let mut slow = UnixStream::connect(&p.path).await.unwrap();
    slow.write_all(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();

    // ...while the others are answered.
    let garbage = exchange(
        &p.path,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    )
    .await;
    assert_eq!(status(&garbage), 400, "{garbage}");
    let not_proxy = exchange(&p.path, b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status(&not_proxy), 400);
    assert!(not_proxy.contains("absolute URL"), "{not_proxy}");
    let no_port = exchange(&p.path, b"CONNECT example.com HTTP/1.1\r\n\r\n").await;
    assert_eq!(status(&no_port), 400);
    let https_plain = exchange(&p.path, b"GET https://example.com/ HTTP/1.1\r\n\r\n").await;
    assert_eq!(status(&https_plain), 400);
    let bad_host = exchange(&p.path, &connect_req("127.1:80")).await;
    assert_eq!(status(&bad_host), 400, "{bad_host}");

    let mut big = b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 20 * 1024));
    big.extend_from_slice(b"\r\n\r\n");
    let resp = exchange(&p.path, &big).await;
    assert_eq!(status(&resp), 431, "{resp}");
    let mut many = b"GET http://127.0.0.1/ HTTP/1.1\r\n".to_vec();
    for i in 0..200 {
        many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(status(&exchange(&p.path, &many).await), 431);

    assert_eq!(status(&exchange(&p.path, &good).await), 200);

    // The slow client is closed once its head timeout passes, with nothing sent.
    let mut rest = Vec::new();
    let n = timeout(WAIT, slow.read_to_end(&mut rest))
        .await
        .expect("the slow client is closed")
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(status(&exchange(&p.path, &good).await), 200);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connections_beyond_the_cap_are_answered_503() {
    let (echo, _) = echo_upstream().await;
    let limits = EgressLimits {
        max_connections: 1,
        ..EgressLimits::default()
    };
    let p = proxy_with(
        allow(&[&format!("127.0.0.1:{}", echo.port())]),
        vec![],
        limits,
    )
    .await;
    let mut first = UnixStream::connect(&p.path).await.unwrap();
    first
        .write_all(&connect_req(&echo.to_string()))
        .await
        .unwrap();
    let established = "HTTP/1.1 200 Connection established\r\n\r\n";
    assert_eq!(
        read_exactly(&mut first, established.len()).await,
        established
    );

    let resp = exchange(&p.path, &connect_req(&echo.to_string())).await;
    assert_eq!(status(&resp), 503, "{resp}");

    drop(first);
    // The slot frees once the first connection's task ends; wait for that condition.
    let freed = timeout(WAIT, async {
        loop {
            // While the first connection's task ends, retries are answered 503, or dropped
            // unanswered once those answers pile up past the cap.
            if let Some(resp) = try_exchange(&p.path, &connect_req("127.0.0.1:1")).await
                && status(&resp) != 503
            {
                return resp;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the slot frees");
    assert_eq!(status(&freed), 403);
}

#[tokio::test]
async fn unreachable_upstream_is_502_with_the_reason() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let p = proxy(allow(&[&format!("127.0.0.1:{port}")]), vec![]).await;
    let resp = exchange(&p.path, &connect_req(&format!("127.0.0.1:{port}"))).await;
    assert_eq!(status(&resp), 502, "{resp}");
    assert!(
        resp.contains(&format!("cannot reach 127.0.0.1:{port}")),
        "{resp}"
    );
    assert!(p.refusals().is_empty());
}

#[tokio::test]
async fn dropping_the_handle_closes_the_socket_and_open_tunnels() {
    let (echo, _) = echo_upstream().await;
    let mut p = proxy(allow(&[&format!("127.0.0.1:{}", echo.port())]), vec![]).await;
    let mut conn = UnixStream::connect(&p.path).await.unwrap();
    conn.write_all(&connect_req(&echo.to_string()))
        .await
        .unwrap();
    let established = "HTTP/1.1 200 Connection established\r\n\r\n";
    assert_eq!(
        read_exactly(&mut conn, established.len()).await,
        established
    );

    drop(p.handle.take());
    let mut rest = Vec::new();
    timeout(WAIT, conn.read_to_end(&mut rest))
        .await
        .expect("the tunnel is closed")
        .unwrap();
    assert!(rest.is_empty());
    assert!(!p.path.exists());
    assert!(UnixStream::connect(&p.path).await.is_err());

    // shutdown() waits for the same.
    let q = proxy(EgressPolicy::All, vec![]).await;
    let path = q.path.clone();
    let Proxy { handle, _dir, .. } = q;
    handle.unwrap().shutdown().await;
    assert!(!path.exists());
}

/// Relays each TCP connection on 127.0.0.1:0 to the proxy's Unix socket, as the sandbox's
/// forwarder does.
async fn relay(path: PathBuf) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let path = path.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = UnixStream::connect(&path).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    addr
}

async fn curl(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
async fn real_curl_goes_through_the_proxy() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("curl is not installed: skipped");
        return;
    }
    let up = http_upstream().await;
    let port = up.addr.port();
    let p = proxy(allow(&[&format!("127.0.0.1:{port}")]), vec![]).await;
    let proxy_url = format!("http://{}", relay(p.path.clone()).await);
    let url = format!("http://127.0.0.1:{port}/from-curl");

    let (ok, body, err) = curl(&["-x", &proxy_url, &url]).await;
    assert!(ok, "{err}");
    assert_eq!(body, "hello");
    let (ok, body, err) = curl(&["-x", &proxy_url, "--proxytunnel", &url]).await;
    assert!(ok, "{err}");
    assert_eq!(body, "hello");
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|h| h.starts_with("GET /from-curl HTTP/1.1\r\n")),
        "{seen:?}"
    );

    // A server not listed: refused, and curl shows why.
    let (other, accepted) = echo_upstream().await;
    let other_url = format!("http://{other}/");
    let (ok, body, _) = curl(&["-x", &proxy_url, "-w", "\n%{http_code}", &other_url]).await;
    assert!(ok);
    assert!(
        body.contains("not in this tool's network allowlist"),
        "{body}"
    );
    assert!(body.ends_with("\n403"), "{body}");
    let (ok, _, err) = curl(&["-x", &proxy_url, "-p", &other_url]).await;
    assert!(!ok);
    assert!(err.contains("403"), "{err}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    assert_eq!(p.refusals().len(), 2);
}
