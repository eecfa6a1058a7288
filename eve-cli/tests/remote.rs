//! Remote agents between two real `eve serve` processes: the parent's `subagents/helper.yaml`
//! names the other deployment (bearer auth from the environment). A task whose remote child asks
//! for approval is answered on the parent; the remote is killed (`kill -9`) and restarted while
//! it waits, and the task completes with the remote's answer.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{Server, build, eve};
use crate::support_dev;

const REMOTE_TOKEN: &str = "remote-secret-token-1234";

/// The remote deployment: a `refund_charge` tool that needs approval, behind bearer auth.
fn remote_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::create_dir_all(agent.join("channels")).unwrap();
    std::fs::create_dir_all(agent.join("sandbox")).unwrap();
    std::fs::write(agent.join("instructions.md"), "You handle refunds.\n").unwrap();
    std::fs::write(agent.join("agent.yaml"), "default_tools: false\n").unwrap();
    std::fs::write(agent.join("sandbox/sandbox.yaml"), "provider: host\n").unwrap();
    std::fs::write(
        agent.join("channels/eve.yaml"),
        "auth:\n  type: bearer\n  tokens: [\"${REMOTE_TOKEN}\"]\n",
    )
    .unwrap();
    let tools = [
        (
            "refund_charge",
            "# description: Refund a charge.\n# approval: always\n# env: [REFUND_LOG]\n",
            "input=$(cat)\necho \"$input\" >> \"$REFUND_LOG\"\necho '{\"refunded\":true}'\n",
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

/// The calling deployment: its `helper` subagent is the remote.
fn parent_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("subagents")).unwrap();
    std::fs::write(agent.join("instructions.md"), "You delegate.\n").unwrap();
    std::fs::write(agent.join("agent.yaml"), "default_tools: false\n").unwrap();
    std::fs::write(
        agent.join("subagents/helper.yaml"),
        "url: ${HELPER_URL}\ndescription: Refunds charges on the billing deployment.\n\
         auth:\n  type: bearer\n  token: ${HELPER_TOKEN}\n",
    )
    .unwrap();
    dir
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_remote(root: &Path, port: u16) -> Server {
    let port = port.to_string();
    let log = root.join("refunds.log");
    let gate = root.join("gate");
    Server::start(
        root,
        &["serve", "--port", &port],
        &[
            ("REMOTE_TOKEN", REMOTE_TOKEN),
            ("REFUND_LOG", log.to_str().unwrap()),
            ("GATE_FILE", gate.to_str().unwrap()),
        ],
    )
}

fn start_parent(root: &Path, remote_port: u16) -> Server {
    let url = format!("http://127.0.0.1:{remote_port}");
    Server::start(
        root,
        &["serve", "--port", "0"],
        &[
            ("HELPER_URL", &url),
            ("HELPER_TOKEN", REMOTE_TOKEN),
            ("EVE_TEST_REMOTE_LOOPBACK", "1"),
        ],
    )
}

fn post(port: u16, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = support_dev::http(port, "POST", path, Some(body), None);
    (status, eve_test_support::json_or_text(text))
}

fn events(port: u16, session: &str) -> Vec<Value> {
    let (status, text) = support_dev::http(
        port,
        "GET",
        &format!("/eve/v1/session/{session}/stream?follow=false"),
        None,
        None,
    );
    assert_eq!(status, 200, "{text}");
    eve_test_support::capture::parse_ndjson(&text)
}

/// Waits until the session's stored events satisfy `done`.
fn wait_for(port: u16, session: &str, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = events(port, session);
        if done(&seen) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; events: {:?}",
            seen.iter().map(|e| e["type"].clone()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_remote_child_asks_approval_on_the_parent_and_survives_a_kill_of_the_remote() {
    let remote_dir = remote_project();
    let remote_root = remote_dir.path();
    build(remote_root);
    let remote_port = free_port();
    let remote = start_remote(remote_root, remote_port);

    let parent_dir = parent_project();
    let parent_root = parent_dir.path();
    build(parent_root);
    let parent = start_parent(parent_root, remote_port);

    let ask = json!({"message": "/tool refund_charge {\"chargeId\": \"ch_7\", \"amount\": 5}"});
    let (status, body) = post(
        parent.port,
        "/eve/v1/session",
        &json!({"message": format!("/tool helper {ask}")}),
    );
    assert_eq!(status, 202, "{body}");
    let parent_id = body["sessionId"].as_str().unwrap().to_owned();

    // The remote child's approval shows on the parent's stream, for the remote's tool.
    let seen = wait_for(parent.port, &parent_id, "the approval", |events| {
        events.iter().any(|e| e["type"] == "input.requested")
    });
    let started = seen
        .iter()
        .find(|e| e["type"] == "agent.started")
        .expect("agent.started on the parent");
    let child_id = started["data"]["sessionId"].as_str().unwrap().to_owned();
    let requested = seen
        .iter()
        .find(|e| e["type"] == "input.requested")
        .unwrap();
    let request = &requested["data"]["requests"][0];
    assert_eq!(request["action"]["toolName"], "refund_charge", "{request}");
    assert_eq!(request["action"]["input"]["chargeId"], "ch_7", "{request}");
    let request_id = request["requestId"].as_str().unwrap().to_owned();
    assert!(
        !remote_root.join("refunds.log").exists(),
        "ran before approval"
    );

    // The remote dies hard and comes back on the same address while the approval waits.
    remote.sigkill();
    let remote = start_remote(remote_root, remote_port);

    let (status, body) = post(
        parent.port,
        &format!("/eve/v1/session/{parent_id}"),
        &json!({"inputResponses": [{"requestId": request_id, "optionId": "approve"}]}),
    );
    assert_eq!(status, 202, "{body}");

    let done = wait_for(parent.port, &parent_id, "the task's result", |events| {
        events.iter().any(|e| e["type"] == "session.waiting")
            && events.iter().any(|e| e["type"] == "task.settled")
    });
    let settled = done.iter().find(|e| e["type"] == "task.settled").unwrap();
    assert_eq!(settled["data"]["status"], "completed", "{settled}");
    let answer = done
        .iter()
        .filter(|e| e["type"] == "message.completed")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        answer.contains("refund_charge returned") && answer.contains("refunded"),
        "{answer}"
    );
    // The tool ran once, on the remote, with the approved input.
    let log = std::fs::read_to_string(remote_root.join("refunds.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("ch_7"), "{log}");

    // The remote child's work is on the local child's stream, which `agent.started` links.
    let child = events(parent.port, &child_id);
    assert!(
        child
            .iter()
            .any(|e| e["type"] == "action.result" && e["data"]["remote"] == true),
        "{:?}",
        child.iter().map(|e| e["type"].clone()).collect::<Vec<_>>()
    );
    drop(remote);
}

#[test]
fn the_parent_killed_while_the_remote_works_resumes_its_stream_where_it_was() {
    let remote_dir = remote_project();
    let remote_root = remote_dir.path();
    build(remote_root);
    let remote_port = free_port();
    let _remote = start_remote(remote_root, remote_port);
    let parent_dir = parent_project();
    let parent_root = parent_dir.path();
    build(parent_root);
    let parent = start_parent(parent_root, remote_port);

    let ask = json!({"message": "/tool gated {}"});
    let (status, body) = post(
        parent.port,
        "/eve/v1/session",
        &json!({"message": format!("/tool helper {ask}")}),
    );
    assert_eq!(status, 202, "{body}");
    let parent_id = body["sessionId"].as_str().unwrap().to_owned();
    let seen = wait_for(parent.port, &parent_id, "the child", |events| {
        events.iter().any(|e| e["type"] == "agent.started")
    });
    let started = seen.iter().find(|e| e["type"] == "agent.started").unwrap();
    assert_eq!(
        started["data"]["remote"]["url"], "${HELPER_URL}",
        "{started}"
    );
    let child_id = started["data"]["sessionId"].as_str().unwrap().to_owned();
    // The remote child's tool call is copied onto the local child's stream: the parent follows.
    wait_for(parent.port, &child_id, "the remote's tool call", |events| {
        events
            .iter()
            .any(|e| e["type"] == "actions.requested" && e["data"]["remote"] == true)
    });

    parent.sigkill();
    std::fs::write(remote_root.join("gate"), "open").unwrap();
    let parent = start_parent(parent_root, remote_port);

    let done = wait_for(parent.port, &parent_id, "the task's result", |events| {
        events.iter().any(|e| e["type"] == "task.settled")
            && events
                .last()
                .is_some_and(|e| e["type"] == "session.waiting")
    });
    let settled = done.iter().find(|e| e["type"] == "task.settled").unwrap();
    assert_eq!(settled["data"]["status"], "completed", "{settled}");
    // Each remote event reached the local child once, across the restart.
    let child = events(parent.port, &child_id);
    let copies = |kind: &str| {
        child
            .iter()
            .filter(|e| e["type"] == kind && e["data"]["remote"] == true)
            .count()
    };
    assert_eq!(copies("actions.requested"), 1);
    assert_eq!(copies("action.result"), 1);
    let last = child
        .iter()
        .rev()
        .find(|e| e["type"] == "message.completed")
        .unwrap();
    assert!(
        last["data"]["message"]
            .as_str()
            .unwrap()
            .contains("gated returned"),
        "{last}"
    );
}

#[test]
fn a_remote_agent_with_a_bad_url_or_a_secret_in_the_file_does_not_build() {
    let dir = parent_project();
    let root = dir.path();
    std::fs::write(
        root.join("agent/subagents/helper.yaml"),
        "url: ftp://billing.example.com\ndescription: Refunds.\n\
         auth:\n  type: bearer\n  token: plain-secret\n",
    )
    .unwrap();
    let out = eve(root, &["build"]).output().unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("E041"), "{text}");
    assert!(text.contains("not http or https"), "{text}");
    assert!(text.contains("`auth.token` is a secret"), "{text}");
}
