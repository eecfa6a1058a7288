//! `eve serve` as a user runs it: the real binary on `127.0.0.1:0`, killed with SIGKILL and
//! restarted, stopped with SIGTERM. The approval flow across a hard restart must match eve's
//! captures (stream3 + stream4); unfinished turns resume on start with no request; start-up
//! refuses to run without a build or on a public address without authentication.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eve_test_support::capture;
use serde_json::{Value, json};

use crate::support_dev;

const EVE: &str = env!("CARGO_BIN_EXE_eve");

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::write(agent.join("instructions.md"), "You are a test agent.\n").unwrap();
    std::fs::write(agent.join("agent.yaml"), "default_tools: false\n").unwrap();
    // The tools log their side effects next to the project, outside any workspace: they run
    // unconfined (the sandbox has its own tests).
    std::fs::create_dir_all(agent.join("sandbox")).unwrap();
    std::fs::write(agent.join("sandbox/sandbox.yaml"), "provider: host\n").unwrap();
    let tools = [
        (
            "refund_charge",
            "# description: Refund a charge.\n# approval: always\n# env: [REFUND_LOG]\n",
            "input=$(cat)\necho \"$input\" >> \"$REFUND_LOG\"\necho '{\"refunded\":true}'\n",
        ),
        (
            "slow",
            "# description: Takes a while.\n# effect: read\n",
            "cat >/dev/null\nsleep 1\necho '{\"slow\":\"done\"}'\n",
        ),
        (
            "gated",
            "# description: Runs until the test opens the gate.\n# effect: read\n# env: [GATE_FILE]\n",
            "cat >/dev/null\nn=0\nwhile [ ! -e \"$GATE_FILE\" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n\
             echo '{\"gated\":\"done\"}'\n",
        ),
    ];
    for (name, front, body) in tools {
        let path = agent.join("tools").join(format!("{name}.sh"));
        std::fs::write(&path, format!("#!/bin/sh\n# ---\n{front}# ---\n{body}")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

pub(crate) fn eve(root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(EVE);
    cmd.args(args)
        .current_dir(root)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT_DIR")
        .env_remove("EVE_MOCK_SCRIPT")
        .env_remove("EVE_BASE_URL")
        .env_remove("PORT")
        .env("EVE_MODEL", "mock/echo")
        .env("REFUND_LOG", root.join("refunds.log"))
        .env("GATE_FILE", root.join("gate"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

pub(crate) fn build(root: &Path) {
    let out = eve(root, &["build"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `eve serve`.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
    banner: String,
}

impl Server {
    /// Starts `eve ARGS` and waits for its `eve serving … on http://…` line.
    pub(crate) fn start(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = eve(root, args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|_| {
                let _ = child.kill();
                let _ = child.wait();
                panic!("eve serve did not start")
            });
            if let Some(rest) = line.strip_prefix("eve serving ") {
                let port = rest.rsplit(':').next().unwrap().trim().parse().unwrap();
                return Self {
                    child,
                    port,
                    banner: line,
                };
            }
        }
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        http(self.port, method, path, body)
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (status, text) = self.request("POST", path, Some(&body));
        (status, eve_test_support::json_or_text(text))
    }

    /// A stream read that ends by itself (bounded, or a follow that reaches rest).
    fn stream(&self, session: &str, query: &str) -> Vec<Value> {
        let (status, text) = self.request(
            "GET",
            &format!("/eve/v1/session/{session}/stream{query}"),
            None,
        );
        assert_eq!(status, 200, "{text}");
        assert!(text.starts_with('\n'));
        capture::parse_ndjson(&text)
    }

    fn count(&self, session: &str) -> u64 {
        self.stream(session, "?follow=false").len() as u64
    }

    pub(crate) fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM; returns the exit code.
    fn sigterm(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("eve serve did not exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking HTTP/1.1 request with `Connection: close`; returns status and decoded body.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    support_dev::http(port, method, path, body, None)
}

/// Sends a request with `Connection: close`; the response is left to read.
fn send(port: u16, method: &str, path: &str, body: Option<&Value>) -> TcpStream {
    support_dev::send(port, method, path, body, None)
}

/// Opens a follow and waits until it is open: the server answered with its head and the
/// stream's first byte. Returns the connection and what was read of it.
fn open_follow(port: u16, path: &str) -> (TcpStream, Vec<u8>) {
    let mut stream = send(port, "GET", path, None);
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .is_none_or(|split| raw.len() <= split + 4)
    {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the stream closed before it opened: {raw:?}");
        raw.extend_from_slice(&buf[..n]);
    }
    (stream, raw)
}

/// Reads a response to its end (`raw` is what was already read of it); returns status and
/// decoded body.
fn response(stream: TcpStream, raw: Vec<u8>) -> (u16, String) {
    support_dev::response(stream, raw)
}

fn assert_matches(ours: &[Value], name: &str) {
    if let Err(e) = capture::compare(ours, &capture::capture(name)) {
        panic!(
            "{name} does not match:\n{e}\nours: {:?}",
            capture::types(ours)
        );
    }
}

#[test]
fn approval_answered_after_sigkill_and_restart_matches_the_captures() {
    let dir = project();
    let root = dir.path();
    build(root);
    let server = Server::start(root, &["serve", "--port", "0"], &[]);
    assert!(server.banner.contains("(build "), "{}", server.banner);
    let (status, body) = server.post("/eve/v1/session", json!({"message": "hello"}));
    assert_eq!(status, 202);
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let first = server.stream(&id, "?startIndex=0");
    assert_eq!(first.last().unwrap()["type"], "session.waiting");

    let before = server.count(&id);
    let (status, _) = server.post(
        &format!("/eve/v1/session/{id}"),
        json!({"message": "/tool refund_charge {\"chargeId\": \"ch_1\", \"amount\": 5}"}),
    );
    assert_eq!(status, 202);
    let parked = server.stream(&id, &format!("?startIndex={}", before - 1));
    assert_matches(&parked, "stream3.ndjson");
    let request_id = parked
        .iter()
        .find(|e| e["type"] == "input.requested")
        .unwrap()["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();

    // A hard kill while the turn waits; a new process (the `start` alias, port from PORT).
    server.sigkill();
    let server = Server::start(root, &["start"], &[("PORT", "0")]);
    let (status, health) = server.request("GET", "/eve/v1/health", None);
    assert_eq!(status, 200, "{health}");
    let before = server.count(&id);
    let (status, body) = server.post(
        &format!("/eve/v1/session/{id}"),
        json!({"inputResponses": [{"requestId": request_id, "optionId": "approve"}]}),
    );
    assert_eq!(status, 202, "{body}");
    let resumed = server.stream(&id, &format!("?startIndex={}", before - 1));
    assert_matches(&resumed, "stream4.ndjson");
    let refunds = std::fs::read_to_string(root.join("refunds.log")).unwrap_or_default();
    assert_eq!(
        refunds.lines().count(),
        1,
        "the approved tool ran once: {refunds}"
    );

    assert_eq!(server.sigterm(), Some(0));
}

#[test]
fn unfinished_turns_resume_on_start() {
    let dir = project();
    let root = dir.path();
    build(root);
    let server = Server::start(root, &["serve", "--port", "0"], &[]);
    let (_, body) = server.post("/eve/v1/session", json!({"message": "/tool slow {}"}));
    let id = body["sessionId"].as_str().unwrap().to_owned();
    // Wait until the slow call is running, then kill the process under it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server
        .stream(&id, "?follow=false")
        .iter()
        .any(|e| e["type"] == "actions.requested")
    {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.sigkill();

    // No request touches the session: the restart alone finishes the turn.
    let server = Server::start(root, &["serve", "--port", "0"], &[]);
    let events = server.stream(&id, "?startIndex=0");
    let kinds = capture::types(&events);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("session.waiting"),
        "{kinds:?}"
    );
    assert!(kinds.iter().any(|k| k == "turn.completed"), "{kinds:?}");
    let result = events
        .iter()
        .rfind(|e| e["type"] == "action.result")
        .unwrap();
    assert_eq!(result["data"]["result"]["output"]["slow"], "done");

    // SIGTERM with a follow open: the stream ends and the process exits 0.
    let port = server.port;
    let path = format!("/eve/v1/session/{id}/stream?startIndex={}", events.len());
    let (stream, opened) = open_follow(port, &path);
    let follower = std::thread::spawn(move || response(stream, opened));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!follower.is_finished(), "a follow at rest waits");
    assert_eq!(server.sigterm(), Some(0));
    assert_eq!(follower.join().unwrap(), (200, "\n".to_owned()));
}

#[test]
fn start_up_checks() {
    let dir = project();
    let root = dir.path();
    let out = eve(root, &["serve", "--port", "0"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("run `eve build`"), "{stderr}");

    build(root);
    let out = eve(root, &["serve", "--port", "0", "--host", "0.0.0.0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("without authentication") && stderr.contains("channels/eve.yaml"),
        "{stderr}"
    );

    // With a bearer token configured, any address is allowed; a missing secret is named.
    std::fs::create_dir_all(root.join("agent/channels")).unwrap();
    std::fs::write(
        root.join("agent/channels/eve.yaml"),
        "auth:\n  type: bearer\n  tokens: [\"${EVE_SERVE_TEST_TOKEN}\"]\n",
    )
    .unwrap();
    build(root);
    let out = eve(root, &["serve", "--port", "0", "--host", "0.0.0.0"])
        .env_remove("EVE_SERVE_TEST_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("EVE_SERVE_TEST_TOKEN"), "{stderr}");
    let server = Server::start(
        root,
        &["serve", "--port", "0", "--host", "0.0.0.0"],
        &[("EVE_SERVE_TEST_TOKEN", "secret-token")],
    );
    let (status, body) = server.request("GET", "/eve/v1/health", None);
    assert_eq!(status, 200, "{body}");
    let (status, _) = server.request("GET", "/eve/v1/info", None);
    assert_eq!(status, 401);
    assert_eq!(server.sigterm(), Some(0));
}

/// Work other processes leave in the store is picked up by a running server: an approval answered
/// with `eve sessions approve` continues at once (and an open stream shows it), and `eve run` on a
/// session the server is driving follows it to the end instead of giving up.
#[test]
fn a_server_continues_what_other_processes_answer_and_eve_run_follows_it() {
    let dir = project();
    let root = dir.path();
    build(root);
    let server = Server::start(root, &["serve", "--port", "0"], &[]);
    let (status, body) = server.post(
        "/eve/v1/session",
        json!({"message": "/tool refund_charge {\"chargeId\": \"ch_9\", \"amount\": 1}"}),
    );
    assert_eq!(status, 202);
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let parked = server.stream(&id, "?startIndex=0");
    assert_eq!(parked.last().unwrap()["type"], "turn.waiting");
    // A follow open on the server while another process answers.
    let port = server.port;
    let path = format!("/eve/v1/session/{id}/stream?startIndex={}", parked.len());
    let (stream, opened) = open_follow(port, &path);
    let follower = std::thread::spawn(move || response(stream, opened));

    let out = eve(root, &["sessions", "approve", &id]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, text) = follower.join().unwrap();
    assert_eq!(status, 200);
    let rest = capture::parse_ndjson(&text);
    let kinds = capture::types(&rest);
    assert!(kinds.iter().any(|k| k == "action.result"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("session.waiting"));
    let refunds = std::fs::read_to_string(root.join("refunds.log")).unwrap_or_default();
    assert_eq!(refunds.lines().count(), 1, "{refunds}");

    // The server drives a turn whose call runs until the gate opens; `eve run --session` joins
    // it and ends with it.
    let (status, _) = server.post(
        &format!("/eve/v1/session/{id}"),
        json!({"message": "/tool gated {}"}),
    );
    assert_eq!(status, 202);
    let mut run = eve(root, &["run", "--session", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = run.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("being driven by another eve process") => {
                assert!(line.contains("following it"), "{line}");
                break;
            }
            Ok(_) => {}
            Err(_) => {
                let _ = run.kill();
                let _ = run.wait();
                std::fs::write(root.join("gate"), "").unwrap();
                panic!(
                    "eve run did not follow the turn:\n{}",
                    reader.join().unwrap()
                );
            }
        }
    }
    std::fs::write(root.join("gate"), "").unwrap();
    let status = run.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let events = server.stream(&id, "?follow=false");
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "action.result")
        .collect();
    assert_eq!(results.len(), 2, "the gated call ran once");
    assert_eq!(results[1]["data"]["result"]["output"]["gated"], "done");
    assert_eq!(events.last().unwrap()["type"], "session.waiting");
    assert_eq!(server.sigterm(), Some(0));
}

/// `--json`: once listening, one JSON line on stdout names the address (with `--port 0` too), so
/// a script can wait for it and talk to the server.
#[test]
fn json_prints_a_ready_line_with_the_address() {
    let dir = project();
    let root = dir.path();
    build(root);
    for command in ["serve", "dev"] {
        let mut child = eve(root, &[command, "--port", "0", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(ready["event"], "ready", "{ready}");
        let port = u16::try_from(ready["port"].as_u64().unwrap()).unwrap();
        assert_ne!(port, 0);
        assert_eq!(ready["url"], format!("http://127.0.0.1:{port}"));
        assert_eq!(ready["build"].as_str().unwrap().len(), 16, "{ready}");
        assert_eq!(ready["console"].is_string(), command == "dev", "{ready}");
        let (status, body) = http(port, "GET", "/eve/v1/health", None);
        assert_eq!(status, 200, "{command}: {body}");
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `eve serve` serves the active build: an agent folder edited since is said at start, and a
/// folder that matches the build says nothing.
#[test]
fn serve_says_when_the_agent_folder_changed_since_the_build() {
    let dir = project();
    let root = dir.path();
    build(root);
    let first_lines = |root: &Path| {
        let mut child = eve(root, &["serve", "--port", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            let done = line.contains("eve serving");
            lines.push(line);
            if done {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        lines.join("\n")
    };
    let clean = first_lines(root);
    assert!(
        clean.contains("eve serving") && !clean.contains("agent/ has"),
        "{clean}"
    );
    std::fs::write(
        root.join("agent/instructions.md"),
        "You are a changed agent.\n",
    )
    .unwrap();
    let changed = first_lines(root);
    assert!(
        changed.contains("warning: agent/ has changed since build")
            && changed.contains("run `eve build`"),
        "{changed}"
    );
    std::fs::write(root.join("agent/agent.yaml"), "default_tools: [\n").unwrap();
    let broken = first_lines(root);
    assert!(broken.contains("agent/ has errors now"), "{broken}");
}
