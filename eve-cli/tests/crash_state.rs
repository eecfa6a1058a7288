//! Tool state across a SIGKILL of the real `eve run`: a counter tool reads `demo.count` from its
//! stdin's `$state` and sets it one higher; the process is killed between the tool's run and the
//! next step (before or after the call's result is journaled) and restarted with
//! `eve run --session ID`. The count ends at exactly one, and every run of the tool saw zero: a
//! re-run call sees the state it saw the first time, and a settled call's update is applied once.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support_run::*;

const LIMIT: Duration = Duration::from_secs(15);

/// The counter: logs `ran N` for the count it was given, then (after `pause`) sets it to N + 1.
fn counter(pause: &str) -> (&'static str, String) {
    (
        "count",
        format!(
            "#!/bin/sh\n# ---\n# description: Count.\n# effect: idempotent\n# env: [SIDE_FILE]\n\
             # ---\ninput=$(cat)\n\
             n=$(printf '%s' \"$input\" | sed -n 's/.*\"demo.count\":{{\"count\":\\([0-9]*\\)}}.*/\\1/p')\n\
             echo \"ran $n\" >> \"$SIDE_FILE\"\n{pause}\n\
             printf '{{\"seen\": %s, \"$state\": {{\"demo.count\": {{\"count\": %s}}}}}}' \"$n\" \"$((n + 1))\"\n"
        ),
    )
}

fn project(pause: &str) -> RunProject {
    let p = RunProject::new(
        &[counter(pause)],
        json!([{"tool_calls": [{"name": "count", "input": {}}]},
               {"text": "counted", "delay_ms": 60}]),
    );
    p.agent.file(
        "agent.yaml",
        "default_tools: false\nstate:\n  demo.count:\n    initial: {count: 0}\n",
    );
    p
}

/// Kills `eve run` once `kill_when` holds, restarts the session, and checks the count.
fn kill_and_restart(p: &RunProject, kill_when: impl Fn(&RunProject, &[String]) -> bool) {
    let mut running = Running::spawn(p.eve(&["run", "--json", "count once"]));
    let reached = running.wait_for(LIMIT, |seen| kill_when(p, seen));
    running.kill();
    assert!(reached, "the kill point was never reached");
    let id = p.session_id().expect("a session before the kill");
    let out = p.run(&["run", "--json", "--session", &id]);
    assert_eq!(out.code, Some(0), "restart failed: {}", out.stderr);
    assert_eq!(p.strings("SELECT status FROM turns"), ["completed"]);
    let stored = p.strings(&format!(
        "SELECT text FROM notes WHERE namespace = 'state:{id}' AND key = 'demo.count'"
    ));
    let stored: Vec<Value> = stored
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(stored, [json!({"count": 1})], "applied exactly once");
    let lines = p.side_lines();
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|l| l == "ran 0"),
        "every run saw the state the first saw: {lines:?}"
    );
}

#[test]
fn killed_after_the_tool_ran_before_its_result_was_journaled() {
    for _ in 0..3 {
        let p = project("sleep 0.3");
        kill_and_restart(&p, |p, _| {
            p.side_lines().iter().any(|l| l.starts_with("ran"))
        });
        assert_eq!(p.side_lines().len(), 2, "the idempotent call ran again");
    }
}

#[test]
fn killed_after_the_result_was_journaled_before_the_next_step() {
    for _ in 0..3 {
        let p = project("");
        kill_and_restart(&p, |_, seen| saw(seen, "action.result"));
        assert_eq!(p.side_lines().len(), 1, "a settled call is never run again");
    }
}
