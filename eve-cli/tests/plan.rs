//! `strategy: plan` through the real binary: a 4-step DAG (`a`; `b` and `c` after `a`, in
//! parallel; `d` after both) is SIGKILLed while `b` and `c` run, restarted with
//! `eve run --session ROOT`, and ends with one synthesis; every step ran in exactly one child
//! session and no child was started twice.

use std::time::Duration;

use serde_json::json;

use crate::support_run::*;

fn project() -> RunProject {
    let plan = json!({"tool_calls": [{"name": "submit_plan", "id": "call_plan", "input": {"steps": [
        {"id": "a", "description": "gather"},
        {"id": "b", "description": "left half", "depends_on": ["a"]},
        {"id": "c", "description": "right half", "depends_on": ["a"]},
        {"id": "d", "description": "combine", "depends_on": ["b", "c"]}
    ]}}]});
    // The root plans, then answers at its fifth model message (after the plan and three
    // waves, which the engine makes); every step's child answers slowly.
    let script = json!({
        "*": [plan, {}, {}, {}, {"text": "synthesis of four"}],
        "#step": [{"text": "step done one two three four", "delay_ms": 40}]
    });
    let p = RunProject::new(&[], script);
    p.agent
        .file("agent.yaml", "default_tools: false\nstrategy: plan\n");
    p
}

fn child_deltas(p: &RunProject) -> i64 {
    if !p.root().join(".eve/eve.db").exists() {
        return 0;
    }
    p.db()
        .query_row(
            "SELECT count(*) FROM events e JOIN sessions s ON s.id = e.session_id \
             WHERE s.parent_id IS NOT NULL AND e.type = 'message.appended'",
            [],
            |r| r.get(0),
        )
        .unwrap_or(0)
}

#[test]
fn a_plan_killed_during_its_parallel_steps_resumes_to_one_synthesis() {
    let p = project();
    let mut running = Running::spawn(p.eve(&["run", "--json", "plan it"]));
    // Step `a` streams six words; more means `b` or `c` is streaming.
    let reached = running.wait_for(Duration::from_secs(30), |_| child_deltas(&p) > 7);
    running.kill();
    assert!(reached, "the kill point was never reached");
    let root = p.session_id().unwrap();
    let children_then = p.count(&format!(
        "SELECT count(*) FROM sessions WHERE parent_id = '{root}'"
    ));
    assert!(children_then >= 3, "b and c had started: {children_then}");

    let out = p.run(&["run", "--json", "--session", &root]);
    assert_eq!(out.code, Some(0), "restart failed: {}", out.stderr);
    assert_eq!(
        p.strings(&format!(
            "SELECT status FROM turns WHERE session_id = '{root}'"
        )),
        ["completed"]
    );
    let kids = p.strings(&format!(
        "SELECT id FROM sessions WHERE parent_id = '{root}'"
    ));
    assert_eq!(
        kids.len(),
        4,
        "one child per step, none started twice: {kids:?}"
    );
    for kid in &kids {
        assert_eq!(
            p.strings(&format!(
                "SELECT status FROM turns WHERE session_id = '{kid}'"
            )),
            ["completed"],
            "child {kid}"
        );
    }
    let count = |kind: &str| {
        p.count(&format!(
            "SELECT count(*) FROM events WHERE session_id = '{root}' AND type = '{kind}'"
        ))
    };
    assert_eq!(count("plan.created"), 1);
    assert_eq!(count("message.completed"), 1, "one synthesis");
    assert_eq!(count("turn.completed"), 1);
    let answer = p.strings(&format!(
        "SELECT json_extract(data, '$.message') FROM events WHERE session_id = '{root}' \
         AND type = 'message.completed'"
    ));
    assert_eq!(answer, ["synthesis of four"]);
    let steps = p.strings(&format!(
        "SELECT json_extract(input, '$.step') FROM tool_calls WHERE session_id = '{root}' \
         AND name = 'plan_step' ORDER BY step_index, position"
    ));
    assert_eq!(steps, ["a", "b", "c", "d"], "no step ran twice");
}
