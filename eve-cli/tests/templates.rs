//! Every template scaffolds, builds and runs one turn with the mock model; template promises hold
//! (the `coding` template asks before every write, and finds and searches files with `glob` and
//! `grep`); an authored tool replaces a built-in.

use std::path::Path;
use std::process::{Command, Output};

const EVE: &str = env!("CARGO_BIN_EXE_eve");

fn eve(dir: &Path, args: &[&str]) -> Output {
    Command::new(EVE)
        .args(args)
        .current_dir(dir)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_MOCK_SCRIPT")
        .env("EVE_MODEL", "mock/echo")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn templates() -> Vec<String> {
    let out = Command::new(EVE).args(["init", "--list"]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn every_template_inits_builds_and_runs() {
    let names = templates();
    for want in ["default", "coding", "support", "scheduled"] {
        assert!(
            names.iter().any(|n| n == want),
            "template {want} missing: {names:?}"
        );
    }
    for name in names {
        let tmp = tempfile::tempdir().unwrap();
        let init = eve(tmp.path(), &["init", "proj", "--template", &name]);
        assert!(
            init.status.success(),
            "init {name}: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let dir = tmp.path().join("proj");
        let build = eve(&dir, &["build"]);
        assert!(
            build.status.success(),
            "build {name}: {}",
            String::from_utf8_lossy(&build.stderr)
        );
        let run = eve(&dir, &["run", "hello"]);
        assert!(
            run.status.success(),
            "run {name}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            String::from_utf8_lossy(&run.stdout).contains("You said: hello"),
            "run {name}"
        );
    }
}

#[test]
fn coding_template_asks_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        eve(tmp.path(), &["init", "proj", "--template", "coding"])
            .status
            .success()
    );
    let dir = tmp.path().join("proj");
    let run = eve(
        &dir,
        &[
            "run",
            r#"/tool write_file {"path": "a.txt", "content": "x"}"#,
        ],
    );
    assert_eq!(
        run.status.code(),
        Some(3),
        "a non-interactive run stops at the approval"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("eve sessions approve"),
        "says how to answer: {stderr}"
    );
    let written: Vec<_> = walk(&dir.join(".eve/sandboxes"))
        .into_iter()
        .filter(|p| p.ends_with("a.txt"))
        .collect();
    assert!(
        written.is_empty(),
        "nothing was written before approval: {written:?}"
    );

    let run = eve(
        &dir,
        &[
            "run",
            "--yes",
            r#"/tool write_file {"path": "b.txt", "content": "x"}"#,
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        walk(&dir.join(".eve/sandboxes"))
            .iter()
            .any(|p| p.ends_with("b.txt"))
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The `coding` template offers `glob` and `grep`, and they run on the session workspace.
#[test]
fn coding_template_finds_and_searches_files() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        eve(tmp.path(), &["init", "proj", "--template", "coding"])
            .status
            .success()
    );
    let dir = tmp.path().join("proj");
    let info = eve(&dir, &["info", "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let tools = j["tools"].as_array().unwrap();
    for name in ["glob", "grep"] {
        let t = tools.iter().find(|t| t["name"] == name).unwrap();
        assert_eq!(t["builtin"], true);
        assert_eq!(t["from"], "agent.yaml");
        assert_eq!(t["effect"], "read");
        assert_eq!(t["sandbox"], serde_json::Value::Null, "in eve's process");
    }
    // The seeded README is found by name and by content.
    for (call, want) in [
        (r#"/tool glob {"pattern": "*.md"}"#, "README.md"),
        (
            r#"/tool grep {"pattern": "[a-z]", "limit": 1}"#,
            "README.md:1:",
        ),
    ] {
        let run = eve(&dir, &["run", "--yes", call]);
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{call}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(stdout.contains(want), "{call}: {stdout}");
    }
}

/// An authored tool at a built-in's name replaces it: a note at build time, and `eve info` says
/// so in text and JSON.
#[test]
fn an_authored_bash_replaces_the_builtin_and_info_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(eve(tmp.path(), &["init", "proj"]).status.success());
    let dir = tmp.path().join("proj");
    std::fs::write(
        dir.join("agent/tools/bash.yaml"),
        "description: My bash.\ninput:\n  type: object\nrun: [echo, mine]\n",
    )
    .unwrap();
    let info = eve(&dir, &["info"]);
    let stdout = String::from_utf8_lossy(&info.stdout);
    let stderr = String::from_utf8_lossy(&info.stderr);
    assert!(info.status.success(), "{stderr}");
    assert!(stderr.contains("note[N001]"), "{stderr}");
    assert!(
        stdout.contains("bash [replaced by tools/bash.yaml]"),
        "{stdout}"
    );
    let j: serde_json::Value =
        serde_json::from_slice(&eve(&dir, &["info", "--json"]).stdout).unwrap();
    let bash: Vec<_> = j["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "bash")
        .collect();
    assert_eq!(bash.len(), 1, "{bash:?}");
    assert_eq!(bash[0]["builtin"], false);
    assert_eq!(bash[0]["replaces"], "bash");
    let run = eve(&dir, &["run", "--yes", r#"/tool bash {"command": "id"}"#]);
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("mine"),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}
