//! Governed self-change (`self_change: true`, the built-in `propose_change`): a real agent
//! folder compiled by the real compiler, the real server on `127.0.0.1:0`, the `mock/echo` model
//! calling `propose_change` from `/tool` messages, answers through the session API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::server_support::{AgentDir, TestServer};

/// An agent with `self_change: true`, one read tool, one skill.
fn changing_agent() -> AgentDir {
    let agent = AgentDir::new();
    agent
        .file("agent.yaml", "self_change: true\n")
        .tool(
            "get_weather",
            "description: Get the weather.\neffect: read\ninput:\n  type: object",
            "cat >/dev/null\necho sunny\n",
        )
        .file(
            "skills/release.md",
            "---\ndescription: The release checklist.\n---\n# Release\n",
        );
    agent
}

/// Every file under `dir` with its bytes (dot-entries included), to compare folders byte for
/// byte.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, target.to_string_lossy().as_bytes().to_vec());
            } else if kind.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn current(root: &Path) -> String {
    std::fs::read_link(root.join(".eve/current"))
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn propose(changes: Value) -> String {
    let input = json!({
        "summary": "Add a triage skill",
        "rationale": "Bug reports keep arriving without a label.",
        "changes": changes,
    });
    format!("/tool propose_change {input}")
}

const SKILL: &str = "---\ndescription: Triage incoming bug reports.\n---\n# Triage\n\nLabel every \
                     report with its component.\n";

/// The change-approval request of the session's stream (panics naming what was seen if none).
fn change_request(events: &[Value]) -> Value {
    events
        .iter()
        .filter(|e| e["type"] == "input.requested")
        .flat_map(|e| {
            e["data"]["requests"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|r| r["kind"] == "change-approval")
        .unwrap_or_else(|| panic!("no change-approval request in {events:#?}"))
}

/// Starts a session proposing the triage skill and waits until it parks on the change approval:
/// the session, its events so far and the approval request.
async fn park_triage(server: &TestServer) -> (String, Vec<Value>, Value) {
    let session = server
        .create(&propose(
            json!([{"path": "skills/triage.md", "content": SKILL}]),
        ))
        .await;
    let parked = server.until_rest(&session, 0).await;
    let request = change_request(&parked);
    (session, parked, request)
}

/// Answers the session's change approval and waits until the session rests again: the events
/// after the answer.
async fn answer_and_rest(
    server: &TestServer,
    session: &str,
    request: &str,
    approve: bool,
    text: &str,
) -> Vec<Value> {
    let count = server.count(session).await;
    answer(server, session, request, approve, text).await;
    server.until_rest(session, count).await
}

fn results(events: &[Value], tool: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == "action.result")
        .filter(|e| e["data"]["result"]["toolName"] == tool || e["data"]["result"]["name"] == tool)
        .map(|e| e["data"].clone())
        .collect()
}

async fn answer(server: &TestServer, session: &str, request: &str, approve: bool, text: &str) {
    let mut response =
        json!({"requestId": request, "optionId": if approve { "approve" } else { "cancel" }});
    if !text.is_empty() {
        response["text"] = json!(text);
    }
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{session}"),
            json!({"inputResponses": [response]}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
}

#[tokio::test]
async fn a_proposed_skill_is_shown_for_approval_then_written_activated_and_loadable() {
    let server = TestServer::start(changing_agent()).await;
    let root = server.agent.root();
    let before = current(&root);
    let (session, parked, request) = park_triage(&server).await;
    let proposal = &request["action"]["proposal"];
    // The approval shows the summary, the rationale, the diff, the checks and the delta.
    assert_eq!(proposal["summary"], "Add a triage skill");
    assert!(
        proposal["rationale"]
            .as_str()
            .unwrap()
            .contains("without a label")
    );
    let diff = proposal["diff"].as_str().unwrap();
    assert!(diff.contains("+++ b/skills/triage.md"), "{diff}");
    assert!(diff.contains("+# Triage"), "{diff}");
    assert_eq!(proposal["diagnostics"]["errors"], 0);
    assert!(proposal["delta"]["changes"].is_array(), "{proposal:#}");
    assert_eq!(proposal["widens"], false, "{proposal:#}");
    assert!(
        proposal.get("evals").is_some(),
        "eval results are shown: {proposal:#}"
    );
    let text = proposal["text"].as_str().unwrap();
    for part in [
        "Add a triage skill",
        "Why:",
        "Capability delta",
        "Evals:",
        "+# Triage",
    ] {
        assert!(text.contains(part), "the card shows {part}: {text}");
    }
    // Staged and built, but nothing changed yet: not in agent/, not active.
    let hash = proposal["build"].as_str().unwrap().to_owned();
    let id = proposal["id"].as_str().unwrap().to_owned();
    assert!(
        root.join(".eve/builds")
            .join(&hash)
            .join("manifest.json")
            .is_file()
    );
    assert!(
        root.join(".eve/staging")
            .join(&id)
            .join("agent/skills/triage.md")
            .is_file()
    );
    assert!(!root.join("agent/skills/triage.md").exists());
    assert_eq!(current(&root), before, "a proposal does not activate");
    assert!(
        parked
            .iter()
            .any(|e| e["type"] == "change.proposed" && e["data"]["id"] == id.as_str()),
        "change.proposed is recorded"
    );

    let after = answer_and_rest(
        &server,
        &session,
        request["requestId"].as_str().unwrap(),
        true,
        "",
    )
    .await;
    let result = results(&after, "propose_change");
    assert_eq!(result.len(), 1, "{after:#?}");
    assert_eq!(result[0]["status"], "completed", "{result:#?}");
    let told = result[0]["result"]["output"].as_str().unwrap();
    assert!(told.contains("approved") && told.contains(&hash), "{told}");
    assert_eq!(
        std::fs::read_to_string(root.join("agent/skills/triage.md")).unwrap(),
        SKILL
    );
    assert_eq!(current(&root), hash, "the reviewed build is active");
    assert!(
        !root.join(".eve/staging").join(&id).exists(),
        "staging is cleaned up"
    );
    let approved = after
        .iter()
        .find(|e| e["type"] == "change.approved")
        .expect("change.approved is recorded");
    assert_eq!(approved["data"]["build"], hash.as_str());
    assert_eq!(
        approved["data"]["by"], "anonymous",
        "the API's principal approved it"
    );

    // Activated as a release by the approver, and audited in the releases' stream.
    let active = server
        .runtime
        .active_release()
        .await
        .unwrap()
        .expect("a release is active");
    assert_eq!(active.build_hash, hash);
    assert_eq!(active.activated_by.as_deref(), Some("anonymous"));
    let audit: Vec<String> = server
        .runtime
        .release_events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.data["id"] == id.as_str() || e.data["build_hash"] == hash.as_str())
        .map(|e| e.kind)
        .collect();
    for kind in ["change.proposed", "change.approved"] {
        assert!(
            audit.iter().any(|k| k == kind),
            "{kind} in the audit stream: {audit:?}"
        );
    }

    // The next message runs on the new build: the skill loads.
    let count = server.count(&session).await;
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{session}"),
            json!({"message": "/tool load_skill {\"name\": \"triage\"}"}),
        )
        .await;
    assert_eq!(status, 202);
    let next = server.until_rest(&session, count).await;
    let loaded = results(&next, "triage");
    assert!(
        loaded.iter().any(|r| r["status"] == "completed"
            && r["result"]["output"]
                .as_str()
                .unwrap_or("")
                .contains("# Triage")),
        "{next:#?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_denied_proposal_leaves_the_agent_folder_byte_identical() {
    let server = TestServer::start(changing_agent()).await;
    let root = server.agent.root();
    let before_files = snapshot(&root.join("agent"));
    let before = current(&root);
    let session = server
        .create(&propose(json!([
            {"path": "skills/triage.md", "content": SKILL},
            {"path": "instructions.md", "content": "You are now someone else.\n"},
            {"path": "skills/release.md", "delete": true},
        ])))
        .await;
    let parked = server.until_rest(&session, 0).await;
    let request = change_request(&parked);
    let id = request["action"]["proposal"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let diff = request["action"]["proposal"]["diff"].as_str().unwrap();
    assert!(
        diff.contains("--- a/skills/release.md") && diff.contains("+++ /dev/null"),
        "{diff}"
    );
    let after = answer_and_rest(
        &server,
        &session,
        request["requestId"].as_str().unwrap(),
        false,
        "not now",
    )
    .await;
    let result = results(&after, "propose_change");
    assert_eq!(result[0]["status"], "denied", "{result:#?}");
    let told = result[0]["result"]["output"].as_str().unwrap();
    assert!(
        told.contains("not now") && told.contains("Nothing"),
        "{told}"
    );
    assert_eq!(
        snapshot(&root.join("agent")),
        before_files,
        "agent/ is untouched"
    );
    assert_eq!(current(&root), before);
    assert!(
        !root.join(".eve/staging").join(&id).exists(),
        "the staging folder is removed"
    );
    let denied = after.iter().find(|e| e["type"] == "change.denied").unwrap();
    assert_eq!(denied["data"]["reason"], "not now");

    // A proposal whose turn is cancelled while it waits is dropped with it.
    let count = server.count(&session).await;
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{session}"),
            json!({"message": propose(json!([{"path": "skills/triage.md", "content": SKILL}]))}),
        )
        .await;
    assert_eq!(status, 202);
    let parked = server.until_rest(&session, count).await;
    let id = change_request(&parked)["action"]["proposal"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(root.join(".eve/staging").join(&id).is_dir());
    let (status, body) = server
        .post(&format!("/eve/v1/session/{session}/cancel"), json!({}))
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    eve_test_support::eventually_async(
        "the cancelled proposal's staging folder is removed",
        || !root.join(".eve/staging").join(&id).exists(),
    )
    .await;
    assert_eq!(snapshot(&root.join("agent")), before_files);
    server.stop().await;
}

#[tokio::test]
async fn a_proposal_widening_network_access_is_flagged_widening() {
    let server = TestServer::start(changing_agent()).await;
    let session = server
        .create(&propose(json!([
            {"path": "connections/docs.yaml", "content": "url: https://docs.example.com/mcp\n"},
            {"path": "tools/fetch.sh", "content": "#!/bin/sh\n# ---\n# description: Fetch a page.\n# network: all\n# ---\ncat >/dev/null\necho fetched\n"},
        ])))
        .await;
    let parked = server.until_rest(&session, 0).await;
    let request = change_request(&parked);
    let proposal = &request["action"]["proposal"];
    assert_eq!(proposal["widens"], true, "{proposal:#}");
    let changes = proposal["delta"]["changes"].as_array().unwrap();
    let widening = |kind: &str, subject: &str| {
        changes.iter().any(|c| {
            c["kind"] == kind
                && c["subject"].as_str().unwrap_or("").contains(subject)
                && c["widening"] == true
        })
    };
    assert!(widening("connection_added", "docs"), "{changes:#?}");
    assert!(widening("tool_added", "fetch"), "{changes:#?}");
    assert!(
        changes.iter().any(|c| c["widening"] == true
            && (c["kind"] == "network_widened" || c.to_string().contains("network"))),
        "the tool's network is in the delta: {changes:#?}"
    );
    assert!(
        request["prompt"].as_str().unwrap().contains("WIDENS"),
        "{request:#}"
    );
    assert!(proposal["text"].as_str().unwrap().contains("WIDENS"));
    server.stop().await;
}

#[tokio::test]
async fn a_proposal_that_does_not_build_never_reaches_approval() {
    let server = TestServer::start(changing_agent()).await;
    let root = server.agent.root();
    let before_files = snapshot(&root.join("agent"));
    let session = server
        .create(&propose(json!([
            {"path": "agent.yaml", "content": "self_change: true\nturn_policy: sideways\n"},
        ])))
        .await;
    let events = server.until_rest(&session, 0).await;
    assert!(
        !events.iter().any(|e| e["type"] == "input.requested"),
        "no approval is asked: {events:#?}"
    );
    let result = results(&events, "propose_change");
    assert_eq!(result[0]["status"], "failed", "{result:#?}");
    let told = result[0]["result"]["output"].as_str().unwrap();
    assert!(
        told.contains("does not build")
            && told.contains("agent/agent.yaml")
            && told.contains("turn_policy"),
        "the model sees the diagnostic: {told}"
    );
    assert_eq!(snapshot(&root.join("agent")), before_files);
    let staging = root.join(".eve/staging");
    assert!(
        !staging.exists() || std::fs::read_dir(&staging).unwrap().next().is_none(),
        "nothing stays staged"
    );
    server.stop().await;
}

#[tokio::test]
async fn paths_outside_the_agent_folder_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "keep").unwrap();
    // Links the build allows (`_`-entries are not discovered, and links are never carried) but
    // that lead outside the agent folder.
    let agent = changing_agent();
    std::os::unix::fs::symlink(outside.path(), agent.root().join("agent/_link")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        agent.root().join("agent/_linked.md"),
    )
    .unwrap();
    let server = TestServer::start(agent).await;
    let root = server.agent.root();
    let before_files = snapshot(&root.join("agent"));
    let before_state = snapshot(&root.join(".eve/builds"));
    let attacks: Vec<(Value, &str)> = vec![
        (json!({"path": "/etc/passwd", "content": "x"}), "absolute"),
        (json!({"path": "../outside.md", "content": "x"}), ".."),
        (
            json!({"path": "skills/../../outside.md", "content": "x"}),
            "..",
        ),
        (json!({"path": ".eve/current", "content": "x"}), "dot-"),
        (
            json!({"path": ".git/hooks/pre-commit", "content": "x"}),
            "dot-",
        ),
        (
            json!({"path": "skills/.hidden/x.md", "content": "x"}),
            "dot-",
        ),
        (json!({"path": "C:/x.md", "content": "x"}), "absolute"),
        (json!({"path": "~/x.md", "content": "x"}), "absolute"),
        (json!({"path": "skills\\x.md", "content": "x"}), "`/`"),
        (
            json!({"path": "skills//x.md", "content": "x"}),
            "empty segment",
        ),
        (json!({"path": "", "content": "x"}), "empty"),
        (
            json!({"path": "_link/secret.txt", "content": "x"}),
            "symbolic link",
        ),
        (
            json!({"path": "_linked.md", "content": "x"}),
            "symbolic link",
        ),
        (
            json!({"path": "_link/secret.txt", "delete": true}),
            "symbolic link",
        ),
        (
            json!({"path": "agent/skills/x.md", "content": "x"}),
            "relative to the agent folder",
        ),
        (json!({"path": "skills", "content": "x"}), "folder"),
        (
            json!({"path": "nothing.md", "delete": true}),
            "does not exist",
        ),
        (
            json!({"path": "big.md", "content": "x".repeat(300 * 1024)}),
            "KiB",
        ),
    ];
    let session = server.create("hello").await;
    for (change, why) in &attacks {
        let count = server.count(&session).await;
        let (status, _) = server
            .post(
                &format!("/eve/v1/session/{session}"),
                json!({"message": propose(json!([change]))}),
            )
            .await;
        assert_eq!(status, 202);
        let events = server.until_rest(&session, count).await;
        assert!(
            !events.iter().any(|e| e["type"] == "input.requested"),
            "{change}: refused before approval"
        );
        let result = results(&events, "propose_change");
        assert_eq!(result.len(), 1, "{change}: {events:#?}");
        assert_eq!(result[0]["status"], "failed", "{change}");
        let told = result[0]["result"]["output"].as_str().unwrap();
        assert!(
            told.contains(why),
            "{change}: the model is told why ({why}): {told}"
        );
    }
    // Too many files at once.
    let many: Vec<Value> = (0..40)
        .map(|i| json!({"path": format!("skills/s{i}.md"), "content": "x"}))
        .collect();
    let count = server.count(&session).await;
    server
        .post(
            &format!("/eve/v1/session/{session}"),
            json!({"message": propose(json!(many))}),
        )
        .await;
    let events = server.until_rest(&session, count).await;
    let told = results(&events, "propose_change")[0]["result"]["output"].clone();
    assert!(told.as_str().unwrap().contains("at most 32"), "{told}");

    assert_eq!(
        snapshot(&root.join("agent")),
        before_files,
        "agent/ is untouched"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "keep"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert!(!root.join("outside.md").exists());
    assert_eq!(
        snapshot(&root.join(".eve/builds")),
        before_state,
        "nothing was built"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_jwt_principal_cannot_approve_a_change_but_an_operator_can() {
    let server = TestServer::start(changing_agent()).await;
    let root = server.agent.root();
    let (session, _, request) = park_triage(&server).await;
    let id = request["requestId"].as_str().unwrap();
    let refused = server
        .runtime
        .answer_input_as(&session, Some(id), true, None, "jwt:alice")
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("operator's act"), "{refused}");
    assert!(!root.join("agent/skills/triage.md").exists());
    let pending = server
        .runtime
        .store()
        .input_requests(&session, true)
        .await
        .unwrap();
    assert!(pending.iter().any(|r| r.id == id), "still pending");
    let count = server.count(&session).await;
    server
        .runtime
        .answer_input_as(&session, Some(id), true, None, "token:EVE_API_TOKEN")
        .await
        .unwrap();
    let after = server.until_rest(&session, count).await;
    let approved = after
        .iter()
        .find(|e| e["type"] == "change.approved")
        .unwrap();
    assert_eq!(approved["data"]["by"], "token:EVE_API_TOKEN");
    assert_eq!(
        std::fs::read_to_string(root.join("agent/skills/triage.md")).unwrap(),
        SKILL
    );
    server.stop().await;
}

#[tokio::test]
async fn an_agent_folder_edited_after_staging_is_not_clobbered() {
    let server = TestServer::start(changing_agent()).await;
    let root = server.agent.root();
    let before = current(&root);
    let (session, _, request) = park_triage(&server).await;
    // Someone edits the folder while the proposal waits.
    std::fs::write(root.join("agent/instructions.md"), "Edited by hand.\n").unwrap();
    let after = answer_and_rest(
        &server,
        &session,
        request["requestId"].as_str().unwrap(),
        true,
        "",
    )
    .await;
    let result = results(&after, "propose_change");
    assert_eq!(result[0]["status"], "failed", "{result:#?}");
    let told = result[0]["result"]["output"].as_str().unwrap();
    assert!(
        told.contains("changed since the proposal was staged"),
        "{told}"
    );
    assert!(
        !root.join("agent/skills/triage.md").exists(),
        "nothing was written"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("agent/instructions.md")).unwrap(),
        "Edited by hand.\n"
    );
    assert_eq!(current(&root), before);
    server.stop().await;
}

#[tokio::test]
async fn a_parked_proposal_survives_a_restart_and_is_answered_after_it() {
    let server = TestServer::start(changing_agent()).await;
    let root = server.agent.root();
    let (session, _, request) = park_triage(&server).await;
    let hash = request["action"]["proposal"]["build"]
        .as_str()
        .unwrap()
        .to_owned();
    let request_id = request["requestId"].as_str().unwrap().to_owned();
    // A new runtime and server on the same project: the request is read from the store.
    let server = server.restart().await;
    let after = answer_and_rest(&server, &session, &request_id, true, "").await;
    let result = results(&after, "propose_change");
    assert_eq!(result[0]["status"], "completed", "{after:#?}");
    assert_eq!(
        std::fs::read_to_string(root.join("agent/skills/triage.md")).unwrap(),
        SKILL
    );
    assert_eq!(current(&root), hash);
    server.stop().await;
}

fn has(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Session A parks a proposal; session B of the same agent, confined by `sandbox_yaml`, runs
/// `bash` that posts an approval of it to the live API, then sends the approval body as text.
/// Returns whether the proposal was applied, and `agent/` before and after.
async fn forge_a_change_approval(sandbox_yaml: &str) -> (bool, bool, Vec<Value>) {
    let agent = changing_agent();
    agent
        .file("agent.yaml", "self_change: true\ndefault_tools: true\n")
        .file("sandbox/sandbox.yaml", sandbox_yaml);
    let server = TestServer::start(agent).await;
    let root = server.agent.root();
    let before_files = snapshot(&root.join("agent"));
    let addr: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    server.runtime.executor().set_own_listeners(vec![addr]);

    let (victim, _, request) = park_triage(&server).await;
    let request_id = request["requestId"].as_str().unwrap().to_owned();
    let body = json!({"inputResponses": [{"requestId": request_id, "optionId": "approve"}]});
    let command = format!(
        "curl -sS --max-time 10 -X POST -H 'content-type: application/json' -d '{body}' \
         http://{addr}/eve/v1/session/{victim} && echo posted"
    );
    let attacker = server
        .create(&format!("/tool bash {}", json!({"command": command})))
        .await;
    let events = server.until_rest(&attacker, 0).await;
    let shown = results(&events, "bash");
    // The model's own output naming the request is only text: it answers nothing.
    let count = server.count(&attacker).await;
    server
        .post(
            &format!("/eve/v1/session/{attacker}"),
            json!({"message": body.to_string()}),
        )
        .await;
    server.until_rest(&attacker, count).await;
    // An answer the API accepted resumes the victim's turn: let it come to rest.
    server.until_rest(&victim, 0).await;
    let pending = server
        .runtime
        .store()
        .input_requests(&victim, true)
        .await
        .unwrap()
        .iter()
        .any(|r| r.id == request_id);
    let unchanged = snapshot(&root.join("agent")) == before_files;
    if pending {
        // A principal's answer (the session API's) still decides it.
        let count = server.count(&victim).await;
        answer(&server, &victim, &request_id, false, "").await;
        let after = server.until_rest(&victim, count).await;
        assert_eq!(results(&after, "propose_change")[0]["status"], "denied");
    }
    server.stop().await;
    (!pending && !unchanged, unchanged, shown)
}

/// The agent cannot approve its own proposal, by a tool reaching the API (isolated, even with
/// `network: all`) or by its output; unconfined (`provider: host`) the same attack goes through,
/// so the test can fail.
#[tokio::test]
async fn the_agent_cannot_approve_its_own_proposal() {
    if !has("curl") {
        eprintln!("skipping: curl is not installed");
        return;
    }
    for yaml in ["provider: isolated\n", "provider: isolated\nnetwork: all\n"] {
        let (applied, unchanged, shown) = forge_a_change_approval(yaml).await;
        assert!(
            !applied && unchanged,
            "{yaml}: a tool approved the proposal: {shown:#?}"
        );
    }
    let (applied, _, shown) = forge_a_change_approval("provider: host\n").await;
    assert!(
        applied,
        "unconfined, the forged approval goes through: {shown:#?}"
    );
}

/// A listener on loopback that counts the connections it gets (and answers none).
fn counting_listener() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, hits)
}

/// An injected agent proposes an OpenAPI connection whose document is a URL of its choosing (here
/// a loopback listener standing in for a metadata service). Returns the listener's hits and what
/// the model was told.
async fn a_proposed_openapi_url(fetching: bool) -> (usize, String) {
    let server = TestServer::start(changing_agent()).await;
    server.runtime.set_proposals_fetch_for_tests(fetching);
    let (port, hits) = counting_listener();
    let session = server
        .create(&propose(json!([
            {"path": "connections/meta.yaml",
             "content": format!("openapi: http://127.0.0.1:{port}/latest/meta-data\n")},
        ])))
        .await;
    let events = server.until_rest(&session, 0).await;
    let result = results(&events, "propose_change");
    assert_eq!(result[0]["status"], "failed", "{result:#?}");
    let told = result[0]["result"]["output"].as_str().unwrap().to_owned();
    server.stop().await;
    (hits.load(std::sync::atomic::Ordering::SeqCst), told)
}

#[tokio::test]
async fn a_proposal_never_makes_the_server_fetch_an_openapi_url() {
    let (hits, told) = a_proposed_openapi_url(false).await;
    assert_eq!(hits, 0, "the server reached the agent's URL");
    assert!(
        told.contains("does not build") && told.contains("fetched by `eve build`"),
        "{told}"
    );
}

#[tokio::test]
async fn twin_a_proposal_build_that_fetches_reaches_the_agents_url() {
    let (hits, told) = a_proposed_openapi_url(true).await;
    assert!(hits >= 1, "the twin did not reach the listener: {told}");
}
