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
fn a_long_diff_is_cut_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let content: String = (0..1000).map(|i| format!("line {i}\n")).collect();
    let (diff, cut) = diff(
        dir.path(),
        &[FileChange::Write {
            path: "big.md".into(),
            content,
        }],
    );
    assert!(cut);
    assert!(
        diff.lines().count() <= DIFF_MAX_LINES + 1,
        "{}",
        diff.lines().count()
    );
    assert!(diff.contains("the diff is cut here"));
}
