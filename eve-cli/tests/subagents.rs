//! Subagents through the real binary: a parent starts three tasks at once (three children), one
//! child's tool needs approval (answered on the root by `eve run --yes`), the process is SIGKILLed
//! while the children work and restarted with `eve run --session ROOT`; the parent's turn completes,
//! every result reaches it once, no child is started twice, and the task's id continues the same
//! child session.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support_run::*;

fn subagent(p: &RunProject, name: &str, tools: &[(&str, String)]) {
    let dir = p.root().join("agent/subagents").join(name);
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!("description: The {name} helper.\ndefault_tools: false\n"),
    )
    .unwrap();
    std::fs::write(dir.join("instructions.md"), format!("You are {name}.\n")).unwrap();
    for (tool, text) in tools {
        let path = dir.join("tools").join(format!("{tool}.sh"));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The scripts; `continue_with` is the root's id and how many answers its first turn gave (each
/// subagent call is a task, so the model answers again as their results arrive).
fn script(continue_with: Option<(&str, usize)>) -> Value {
    let mut root = vec![
        json!({"tool_calls": [
            {"name": "alpha", "id": "call_alpha", "input": {"message": "first"}},
            {"name": "beta", "id": "call_beta", "input": {"message": "open the gate"}},
            {"name": "gamma", "id": "call_gamma", "input": {"message": "take your time"}}]}),
        json!({"text": "both answered"}),
    ];
    if let Some((root_id, answers)) = continue_with {
        root.resize(answers, json!({"text": "noted"}));
        root.push(json!({"tool_calls": [{"name": "alpha", "id": "call_again",
            "input": {"message": "second", "task_id": format!("{root_id}:call_alpha")}}]}));
        root.push(json!({"text": "continued"}));
    }
    json!({
        "*": root,
        "alpha": [{"text": "alpha says one two three four five six", "delay_ms": 25},
                  {"text": "alpha remembers"}],
        "beta": [{"tool_calls": [{"name": "gate", "id": "gate_1", "input": {}}]},
                 {"text": "beta opened it", "delay_ms": 10}],
        "gamma": [{"text": "gamma took its time", "delay_ms": 150}]
    })
}

fn project() -> RunProject {
    let p = RunProject::new(&[], script(None));
    subagent(&p, "alpha", &[]);
    let gate = logging_tool(
        "# description: Open the gate.\n# effect: write\n# approval: always\n",
        "",
    );
    subagent(&p, "beta", &[("gate", gate)]);
    subagent(&p, "gamma", &[]);
    p
}

fn child_count(p: &RunProject, sql_filter: &str) -> i64 {
    if !p.root().join(".eve/eve.db").exists() {
        return 0;
    }
    // The store may still be migrating: not counted yet.
    p.db()
        .query_row(
            &format!(
                "SELECT count(*) FROM events e JOIN sessions s ON s.id = e.session_id \
                 WHERE s.parent_id IS NOT NULL AND {sql_filter}"
            ),
            [],
            |r| r.get(0),
        )
        .unwrap_or(0)
}

#[test]
fn children_survive_sigkill_and_the_task_id_continues_one() {
    for i in 0..4 {
        let mut p = project();
        let mut running = Running::spawn(p.eve(&["run", "--json", "--yes", "ask both"]));
        let reached = running.wait_for(Duration::from_secs(20), |seen| match i % 2 {
            // While alpha streams its answer.
            0 => child_count(&p, "e.type = 'message.appended'") > i64::from(i as u8),
            // Once beta's approval surfaced on the root.
            _ => saw(seen, "input.requested"),
        });
        running.kill();
        assert!(reached, "#{i}: the kill point was never reached");
        let root = p.session_id().unwrap();
        let out = p.run(&["run", "--json", "--yes", "--session", &root]);
        assert_eq!(out.code, Some(0), "#{i}: restart failed: {}", out.stderr);

        let db = p.db();
        let status: String = db
            .query_row(
                "SELECT status FROM turns WHERE session_id = ?1 AND seq = 0",
                [&root],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(status, "completed", "#{i}");
        // Exactly three children, each with one completed turn: none was started twice.
        let kids = p.strings(&format!(
            "SELECT id FROM sessions WHERE parent_id = '{root}' ORDER BY agent_name"
        ));
        assert_eq!(kids.len(), 3, "#{i}: {kids:?}");
        for kid in &kids {
            let turns = p.strings(&format!(
                "SELECT status FROM turns WHERE session_id = '{kid}'"
            ));
            assert_eq!(turns, ["completed"], "#{i}: child {kid}");
        }
        let outputs = p.strings(&format!(
            "SELECT output FROM tool_calls WHERE session_id = '{root}' ORDER BY position"
        ));
        let outputs: Vec<Value> = outputs
            .iter()
            .map(|o| serde_json::from_str(o).unwrap())
            .collect();
        // Each call is a task: it answered with its receipt, and its result reached the model
        // once, as a `<task_result>` message.
        assert_eq!(outputs.len(), 3, "#{i}: {outputs:?}");
        for (output, call) in outputs
            .iter()
            .zip(["call_alpha", "call_beta", "call_gamma"])
        {
            assert!(
                output.as_str().unwrap().starts_with(&format!(
                    "Started task {root}:{call}. Its result will arrive in a <task_result> message."
                )),
                "#{i}: {outputs:?}"
            );
        }
        let results = p.strings(&format!(
            "SELECT body FROM messages WHERE session_id = '{root}' AND body LIKE '%<task_result id=%'"
        ));
        let all = results.join("\n");
        for (call, answer) in [
            ("call_alpha", "alpha says one two three four five six"),
            ("call_beta", "beta opened it"),
            ("call_gamma", "gamma took its time"),
        ] {
            let block = format!("id=\\\"{root}:{call}\\\"");
            assert_eq!(all.matches(&block).count(), 1, "#{i}: {all}");
            assert!(all.contains(answer), "#{i}: {all}");
        }
        // The gate (a write) ran at most once; completed means exactly once.
        let starts = p
            .side_lines()
            .iter()
            .filter(|l| l.starts_with("start"))
            .count();
        assert!(starts <= 1, "#{i}: {:?}", p.side_lines());

        // Continue alpha with its task_id: same child session, second turn.
        if i == 0 {
            let answers = p.count(&format!(
                "SELECT count(*) FROM messages WHERE session_id = '{root}' \
                 AND body LIKE '%\"role\":\"assistant\"%'"
            ));
            p.script = script(Some((&root, answers as usize))).to_string();
            let out = p.run(&["run", "--json", "--session", &root, "ask alpha again"]);
            assert_eq!(out.code, Some(0), "{}", out.stderr);
            let again = p.strings(&format!(
                "SELECT body FROM messages WHERE session_id = '{root}' AND turn_seq = 1 \
                 AND body LIKE '%<task_result id=%'"
            ));
            assert_eq!(again.len(), 1, "{again:?}");
            assert!(
                again[0].contains(&format!("id=\\\"{root}:call_alpha\\\""))
                    && again[0].contains("alpha remembers"),
                "{again:?}"
            );
            let kids_after = p.strings(&format!(
                "SELECT id FROM sessions WHERE parent_id = '{root}' ORDER BY agent_name"
            ));
            assert_eq!(kids_after, kids, "no new child session");
            let alpha_turns = p.count(&format!(
                "SELECT turn_count FROM sessions WHERE id = '{}'",
                kids[0]
            ));
            assert_eq!(alpha_turns, 2);
        }
    }
}
