//! `eve memory`: the notes an agent saved (with its `memory` tool, in `eve run`) are shown,
//! edited and cleared from the project's store; scripts get JSON; mistakes get clear errors.

use serde_json::{Value, json};

use super::support_run::RunProject;

fn project() -> RunProject {
    let p = RunProject::new(
        &[],
        json!([
            {"tool_calls": [{"name": "memory", "input": {"action": "add", "text": "Builds run with make ci"}}]},
            {"text": "noted"}
        ]),
    );
    p.agent
        .file("agent.yaml", "memory:\n  scopes: [agent, user, session]\n");
    p
}

fn show(p: &RunProject, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["memory", "show", "--json"];
    all.extend_from_slice(args);
    let out = p.run(&all);
    assert!(out.code == Some(0), "{}", out.stderr);
    serde_json::from_str::<Vec<Value>>(&out.stdout).unwrap()
}

#[test]
fn notes_written_by_the_agent_are_shown_edited_and_cleared() {
    let p = project();
    let run = p.run(&["run", "remember how builds run"]);
    assert!(run.code == Some(0), "{}", run.stderr);

    let notes = show(&p, &[]);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["scope"], "agent");
    assert_eq!(notes[0]["id"], "n1");
    assert_eq!(notes[0]["text"], "Builds run with make ci");
    let text = p.run(&["memory", "show"]);
    assert!(text.stdout.contains("n1    Builds run with make ci"));

    let edit = p.run(&[
        "memory",
        "edit",
        "--replace",
        "n1",
        "--text",
        "Builds run with make check",
    ]);
    assert!(edit.code == Some(0), "{}", edit.stderr);
    let add = p.run(&[
        "memory",
        "edit",
        "--scope",
        "user",
        "--user",
        "slack:U42",
        "--add",
        "Prefers short answers",
    ]);
    assert!(add.code == Some(0), "{}", add.stderr);
    let notes = show(&p, &[]);
    let texts: Vec<(&str, &str)> = notes
        .iter()
        .map(|n| (n["scope"].as_str().unwrap(), n["text"].as_str().unwrap()))
        .collect();
    assert_eq!(
        texts,
        [
            ("agent", "Builds run with make check"),
            ("user slack:U42", "Prefers short answers")
        ]
    );
    assert_eq!(
        show(&p, &["--scope", "user", "--user", "slack:U7"]).len(),
        0
    );

    // Mistakes: a user scope without the user, an unknown note, no change named.
    let out = p.run(&["memory", "edit", "--scope", "user", "--add", "x"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("the user scope needs the user"));
    let out = p.run(&["memory", "edit", "--remove", "n9"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("There is no note `n9` in agent memory; its notes are n1")
    );
    let out = p.run(&["memory", "edit"]);
    assert_eq!(
        out.code,
        Some(2),
        "clap refuses an edit that changes nothing"
    );

    let clear = p.run(&["memory", "clear"]);
    assert!(clear.stderr.contains("removed 1 note"), "{}", clear.stderr);
    assert_eq!(show(&p, &["--scope", "agent"]).len(), 0);
    assert_eq!(
        show(&p, &[]).len(),
        1,
        "the user's note is not in the agent scope"
    );
}
