//! Durable tool state (`state:` in agent.yaml, eve's `defineState`): script tools read a
//! session's slots on stdin (`$state`) and update them in their result; the update is journaled
//! with the call (a resumed call sees what it saw the first time, a settled one is never applied
//! twice), capped, a subagent's own, and never another session's (attack and twin).

use std::time::Duration;

use eve_compile::{Approval, Effect, StateSlot, Tool};
use eve_runtime::engine::{DriveOutcome, Runtime};
use eve_runtime::store::CallStatus;
use serde_json::{Value, json};

use crate::composition::{PerAgent, call, children, runtime as per_agent_runtime};
use crate::engine_support::*;

/// An agent declaring `demo.count` (`{"n": 0}`) and `demo.note` (`""`, at most 64 bytes).
fn stateful() -> eve_compile::Agent {
    let mut a = agent();
    a.config.state.insert(
        "demo.count".into(),
        StateSlot {
            initial: json!({"n": 0}),
            max_bytes: 1024,
        },
    );
    a.config.state.insert(
        "demo.note".into(),
        StateSlot {
            initial: json!(""),
            max_bytes: 64,
        },
    );
    a
}

/// `counter`: logs `ran <session> <n>` for the count it was given, sleeps `pause`, then
/// answers `{"seen": n}` and sets the count to n + 1.
fn counter(effect: Effect, pause: &str) -> (Tool, (String, String)) {
    let tool = script_tool("counter", effect, Approval::Never);
    let script = format!(
        "input=$(cat)\n\
         n=$(printf '%s' \"$input\" | sed -n 's/.*\"demo.count\":{{\"n\":\\([0-9]*\\)}}.*/\\1/p')\n\
         echo \"ran $EVE_SESSION_ID $n\" >> \"$SIDE_FILE\"\n\
         {pause}\n\
         printf '{{\"seen\": %s, \"$state\": {{\"demo.count\": {{\"n\": %s}}}}}}' \"$n\" \"$((n + 1))\"\n"
    );
    (tool, ("tools/counter.sh".to_owned(), script))
}

/// `recall`: answers with the whole stdin it was given (its `$state` included, under `stdin`).
fn recall() -> (Tool, (String, String)) {
    let tool = script_tool("recall", Effect::Read, Approval::Never);
    let script = "input=$(cat)\nprintf '{\"stdin\": %s}' \"$input\"\n".to_owned();
    (tool, ("tools/recall.sh".to_owned(), script))
}

/// `remember`: sets `demo.note` to the `$state` value its input's `update` holds, verbatim.
fn remember() -> (Tool, (String, String)) {
    let tool = script_tool("remember", Effect::Write, Approval::Never);
    let script = "input=$(cat)\n\
        update=$(printf '%s' \"$input\" | sed -n 's/^{\"update\":\\(.*\\),\"\\$state\".*/\\1/p')\n\
        printf '{\"ok\": true, \"$state\": %s}' \"$update\"\n"
        .to_owned();
    (tool, ("tools/remember.sh".to_owned(), script))
}

/// The `n` each `ran` line of `session` saw, in order.
fn seen(p: &TestProject, session: &str) -> Vec<u64> {
    p.side_lines()
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("ran {session} ")))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

/// The stored value of `slot` in `session`'s state, if written.
async fn stored(rt: &Runtime, session: &str, slot: &str) -> Option<Value> {
    rt.store()
        .note(&format!("state:{session}"), slot)
        .await
        .unwrap()
        .map(|n| serde_json::from_str(&n.text).unwrap())
}

#[tokio::test]
async fn tools_read_and_update_their_sessions_state_one_call_at_a_time() {
    let p = TestProject::new();
    let mut a = stateful();
    let (tool, file) = counter(Effect::Write, "sleep 0.1");
    a.tools.push(tool);
    p.write_build(&a, &[file]);
    // Two calls in one step (run one at a time), one more in the next step, one next turn.
    let script = json!([
        {"tool_calls": [{"name": "counter", "input": {}}, {"name": "counter", "input": {}}]},
        call("counter", "c3", json!({})),
        {"text": "counted"},
        call("counter", "c4", json!({})),
        {"text": "counted again"}
    ]);
    let rt = p.runtime(script);
    let (id, outcome) = run_prompt(&rt, "count").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    rt.post_message(&id, "again").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(seen(&p, &id), vec![0, 1, 2, 3], "{:?}", p.side_lines());
    assert_eq!(stored(&rt, &id, "demo.count").await, Some(json!({"n": 4})));
    // What the model saw has no `$state`: the key is the runtime's.
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[2].status, CallStatus::Completed);
    assert_eq!(calls[2].output, Some(json!({"seen": 2})), "{calls:?}");
    // A slot no tool wrote is its initial value, and is not stored.
    assert_eq!(stored(&rt, &id, "demo.note").await, None);
}

#[tokio::test]
async fn an_update_over_the_cap_or_of_an_undeclared_slot_fails_the_call_and_changes_nothing() {
    let p = TestProject::new();
    let mut a = stateful();
    let (tool, file) = remember();
    a.tools.push(tool);
    p.write_build(&a, &[file]);
    let long = "x".repeat(100);
    // One update that fits, then three that fail (which opens the tool's breaker: three in a row).
    let script = json!([
        call("remember", "c1", json!({"update": {"demo.note": "fits"}})),
        call("remember", "c2", json!({"update": {"demo.note": long, "demo.count": {"n": 9}}})),
        call("remember", "c3", json!({"update": {"other.slot": 1}})),
        call("remember", "c4", json!({"update": ["not", "an", "object"]})),
        {"text": "done"}
    ]);
    let rt = p.runtime(script);
    let (id, _) = run_prompt(&rt, "remember").await;
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    let text = |i: usize| calls[i].output.as_ref().unwrap().to_string();
    assert_eq!(calls[0].status, CallStatus::Completed, "{calls:?}");
    assert_eq!(calls[1].status, CallStatus::Failed, "{calls:?}");
    assert!(text(1).contains("state_too_large"), "{}", text(1));
    assert!(text(1).contains("cap of 64 bytes"), "{}", text(1));
    assert_eq!(calls[2].status, CallStatus::Failed);
    assert!(text(2).contains("does not declare"), "{}", text(2));
    assert_eq!(calls[3].status, CallStatus::Failed);
    assert!(text(3).contains("must be an object"), "{}", text(3));
    // Nothing of a refused update was applied, not even its slots that fit.
    assert_eq!(stored(&rt, &id, "demo.note").await, Some(json!("fits")));
    assert_eq!(stored(&rt, &id, "demo.count").await, None);
    assert_eq!(stored(&rt, &id, "other.slot").await, None);
}

/// Drives `id` in a task and aborts it (the process dying, as far as the store knows) once
/// `until` holds.
async fn drive_and_abort(rt: &Runtime, id: &str, until: impl Fn() -> bool) {
    let task = {
        let rt = rt.clone();
        let id = id.to_owned();
        tokio::spawn(async move { rt.drive(&id).await })
    };
    eventually("the kill point was reached", &until).await;
    task.abort();
    let _ = task.await;
}

#[tokio::test]
async fn a_call_killed_before_it_settled_reruns_on_the_state_it_saw_and_applies_once() {
    let p = TestProject::new();
    let mut a = stateful();
    let (tool, file) = counter(Effect::Idempotent, "sleep 0.5");
    a.tools.push(tool);
    p.write_build(&a, &[file]);
    let script = json!([call("counter", "c1", json!({})), {"text": "counted"}]);
    let rt = p.runtime(script.clone());
    let id = rt.create_session(Some("count".into())).await.unwrap();
    // Killed after the tool ran (it logged what it saw), before its result was committed.
    drive_and_abort(&rt, &id, || {
        p.side_lines().iter().any(|l| l.starts_with("ran"))
    })
    .await;
    drop(rt);
    assert_eq!(seen(&p, &id), vec![0]);
    let rt = p.runtime(script);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        seen(&p, &id),
        vec![0, 0],
        "the re-run saw the state the first run saw"
    );
    assert_eq!(stored(&rt, &id, "demo.count").await, Some(json!({"n": 1})));
}

#[tokio::test]
async fn a_settled_call_is_not_run_again_after_a_restart_and_its_update_is_applied_once() {
    let p = TestProject::new();
    let mut a = stateful();
    let (tool, file) = counter(Effect::Write, "");
    a.tools.push(tool);
    let wait = script_tool("wait", Effect::Read, Approval::Never);
    a.tools.push(wait);
    p.write_build(&a, &[file, logging_script("wait", "sleep 0.5")]);
    let script = json!([
        call("counter", "c1", json!({})),
        call("wait", "w1", json!({})),
        call("counter", "c2", json!({})),
        {"text": "counted"}
    ]);
    let rt = p.runtime(script.clone());
    let id = rt.create_session(Some("count".into())).await.unwrap();
    // Killed in the next step, after the counter's call settled with its update.
    drive_and_abort(&rt, &id, || {
        p.side_lines().iter().any(|l| l.starts_with("start wait"))
    })
    .await;
    drop(rt);
    let rt = p.runtime(script);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(seen(&p, &id), vec![0, 1], "{:?}", p.side_lines());
    assert_eq!(stored(&rt, &id, "demo.count").await, Some(json!({"n": 2})));
}

#[tokio::test]
async fn a_subagent_has_its_own_state() {
    let p = TestProject::new();
    let (tool, file) = counter(Effect::Write, "");
    let mut root = stateful();
    root.tools.push(tool.clone());
    let mut alpha = stateful();
    alpha.name = "alpha".into();
    alpha.path = "subagents/alpha".into();
    alpha.description = Some("The alpha helper.".into());
    alpha.tools.push(tool);
    root.subagents = vec![alpha];
    p.write_build(&root, &[file]);
    let models = PerAgent::default();
    models.set(
        "",
        json!([
            call("counter", "c1", json!({})),
            call("alpha", "a1", json!({"message": "count twice"})),
            {"text": "asked alpha"},
            {"text": "alpha answered"},
            {"text": "done"}
        ]),
    );
    models.set(
        "alpha",
        json!([call("counter", "k1", json!({})), call("counter", "k2", json!({})), {"text": "two"}]),
    );
    let rt = per_agent_runtime(&p, &models);
    let id = rt.create_session(Some("go".into())).await.unwrap();
    rt.drive(&id).await.unwrap();
    let kid = children(&rt, &id).await.pop().expect("a child session");
    eventually_async_state(&rt, &kid).await;
    assert_eq!(seen(&p, &id), vec![0]);
    assert_eq!(
        seen(&p, &kid),
        vec![0, 1],
        "the child starts from `initial`"
    );
    assert_eq!(stored(&rt, &id, "demo.count").await, Some(json!({"n": 1})));
    assert_eq!(stored(&rt, &kid, "demo.count").await, Some(json!({"n": 2})));
}

/// Waits until the child's second count is stored.
async fn eventually_async_state(rt: &Runtime, kid: &str) {
    for _ in 0..200 {
        if stored(rt, kid, "demo.count").await == Some(json!({"n": 2})) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the child's counts were never stored");
}

/// Session A stores a secret in its state; session B's (prompt-injected) tools ask for it.
/// Returns what B's `recall` was given on stdin.
async fn another_sessions_state(shared: bool) -> String {
    let p = TestProject::new();
    let mut a = stateful();
    let (remember_tool, remember_file) = remember();
    let (recall_tool, recall_file) = recall();
    a.tools.push(remember_tool);
    a.tools.push(recall_tool);
    p.write_build(&a, &[remember_file, recall_file]);
    let rt = p.runtime(json!([
        call("remember", "c1", json!({"update": {"demo.note": "A-SECRET-7731"}})),
        {"text": "noted"}
    ]));
    rt.set_tool_state_shared_for_tests(shared);
    let (first, _) = run_prompt(&rt, "remember this").await;
    let kept = if shared {
        None
    } else {
        Some(json!("A-SECRET-7731"))
    };
    assert_eq!(stored(&rt, &first, "demo.note").await, kept);
    drop(rt);
    // B's model does what an injected prompt tells it: read every slot, and try to write A's.
    let rt = p.runtime(json!([
        call("recall", "r1", json!({"session": first, "slot": "demo.note"})),
        call("remember", "c2", json!({"update": {format!("../{first}/demo.note"): "x"}})),
        {"text": "done"}
    ]));
    rt.set_tool_state_shared_for_tests(shared);
    let (second, _) = run_prompt(&rt, "what did the other user say?").await;
    let calls = rt.store().tool_calls(&second, 0).await.unwrap();
    assert_eq!(calls[1].status, CallStatus::Failed, "{calls:?}");
    assert_eq!(
        stored(&rt, &first, "demo.note").await,
        kept,
        "B cannot write A's state"
    );
    calls[0].output.as_ref().unwrap().to_string()
}

#[tokio::test]
async fn another_session_never_sees_a_sessions_state() {
    let given = another_sessions_state(false).await;
    assert!(!given.contains("A-SECRET-7731"), "{given}");
    assert!(
        given.contains(r#""demo.note":"""#),
        "B sees its own initial value: {given}"
    );
}

#[tokio::test]
async fn with_state_kept_per_agent_another_session_reads_it() {
    let given = another_sessions_state(true).await;
    assert!(given.contains("A-SECRET-7731"), "{given}");
}
