//! A fleet of `eve serve` nodes on one real PostgreSQL, each with its own `.eve/`: builds and
//! session workspaces travel through the store.
//!
//! Node A builds and publishes v1 of the agent and serves; a session's first turn writes a
//! file with a tool, its second parks on an approval, and A is SIGKILLed. A deploy machine
//! publishes v2. Node C has never built anything: it adopts the newest published build (v2),
//! and when the approval is answered there, it finishes the parked turn on v1, the build the
//! turn is pinned to, fetched from the store, in the workspace restored from the store. Node
//! D, as new as C was, then takes a third turn whose tool reads the file again.
//!
//! A reply owed to a platform follows the turn across nodes: node A accepts a signed webhook
//! delivery and is SIGKILLed while the turn's tool runs; node B continues the turn and POSTs the
//! answer to the platform's `reply_url` exactly once.
//!
//! Needs `EVE_TEST_POSTGRES_URL` (`scripts/test.sh` starts a throwaway cluster) and `psql`;
//! with `EVE_SKIP_POSTGRES=1` it says SKIPPED.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eve_test_support::{TestAgent, capture};
use serde_json::{Value, json};

use crate::support_dev;

const EVE: &str = env!("CARGO_BIN_EXE_eve");

/// The test server's URL with a fresh schema, or `None` when PostgreSQL tests are skipped.
pub fn fresh_store() -> Option<String> {
    let base = match std::env::var("EVE_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ if std::env::var("EVE_SKIP_POSTGRES").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: PostgreSQL test (EVE_SKIP_POSTGRES=1)");
            return None;
        }
        _ => panic!(
            "this test needs PostgreSQL: run `scripts/postgres.sh start` and export \
             EVE_TEST_POSTGRES_URL=$(scripts/postgres.sh url), or set EVE_SKIP_POSTGRES=1"
        ),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let schema = format!("cli_{}_{nanos}", std::process::id());
    let out = Command::new("psql")
        .args(["-q", "-v", "ON_ERROR_STOP=1", &base, "-c"])
        .arg(format!("CREATE SCHEMA {schema}"))
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}options=-csearch_path%3D{schema}"))
}

const SCRIPT: &str = r#"[
  {"tool_calls": [{"name": "note_write", "input": {"text": "remember the milk"}}]},
  {"text": "saved"},
  {"tool_calls": [{"name": "note_read", "input": {}}]},
  {"text": "read it"},
  {"tool_calls": [{"name": "note_cat", "input": {}}]},
  {"text": "still there"}
]"#;

/// The agent at `version`: its tools say which version ran them.
fn agent(version: &str) -> TestAgent {
    let agent = TestAgent::new();
    agent.file("instructions.md", &format!("You keep notes ({version}).\n"));
    agent.file("sandbox/sandbox.yaml", "provider: host\n");
    agent.tool(
        "note_write",
        "description: Write the note.\neffect: write",
        "input=$(cat)\nmkdir -p notes\nprintf '%s' \"$input\" | sed 's/.*\"text\": *\"\\([^\"]*\\)\".*/\\1/' > notes/today.txt\n\
         echo '{\"written\": true}'\n",
    );
    let read = format!(
        "cat >/dev/null\nprintf '{{\"from\": \"{version}\", \"note\": \"%s\"}}' \"$(cat notes/today.txt)\"\n"
    );
    agent.tool(
        "note_read",
        "description: Read the note.\neffect: read\napproval: always",
        &read,
    );
    agent.tool(
        "note_cat",
        "description: Read the note.\neffect: read",
        &read,
    );
    agent
}

fn eve(root: &Path, store: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(EVE);
    cmd.args(args)
        .current_dir(root)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_BASE_URL")
        .env_remove("PORT")
        .env("EVE_STORE", store)
        .env("EVE_LEASE_TTL_MS", "1000")
        .env("EVE_MODEL", "mock/echo")
        .env("EVE_MOCK_SCRIPT", SCRIPT)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

struct Node {
    child: Child,
    port: u16,
    lines: Vec<String>,
}

impl Node {
    fn start(root: &Path, store: &str) -> Self {
        Self::start_with(root, store, &[])
    }

    /// A node with extra environment variables.
    fn start_with(root: &Path, store: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = eve(root, store, &["serve", "--port", "0"]);
        cmd.envs(env.iter().copied());
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
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("eve serve did not start: {lines:?}");
            };
            lines.push(line.clone());
            if let Some(rest) = line.strip_prefix("eve serving ") {
                let port = rest.rsplit(':').next().unwrap().trim().parse().unwrap();
                return Self { child, port, lines };
            }
        }
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (status, text) = support_dev::http(self.port, "POST", path, Some(&body), None);
        (status, eve_test_support::json_or_text(text))
    }

    fn events(&self, session: &str) -> Vec<Value> {
        let (status, text) = support_dev::http(
            self.port,
            "GET",
            &format!("/eve/v1/session/{session}/stream?follow=false"),
            None,
            None,
        );
        assert_eq!(status, 200, "{text}");
        capture::parse_ndjson(&text)
    }

    /// Waits for the `n`-th event of type `kind` (1-based) in the session's stream.
    fn wait_for(&self, session: &str, kind: &str, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let events = self.events(session);
            if events.iter().filter(|e| e["type"] == kind).count() >= n {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} #{n}: {:?}",
                capture::types(&events)
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn current(root: &Path) -> String {
    let link = root.join(".eve/current");
    std::fs::read_link(&link)
        .map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
        .or_else(|_| std::fs::read_to_string(&link).map(|s| s.trim().to_owned()))
        .unwrap()
}

/// The output of the last result of a call of `tool`.
fn last_result(events: &[Value], tool: &str) -> Value {
    events
        .iter()
        .rfind(|e| e["type"] == "action.result" && e["data"]["result"]["toolName"] == tool)
        .unwrap_or_else(|| panic!("no result of {tool}: {:?}", capture::types(events)))["data"]
        ["result"]["output"]
        .clone()
}

#[test]
fn a_session_moves_between_nodes_with_its_build_and_its_workspace() {
    let Some(store) = fresh_store() else { return };

    // Node A: builds v1, publishes it, serves.
    let a = agent("v1");
    let published = run_ok(&mut eve(a.root(), &store, &["build", "--publish"]));
    assert!(published.contains("Published build"), "{published}");
    let v1 = current(a.root());
    let node_a = Node::start(a.root(), &store);
    let (status, body) = node_a.post("/eve/v1/session", json!({"message": "save the note"}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    node_a.wait_for(&id, "turn.completed", 1);
    assert_eq!(
        std::fs::read_to_string(a.path(&format!(".eve/sandboxes/{id}/notes/today.txt"))).unwrap(),
        "remember the milk"
    );
    let (status, body) = node_a.post(
        &format!("/eve/v1/session/{id}"),
        json!({"message": "read it"}),
    );
    assert_eq!(status, 202, "{body}");
    let parked = node_a.wait_for(&id, "input.requested", 1);
    let request = parked
        .iter()
        .find(|e| e["type"] == "input.requested")
        .unwrap()["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    node_a.kill();

    // A deploy machine publishes v2: the newest build in the store.
    let deploy = agent("v2");
    run_ok(&mut eve(deploy.root(), &store, &["build", "--publish"]));
    let v2 = current(deploy.root());
    assert_ne!(v1, v2);

    // Node C has never built: it adopts v2, and finishes the parked turn on v1.
    let c = tempfile::tempdir().unwrap();
    std::fs::create_dir(c.path().join("agent")).unwrap();
    let node_c = Node::start(c.path(), &store);
    assert!(
        node_c
            .lines
            .iter()
            .any(|l| l.contains(&format!("using build {v2}"))),
        "{:?}",
        node_c.lines
    );
    assert!(!c.path().join(format!(".eve/builds/{v1}")).exists());
    let before = node_c.events(&id).len();
    let (status, body) = node_c.post(
        &format!("/eve/v1/session/{id}"),
        json!({"inputResponses": [{"requestId": request, "optionId": "approve"}]}),
    );
    assert_eq!(status, 202, "{body}");
    let events = node_c.wait_for(&id, "turn.completed", 2);
    assert!(events.len() > before);
    assert_eq!(
        last_result(&events, "note_read"),
        json!({"from": "v1", "note": "remember the milk"}),
        "the turn finished on its own build, in the workspace its first turn wrote on node A"
    );
    assert!(
        c.path()
            .join(format!(".eve/builds/{v1}/manifest.json"))
            .is_file(),
        "node C fetched the pinned build from the store"
    );
    node_c.kill();

    // Node D, as new as C was: a new turn (on v2 now) reads the file again.
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("agent")).unwrap();
    let node_d = Node::start(d.path(), &store);
    let (status, body) = node_d.post(
        &format!("/eve/v1/session/{id}"),
        json!({"message": "again"}),
    );
    assert_eq!(status, 202, "{body}");
    let events = node_d.wait_for(&id, "turn.completed", 3);
    assert_eq!(
        last_result(&events, "note_cat"),
        json!({"from": "v2", "note": "remember the milk"}),
        "an idle session moves to the newest build and keeps its workspace"
    );
}

#[test]
fn a_workspace_past_the_checkpoint_cap_fails_the_turn_naming_the_cap_and_the_setting() {
    let project = TestAgent::new();
    project.file("sandbox/sandbox.yaml", "provider: host\n");
    project.tool(
        "big",
        "description: Write a large file.\neffect: write",
        "cat >/dev/null\nhead -c 5000 /dev/zero > big.bin\necho '{\"ok\": true}'\n",
    );
    let store = project.path(".eve/eve.db").display().to_string();
    run_ok(&mut eve(project.root(), &store, &["build"]));
    let out = eve(project.root(), &store, &["run", "--json", "write it"])
        .env(
            "EVE_MOCK_SCRIPT",
            r#"[{"tool_calls": [{"name": "big", "input": {}}]}, {"text": "done"}]"#,
        )
        .env("EVE_WORKSPACE_MAX_BYTES", "4096")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = capture::parse_ndjson(&stdout)
        .into_iter()
        .find(|e| e["type"] == "turn.failed")
        .unwrap_or_else(|| panic!("the turn did not fail: {stdout}"));
    assert_eq!(failed["data"]["error"]["code"], "workspace_too_large");
    let message = failed["data"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("(4.9 KiB) is larger than the 4.0 KiB")
            && message.contains("EVE_WORKSPACE_MAX_BYTES=4096"),
        "{message}"
    );
    assert!(!out.status.success());
}

fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-At", "-v", "ON_ERROR_STOP=1", url, "-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn sqlite_count(root: &Path, table: &str) -> i64 {
    support_dev::store(root)
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn eve_store_migrate_moves_a_project_to_postgres_verifiably_and_idempotently() {
    let Some(url) = fresh_store() else { return };
    let project = agent("v1");
    let root = project.root();
    let sqlite = root.join(".eve/eve.db").display().to_string();
    // Real turns on the project's SQLite store: a tool writes a file, the next turn stops at
    // an approval; the build is published into the store too.
    run_ok(&mut eve(root, &sqlite, &["build", "--publish"]));
    run_ok(&mut eve(root, &sqlite, &["run", "save the note"]));
    let parked = eve(root, &sqlite, &["run", "-c", "read it"])
        .output()
        .unwrap();
    assert_eq!(parked.status.code(), Some(3), "stopped at the approval");
    let tables = [
        "sessions",
        "events",
        "messages",
        "turns",
        "steps",
        "tool_calls",
        "input_requests",
        "inbox",
        "builds",
        "workspace_checkpoints",
        "workspace_blobs",
    ];
    for table in tables {
        assert!(sqlite_count(root, table) > 0, "{table} has rows to move");
    }

    let migrate = |extra: &[&str]| {
        let mut args = vec!["store", "migrate", "--from", ".eve/eve.db", "--to", &url];
        args.extend_from_slice(extra);
        eve(root, &sqlite, &args)
            .env_remove("EVE_STORE")
            .output()
            .unwrap()
    };
    let first = migrate(&[]);
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for table in tables {
        let n = sqlite_count(root, table);
        assert_eq!(
            psql(&url, &format!("SELECT count(*) FROM {table}")),
            n.to_string(),
            "{table}"
        );
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(table))
            .unwrap_or_else(|| panic!("no line for {table}: {text}"));
        assert_eq!(
            line.split_whitespace().skip(1).collect::<Vec<_>>(),
            vec![n.to_string(); 3],
            "{line}"
        );
    }
    assert!(text.contains("leases"), "{text}");
    assert!(text.contains("spot check:"), "{text}");

    // A second run copies nothing, and says so.
    let again = migrate(&["--json"]);
    assert!(again.status.success());
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(report["copied"], 0, "{report}");
    assert!(report["spotChecks"].as_array().unwrap().len() >= tables.len());

    let text_again = String::from_utf8_lossy(&migrate(&[]).stdout).into_owned();
    assert!(text_again.contains("Nothing to copy"), "{text_again}");

    // A fleet node with nothing local continues the migrated session: it adopts the migrated
    // build and finishes the parked turn in the migrated workspace.
    let id = psql(&url, "SELECT id FROM sessions");
    let request = psql(
        &url,
        "SELECT id FROM input_requests WHERE status = 'pending'",
    );
    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir(empty.path().join("agent")).unwrap();
    let node = Node::start(empty.path(), &url);
    let (status, body) = node.post(
        &format!("/eve/v1/session/{id}"),
        json!({"inputResponses": [{"requestId": request, "optionId": "approve"}]}),
    );
    assert_eq!(status, 202, "{body}");
    let after = node.wait_for(&id, "turn.completed", 2);
    assert_eq!(
        last_result(&after, "note_read"),
        json!({"from": "v1", "note": "remember the milk"})
    );
    node.kill();

    // PostgreSQL's session moved on; the SQLite store still has the parked one. Migrating
    // again is refused (the same ids hold different data), and writes nothing.
    let events = psql(&url, "SELECT count(*) FROM events");
    psql(&url, "DELETE FROM builds");
    let refused = migrate(&[]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!("different sessions row for id={id}")),
        "{err}"
    );
    assert_eq!(psql(&url, "SELECT count(*) FROM events"), events);
    assert_eq!(
        psql(&url, "SELECT count(*) FROM builds"),
        "0",
        "the refused migration wrote nothing (not even the rows it could have copied)"
    );
}

const HOOK_SECRET: &str = "fleet-webhook-secret-0123456789";

/// The agent of the reply test: a webhook channel whose replies go to `reply_port`, and a tool
/// that logs each run in `$GATE_DIR/runs` and waits until `$GATE_DIR/open` exists.
fn hook_agent(reply_port: u16) -> TestAgent {
    let agent = TestAgent::new();
    agent.file("sandbox/sandbox.yaml", "provider: host\n");
    agent.file(
        "channels/hook.yaml",
        &format!(
            "kind: webhook\nsecret: ${{HOOK_SECRET}}\n\
             reply_url: http://127.0.0.1:{reply_port}/replies\n"
        ),
    );
    agent.tool(
        "gated",
        "description: Waits for a gate.\neffect: read\nenv: [GATE_DIR]",
        "cat >/dev/null\necho run >> \"$GATE_DIR/runs\"\n\
         while [ ! -e \"$GATE_DIR/open\" ]; do sleep 0.05; done\necho '{\"gated\": \"done\"}'\n",
    );
    agent
}

/// POSTs `body` to the webhook channel of the node on `port`, signed; status and JSON body.
fn webhook(port: u16, body: &str, delivery: &str) -> (u16, Value) {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(HOOK_SECRET.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    super::channels::post_channel(
        port,
        "hook",
        &format!("X-Eve-Signature: sha256={signature}\r\nX-Eve-Delivery: {delivery}\r\n"),
        body,
    )
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_reply_owed_by_a_killed_node_is_sent_once_by_the_node_that_continues_the_turn() {
    let Some(store) = fresh_store() else { return };
    let (reply_port, replies) = crate::channels::fake_slack();
    let gate = tempfile::tempdir().unwrap();
    let gate_dir = gate.path().display().to_string();
    let script = r#"[{"tool_calls": [{"name": "gated", "input": {}}]}, {"text": "the answer"}]"#;
    let env = [
        ("HOOK_SECRET", HOOK_SECRET),
        ("GATE_DIR", gate_dir.as_str()),
        ("EVE_MOCK_SCRIPT", script),
    ];
    let (a, b) = (hook_agent(reply_port), hook_agent(reply_port));
    run_ok(&mut eve(a.root(), &store, &["build", "--publish"]));
    run_ok(&mut eve(b.root(), &store, &["build", "--publish"]));
    let node_a = Node::start_with(a.root(), &store, &env);
    let node_b = Node::start_with(b.root(), &store, &env);
    let a_pid = node_a.child.id();
    let b_pid = node_b.child.id();

    let body = json!({"message": "go", "session_key": "fleet-1"}).to_string();
    let (status, accepted) = webhook(node_a.port, &body, "d-1");
    assert_eq!(status, 202, "{accepted}");
    let session = accepted["sessionId"].as_str().unwrap().to_owned();
    let runs = gate.path().join("runs");
    wait_until("the tool runs on node A", || runs.exists());
    assert_eq!(
        psql(&store, "SELECT owner_pid, owner_token FROM channel_replies"),
        format!("{a_pid}|1"),
        "node A owes the reply"
    );
    node_a.kill();
    std::fs::write(gate.path().join("open"), "").unwrap();

    // Node B continues the turn and sends the answer; the reply is then recorded as done, so
    // nothing can send it again.
    node_b.wait_for(&session, "turn.completed", 1);
    wait_until("the reply is recorded as sent", || {
        psql(&store, "SELECT done FROM channel_replies") == "t"
    });
    let sent = replies.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "exactly one reply: {sent:?}");
    let (path, reply) = &sent[0];
    assert_eq!(path, "/replies");
    assert_eq!(reply["type"], "turn.completed", "{reply}");
    assert_eq!(reply["text"], "the answer");
    assert_eq!(reply["sessionId"], json!(session));
    assert_eq!(reply["sessionKey"], "fleet-1");
    assert_eq!(
        psql(
            &store,
            "SELECT owner_pid, owner_token, sending IS NULL FROM channel_replies"
        ),
        format!("{b_pid}|2|t"),
        "node B took the reply over with a newer token"
    );
    // A retry of the delivery to the surviving node is recognised across the fleet.
    let (status, again) = webhook(node_b.port, &body, "d-1");
    assert_eq!(status, 400, "{again}");
    assert_eq!(replies.lock().unwrap().len(), 1);
}

#[test]
fn pruning_sessions_collects_their_workspace_blobs_and_local_files() {
    let project = agent("v1");
    let root = project.root();
    let sqlite = root.join(".eve/eve.db").display().to_string();
    run_ok(&mut eve(root, &sqlite, &["build"]));
    run_ok(&mut eve(root, &sqlite, &["run", "save the note"]));
    let id: String = support_dev::store(root)
        .query_row("SELECT id FROM sessions", [], |r| r.get(0))
        .unwrap();
    let index = root.join(format!(".eve/workspaces/{id}.json"));
    let sandbox = root.join(format!(".eve/sandboxes/{id}"));
    assert!(index.is_file() && sandbox.is_dir());
    let blobs = sqlite_count(root, "workspace_blobs");
    assert!(blobs > 0, "the tool's file was checkpointed");

    let out = eve(
        root,
        &sqlite,
        &["sessions", "prune", "--older-than", "0s", "--json"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["deleted"], json!([id]), "{report}");
    assert_eq!(report["blobsDeleted"], json!(blobs), "{report}");
    assert_eq!(sqlite_count(root, "workspace_blobs"), 0);
    assert_eq!(sqlite_count(root, "workspace_checkpoints"), 0);
    assert!(
        !index.exists(),
        "the node's index of the workspace went too"
    );
    assert!(!sandbox.exists());

    // The project keeps working: a new session checkpoints its workspace again.
    run_ok(&mut eve(root, &sqlite, &["run", "save the note"]));
    assert!(sqlite_count(root, "workspace_blobs") > 0);
}
