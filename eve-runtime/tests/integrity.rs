//! Tamper-evident builds and skill files at a stated path, on real `eve build` output: a build
//! file altered between two calls is refused (with an event, and the appended code never runs),
//! and a packaged skill's files are named in the system prompt and `load_skill` and readable by
//! `read_file` at that path, never writable.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use eve_compile::Project;
use eve_runtime::engine::Runtime;
use eve_runtime::store::CallStatus;
use serde_json::{Value, json};

use crate::engine_support::*;

fn call(name: &str, input: Value) -> Value {
    json!({"tool_calls": [{"name": name, "input": input}]})
}

fn write(root: &Path, rel: &str, text: &str, executable: bool) {
    let path = root.join("agent").join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `eve build` on `<p>/agent`; returns the build's `files/` folder (absolute).
fn build(p: &TestProject) -> PathBuf {
    let root = p.dir.path().to_path_buf();
    let project = Project::at(root.clone(), root.join("agent"));
    let built = eve_compile::build::build(&project).unwrap();
    let hash = built
        .hash
        .unwrap_or_else(|| panic!("build failed: {:#?}", built.output.diagnostics));
    std::path::absolute(p.state_dir.join("builds").join(hash).join("files")).unwrap()
}

/// Outputs of a session's tool calls, in order, as (status, output text).
async fn outputs(rt: &Runtime, id: &str) -> Vec<(CallStatus, String)> {
    rt.store()
        .tool_calls(id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            let text = match c.output {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => String::new(),
            };
            (c.status, text)
        })
        .collect()
}

/// A session calls `tool`; the test then appends to `rel` (a file of the build), as a tool
/// running unconfined could; the next session's call is refused and the appended line never
/// runs; the build's files are put back, so a third session runs what was built.
async fn altered_between_calls(p: &TestProject, tool: &str, rel: &str) {
    let files = build(p);
    let marker = p.dir.path().join("owned");
    let (rt, _) = recording_runtime(
        p,
        json!([
            call(tool, json!({})), {"text": "one"},
            call(tool, json!({})), {"text": "two"},
            call(tool, json!({})), {"text": "three"}
        ]),
    );
    let (first, _) = run_prompt(&rt, "go").await;
    let outs = outputs(&rt, &first).await;
    assert_eq!(outs.len(), 1, "{outs:?}");
    assert_eq!(outs[0].0, CallStatus::Completed, "{outs:?}");
    assert_eq!(p.side_lines().len(), 1);

    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(files.join(rel))
        .unwrap();
    std::io::Write::write_all(&mut f, format!("touch '{}'\n", marker.display()).as_bytes())
        .unwrap();
    drop(f);

    let (second, _) = run_prompt(&rt, "again").await;
    let outs = outputs(&rt, &second).await;
    assert_eq!(outs.len(), 1, "{outs:?}");
    assert_eq!(outs[0].0, CallStatus::Failed, "{outs:?}");
    assert!(
        outs[0].1.contains(&format!(
            "the build file {rel} was altered after `eve build` (its SHA-256 is not the manifest's): refusing to run it; run `eve build` again"
        )),
        "{}",
        outs[0].1
    );
    assert!(!marker.exists(), "the appended code ran");
    assert_eq!(p.side_lines().len(), 1, "the altered file ran");
    let events = all_events(&rt, &second).await;
    let tampered: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "build.tampered")
        .collect();
    assert_eq!(tampered.len(), 1, "{:?}", kinds(&events));
    assert_eq!(tampered[0].data["path"], rel);
    assert_eq!(tampered[0].data["tool"], tool);

    // The build's own files were put back: the next call runs what was built.
    let (third, _) = run_prompt(&rt, "once more").await;
    let outs = outputs(&rt, &third).await;
    assert_eq!(outs[0].0, CallStatus::Completed, "{outs:?}");
    assert!(!marker.exists(), "the appended code ran");
    assert_eq!(p.side_lines().len(), 2, "{:?}", p.side_lines());
}

#[tokio::test]
async fn a_script_tool_altered_after_the_build_is_refused() {
    let p = TestProject::new();
    let root = p.dir.path();
    write(root, "instructions.md", "You are a test agent.\n", false);
    write(root, "agent.yaml", "default_tools: false\n", false);
    // The tools log next to the project, outside the workspace, and the check under test is
    // the one that guards unconfined tools: they run `host`.
    write(root, "sandbox/sandbox.yaml", "provider: host\n", false);
    write(
        root,
        "tools/step.sh",
        "#!/bin/sh\n# ---\n# description: One step.\n# env: [SIDE_FILE]\n# ---\ncat >/dev/null\n\
         echo ran >> \"$SIDE_FILE\"\necho '{\"ok\": true}'\n",
        true,
    );
    altered_between_calls(&p, "step", "tools/step.sh").await;
}

#[tokio::test]
async fn a_run_tool_naming_an_altered_helper_is_refused() {
    let p = TestProject::new();
    let root = p.dir.path();
    write(root, "instructions.md", "You are a test agent.\n", false);
    write(root, "agent.yaml", "default_tools: false\n", false);
    // The tools log next to the project, outside the workspace, and the check under test is
    // the one that guards unconfined tools: they run `host`.
    write(root, "sandbox/sandbox.yaml", "provider: host\n", false);
    write(
        root,
        "_helper.sh",
        "cat >/dev/null\necho ran >> \"$SIDE_FILE\"\necho '{\"ok\": true}'\n",
        false,
    );
    write(
        root,
        "tools/helper.yaml",
        "description: Runs the helper.\nenv: [SIDE_FILE]\ninput:\n  type: object\n\
         run: [sh, \"${EVE_AGENT_DIR}/_helper.sh\"]\n",
        false,
    );
    altered_between_calls(&p, "helper", "_helper.sh").await;
}

#[tokio::test]
async fn skill_files_are_named_and_readable_at_the_stated_path() {
    let p = TestProject::new();
    let root = p.dir.path();
    write(root, "instructions.md", "You are a test agent.\n", false);
    write(root, "agent.yaml", "default_tools: true\n", false);
    write(
        root,
        "skills/review/SKILL.md",
        "---\ndescription: How to review a change.\n---\nRead references/checklist.md first.\n",
        false,
    );
    write(
        root,
        "skills/review/references/checklist.md",
        "1. Tests first.\n2. Then names.\n",
        false,
    );
    let files = build(&p);
    let dir = files.join("skills/review");
    let checklist = dir.join("references/checklist.md");
    let stated = format!(
        "Files of this skill are in {}/: references/checklist.md",
        dir.display()
    );
    // A fresh build: nothing has unpacked it yet.
    assert!(!files.exists());
    let path = checklist.to_string_lossy().into_owned();
    let (rt, requests) = recording_runtime(
        &p,
        json!([
            call("load_skill", json!({"name": "review"})),
            call("read_file", json!({"path": path})),
            call("write_file", json!({"path": path, "content": "owned"})),
            call("read_file", json!({"path": format!("{}/../../../manifest.json", dir.display())})),
            {"text": "done"}
        ]),
    );
    let id = rt.create_session(Some("review".to_owned())).await.unwrap();
    rt.drive(&id).await.unwrap();
    let system = requests.lock().unwrap()[0].system.clone();
    assert!(system.contains(&stated), "{system}");
    let outs = outputs(&rt, &id).await;
    assert_eq!(outs.len(), 4, "{outs:?}");
    assert_eq!(outs[0].0, CallStatus::Completed);
    assert!(
        outs[0].1.contains("Read references/checklist.md first."),
        "{}",
        outs[0].1
    );
    assert!(outs[0].1.contains(&stated), "{}", outs[0].1);
    assert_eq!(outs[1].0, CallStatus::Completed, "{outs:?}");
    assert!(outs[1].1.contains("1. Tests first."), "{}", outs[1].1);
    assert_eq!(outs[2].0, CallStatus::Failed, "{outs:?}");
    assert_eq!(
        std::fs::read_to_string(&checklist).unwrap(),
        "1. Tests first.\n2. Then names.\n"
    );
    assert_eq!(outs[3].0, CallStatus::Failed, "{outs:?}");
}
