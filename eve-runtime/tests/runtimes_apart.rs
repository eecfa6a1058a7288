//! Two runtimes in one process keep their state apart: what one knows of its session workspaces
//! and of its builds' files is never what the other decides by. Each runtime holds its own
//! (created with it), so two projects whose sessions share an id (a conversation-derived id, as
//! channels make) and whose builds are the same each restore, check and report for themselves.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eve_compile::Project;
use eve_runtime::engine::{
    Accept, BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig, SessionRef,
};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{CallStatus, SqliteStore, Store};
use serde_json::{Value, json};

use crate::engine_support::*;

/// The session id both projects use, as a channel's conversation would derive it.
const SESSION: &str = "chat-1";

fn call(name: &str) -> Value {
    json!({"tool_calls": [{"name": name, "input": {}}]})
}

fn write(root: &Path, rel: &str, text: &str, executable: bool) {
    let path = root.join("agent").join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A project with two unconfined script tools: `put` writes `note.txt` into the workspace
/// (naming the workspace, so each project's note is its own), `get` prints it (or `missing`). Built with `eve build`, so
/// the manifest holds every file's digest. Returns the build's hash.
fn project(p: &TestProject) -> String {
    let root = p.dir.path();
    write(root, "instructions.md", "You are a test agent.\n", false);
    write(root, "agent.yaml", "default_tools: false\n", false);
    write(root, "sandbox/sandbox.yaml", "provider: host\n", false);
    write(
        root,
        "tools/put.sh",
        "#!/bin/sh\n# ---\n# description: Writes the note.\n# env: [SIDE_FILE]\n# ---\n\
         cat >/dev/null\necho \"note of $EVE_WORKSPACE\" > note.txt\necho ran >> \"$SIDE_FILE\"\n\
         echo '{\"ok\": true}'\n",
        true,
    );
    write(
        root,
        "tools/get.sh",
        "#!/bin/sh\n# ---\n# description: Reads the note.\n# env: [SIDE_FILE]\n# ---\n\
         cat >/dev/null\necho ran >> \"$SIDE_FILE\"\n\
         if [ -f note.txt ]; then cat note.txt; else echo missing; fi\n",
        true,
    );
    let project = Project::at(root.to_path_buf(), root.join("agent"));
    let built = eve_compile::build::build(&project).unwrap();
    built
        .hash
        .unwrap_or_else(|| panic!("build failed: {:#?}", built.output.diagnostics))
}

/// A runtime on `p`'s state folder over the store in `db` (in that folder), whose model plays
/// `steps`.
fn runtime(p: &TestProject, db: &str, steps: Value) -> Runtime {
    let model = ResolvedModel {
        client: Arc::new(MockClient::from_steps(
            load_script(&steps.to_string()).unwrap(),
        )),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let side = p.side_file.clone();
    Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(SqliteStore::open(p.state_dir.join(db)).unwrap()) as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| match name {
            "SIDE_FILE" => Some(side.to_string_lossy().into_owned()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

/// Sends `text` to the session `id` (created when missing) and drives it to rest.
async fn say(rt: &Runtime, id: &str, text: &str) {
    rt.accept(Accept::message(SessionRef::Ensure(id.to_owned()), text))
        .await
        .unwrap()
        .expect("the message was accepted");
    rt.drive(id).await.unwrap();
}

/// The last tool call of `id` (in its last turn): its status and output text.
async fn last_call(rt: &Runtime, id: &str) -> (CallStatus, String) {
    let turn = rt.store().last_turn(id).await.unwrap().unwrap();
    let call = rt
        .store()
        .tool_calls(id, turn.seq)
        .await
        .unwrap()
        .pop()
        .unwrap();
    let text = match call.output {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    (call.status, text)
}

async fn tampered(rt: &Runtime, id: &str) -> usize {
    all_events(rt, id)
        .await
        .iter()
        .filter(|e| e.kind == "build.tampered")
        .count()
}

#[tokio::test]
async fn two_runtimes_with_one_session_id_and_one_build_keep_apart() {
    let (a, b) = (TestProject::new(), TestProject::new());
    let hash = project(&a);
    project(&b);
    let rt_b = runtime(
        &b,
        "eve.db",
        json!([
            call("put"), {"text": "put"},
            call("get"), {"text": "got"},
            call("get"), {"text": "again"}
        ]),
    );
    // B's session writes its note, checkpointed into B's store; then B's local copy is lost.
    say(&rt_b, SESSION, "put the note").await;
    assert_eq!(last_call(&rt_b, SESSION).await.0, CallStatus::Completed);
    let local = b.state_dir.join("sandboxes").join(SESSION);
    assert!(local.join("note.txt").is_file());
    assert!(
        rt_b.remove_local_workspaces(&[SESSION.to_owned()])
            .is_empty()
    );
    assert!(!local.exists());

    // A's session of the same id runs two turns of tools: its lease tokens are 1, then 2, the
    // token B's next lease of its own session gets.
    let rt_a = runtime(
        &a,
        "eve.db",
        json!([
            call("put"), {"text": "one"},
            call("get"), {"text": "two"},
            call("get"), {"text": "three"}
        ]),
    );
    say(&rt_a, SESSION, "put").await;
    say(&rt_a, SESSION, "get").await;
    let (status, text) = last_call(&rt_a, SESSION).await;
    assert_eq!(status, CallStatus::Completed);
    let workspace = |p: &TestProject| p.state_dir.join("sandboxes").join(SESSION);
    assert_eq!(text.trim(), format!("note of {}", workspace(&a).display()));

    // B continues: its workspace comes back from B's store, whatever A compared with its own.
    say(&rt_b, SESSION, "get the note").await;
    let (status, text) = last_call(&rt_b, SESSION).await;
    assert_eq!(status, CallStatus::Completed, "{text}");
    assert_eq!(
        text.trim(),
        format!("note of {}", workspace(&b).display()),
        "B's workspace was not restored from B's store"
    );

    // A's copy of the build is altered: A refuses it and says so in A's store; B's copy (the
    // same file at the same path in B's build) is untouched, runs, and B records nothing.
    let files = a.state_dir.join("builds").join(&hash).join("files");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(files.join("tools/get.sh"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"echo altered\n").unwrap();
    drop(f);
    say(&rt_a, SESSION, "get again").await;
    let (status, text) = last_call(&rt_a, SESSION).await;
    assert_eq!(status, CallStatus::Failed, "{text}");
    assert!(
        text.contains("the build file tools/get.sh was altered"),
        "{text}"
    );
    assert_eq!(tampered(&rt_a, SESSION).await, 1);
    say(&rt_b, SESSION, "get it again").await;
    let (status, text) = last_call(&rt_b, SESSION).await;
    assert_eq!(status, CallStatus::Completed, "{text}");
    assert!(!text.contains("altered"), "{text}");
    assert_eq!(tampered(&rt_b, SESSION).await, 0);
    rt_a.shutdown().await;
    rt_b.shutdown().await;
}

#[tokio::test]
async fn a_refused_build_file_is_reported_to_the_runtime_that_ran_it() {
    // Two runtimes on one state folder, each with its own store: the refusal of A's call is
    // recorded in A's store (the session's), never in the other runtime's.
    let p = TestProject::new();
    let hash = project(&p);
    let rt_a = runtime(
        &p,
        "eve.db",
        json!([call("get"), {"text": "one"}, call("get"), {"text": "two"}]),
    );
    let rt_b = runtime(&p, "other.db", json!([{"text": "idle"}]));
    say(&rt_a, SESSION, "get").await;
    assert_eq!(last_call(&rt_a, SESSION).await.0, CallStatus::Completed);
    let files = p.state_dir.join("builds").join(&hash).join("files");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(files.join("tools/get.sh"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"echo altered\n").unwrap();
    drop(f);
    say(&rt_a, SESSION, "get again").await;
    assert_eq!(last_call(&rt_a, SESSION).await.0, CallStatus::Failed);
    assert_eq!(tampered(&rt_a, SESSION).await, 1);
    assert!(rt_b.session(SESSION).await.unwrap().is_none());
    rt_a.shutdown().await;
    rt_b.shutdown().await;
}
