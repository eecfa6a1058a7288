//! A platform channel under `kill -9`: `eve serve` accepts a signed Slack mention, is SIGKILLed
//! while the turn's tool runs, and the next `eve serve` finishes the turn and posts the answer in
//! the thread exactly once (to a fake of Slack's Web API on loopback); a retry of the same event
//! is recognised after the restart.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::serve::{Server, build};

const SECRET: &str = "e2e-signing-secret-0123456789abcdef";

/// Requests Slack's Web API received: (path, JSON body).
pub type Posts = Arc<Mutex<Vec<(String, Value)>>>;

/// A fake of Slack's Web API: answers `{"ok": true}` to every POST and records it.
pub fn fake_slack() -> (u16, Posts) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let posts: Posts = Arc::default();
    let seen = posts.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let seen = seen.clone();
            std::thread::spawn(move || answer(stream, &seen));
        }
    });
    (port, posts)
}

fn answer(stream: TcpStream, seen: &Posts) {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push((path, json));
    let reply = br#"{"ok":true,"ts":"1.0001"}"#;
    let mut stream = reader.into_inner();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        reply.len()
    );
    let _ = stream.write_all(reply);
}

fn project(api_port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::create_dir_all(agent.join("channels")).unwrap();
    std::fs::write(agent.join("instructions.md"), "You are a test agent.\n").unwrap();
    std::fs::write(agent.join("agent.yaml"), "default_tools: false\n").unwrap();
    // The tool logs its runs next to the project, outside the workspace: it runs unconfined.
    std::fs::create_dir_all(agent.join("sandbox")).unwrap();
    std::fs::write(agent.join("sandbox/sandbox.yaml"), "provider: host\n").unwrap();
    std::fs::write(
        agent.join("channels/slack.yaml"),
        format!(
            "kind: slack\nsigning_secret: ${{SLACK_SIGNING_SECRET}}\n\
             bot_token: ${{SLACK_BOT_TOKEN}}\napi_base_url: http://127.0.0.1:{api_port}/api\n"
        ),
    )
    .unwrap();
    // Runs until the test creates `open`; each run is logged.
    let tool = agent.join("tools/gated.sh");
    std::fs::write(
        &tool,
        "#!/bin/sh\n# ---\n# description: Waits for a gate.\n# effect: read\n# env: [GATE_DIR]\n\
         # ---\ncat >/dev/null\necho run >> \"$GATE_DIR/runs\"\n\
         while [ ! -e \"$GATE_DIR/open\" ]; do sleep 0.05; done\necho '{\"gated\":\"done\"}'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The Slack secrets and the gate folder, for `eve serve`.
fn env(root: &Path) -> [(&'static str, String); 3] {
    [
        ("SLACK_SIGNING_SECRET", SECRET.to_owned()),
        ("SLACK_BOT_TOKEN", "xoxb-e2e".to_owned()),
        ("GATE_DIR", root.display().to_string()),
    ]
}

fn serve(root: &Path) -> Server {
    let env = env(root);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start(root, &["serve", "--port", "0"], &env)
}

/// Posts a Slack event signed now to the server on `port`; status and JSON body.
fn slack(port: u16, body: &str, retry: bool) -> (u16, Value) {
    let ts = chrono::Utc::now().timestamp();
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let retry = if retry {
        "X-Slack-Retry-Num: 1\r\nX-Slack-Retry-Reason: http_timeout\r\n"
    } else {
        ""
    };
    post_channel(
        port,
        "slack",
        &format!("X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: v0={signature}\r\n{retry}"),
        body,
    )
}

/// POSTs `body` to channel `name` of the server on `port` with `headers` (each line ending in
/// CRLF) over a raw HTTP/1.1 connection; the status and the JSON body (`null` when not JSON).
pub fn post_channel(port: u16, name: &str, headers: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "POST /eve/v1/channels/{name} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let json = raw
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

fn mention(event_id: &str, text: &str) -> String {
    json!({
        "token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": chrono::Utc::now().timestamp(),
        "event": {"type": "app_mention", "user": "U1", "text": format!("<@UBOT> {text}"),
                  "ts": "7000.1", "channel": "C9", "event_ts": "7000.1"},
        "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": true}],
    })
    .to_string()
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_slack_answer_owed_by_a_killed_server_is_posted_once_by_the_next() {
    let (api_port, posts) = fake_slack();
    let dir = project(api_port);
    let root = dir.path();
    build(root);
    let runs = || {
        std::fs::read_to_string(root.join("runs"))
            .unwrap_or_default()
            .lines()
            .count()
    };

    let server = serve(root);
    let event = mention("EvKill1", "/tool gated {}");
    let (status, body) = slack(server.port, &event, false);
    assert_eq!(status, 200, "{body}");
    wait_until("the tool runs", || runs() == 1);
    server.sigkill();
    assert!(posts.lock().unwrap().is_empty(), "nothing was posted yet");

    // The next process finishes the turn (the `read` tool runs again) and owes the answer.
    let server = serve(root);
    wait_until("the interrupted call runs again", || runs() == 2);
    std::fs::write(root.join("open"), "").unwrap();
    wait_until("the answer is posted", || !posts.lock().unwrap().is_empty());
    {
        let posts = posts.lock().unwrap();
        let (path, message) = &posts[0];
        assert_eq!(path, "/api/chat.postMessage");
        assert_eq!(message["channel"], "C9");
        assert_eq!(message["thread_ts"], "7000.1");
        let text = message["text"].as_str().unwrap_or_default();
        assert!(text.contains("gated"), "{text}");
    }

    // Slack retries the event the killed process accepted: recognised, not a second turn.
    let (status, body) = slack(server.port, &event, true);
    assert_eq!(status, 200, "{body}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        posts.lock().unwrap().len(),
        1,
        "{:?}",
        posts.lock().unwrap()
    );
    assert_eq!(runs(), 2);
    let db = rusqlite::Connection::open(root.join(".eve/eve.db")).unwrap();
    let turns: i64 = db
        .query_row("SELECT COUNT(*) FROM turns", [], |r| r.get(0))
        .unwrap();
    assert_eq!(turns, 1);
}
