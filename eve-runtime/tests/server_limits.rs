//! The listener's limits with real sockets: slow heads, slow bodies and idle keep-alive
//! connections are closed within their timeouts, an open stream is not idle, and at the
//! connection cap a fresh connection is served as soon as a slot frees.

use std::time::{Duration, Instant};

use eve_runtime::server::{self, ListenerLimits, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::server_support::{AgentDir, runtime};

struct Limited {
    _agent: AgentDir,
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
    runtime: eve_runtime::engine::Runtime,
}

async fn start(limits: ListenerLimits) -> Limited {
    let agent = AgentDir::new();
    agent.build();
    let runtime = runtime(&agent.root());
    let config = ServerConfig {
        heartbeat: Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let shutdown = config.shutdown.clone();
    let router = server::router(runtime.clone(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = shutdown.clone();
    tokio::spawn(async move { server::serve_with(listener, router, stop, limits).await });
    Limited {
        _agent: agent,
        addr,
        shutdown,
        runtime,
    }
}

fn limits(header: u64, body: u64, idle: u64, max: Option<usize>) -> ListenerLimits {
    ListenerLimits {
        header_timeout: Duration::from_millis(header),
        body_timeout: Duration::from_millis(body),
        idle_timeout: Duration::from_millis(idle),
        max_connections: max,
    }
}

/// Reads until the peer closes (or resets); returns what was read and when it closed, or `None`
/// when it stayed open for `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<(Vec<u8>, Instant)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((got, Instant::now())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends a GET for `/eve/v1/health` and reads one response head and body.
async fn health_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /eve/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains('}') {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the response");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_head_sent_one_byte_at_a_time_is_cut_off_at_the_header_timeout() {
    let server = start(limits(800, 60_000, 60_000, None)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let head = b"GET /eve/v1/health HTTP/1.1\r\nhost: localhost\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed = None;
    for byte in head {
        if stream.write_all(&[*byte]).await.is_err() {
            break;
        }
        // One byte every 100 ms; the read below doubles as the pacing.
        if let Some(c) = closed_within(&mut stream, Duration::from_millis(100)).await {
            closed = Some(c);
            break;
        }
    }
    let (got, at) = closed.expect("the slow head was never cut off");
    let took = at - started;
    assert!(got.is_empty(), "no response to a head that never ended");
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_millis(2500),
        "closed after {took:?}, the header timeout is 800 ms"
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let server = start(limits(600, 60_000, 60_000, None)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let (_, at) = closed_within(&mut stream, Duration::from_secs(5))
        .await
        .expect("a silent connection stayed open");
    let took = at - started;
    assert!(took >= Duration::from_millis(500), "closed early: {took:?}");
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_body_that_stalls_is_cut_off_at_the_body_timeout() {
    let server = start(limits(60_000, 800, 60_000, None)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(
            b"POST /eve/v1/session HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
              content-length: 200\r\n\r\n{\"message\": \"hel",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let (_, at) = closed_within(&mut stream, Duration::from_secs(5))
        .await
        .expect("a stalled body kept the connection open");
    let took = at - started;
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_millis(2500),
        "closed after {took:?}, the body timeout is 800 ms"
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_but_an_open_stream_is_not() {
    let server = start(limits(60_000, 60_000, 700, None)).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    let response = health_on(&mut idle).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    // The connection is reused while it is fresh.
    let again = health_on(&mut idle).await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    let started = Instant::now();
    let (_, at) = closed_within(&mut idle, Duration::from_secs(5))
        .await
        .expect("an idle keep-alive connection stayed open");
    let took = at - started;
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_millis(2500),
        "closed after {took:?}, the idle timeout is 700 ms"
    );

    // A stream being written is not idle: it outlives several idle timeouts.
    let id = server.runtime.create_session(None).await.unwrap();
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /eve/v1/session/{id}/stream?format=sse HTTP/1.1\r\nhost: localhost\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    assert!(
        closed_within(&mut stream, Duration::from_millis(2500))
            .await
            .is_none(),
        "an open stream was closed as idle"
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn at_the_connection_cap_a_fresh_connection_is_served_once_a_slot_frees() {
    let server = start(limits(60_000, 60_000, 60_000, Some(3))).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        assert!(health_on(&mut s).await.starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    // The fourth connects (the kernel's backlog) but is not served while all slots are taken.
    let mut fresh = TcpStream::connect(server.addr).await.unwrap();
    fresh
        .write_all(b"GET /eve/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(
        tokio::time::timeout(Duration::from_millis(500), fresh.read(&mut buf))
            .await
            .is_err(),
        "served past the cap"
    );
    drop(held.pop());
    let n = tokio::time::timeout(Duration::from_secs(5), fresh.read(&mut buf))
        .await
        .expect("not served after a slot freed")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // And it keeps accepting: close the rest, and many more connections are served in turn.
    drop(held);
    drop(fresh);
    for _ in 0..10 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        assert!(health_on(&mut s).await.starts_with("HTTP/1.1 200"));
    }
    server.shutdown.cancel();
}

#[test]
fn listener_settings_come_from_the_environment_and_bad_values_are_named() {
    let env = |name: &str| match name {
        "EVE_HEADER_TIMEOUT_SECS" => Some("2.5".to_owned()),
        "EVE_MAX_CONNECTIONS" => Some("12000".to_owned()),
        _ => None,
    };
    let limits = ListenerLimits::from_env(&env).unwrap();
    assert_eq!(limits.header_timeout, Duration::from_millis(2500));
    assert_eq!(limits.body_timeout, server::DEFAULT_BODY_TIMEOUT);
    assert_eq!(limits.max_connections, Some(12000));
    let bad = |name: &str| (name == "EVE_IDLE_TIMEOUT_SECS").then(|| "soon".to_owned());
    let err = ListenerLimits::from_env(&bad).unwrap_err().to_string();
    assert!(
        err.contains("EVE_IDLE_TIMEOUT_SECS") && err.contains("soon"),
        "{err}"
    );
    // Without a setting the cap follows the descriptor limit, less a reserve.
    let cap = ListenerLimits::default().connection_cap();
    let fds = server::raise_fd_limit();
    assert!(
        cap >= 16 && (cap as u64) < fds.max(17),
        "cap {cap} for {fds} fds"
    );
}

/// Unmounts the test's tmpfs when the test ends, however it ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test]
async fn a_full_disk_makes_health_degraded_and_posts_503_until_space_frees() {
    let agent = AgentDir::new();
    let state = agent.root().join(".eve");
    std::fs::create_dir_all(&state).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&state)
        .output();
    match mounted {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            println!(
                "skipped: cannot mount a small tmpfs (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return;
        }
        Err(e) => {
            println!("skipped: cannot run mount: {e}");
            return;
        }
    }
    let _unmount = Mounted(state.clone());
    agent.build();
    let runtime = runtime(&agent.root());
    let config = ServerConfig::default();
    let shutdown = config.shutdown.clone();
    let router = server::router(runtime.clone(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = shutdown.clone();
    tokio::spawn(async move { server::serve(listener, router, stop).await });
    let http = reqwest::Client::new();
    let health = || async {
        let r = http
            .get(format!("{base}/eve/v1/health"))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };
    let post = || async {
        let r = http
            .post(format!("{base}/eve/v1/session"))
            .json(&serde_json::json!({"message": "hello there"}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.text().await.unwrap())
    };
    assert_eq!(health().await.0, 200);
    let (status, body) = post().await;
    assert_eq!(status, 202, "{body}");

    // Fill the disk: one file takes every free byte.
    let filler = state.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let mut refused = None;
    for _ in 0..20 {
        let (status, body) = post().await;
        if status != 202 {
            refused = Some((status, body));
            break;
        }
    }
    let (status, body) = refused.expect("every POST was accepted on a full disk");
    assert_eq!(status, 503, "{body}");
    let (status, report) = health().await;
    assert_eq!(status, 503, "{report}");
    assert_eq!(report["status"], "degraded", "{report}");
    assert!(
        report["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{report}"
    );

    // Space frees: readiness and writes come back.
    std::fs::remove_file(&filler).unwrap();
    let (status, report) = health().await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["status"], "ready");
    let (status, body) = post().await;
    assert_eq!(status, 202, "{body}");
    shutdown.cancel();
}
