//! `eve dev` as a user runs it: the real binary on `127.0.0.1:0` watching a temp agent folder.
//! Edits show up in `/eve/v1/agent` without a restart; a broken edit prints its diagnostics and the
//! last good build keeps serving; a turn already running finishes on the build it started on while
//! the session's next message uses the new one; the dev route fires a schedule.

use std::time::Duration;

use serde_json::{Value, json};

use super::support_dev::{Project, Server, eventually, http};

const WAIT: Duration = Duration::from_secs(20);

fn tool_names(info: &Value) -> Vec<String> {
    info["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn project() -> Project {
    let project = Project::new();
    project.tool(
        "greet",
        "description: Greet someone.\neffect: read",
        "cat >/dev/null\necho '{\"hello\":\"world\"}'\n",
    );
    project
}

#[test]
fn edits_are_served_without_a_restart_and_a_broken_build_keeps_the_last_good_one() {
    let project = project();
    let mut cmd = project.eve(&["dev", "--port", "0"]);
    cmd.env("DEV_TOKEN", "t0ken");
    let mut dev = Server::start(cmd);
    let first = dev.wait_line(WAIT, |l| l.starts_with("built in "));
    let (status, info) = dev.get("/eve/v1/agent");
    assert_eq!(status, 200);
    assert_eq!(tool_names(&info), ["greet"]);
    let hash1 = info["build"]["hash"].as_str().unwrap().to_owned();
    assert!(
        first.contains(&format!("serving {hash1} (1 tool")),
        "{first}"
    );

    // A new tool file: rebuilt in place, served by the same process.
    let mark = dev.stderr().len();
    project.tool(
        "weather",
        "description: The weather.\neffect: read",
        "cat >/dev/null\necho '{\"sky\":\"clear\"}'\n",
    );
    let line = dev.wait_line_after(mark, WAIT, |l| l.starts_with("rebuilt in "));
    let (_, info) = dev.get("/eve/v1/agent");
    assert_eq!(tool_names(&info), ["greet", "weather"], "{line}");
    let hash2 = info["build"]["hash"].as_str().unwrap().to_owned();
    assert_ne!(hash1, hash2);
    assert!(
        line.contains(&format!("serving {hash2} (2 tools")),
        "{line}"
    );
    let (_, health) = dev.get("/eve/v1/health");
    assert_eq!(health["workflowId"], hash2.as_str());

    // Two mistakes: the diagnostics are printed, the last good build keeps serving.
    let mark = dev.stderr().len();
    project.file(
        "agent.yaml",
        "default_tools: false\nturn_policy: sideways\n",
    );
    project.tool("bad name!", "description: x", "echo '{}'\n");
    let failed = dev.wait_line_after(mark, WAIT, |l| l.starts_with("build failed: "));
    assert_eq!(
        failed,
        format!("build failed: 2 errors (still serving {hash2})")
    );
    let printed = dev.stderr()[mark..].join("\n");
    assert!(printed.contains("agent/agent.yaml"), "{printed}");
    assert!(printed.contains("turn_policy"), "{printed}");
    assert!(printed.contains("agent/tools/bad name!.sh"), "{printed}");
    let (status, info) = dev.get("/eve/v1/agent");
    assert_eq!(status, 200);
    assert_eq!(info["build"]["hash"], hash2.as_str());
    assert_eq!(tool_names(&info), ["greet", "weather"]);
    // Sessions still run on it.
    let (status, body) = dev.post("/eve/v1/session", &json!({"message": "/tool weather {}"}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap();
    let events = dev.stream(id, "?startIndex=0");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "action.result" && e["data"]["status"] == "completed"),
        "{events:?}"
    );

    // Fixed: the next good build is served.
    let mark = dev.stderr().len();
    project.file("agent.yaml", "default_tools: false\n");
    std::fs::remove_file(project.path("agent/tools/bad name!.sh")).unwrap();
    let line = dev.wait_line_after(mark, WAIT, |l| {
        l.starts_with("rebuilt in ") && l.contains(&hash2)
    });
    assert!(line.ends_with(&format!("unchanged ({hash2})")), "{line}");

    // Auth added to the channel: the API's settings reload with the build.
    let mark = dev.stderr().len();
    project.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${DEV_TOKEN}\"]\n",
    );
    dev.wait_line_after(mark, WAIT, |l| l.starts_with("rebuilt in "));
    let (status, _) = http(dev.port, "GET", "/eve/v1/info", None, None);
    assert_eq!(status, 401);
    let (status, _) = http(dev.port, "GET", "/eve/v1/info", None, Some("t0ken"));
    assert_eq!(status, 200);
    assert_eq!(dev.get("/eve/v1/health").0, 200, "/health stays public");
    assert_eq!(dev.stop(), Some(0));
}

#[test]
fn a_busy_turn_finishes_on_its_build_and_the_next_message_takes_the_new_one() {
    let project = project();
    project.tool(
        "version",
        "description: Which version runs.\neffect: read",
        "cat >/dev/null\nsleep 1.5\necho '{\"version\":1}'\n",
    );
    let mut dev = Server::start(project.eve(&["dev", "--port", "0"]));
    let (_, info) = dev.get("/eve/v1/agent");
    let old = info["build"]["hash"].as_str().unwrap().to_owned();

    let (status, body) = dev.post("/eve/v1/session", &json!({"message": "/tool version {}"}));
    assert_eq!(status, 202);
    let id = body["sessionId"].as_str().unwrap().to_owned();
    // Wait until the call is running, then change the tool.
    eventually(WAIT, "the tool call to start", || {
        let events = dev.stream(&id, "?follow=false");
        events
            .iter()
            .any(|e| e["type"] == "actions.requested")
            .then_some(())
    });
    let mark = dev.stderr().len();
    project.tool(
        "version",
        "description: Which version runs.\neffect: read",
        "cat >/dev/null\necho '{\"version\":2}'\n",
    );
    dev.wait_line_after(mark, WAIT, |l| l.starts_with("rebuilt in "));
    let (_, info) = dev.get("/eve/v1/agent");
    let new = info["build"]["hash"].as_str().unwrap().to_owned();
    assert_ne!(old, new);

    // The running turn ends on the old build: version 1.
    let events = dev.stream(&id, "?startIndex=0");
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(result.to_string().contains("version"), "{result}");
    assert!(result.to_string().contains(":1}"), "{result}");
    let turn_build: String = project
        .db()
        .query_row(
            "SELECT build_hash FROM turns WHERE session_id=?1 AND seq=0",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(turn_build, old);

    // The idle session's next message runs on the new build: version 2.
    let before = events.len();
    let (status, _) = dev.post(
        &format!("/eve/v1/session/{id}"),
        &json!({"message": "/tool version {}"}),
    );
    assert_eq!(status, 202);
    let events = dev.stream(&id, &format!("?startIndex={before}"));
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(result.to_string().contains(":2}"), "{result}");
    let turn_build: String = project
        .db()
        .query_row(
            "SELECT build_hash FROM turns WHERE session_id=?1 AND seq=1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(turn_build, new);
}

#[test]
fn the_dev_route_fires_a_schedule_and_eve_serve_does_not_serve_it() {
    let project = project();
    project.file(
        "schedules/digest.md",
        "---\ncron: \"0 6 * * *\"\ntimezone: Europe/Paris\n---\nSummarise yesterday.\n",
    );
    let dev = Server::start(project.eve(&["dev", "--port", "0"]));
    let (status, body) = dev.post("/eve/v1/dev/schedules/digest", &json!({}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let events = dev.stream(&id, "?startIndex=0");
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "message.appended")
        .map(|e| e["data"]["messageDelta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "You said: Summarise yesterday.");
    let (status, body) = dev.post("/eve/v1/dev/schedules/nope", &json!({}));
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found"))
    );
    assert_eq!(dev.stop(), Some(0));

    let listed = project
        .eve(&["sessions", "list", "--schedule", "digest", "--json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["schedule"], "digest");
    let none = project
        .eve(&["sessions", "list", "--schedule", "other", "--json"])
        .output()
        .unwrap();
    let none: Value = serde_json::from_slice(&none.stdout).unwrap();
    assert_eq!(none, json!([]));

    let serve = Server::start(project.eve(&["serve", "--port", "0"]));
    let (status, body) = serve.post("/eve/v1/dev/schedules/digest", &json!({}));
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

/// The codes and files of a `failedBuild`'s diagnostics.
fn failed_codes(info: &Value) -> Vec<(String, String)> {
    info["failedBuild"]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                d["file"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_failed_rebuild_is_in_the_agent_route_until_a_build_succeeds() {
    let project = project();
    project.build();
    // Broken before `eve dev` starts: it serves the build from before, and says why not the folder.
    project.file("agent.yaml", "turn_policy: sideways\n");
    let mut dev = Server::start(project.eve(&["dev", "--port", "0"]));
    let (status, info) = dev.get("/eve/v1/agent");
    assert_eq!(status, 200);
    let good = info["build"]["hash"].as_str().unwrap().to_owned();
    assert_eq!(tool_names(&info), ["greet"]);
    assert_eq!(info["failedBuild"]["errors"], 1, "{info:#}");
    assert_eq!(info["failedBuild"]["warnings"], 0);
    let codes = failed_codes(&info);
    assert_eq!(codes.len(), 1, "{codes:?}");
    assert!(codes[0].1.ends_with("agent.yaml"), "{codes:?}");
    assert!(
        info["failedBuild"]["diagnostics"][0]["message"]
            .as_str()
            .unwrap()
            .contains("turn_policy"),
        "{info:#}"
    );
    assert!(info["failedBuild"]["at"].as_str().unwrap().ends_with('Z'));
    // The served build's own diagnostics are its own, not the failure's.
    assert_eq!(info["diagnostics"], json!([]));

    // Fixed: the failure is gone.
    let mark = dev.stderr().len();
    project.file("agent.yaml", "model: mock/echo\n");
    dev.wait_line_after(mark, WAIT, |l| l.starts_with("rebuilt in "));
    let (_, info) = dev.get("/eve/v1/agent");
    assert_eq!(info["failedBuild"], Value::Null, "{info:#}");

    // Broken while serving: two errors in two files; the last good build keeps serving.
    let mark = dev.stderr().len();
    project.file("agent.yaml", "turn_policy: sideways\n");
    project.tool("bad name!", "description: x", "echo '{}'\n");
    dev.wait_line_after(mark, WAIT, |l| l.starts_with("build failed: "));
    let (_, info) = dev.get("/eve/v1/agent");
    let serving = info["build"]["hash"].as_str().unwrap().to_owned();
    assert_ne!(serving, good, "the fixed build serves");
    assert_eq!(info["failedBuild"]["errors"], 2, "{info:#}");
    let files: Vec<String> = failed_codes(&info).into_iter().map(|(_, f)| f).collect();
    assert!(files.iter().any(|f| f.ends_with("agent.yaml")), "{files:?}");
    assert!(
        files.iter().any(|f| f.ends_with("bad name!.sh")),
        "{files:?}"
    );

    // Fixed again: gone again.
    let mark = dev.stderr().len();
    project.file("agent.yaml", "model: mock/echo\n");
    std::fs::remove_file(project.path("agent/tools/bad name!.sh")).unwrap();
    dev.wait_line_after(mark, WAIT, |l| l.starts_with("rebuilt in "));
    let (_, info) = dev.get("/eve/v1/agent");
    assert_eq!(info["failedBuild"], Value::Null, "{info:#}");
    assert_eq!(dev.stop(), Some(0));

    // `eve serve` does not rebuild: it has no failed build to report.
    project.file("agent.yaml", "turn_policy: sideways\n");
    let serve = Server::start(project.eve(&["serve", "--port", "0"]));
    let (_, info) = serve.get("/eve/v1/agent");
    assert_eq!(info["failedBuild"], Value::Null, "{info:#}");
}
