//! Governed self-change through the real binary: `eve run` shows the proposal and stops (never
//! approved by `--yes`), `eve sessions approve` and `eve run --session` apply it; a killed
//! `eve serve` keeps a parked proposal answerable; a proposal failing the active release's gate
//! evals (run by the real eval runner) is never offered.

use std::time::Duration;

use serde_json::{Value, json};

use super::support_dev::{Project, Server};

const SKILL: &str = "---\ndescription: Triage incoming bug reports.\n---\n# Triage\n\nLabel every \
                     report.\n";

fn project(yaml: &str) -> Project {
    let p = Project::new();
    p.file("agent.yaml", yaml);
    p.build();
    p
}

fn proposal() -> String {
    let input = json!({
        "summary": "Add a triage skill",
        "rationale": "Reports arrive without labels.",
        "changes": [{"path": "skills/triage.md", "content": SKILL}],
    });
    format!("/tool propose_change {input}")
}

fn current(p: &Project) -> String {
    std::fs::read_link(p.root().join(".eve/current"))
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn run(p: &Project, args: &[&str]) -> (Option<i32>, String, String) {
    let out = p.eve(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn eve_run_shows_the_proposal_and_a_principal_approves_it() {
    let p = project("self_change: true\n");
    let before = current(&p);
    // `--yes` approves tool calls, not a change to the agent: the run stops at the proposal.
    let (code, _, err) = run(&p, &["run", "--yes", &proposal()]);
    assert_eq!(code, Some(3), "{err}");
    for part in [
        "does not approve a proposed change",
        "Proposed change chg_",
        "Why: Reports arrive without labels.",
        "Capability delta",
        "+++ b/skills/triage.md",
        "+# Triage",
        "eve sessions approve",
    ] {
        assert!(err.contains(part), "stderr shows {part:?}:\n{err}");
    }
    assert!(!p.path("agent/skills/triage.md").exists());
    assert_eq!(current(&p), before);
    // `eve sessions show` shows the parked proposal whole, and how to answer it.
    let (code, out, err) = run(&p, &["sessions", "show", "--last"]);
    assert_eq!(code, Some(0), "{err}");
    for part in [
        "pending approvals:",
        "proposed change to the agent",
        "Why: Reports arrive without labels.",
        "+++ b/skills/triage.md",
        "eve sessions approve wrun_",
    ] {
        assert!(out.contains(part), "sessions show prints {part:?}:\n{out}");
    }
    let (code, out, _) = run(&p, &["sessions", "show", "--last", "--json"]);
    assert_eq!(code, Some(0));
    let shown: Value = serde_json::from_str(&out).unwrap();
    let request = &shown["inputRequests"][0];
    assert_eq!(request["kind"], "change-approval", "{request:#}");
    assert!(
        request["action"]["proposal"]["diff"]
            .as_str()
            .unwrap()
            .contains("skills/triage.md")
    );

    let (code, _, err) = run(&p, &["sessions", "approve", "--last"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = run(&p, &["sessions", "list", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let sessions: Vec<Value> = serde_json::from_str(&out).unwrap();
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let (code, out, err) = run(&p, &["run", "--session", &id]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        err.contains("propose_change: ok") || out.contains("was approved by local"),
        "the model is told: {out}\n{err}"
    );
    assert_eq!(
        std::fs::read_to_string(p.path("agent/skills/triage.md")).unwrap(),
        SKILL
    );
    assert_ne!(current(&p), before, "the approved build is active");
    let (code, out, err) = run(&p, &["releases", "list", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let releases: Value = serde_json::from_str(&out).unwrap();
    let active: Vec<&Value> = releases
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "active")
        .collect();
    assert_eq!(active.len(), 1, "{releases:#}");
    assert_eq!(active[0]["build_hash"], current(&p).as_str());
    assert!(
        active[0]["activated_by"]
            .as_str()
            .unwrap_or("")
            .starts_with("local"),
        "the approver is the release's principal: {releases:#}"
    );
    // `eve releases log` says what each change event was about, not just its kind.
    let (code, out, err) = run(&p, &["releases", "log"]);
    assert_eq!(code, Some(0), "{err}");
    let line = |kind: &str| {
        out.lines()
            .find(|l| l.contains(kind))
            .unwrap_or_else(|| panic!("no {kind} in:\n{out}"))
            .to_owned()
    };
    let proposed = line("change.proposed");
    for part in [
        "chg_",
        "session=wrun_",
        "files=skills/triage.md",
        "widens=no",
        "summary=\"Add a triage skill\"",
    ] {
        assert!(proposed.contains(part), "{part:?} in {proposed}");
    }
    let approved = line("change.approved");
    for part in [
        "chg_",
        "by=local",
        "build=",
        "release=rel_",
        "files=skills/triage.md",
    ] {
        assert!(approved.contains(part), "{part:?} in {approved}");
    }
}

#[test]
fn a_killed_server_keeps_a_parked_proposal_answerable() {
    let p = project("self_change: true\n");
    let server = Server::start(p.eve(&["serve", "--port", "0"]));
    let (status, body) = server.post("/eve/v1/session", &json!({"message": proposal()}));
    assert_eq!(status, 202, "{body}");
    let session = body["sessionId"].as_str().unwrap().to_owned();
    let events = server.stream(&session, "");
    let request = events
        .iter()
        .filter(|e| e["type"] == "input.requested")
        .flat_map(|e| {
            e["data"]["requests"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|r| r["kind"] == "change-approval")
        .unwrap_or_else(|| panic!("no proposal: {events:#?}"));
    let hash = request["action"]["proposal"]["build"]
        .as_str()
        .unwrap()
        .to_owned();
    server.kill();

    let server = Server::start(p.eve(&["serve", "--port", "0"]));
    let (status, body) = server.post(
        &format!("/eve/v1/session/{session}"),
        &json!({"inputResponses": [{"requestId": request["requestId"], "optionId": "approve"}]}),
    );
    assert!(status == 200 || status == 202, "{status} {body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = server.stream(&session, "?follow=false");
        let done = events.iter().any(|e| {
            e["type"] == "action.result" && e["data"]["result"]["toolName"] == "propose_change"
        });
        if done {
            let result = events
                .iter()
                .find(|e| e["type"] == "action.result")
                .unwrap();
            assert_eq!(result["data"]["status"], "completed", "{result:#}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{events:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read_to_string(p.path("agent/skills/triage.md")).unwrap(),
        SKILL
    );
    assert_eq!(current(&p), hash);
    server.stop();
}

#[test]
fn a_proposal_failing_the_gate_evals_is_never_offered() {
    let p = Project::new();
    p.file("agent.yaml", "self_change: true\ngate: [smoke]\n");
    std::fs::create_dir_all(p.root().join("evals")).unwrap();
    std::fs::write(
        p.root().join("evals/smoke.yaml"),
        "- id: says-goodbye\n  tags: [smoke]\n  messages: [\"hello\"]\n  expect:\n    text: {contains: goodbye}\n",
    )
    .unwrap();
    // The first build activates (there is nothing to gate it against); its gate governs next.
    p.build();
    let before = current(&p);
    let (code, out, err) = run(&p, &["run", "--json", &proposal()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!out.contains("\"input.requested\""), "never offered: {out}");
    let result: Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "action.result")
        .unwrap_or_else(|| panic!("no result: {out}"));
    assert_eq!(result["data"]["status"], "failed", "{result:#}");
    let told = result["data"]["result"]["output"].as_str().unwrap();
    assert!(
        told.contains("gate evals failed") && told.contains("says-goodbye"),
        "the model sees the failing case: {told}"
    );
    assert!(!p.path("agent/skills/triage.md").exists());
    assert_eq!(current(&p), before);
}

/// With the agent folder at the project's root (`--agent .`), `evals/` (the gate) and `.eve/`
/// sit inside it: a proposal may not touch them. The twin: the path check alone (`check_path`,
/// what guarded proposals before) lets `evals/smoke.yaml` through.
#[test]
fn a_proposal_cannot_rewrite_the_project_s_evals_from_a_root_agent_folder() {
    let p = Project::new();
    std::fs::write(p.root().join("agent.yaml"), "self_change: true\n").unwrap();
    std::fs::write(p.root().join("instructions.md"), "You help.\n").unwrap();
    std::fs::create_dir_all(p.root().join("evals")).unwrap();
    let gate = "- id: greets\n  messages: [\"hello\"]\n  expect:\n    text: {contains: hello}\n";
    std::fs::write(p.root().join("evals/smoke.yaml"), gate).unwrap();
    let out = p.eve(&["--agent", ".", "build"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let weaker = "- id: greets\n  messages: [\"hello\"]\n  expect: {}\n";
    assert!(
        eve_runtime::engine::selfchange::check_path("evals/smoke.yaml").is_ok(),
        "the path check alone accepts it"
    );
    for change in [
        json!({"path": "evals/smoke.yaml", "content": weaker}),
        json!({"path": "evals/smoke.yaml", "delete": true}),
        json!({"path": "evals/new.yaml", "content": weaker}),
    ] {
        let input = json!({"summary": "Fix the evals", "rationale": "They are wrong.",
                           "changes": [change]});
        let message = format!("/tool propose_change {input}");
        let (code, out, err) = run(&p, &["--agent", ".", "run", "--json", &message]);
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(!out.contains("\"input.requested\""), "never offered: {out}");
        let result: Value = out
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["type"] == "action.result")
            .unwrap_or_else(|| panic!("no result: {out}"));
        assert_eq!(result["data"]["status"], "failed", "{result:#}");
        let told = result["data"]["result"]["output"].as_str().unwrap();
        assert!(told.contains("belongs to the project"), "{change}: {told}");
    }
    assert_eq!(
        std::fs::read_to_string(p.root().join("evals/smoke.yaml")).unwrap(),
        gate
    );
    assert!(!p.root().join("evals/new.yaml").exists());
}
