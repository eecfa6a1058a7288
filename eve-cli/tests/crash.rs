//! The crash suite: SIGKILL the real `eve run` at chosen points, restart it with
//! `eve run --session ID`, and check from the store and the tools' side-effect log that the turn
//! completed, every completed call ran exactly once, an interrupted `write` call was not silently
//! re-run, and no accepted message was lost.
//!
//! Each kill point runs `EVE_CRASH_ITERATIONS` times (default 20).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support_run::*;

fn iterations() -> usize {
    std::env::var("EVE_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

const LIMIT: Duration = Duration::from_secs(15);

fn charge(sleep: &str) -> (&'static str, String) {
    (
        "charge",
        logging_tool("# description: Charge a card.\n# effect: write\n", sleep),
    )
}

fn refund() -> (&'static str, String) {
    (
        "refund",
        logging_tool(
            "# description: Refund a charge.\n# effect: write\n# approval: once\n",
            "",
        ),
    )
}

/// Restarts the session until it settles, then checks every invariant.
fn restart_and_check(p: &RunProject, point: &str, i: usize, expect: Option<&str>) {
    let Some(id) = p.session_id() else {
        panic!("{point}#{i}: no session was created before the kill");
    };
    let out = p.run(&["run", "--json", "--yes", "--session", &id]);
    assert_eq!(
        out.code,
        Some(0),
        "{point}#{i}: restart failed: {}",
        out.stderr
    );
    // The turn completed, nothing is left open.
    let turns = p.strings("SELECT status FROM turns");
    assert_eq!(turns, ["completed"], "{point}#{i}: turns {turns:?}");
    assert_eq!(
        p.strings("SELECT status FROM sessions"),
        ["idle"],
        "{point}#{i}"
    );
    // No accepted message is lost: every inbox row was taken by a turn.
    assert_eq!(
        p.count("SELECT count(*) FROM inbox WHERE consumed_turn IS NULL"),
        0,
        "{point}#{i}"
    );
    assert_eq!(p.count("SELECT count(*) FROM inbox"), 1, "{point}#{i}");
    // Side effects against the journal.
    let lines = p.side_lines();
    let mut starts: HashMap<String, usize> = HashMap::new();
    let mut dones: HashMap<String, usize> = HashMap::new();
    for line in &lines {
        let mut parts = line.split(' ');
        let (kind, call) = (parts.next().unwrap(), parts.next().unwrap().to_owned());
        *match kind {
            "start" => &mut starts,
            _ => &mut dones,
        }
        .entry(call)
        .or_default() += 1;
    }
    let db = p.db();
    let mut stmt = db
        .prepare("SELECT call_id, status, effect, attempts FROM tool_calls")
        .unwrap();
    let calls: Vec<(String, String, String, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(calls.len(), 1, "{point}#{i}: one call per run");
    if let Some(expected) = expect {
        assert_eq!(calls[0].1, expected, "{point}#{i}: {lines:?}");
    }
    for (call, status, effect, _attempts) in &calls {
        let ran = starts.get(call).copied().unwrap_or(0);
        assert_eq!(effect, "write", "{point}#{i}");
        assert!(
            ran <= 1,
            "{point}#{i}: write call {call} ran {ran} times (never re-run): {lines:?}"
        );
        match status.as_str() {
            "completed" => assert_eq!(
                (ran, dones.get(call).copied().unwrap_or(0)),
                (1, 1),
                "{point}#{i}: completed call {call} ran exactly once: {lines:?}"
            ),
            // Outcome unknown: the kill may land after the call was journaled as running and
            // before the tool wrote anything, or after it started.
            "interrupted" => assert!(ran <= 1, "{point}#{i}: {lines:?}"),
            other => panic!("{point}#{i}: call {call} ended {other}"),
        }
    }
    // The model was told what happened: every call has a result message after restart.
    let results = p.count("SELECT count(*) FROM messages WHERE body LIKE '%\"role\":\"tool\"%'");
    assert_eq!(results as usize, calls.len(), "{point}#{i}");
}

fn crash_loop(
    point: &str,
    tools: &[(&str, String)],
    script: Value,
    args: &[&str],
    kill_when: impl Fn(&RunProject, &[String], usize) -> bool,
    expect: impl Fn(usize) -> Option<&'static str>,
) {
    for i in 0..iterations() {
        let p = RunProject::new(tools, script.clone());
        let mut running = Running::spawn(p.eve(args));
        let reached = running.wait_for(LIMIT, |seen| kill_when(&p, seen, i));
        running.kill();
        assert!(reached, "{point}#{i}: the kill point was never reached");
        restart_and_check(&p, point, i, expect(i));
    }
}

#[test]
fn killed_mid_model_stream() {
    crash_loop(
        "mid-stream",
        &[charge("")],
        json!([{"tool_calls": [{"name": "charge", "input": {}}]},
               {"text": "one two three four five six", "delay_ms": 15}]),
        &["run", "--json", "charge it"],
        |_, seen, i| {
            // Vary the point within the stream.
            seen.iter()
                .filter(|l| l.contains("\"type\":\"message.appended\""))
                .count()
                > i % 4
        },
        |_| Some("completed"),
    );
}

#[test]
fn killed_after_a_tool_starts() {
    crash_loop(
        "tool-started",
        &[charge("sleep 0.1")],
        json!([{"tool_calls": [{"name": "charge", "input": {}}]}, {"text": "done"}]),
        &["run", "--json", "charge it"],
        |p, _, _| p.side_lines().iter().any(|l| l.starts_with("start")),
        |_| Some("interrupted"),
    );
}

#[test]
fn killed_after_a_tool_finishes_before_the_next_step() {
    crash_loop(
        "tool-finished",
        &[charge("")],
        json!([{"tool_calls": [{"name": "charge", "input": {}}]},
               {"text": "done", "delay_ms": 60}]),
        &["run", "--json", "charge it"],
        |p, seen, i| {
            if i % 2 == 0 {
                // As soon as the tool's process is done (its result may not be journaled yet).
                p.side_lines().iter().any(|l| l.starts_with("done"))
            } else {
                saw(seen, "action.result")
            }
        },
        // Killed between the tool's exit and its journal entry, the call is `interrupted`.
        |i| (i % 2 == 1).then_some("completed"),
    );
}

#[test]
fn killed_while_waiting_for_approval() {
    crash_loop(
        "approval",
        &[refund()],
        json!([{"tool_calls": [{"name": "refund", "input": {"charge": "ch_1"}}]},
               {"text": "refunded"}]),
        &["run", "--json", "refund ch_1"],
        |_, seen, _| saw(seen, "input.requested"),
        |_| Some("completed"),
    );
}

#[test]
fn killed_right_after_the_message_is_accepted() {
    crash_loop(
        "accepted",
        &[charge("")],
        json!([{"tool_calls": [{"name": "charge", "input": {}}]}, {"text": "done"}]),
        &["run", "--json", "charge it"],
        |p, seen, i| {
            if i % 2 == 0 {
                p.session_id().is_some()
            } else {
                saw(seen, "turn.started")
            }
        },
        // The kill is aimed at the start of the turn, but on a loaded machine the process may get
        // as far as starting the write call: then it is interrupted, never re-run.
        |_| None,
    );
}
