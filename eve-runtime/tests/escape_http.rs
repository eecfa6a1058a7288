//! Attacks on the requests the runtime makes for a tool (`http:` tools) and on the "loopback
//! only" door of an API without auth, over real sockets. Each attack has a twin where the
//! protection does not apply (the destination listed, a naive template, an open schema, a real
//! loopback peer) and the same request goes through, so no test passes because the target was
//! simply unreachable.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::get;
use eve_compile::{HttpRequest, Network, Runner, Tool};
use eve_runtime::tools::{ToolResult, run_tool};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::server_support::{AgentDir, TestServer};
use crate::tools::{Fixture, tool};

/// A server on `bind` that answers every request with what it received, and counts them.
struct Echo {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

async fn echo_on(bind: &str, extra: Router) -> Echo {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = extra.fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            let header = |n: &str| headers.get(n).map(|v| v.to_str().unwrap().to_owned());
            axum::Json(json!({
                "path": uri.path(),
                "query": uri.query(),
                "authorization": header("authorization"),
                "x_extra": header("x-extra"),
                "body": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            }))
        }
    });
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Echo { addr, hits }
}

async fn echo() -> Echo {
    echo_on("127.0.0.1:0", Router::new()).await
}

fn http_tool(method: &str, url: &str, headers: &[(&str, &str)], body: Option<Value>) -> Tool {
    tool(
        "api",
        Runner::Http(HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            body,
        }),
    )
}

fn allow(entries: &[&str]) -> Option<Network> {
    Some(Network::Allow(
        entries.iter().map(|e| (*e).to_owned()).collect(),
    ))
}

async fn call(t: &Tool, network: Option<Network>, input: Value) -> ToolResult {
    let mut fx = Fixture::with_env(&[("API_TOKEN", "bearer-s3cret")]);
    fx.ctx.network = network;
    run_tool(t, &input, &fx.ctx, CancellationToken::new()).await
}

fn error(r: &ToolResult) -> String {
    r.error.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_tool_listing_one_host_reaches_no_other() {
    let api = echo().await;
    let port = api.addr.port();
    let at = |host: &str| http_tool("GET", &format!("http://{host}:{port}/data"), &[], None);
    let loopback = at("127.0.0.1");

    // The report of issue 29: `network: [example.com]`, a URL on 127.0.0.1.
    let r = call(&loopback, allow(&["example.com"]), json!({})).await;
    assert!(!r.ok, "{r:?}");
    assert!(
        error(&r).contains(&format!(
            "refused http://127.0.0.1:{port}/data: not in this tool's network allowlist"
        )),
        "{r:?}"
    );
    assert_eq!(
        (r.refused[0].host.as_str(), r.refused[0].port),
        ("127.0.0.1", port)
    );
    assert!(
        !r.input_refused,
        "a refused destination counts as a failure"
    );

    // `all` is the internet, not loopback: in every spelling, by name (the resolved address is
    // checked) and by literal.
    for (host, said) in [
        ("127.0.0.1", "loopback address 127.0.0.1 not listed by name"),
        (
            "2130706433",
            "loopback address 127.0.0.1 not listed by name",
        ),
        ("127.1", "loopback address 127.0.0.1 not listed by name"),
        ("[::ffff:127.0.0.1]", "loopback address ::ffff:127.0.0.1"),
        ("localhost", "loopback address"),
    ] {
        let r = call(&at(host), Some(Network::All), json!({})).await;
        assert!(!r.ok, "{host}: {r:?}");
        assert!(error(&r).contains(said), "{host}: {r:?}");
        assert_eq!(r.refused.len(), 1, "{host}: {r:?}");
    }
    let r = call(&loopback, Some(Network::None), json!({})).await;
    assert!(
        error(&r).contains("`network: none` allows no destination"),
        "{r:?}"
    );
    assert_eq!(api.hits.load(Ordering::SeqCst), 0, "never reached");

    // Twins: listed by address or by name, and with no `network:` (the origin the author
    // wrote in `url:`), the same requests go through.
    let r = call(&loopback, allow(&[&format!("127.0.0.1:{port}")]), json!({})).await;
    assert!(r.ok, "{r:?}");
    let r = call(
        &at("localhost"),
        allow(&[&format!("localhost:{port}")]),
        json!({}),
    )
    .await;
    assert!(r.ok, "{r:?}");
    let r = call(&loopback, None, json!({})).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(api.hits.load(Ordering::SeqCst), 3);

    // With no `network:`, a host taken from the input is not the author's: refused until the
    // tool lists where it may go.
    let from_input = http_tool("GET", "http://{{input.host}}/data", &[], None);
    let r = call(
        &from_input,
        None,
        json!({"host": format!("127.0.0.1:{port}")}),
    )
    .await;
    assert!(error(&r).contains("comes from its input"), "{r:?}");
    assert_eq!(api.hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn eves_own_api_is_refused_even_at_the_url_the_author_wrote() {
    let api = echo().await;
    let t = http_tool(
        "GET",
        &format!("http://{}/eve/v1/info", api.addr),
        &[],
        None,
    );
    let fx = Fixture::new();
    fx.ctx.exec.set_own_listeners(vec![api.addr]);
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(error(&r).contains("eve's own API"), "{r:?}");
    let r = call(&t, allow(&[&api.addr.to_string()]), json!({})).await;
    assert!(r.ok, "twin: not eve's own listener here: {r:?}");
    let mut fx = Fixture::new();
    fx.ctx.network = allow(&[&api.addr.to_string()]);
    fx.ctx.exec.set_own_listeners(vec![api.addr]);
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(error(&r).contains("eve's own API"), "even listed: {r:?}");
    assert_eq!(api.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_to_a_destination_not_listed_is_refused_at_the_hop() {
    let other = echo().await;
    let b = other.addr;
    let first = Router::new()
        .route(
            "/away",
            get(move || async move {
                (
                    StatusCode::FOUND,
                    [("location", format!("http://{b}/stolen"))],
                )
            }),
        )
        .route(
            "/metadata",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [("location", "http://169.254.169.254/latest/meta-data/")],
                )
            }),
        )
        .route(
            "/here",
            get(|| async { (StatusCode::FOUND, [("location", "/landed")]) }),
        );
    let a = echo_on("127.0.0.1:0", first).await;
    let listed_a = format!("127.0.0.1:{}", a.addr.port());
    let headers = [("Authorization", "Bearer ${API_TOKEN}")];

    let away = http_tool("GET", &format!("http://{}/away", a.addr), &headers, None);
    let r = call(&away, allow(&[&listed_a]), json!({})).await;
    assert!(!r.ok, "{r:?}");
    assert!(
        error(&r).contains(&format!(
            "the redirect of http://{}/away to 127.0.0.1:{}",
            a.addr,
            b.port()
        )) && error(&r).contains("not in this tool's network allowlist"),
        "{r:?}"
    );
    assert_eq!(r.refused[0].port, b.port());
    let meta = http_tool(
        "GET",
        &format!("http://{}/metadata", a.addr),
        &headers,
        None,
    );
    let r = call(&meta, Some(Network::All), json!({})).await;
    assert!(
        error(&r).contains("loopback address"),
        "a itself is loopback: {r:?}"
    );
    let r = call(&meta, allow(&[&listed_a, "*.amazonaws.com"]), json!({})).await;
    assert!(error(&r).contains("169.254.169.254"), "{r:?}");

    // Twin: with the second host listed too, the hop is not refused; the redirect leaves the
    // origin, so it comes back as the 3xx answer and the templated header goes nowhere else.
    let r = call(
        &away,
        allow(&[&listed_a, &format!("127.0.0.1:{}", b.port())]),
        json!({}),
    )
    .await;
    assert!(error(&r).contains("HTTP 302"), "{r:?}");
    assert!(r.refused.is_empty(), "{r:?}");
    // A hop within the origin is checked and followed.
    let here = http_tool("GET", &format!("http://{}/here", a.addr), &headers, None);
    let r = call(&here, allow(&[&listed_a]), json!({})).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["path"], "/landed");
    assert_eq!(
        other.hits.load(Ordering::SeqCst),
        0,
        "the second host was reached"
    );
}

#[tokio::test]
async fn a_value_in_a_url_path_is_one_segment_never_dot_or_dot_dot() {
    let api = echo().await;
    let template = format!("http://{}/teams/{{{{input.team}}}}/users", api.addr);
    let headers = [("Authorization", "Bearer ${API_TOKEN}")];
    let mut t = http_tool("GET", &template, &headers, None);
    t.input_schema = json!({"type": "object", "properties": {"team": {"type": "string"}}});

    for team in ["..", ".", ".%2E", "%2e%2e"] {
        // `%` is encoded, so `%2e` arrives as the text `%2e`; only the first two climb.
        let r = call(&t, None, json!({"team": team})).await;
        if team.contains('%') {
            assert!(r.ok, "{team}: {r:?}");
            assert!(
                r.output["path"].as_str().unwrap().starts_with("/teams/"),
                "{team}: {r:?}"
            );
            continue;
        }
        assert!(!r.ok, "{team}: {r:?}");
        assert!(r.input_refused, "{team}: the caller's mistake");
        assert!(
            error(&r).contains(&format!("input `team` makes the URL path segment `{team}`")),
            "{team}: {r:?}"
        );
    }
    for (team, path) in [
        ("a/../../admin", "/teams/a%2F..%2F..%2Fadmin/users"),
        ("...", "/teams/.../users"),
        ("R&D ?#", "/teams/R%26D%20%3F%23/users"),
    ] {
        let r = call(&t, None, json!({"team": team})).await;
        assert!(r.ok, "{team}: {r:?}");
        assert_eq!(r.output["path"], path, "{team}");
    }
    // Dots split across two values, or next to a literal dot, are one segment too.
    let mut split = http_tool(
        "GET",
        &format!("http://{}/files/{{{{input.a}}}}{{{{input.b}}}}/x", api.addr),
        &[],
        None,
    );
    split.input_schema = json!({"type": "object", "properties": {"a": {}, "b": {}}});
    let r = call(&split, None, json!({"a": ".", "b": "."})).await;
    assert!(error(&r).contains("path segment `..`"), "{r:?}");
    let glued = http_tool(
        "GET",
        &format!("http://{}/files/.{{{{input.a}}}}/x", api.addr),
        &[],
        None,
    );
    let r = call(&glued, None, json!({"a": "."})).await;
    assert!(error(&r).contains("path segment `..`"), "{r:?}");
    let before = api.hits.load(Ordering::SeqCst);
    assert_eq!(before, 5, "only the encoded values reached the server");

    // Twin: the same template filled naively sends the token to `/users`, outside `/teams/`.
    let naive = template.replace("{{input.team}}", "..");
    let sent = reqwest::Client::new()
        .get(&naive)
        .header("authorization", "Bearer bearer-s3cret")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(sent["path"], "/users");
    assert_eq!(sent["authorization"], "Bearer bearer-s3cret");
}

#[tokio::test]
async fn input_fields_the_tool_does_not_declare_are_never_sent() {
    let api = echo().await;
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let input = json!({"q": "x", "admin": true, "token": "t0k", "extra": "e"});
    let with = |method: &str, body: Option<Value>| {
        let mut t = http_tool(
            method,
            &format!("http://{}/search", api.addr),
            &[("X-Extra", "{{input.extra}}")],
            body,
        );
        t.input_schema = schema.clone();
        t
    };
    let r = call(&with("GET", None), None, input.clone()).await;
    assert!(r.ok, "{r:?}");
    // `extra` is named by a template, so it is declared (and, as any field the URL did not
    // use, a query parameter too); `admin` and `token` are not.
    assert_eq!(r.output["query"], "q=x&extra=e", "{r:?}");
    assert_eq!(r.output["x_extra"], "e");
    let r = call(&with("POST", None), None, input.clone()).await;
    assert_eq!(r.output["body"], json!({"q": "x", "extra": "e"}), "{r:?}");
    let r = call(&with("POST", Some(json!("{{input}}"))), None, input.clone()).await;
    assert_eq!(r.output["body"], json!({"q": "x", "extra": "e"}), "{r:?}");

    // Twin: a schema that declares every field (`additionalProperties: true`) sends them.
    let mut open = with("GET", None);
    open.input_schema =
        json!({"type": "object", "properties": {"q": {}}, "additionalProperties": true});
    let r = call(&open, None, input).await;
    assert_eq!(
        r.output["query"], "q=x&admin=true&token=t0k&extra=e",
        "{r:?}"
    );
}

/// This host's IPv4 and IPv6 addresses off loopback (link-local left out); when it has none, one
/// is added to `lo` for the test (root only) and removed by the returned guard.
fn host_addresses() -> (Vec<IpAddr>, Option<Added>) {
    let read = || -> Vec<IpAddr> {
        let Ok(out) = Command::new("ip").args(["-o", "addr", "show"]).output() else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|line| !line.contains("evt"))
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                words.find(|w| *w == "inet" || *w == "inet6")?;
                words.next()?.split('/').next()?.parse::<IpAddr>().ok()
            })
            .filter(|ip| !ip.is_loopback())
            .filter(|ip| !matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
            .collect()
    };
    let found = read();
    if !found.is_empty() {
        return (found, None);
    }
    let added = Added::to_lo("198.51.100.78/32");
    (read(), added)
}

/// An address added to `lo` under a label, removed when dropped.
struct Added(String);

impl Added {
    fn to_lo(cidr: &str) -> Option<Self> {
        let label = format!("lo:evh{}", std::process::id() % 10_000);
        let done = Command::new("ip")
            .args(["addr", "add", cidr, "dev", "lo", "label", &label])
            .output()
            .is_ok_and(|o| o.status.success());
        done.then(|| Self(cidr.to_owned()))
    }
}

impl Drop for Added {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &self.0, "dev", "lo"])
            .output();
    }
}

#[tokio::test]
async fn network_all_does_not_reach_this_hosts_own_addresses() {
    let (addrs, _added) = host_addresses();
    if addrs.is_empty() {
        eprintln!(
            "SKIPPED network_all_does_not_reach_this_hosts_own_addresses: no address off loopback, and none could be added"
        );
        return;
    }
    // Services bound on every address, as a host's `0.0.0.0` and `::` services are.
    let v4 = echo_on("0.0.0.0:0", Router::new()).await;
    let v6 = echo_on("[::]:0", Router::new()).await;
    let mut tried = 0;
    for ip in addrs {
        let (host, port, hits) = match ip {
            IpAddr::V4(v4a) => (v4a.to_string(), v4.addr.port(), &v4.hits),
            IpAddr::V6(v6a) => (format!("[{v6a}]"), v6.addr.port(), &v6.hits),
        };
        let t = http_tool("GET", &format!("http://{host}:{port}/"), &[], None);
        let r = call(&t, Some(Network::All), json!({})).await;
        assert!(!r.ok, "{host}: {r:?}");
        assert!(
            error(&r).contains("this host's own address") || error(&r).contains("private address"),
            "{host}: {r:?}"
        );
        let before = hits.load(Ordering::SeqCst);
        // Twin: listed by address, reached.
        let r = call(&t, allow(&[&format!("{host}:{port}")]), json!({})).await;
        assert!(r.ok, "{host}: {r:?}");
        assert_eq!(hits.load(Ordering::SeqCst), before + 1);
        tried += 1;
    }
    eprintln!("{tried} of this host's own addresses refused under `all`, reached when listed");
    // Private ranges, by literal: refused before any connection is tried.
    for host in [
        "10.0.0.1",
        "192.168.1.1",
        "172.20.0.1",
        "100.64.1.1",
        "[fd00::1]",
        "[::ffff:10.0.0.1]",
        "[64:ff9b::a00:1]",
    ] {
        let t = http_tool("GET", &format!("http://{host}:9/"), &[], None);
        let r = call(&t, Some(Network::All), json!({})).await;
        assert!(error(&r).contains("private address"), "{host}: {r:?}");
    }
}

/// Relays connections on `listen` to `to`, each from `source` (port 0) when given: a forwarder
/// whose connections reach the target from a non-loopback address.
async fn forwarder(listen: SocketAddr, to: SocketAddr, source: Option<IpAddr>) -> SocketAddr {
    let listener = TcpListener::bind(listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let socket = TcpSocket::new_v4().unwrap();
                if let Some(source) = source {
                    socket.bind(SocketAddr::new(source, 0)).unwrap();
                }
                if let Ok(mut up) = socket.connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                }
            });
        }
    });
    addr
}

async fn raw_get(to: SocketAddr, path: &str) -> String {
    let mut conn = TcpStream::connect(to).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn an_api_without_auth_answers_loopback_peers_only_whatever_the_host_header() {
    let (addrs, _added) = host_addresses();
    let Some(outside) = addrs.into_iter().find(IpAddr::is_ipv4) else {
        eprintln!(
            "SKIPPED an_api_without_auth_answers_loopback_peers_only: no IPv4 address off loopback"
        );
        return;
    };
    let server = TestServer::start(AgentDir::new()).await;
    let api: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    // A plain TCP forwarder on the host's non-loopback address whose connections to the API come
    // from that address: `Host: 127.0.0.1` is forged, the peer is not loopback.
    let outside_fwd = forwarder(SocketAddr::new(outside, 0), api, Some(outside)).await;
    let answer = raw_get(outside_fwd, "/eve/v1/info").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("only answers connections from this machine's loopback"),
        "{answer}"
    );
    assert!(answer.contains(&outside.to_string()), "{answer}");
    // Twin: the same forwarder with its connections from loopback, and a direct client.
    let loopback_fwd = forwarder(SocketAddr::new(outside, 0), api, None).await;
    let answer = raw_get(loopback_fwd, "/eve/v1/info").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = raw_get(api, "/eve/v1/info").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn an_mcp_server_over_http_reaches_its_own_origin_only() {
    use eve_compile::{Approval, Connection, ToolFilter, Transport};
    use eve_runtime::mcp::McpManager;
    // A server that answers the MCP endpoint with a redirect to another origin, which counts
    // what reaches it (and the header that came along).
    let other = echo().await;
    let b = other.addr;
    let redirecting = Router::new().route(
        "/mcp",
        axum::routing::post(move || async move {
            (
                StatusCode::TEMPORARY_REDIRECT,
                [("location", format!("http://{b}/mcp"))],
            )
        }),
    );
    let a = echo_on("127.0.0.1:0", redirecting).await;
    let connection = |url: String| Connection {
        name: "web".to_owned(),
        source: "connections/web.yaml".to_owned(),
        transport: Transport::Http {
            url,
            headers: BTreeMap::from([("X-Api-Key".to_owned(), "mcp-s3cret".to_owned())]),
        },
        tools: ToolFilter::default(),
        approval: Approval::Never,
        timeout_ms: 0,
        start_timeout_ms: None,
        oauth: None,
        credentials: Default::default(),
    };
    let env: eve_runtime::tools::EnvLookup = Arc::new(|_: &str| None);
    let mcp = McpManager::new(
        &[connection(format!("http://{}/mcp", a.addr))],
        env.clone(),
        std::env::temp_dir(),
    );
    assert!(mcp.tools().await.is_empty());
    let said = mcp.status().await[0].last_error.clone().unwrap_or_default();
    assert!(said.contains("redirect"), "{said}");
    mcp.shutdown().await;
    assert_eq!(
        other.hits.load(Ordering::SeqCst),
        0,
        "the redirect was followed: {said}"
    );

    // eve's own listener, named by the connection itself, is refused before any request.
    let exec = Arc::new(eve_runtime::exec::Executor::default());
    exec.set_own_listeners(vec![other.addr]);
    let mcp = McpManager::with_exec(
        &[connection(format!("http://{}/mcp", other.addr))],
        env,
        std::env::temp_dir(),
        exec,
        Default::default(),
        None,
    );
    assert!(mcp.tools().await.is_empty());
    let said = mcp.status().await[0].last_error.clone().unwrap_or_default();
    assert!(said.contains("eve's own API"), "{said}");
    mcp.shutdown().await;
    assert_eq!(other.hits.load(Ordering::SeqCst), 0);

    // Twin: the client rmcp uses by default follows the same redirect, header and all.
    let followed = reqwest::Client::new()
        .post(format!("http://{}/mcp", a.addr))
        .header("x-api-key", "mcp-s3cret")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(followed.status(), 200);
    assert_eq!(other.hits.load(Ordering::SeqCst), 1);
}
