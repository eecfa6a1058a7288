//! `eve sessions` and the ways a command names a session: an id, a unique prefix of one (an
//! ambiguous one lists the candidates), `--last`; `list --status --limit` with the parent and
//! first-message columns; `show` with tool outputs and failed turns; `approve --json`; `cancel`
//! of a parked turn and of one a running `eve serve` drives.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::support_dev::{Project, Server, eventually};
use super::support_run::{Output, wait_output};

const WAIT: Duration = Duration::from_secs(30);

fn run(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, WAIT)
}

fn ok(project: &Project, args: &[&str]) -> Output {
    let out = run(project.eve(args));
    assert_eq!(out.code, Some(0), "eve {args:?}: {}", out.stderr);
    out
}

fn project() -> Project {
    let project = Project::new();
    project.file("sandbox/sandbox.yaml", "provider: host\n");
    project.tool(
        "greet",
        "description: Greet someone.\napproval: always",
        "cat >/dev/null\necho '{\"hello\":\"world\"}'\n",
    );
    project.tool(
        "fetch",
        "description: Fetch a page.\neffect: read",
        "cat >/dev/null\necho 'page body, 42 lines'\n",
    );
    project.tool(
        "slow",
        "description: Waits for its gate.\neffect: read\nenv: [GATE]",
        "cat >/dev/null\nwhile [ ! -f \"$GATE\" ]; do sleep 0.05; done\necho opened\n",
    );
    project
}

fn list(project: &Project, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["sessions", "list", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(project, &all).stdout).unwrap()
}

fn ids(project: &Project) -> Vec<String> {
    list(project, &[])
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The shortest prefix of `id` that no other id of `all` starts with.
fn unique_prefix(id: &str, all: &[String]) -> String {
    (6..=id.len())
        .map(|n| id[..n].to_owned())
        .find(|p| all.iter().filter(|o| o.starts_with(p.as_str())).count() == 1)
        .unwrap()
}

#[test]
fn prefixes_last_and_list_columns() {
    let project = project();
    for prompt in ["first question", "second question", "third question"] {
        ok(&project, &["run", prompt]);
    }
    let all = ids(&project);
    assert_eq!(all.len(), 3);
    // Newest first: the third run's session is first.
    let (third, first) = (all[0].clone(), all[2].clone());

    // A unique prefix names the session, in any case.
    let prefix = unique_prefix(&first, &all);
    let show = ok(&project, &["sessions", "show", &prefix.to_lowercase()]);
    assert!(show.stdout.contains(&first), "{}", show.stdout);
    assert!(
        show.stdout.contains("user: first question"),
        "{}",
        show.stdout
    );

    // A prefix of every id is ambiguous: the error lists them and says what to do.
    let out = run(project.eve(&["sessions", "show", "wrun_"]));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("`wrun_` is the start of 3 session ids; give more of the id"),
        "{}",
        out.stderr
    );
    for id in &all {
        assert!(out.stderr.contains(id.as_str()), "{}", out.stderr);
    }
    let out = run(project.eve(&["sessions", "show", "wrun_zzzz"]));
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("no session id starts with it")
            && out.stderr.contains("eve sessions list"),
        "{}",
        out.stderr
    );

    // `--last` is the session active most recently; `-s PREFIX` continues another.
    ok(&project, &["run", "--last", "fourth, in the third"]);
    ok(&project, &["run", "-s", &prefix, "fifth, in the first"]);
    let third_show = ok(&project, &["sessions", "show", &third]).stdout;
    assert!(
        third_show.contains("user: fourth, in the third"),
        "{third_show}"
    );
    let first_show = ok(&project, &["sessions", "show", "-c"]).stdout;
    assert!(
        first_show.contains(&first),
        "--last is now the first session: {first_show}"
    );
    assert!(
        first_show.contains("user: fifth, in the first"),
        "{first_show}"
    );
    let out = run(project.eve(&["sessions", "show", &first, "--last"]));
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("not both"), "{}", out.stderr);

    // The table has the parent and first-message columns; --limit keeps the newest.
    let table = ok(&project, &["sessions", "list"]).stdout;
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("PARENT") && header.contains("FIRST MESSAGE"),
        "{table}"
    );
    assert!(table.contains("first question"), "{table}");
    let limited = list(&project, &["--limit", "2"]);
    assert_eq!(limited.len(), 2);
    assert_eq!(limited[0]["id"], all[0].as_str());
    assert_eq!(limited[0]["firstMessage"], "third question");
    assert!(limited[0]["parent"].is_null());
    let out = run(project.eve(&["sessions", "list", "--status", "sleeping"]));
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("idle, running, waiting, failed"),
        "{}",
        out.stderr
    );
}

#[test]
fn status_filter_show_outputs_and_failures_approve_json_and_cancel() {
    let project = project();
    // A tool's output and a failed turn, in `show`.
    ok(&project, &["run", "/tool fetch {}"]);
    let mut failing = project.eve(&["run", "this one fails"]);
    failing.env("EVE_MOCK_SCRIPT", r#"[{"error": "the model exploded"}]"#);
    let out = run(failing);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let show = ok(&project, &["sessions", "show", "--last"]).stdout;
    assert!(show.contains("turn 0 failed:"), "{show}");
    assert!(show.contains("the model exploded"), "{show}");
    let failed = list(&project, &["--status", "failed"]);
    assert_eq!(failed.len(), 1);
    let fetched = list(&project, &["--status", "idle"]);
    assert_eq!(fetched.len(), 1);
    let fetch_id = fetched[0]["id"].as_str().unwrap().to_owned();
    let show = ok(&project, &["sessions", "show", &fetch_id]).stdout;
    assert!(show.contains("→ fetch {} [completed"), "{show}");
    assert!(show.contains("← page body, 42 lines"), "{show}");
    let json: Value =
        serde_json::from_str(&ok(&project, &["sessions", "show", &fetch_id, "--json"]).stdout)
            .unwrap();
    assert_eq!(json["toolCalls"][0]["output"], "page body, 42 lines");
    assert!(json["toolCalls"][0]["durationMs"].is_u64(), "{json}");
    assert_eq!(json["failedTurns"], json!([]));

    // A parked approval: `--status waiting`, answered by `--last` with `--json`.
    let out = run(project.eve(&["run", "/tool greet {\"name\": \"Ada\"}"]));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    let waiting = list(&project, &["--status", "waiting"]);
    assert_eq!(waiting.len(), 1);
    let answer = ok(
        &project,
        &[
            "sessions", "approve", "--last", "--reason", "fine", "--json",
        ],
    );
    let answer: Value = serde_json::from_str(&answer.stdout).unwrap();
    assert_eq!(answer["outcome"], "approved");
    assert_eq!(answer["tool"], "greet");
    assert_eq!(answer["sessionId"], waiting[0]["id"]);
    assert!(answer["requestId"].as_str().unwrap().starts_with("apr_"));

    // Cancel a parked turn: the session is idle again and the turn says cancelled.
    let out = run(project.eve(&["run", "/tool greet {\"name\": \"Bob\"}"]));
    assert_eq!(out.code, Some(3));
    let parked = list(&project, &["--status", "waiting"]);
    let parked = parked[0]["id"].as_str().unwrap().to_owned();
    let out = ok(
        &project,
        &["sessions", "cancel", &parked[..parked.len() - 2]],
    );
    assert!(out.stderr.contains("cancelling"), "{}", out.stderr);
    let row = list(&project, &[])
        .into_iter()
        .find(|s| s["id"] == parked.as_str())
        .unwrap();
    assert_eq!(row["status"], "idle", "{row}");
    let cancelled = project.count(&format!(
        "SELECT COUNT(*) FROM events WHERE session_id = '{parked}' AND type = 'turn.cancelled'"
    ));
    assert_eq!(cancelled, 1);
    // An idle session has nothing to cancel, and says so.
    let out = ok(&project, &["sessions", "cancel", &parked]);
    assert!(out.stderr.contains("nothing to cancel"), "{}", out.stderr);
}

#[test]
fn cancel_stops_a_turn_a_server_drives() {
    let project = project();
    project.build();
    let mut serve = project.eve(&["serve", "--port", "0"]);
    serve.env("GATE", project.path("gate"));
    let server = Server::start(serve);
    let (status, body) = server.post("/eve/v1/session", &json!({"message": "/tool slow {}"}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    eventually(WAIT, "the slow tool runs", || {
        (project.count(&format!(
            "SELECT COUNT(*) FROM tool_calls WHERE session_id = '{id}' AND status = 'running'"
        )) == 1)
            .then_some(())
    });
    let out = ok(&project, &["sessions", "cancel", "--last"]);
    assert!(
        out.stderr.contains(&format!("cancelling the turn of {id}")),
        "{}",
        out.stderr
    );
    // The serving process stops the turn at its next checkpoint: when the running call ends.
    std::fs::write(project.path("gate"), "open").unwrap();
    eventually(WAIT, "the server cancels the turn", || {
        (project.count(&format!(
            "SELECT COUNT(*) FROM events WHERE session_id = '{id}' AND type = 'turn.cancelled'"
        )) == 1)
            .then_some(())
    });
    let events = server.stream(&id, "?follow=false");
    assert!(events.iter().any(|e| e["type"] == "turn.cancelled"));
    assert!(!events.iter().any(|e| e["type"] == "turn.completed"));
    // The model was not asked again after the cancel: no reply to the tool's result.
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "message.completed" && e["data"]["message"] != ""),
        "{events:?}"
    );
}

/// `eve sessions prune --older-than`: idle sessions go with their workspaces; one parked on an
/// approval stays; the pruned store opens again (its integrity mark still holds) and keeps working.
#[test]
fn prune_deletes_idle_sessions_and_their_workspaces() {
    let project = project();
    ok(&project, &["run", "/tool fetch {}"]);
    ok(&project, &["run", "hello"]);
    // Parked on an approval: waiting, not idle.
    let parked = run(project.eve(&["run", "/tool greet {}"]));
    assert_eq!(parked.code, Some(3), "{}", parked.stderr);
    let before = list(&project, &[]);
    assert_eq!(before.len(), 3);
    let waiting: Vec<String> = before
        .iter()
        .filter(|s| s["status"] == "waiting")
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(waiting.len(), 1, "{before:?}");
    let sandboxes = project.root().join(".eve/sandboxes");
    // Newest first: the oldest session ran `fetch` in its workspace.
    let fetched = before.last().unwrap()["id"].as_str().unwrap().to_owned();
    assert!(
        sandboxes.join(&fetched).is_dir(),
        "the tool call made a workspace"
    );

    // Nothing is that old yet.
    let out = ok(
        &project,
        &["sessions", "prune", "--older-than", "1d", "--json"],
    );
    assert_eq!(
        serde_json::from_str::<Value>(&out.stdout).unwrap()["deleted"],
        json!([])
    );
    let out = ok(
        &project,
        &["sessions", "prune", "--older-than", "0s", "--json"],
    );
    let deleted: Vec<String> = serde_json::from_value(
        serde_json::from_str::<Value>(&out.stdout).unwrap()["deleted"].clone(),
    )
    .unwrap();
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert!(!deleted.contains(&waiting[0]));
    assert!(
        !sandboxes.join(&fetched).exists(),
        "the workspace went with its session"
    );
    assert_eq!(ids(&project), waiting);
    // The store opens again and takes new sessions.
    let again = ok(&project, &["run", "hello again"]);
    assert!(
        again.stdout.contains("You said: hello again"),
        "{}",
        again.stdout
    );

    let bad = run(project.eve(&["sessions", "prune", "--older-than", "soon"]));
    assert_eq!(bad.code, Some(2));
    assert!(bad.stderr.contains("not a duration"), "{}", bad.stderr);
}
