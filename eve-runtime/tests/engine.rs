//! Session engine behaviour with the scripted mock model and real script tools.
//!
//! Longer than 800 lines on purpose: the engine's basic scenarios, each a short test on the shared
//! support in `engine_support.rs`; the features' own scenarios live in their own files.

use std::time::{Duration, Instant};

use eve_compile::{Approval, Effect};
use eve_runtime::engine::{DriveOutcome, RuntimeError};
use eve_runtime::model::Message;
use eve_runtime::store::{CallStatus, SessionStatus, TurnStatus};
use serde_json::json;

use crate::engine_support::*;

fn call(name: &str, input: serde_json::Value) -> serde_json::Value {
    json!({"tool_calls": [{"name": name, "input": input}]})
}

#[tokio::test]
async fn a_tool_call_and_a_reply_emit_eves_events_in_order() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("get_weather", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("get_weather", "")]);
    let rt = p.runtime(json!([
        call("get_weather", json!({"city": "Paris"})),
        {"text": "It is sunny in Paris."}
    ]));
    let (id, outcome) = run_prompt(&rt, "What is the weather in Paris?").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    assert_eq!(
        folded_kinds(&events),
        [
            "session.started",
            "turn.started",
            "message.received",
            "step.started",
            "action.input.appended",
            "actions.requested",
            "action.result",
            "step.completed",
            "step.started",
            "message.appended",
            "message.completed",
            "step.completed",
            "turn.completed",
            "session.waiting"
        ]
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.index, i as u64);
        assert!(e.id.starts_with("evt_"));
    }
    let wire = events[5].to_wire();
    assert_eq!(wire["type"], "actions.requested");
    assert_eq!(wire["data"]["turnId"], "turn_0");
    assert_eq!(wire["data"]["sequence"], 0);
    assert_eq!(wire["data"]["stepIndex"], 0);
    assert_eq!(wire["data"]["actions"][0]["kind"], "tool-call");
    assert_eq!(wire["data"]["actions"][0]["toolName"], "get_weather");
    assert_eq!(
        wire["data"]["actions"][0]["input"],
        json!({"city": "Paris"})
    );
    assert!(wire["meta"]["at"].as_str().unwrap().ends_with('Z'));
    let result = &events[6].data;
    assert_eq!(result["status"], "completed");
    assert_eq!(result["result"]["kind"], "tool-result");
    assert_eq!(
        result["result"]["output"]["input"],
        json!({"city": "Paris"})
    );
    let completed = events
        .iter()
        .find(|e| e.kind == "message.completed")
        .unwrap();
    assert_eq!(completed.data["message"], "It is sunny in Paris.");
    assert_eq!(completed.data["finishReason"], "stop");
    let waiting = events.last().unwrap();
    assert_eq!(waiting.data["continuationToken"], id.as_str());
    assert_eq!(waiting.data["wait"], "next-user-message");
    assert_eq!(
        p.side_lines().len(),
        2,
        "the tool ran once: {:?}",
        p.side_lines()
    );
    let session = rt.session(&id).await.unwrap().unwrap();
    assert_eq!(session.status, SessionStatus::Idle);
    assert!(id.starts_with("wrun_"));
}

#[tokio::test]
async fn approval_once_asks_the_first_time_only_and_survives_a_new_runtime() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("refund", Effect::Write, Approval::Once));
    p.write_build(&a, &[logging_script("refund", "")]);
    let script = json!([
        call("refund", json!({"charge": "ch_1"})),
        {"text": "Refunded."},
        call("refund", json!({"charge": "ch_2"})),
        {"text": "Refunded again."}
    ]);
    let rt = p.runtime(script.clone());
    let (id, outcome) = run_prompt(&rt, "refund ch_1").await;
    let DriveOutcome::WaitingInput(requests) = outcome else {
        panic!("expected a wait, got {outcome:?}");
    };
    assert_eq!(requests.len(), 1);
    assert!(p.side_lines().is_empty(), "nothing runs before approval");
    let events = all_events(&rt, &id).await;
    assert_eq!(
        kinds(&events)[events.len() - 4..],
        [
            "actions.requested",
            "step.completed",
            "input.requested",
            "turn.waiting"
        ]
    );
    let req = &events[events.len() - 2].data["requests"][0];
    assert_eq!(req["kind"], "tool-approval");
    assert_eq!(req["requestId"], requests[0].id.as_str());
    assert_eq!(events.last().unwrap().data["on"], "input");
    drop(rt);

    // A new runtime (as after a restart) sees the durable request and continues after the answer.
    let rt = p.runtime(script);
    assert_eq!(rt.pending_inputs(&id).await.unwrap().len(), 1);
    rt.answer_input(&id, None, true, None).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(p.side_lines().len(), 2);
    let events = all_events(&rt, &id).await;
    let after: Vec<String> = folded_kinds(&events)
        .into_iter()
        .skip_while(|k| k != "approval.settled")
        .collect();
    assert_eq!(
        after,
        [
            "approval.settled",
            "input.resolved",
            "step.started",
            "action.result",
            "message.appended",
            "message.completed",
            "step.completed",
            "turn.completed",
            "session.waiting"
        ]
    );
    let settled = events
        .iter()
        .find(|e| e.kind == "approval.settled")
        .unwrap();
    assert_eq!(settled.data["outcome"], "approved");
    let step = events
        .iter()
        .rev()
        .find(|e| e.kind == "step.started")
        .unwrap();
    assert_eq!(step.data["stepIndex"], 1);

    // Second call of the same tool in the session: approved already.
    rt.post_message(&id, "refund ch_2").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(p.side_lines().len(), 4);
}

#[tokio::test]
async fn approval_always_asks_every_time_and_never_does_not_ask() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("deploy", Effect::Write, Approval::Always));
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    p.write_build(
        &a,
        &[logging_script("deploy", ""), logging_script("lookup", "")],
    );
    let rt = p.runtime(json!([
        call("deploy", json!({})),
        call("lookup", json!({})),
        call("deploy", json!({})),
        {"text": "done"}
    ]));
    let (id, outcome) = run_prompt(&rt, "go").await;
    assert!(matches!(outcome, DriveOutcome::WaitingInput(_)));
    rt.answer_input(&id, None, true, None).await.unwrap();
    let outcome = rt.drive(&id).await.unwrap();
    assert!(
        matches!(outcome, DriveOutcome::WaitingInput(_)),
        "always asks again: {outcome:?}"
    );
    rt.answer_input(&id, None, true, None).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let starts: Vec<String> = p
        .side_lines()
        .into_iter()
        .filter(|l| l.starts_with("start"))
        .collect();
    assert_eq!(starts.len(), 3, "{starts:?}");
    assert_eq!(
        all_events(&rt, &id)
            .await
            .iter()
            .filter(|e| e.kind == "input.requested")
            .count(),
        2
    );
}

#[tokio::test]
async fn a_denied_call_reaches_the_model_as_denied_with_the_reason() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("refund", Effect::Write, Approval::Always));
    p.write_build(&a, &[logging_script("refund", "")]);
    let rt = p
        .runtime(json!([call("refund", json!({"charge": "ch_1"})), {"text": "OK, not refunded."}]));
    let (id, _) = run_prompt(&rt, "refund").await;
    rt.answer_input(&id, None, false, Some("too large".to_owned()))
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert!(p.side_lines().is_empty(), "a denied call never runs");
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Denied);
    let context = rt.store().context(&id).await.unwrap();
    let tool_message = context
        .iter()
        .find_map(
            |m| match serde_json::from_value::<Message>(m.body.clone()).ok()? {
                Message::Tool {
                    content, is_error, ..
                } => Some((content, is_error)),
                _ => None,
            },
        )
        .unwrap();
    assert!(tool_message.1);
    assert!(tool_message.0.contains("denied"), "{}", tool_message.0);
    assert!(tool_message.0.contains("too large"), "{}", tool_message.0);
    let events = all_events(&rt, &id).await;
    let settled = events
        .iter()
        .find(|e| e.kind == "approval.settled")
        .unwrap();
    assert_eq!(settled.data["outcome"], "denied");
    let result = events.iter().find(|e| e.kind == "action.result").unwrap();
    assert_eq!(result.data["status"], "denied");
}

#[tokio::test]
async fn invalid_input_is_an_error_result_and_nothing_runs() {
    let p = TestProject::new();
    let mut a = agent();
    let mut tool = script_tool("weather", Effect::Read, Approval::Never);
    tool.input_schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"]
    });
    a.tools.push(tool);
    p.write_build(&a, &[logging_script("weather", "")]);
    let rt = p.runtime(json!([call("weather", json!({"town": 3})), {"text": "sorry"}]));
    let (id, outcome) = run_prompt(&rt, "weather?").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    assert!(p.side_lines().is_empty());
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Failed);
    let output = calls[0]
        .output
        .as_ref()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert!(output.contains("Invalid input"), "{output}");
    assert!(output.contains("city"), "{output}");
}

#[tokio::test]
async fn the_breaker_opens_after_three_failures_and_the_model_is_told() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("flaky", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("flaky", "echo boom >&2; exit 3")]);
    let rt = p.runtime(json!([
        call("flaky", json!({})),
        call("flaky", json!({})),
        call("flaky", json!({})),
        call("flaky", json!({})),
        {"text": "giving up"}
    ]));
    let (id, outcome) = run_prompt(&rt, "try").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let starts = p
        .side_lines()
        .iter()
        .filter(|l| l.starts_with("start"))
        .count();
    assert_eq!(starts, 3, "the fourth call is refused");
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.status == CallStatus::Failed));
    let refusal = calls[3].output.as_ref().unwrap().as_str().unwrap();
    assert!(refusal.contains("temporarily disabled"), "{refusal}");
    let breaker = rt
        .store()
        .breaker(&format!("flaky@{id}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(breaker.consecutive_failures, 3);
    assert!(breaker.open_until > eve_runtime::store::now_ms() + 20_000);
    assert_eq!(breaker.backoff_ms, 60_000, "the next open period doubles");
}

#[tokio::test]
async fn the_step_limit_stops_the_turn_with_a_stop_reason() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.limits.max_steps_per_turn = 2;
    a.tools
        .push(script_tool("noop", Effect::Read, Approval::Never));
    p.write_build(&a, &[("tools/noop.sh".to_owned(), "echo ok\n".to_owned())]);
    let rt = p.runtime(json!([
        call("noop", json!({})),
        call("noop", json!({})),
        call("noop", json!({})),
        {"text": "never"}
    ]));
    let (id, outcome) = run_prompt(&rt, "loop").await;
    let DriveOutcome::Failed { code, message } = outcome else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert_eq!(code, "max_steps_per_turn");
    assert!(message.contains("step limit"), "{message}");
    let events = all_events(&rt, &id).await;
    let failed = events.iter().find(|e| e.kind == "turn.failed").unwrap();
    assert_eq!(failed.data["stopReason"], "max_steps_per_turn");
    assert_eq!(events.last().unwrap().kind, "session.waiting");
    let turn = rt.store().last_turn(&id).await.unwrap().unwrap();
    assert_eq!(turn.status, TurnStatus::Failed);
    assert_eq!(
        events.iter().filter(|e| e.kind == "step.started").count(),
        2
    );
}

#[tokio::test]
async fn the_token_limit_holds_the_next_turn_until_a_principal_answers() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.limits.max_tokens = Some(100);
    p.write_build(&a, &[]);
    let rt = p.runtime(json!([
        {"text": "one", "usage": {"input_tokens": 90, "output_tokens": 20}},
        {"text": "two"}
    ]));
    let (id, outcome) = run_prompt(&rt, "hi").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    rt.post_message(&id, "again").await.unwrap();
    let outcome = rt.drive(&id).await.unwrap();
    // A root session over its budget asks before its next model call (eve's session limit).
    assert!(
        matches!(&outcome, DriveOutcome::WaitingInput(r)
            if r.len() == 1 && r[0].kind == "session-limit"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn load_skill_returns_the_body_with_eves_action_kinds() {
    let p = TestProject::new();
    let mut a = agent();
    a.skills
        .push(skill("release", "# Release checklist\n\n1. Bump.\n"));
    p.write_build(&a, &[]);
    let rt = p.runtime(json!([call("load_skill", json!({"name": "release"})), {"text": "done"}]));
    let (id, outcome) = run_prompt(&rt, "load the release skill").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    let requested = events
        .iter()
        .find(|e| e.kind == "actions.requested")
        .unwrap();
    assert_eq!(requested.data["actions"][0]["kind"], "load-skill");
    assert_eq!(requested.data["actions"][0]["name"], "release");
    let call_id = requested.data["actions"][0]["callId"].as_str().unwrap();
    assert_eq!(
        requested.data["presentation"][call_id]["label"],
        "Load skill release"
    );
    let result = events.iter().find(|e| e.kind == "action.result").unwrap();
    assert_eq!(result.data["result"]["kind"], "load-skill-result");
    assert_eq!(
        result.data["result"]["output"],
        "# Release checklist\n\n1. Bump.\n"
    );
    let session = rt.session(&id).await.unwrap().unwrap();
    assert_eq!(session.loaded_skills, ["release"]);
}

#[tokio::test]
async fn the_system_prompt_lists_skills_that_are_not_deferred() {
    let mut a = agent();
    a.skills.push(skill("release", "body"));
    let mut hidden = skill("secret", "body");
    hidden.deferred = true;
    a.skills.push(hidden);
    let manifest = eve_compile::Manifest {
        version: eve_compile::MANIFEST_VERSION,
        eve_version: "t".into(),
        agent: a,
        files: Default::default(),
    };
    let prompt = eve_runtime::engine::system_prompt(&manifest);
    assert!(prompt.starts_with("You are a test agent."));
    assert!(prompt.contains("- release: How to release."));
    assert!(!prompt.contains("secret"));
}

#[tokio::test]
async fn calls_of_one_step_run_in_parallel() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("slow", Effect::Read, Approval::Never));
    // Each call waits (up to 10 s) until all three have started: run one after another, the
    // first would finish before the others start.
    p.write_build(
        &a,
        &[logging_script(
            "slow",
            "n=0\nwhile [ \"$(grep -c '^start' \"$SIDE_FILE\")\" -lt 3 ] && [ $n -lt 200 ]; do \
             sleep 0.05; n=$((n+1)); done",
        )],
    );
    let rt = p.runtime(json!([
        {"tool_calls": [{"name": "slow", "input": {"n": 1}}, {"name": "slow", "input": {"n": 2}},
                        {"name": "slow", "input": {"n": 3}}]},
        {"text": "done"}
    ]));
    let (id, outcome) = run_prompt(&rt, "go").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let lines = p.side_lines();
    let kinds: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        kinds,
        ["start", "start", "start", "done", "done", "done"],
        "the three calls overlap: {lines:?}"
    );
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
    let keys: std::collections::HashSet<_> = calls.iter().map(|c| &c.idempotency_key).collect();
    assert_eq!(keys.len(), 3);
}

#[tokio::test]
async fn compaction_replaces_old_context_and_pins_loaded_skills() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.context_window = Some(200);
    a.config.compaction.threshold = 0.5;
    a.skills.push(skill("style", "Always answer in haiku."));
    p.write_build(&a, &[]);
    let long = "word ".repeat(200);
    let rt = p.runtime(json!([
        call("load_skill", json!({"name": "style"})),
        {"text": long},
        {"text": "SUMMARY: the user asked things"},
        {"text": "after compaction"}
    ]));
    let (id, outcome) = run_prompt(&rt, "first").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    rt.post_message(&id, "second").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    let compaction = events
        .iter()
        .find(|e| e.kind == "compaction.completed")
        .expect("compacted");
    assert_eq!(compaction.data["sessionId"], id.as_str());
    assert_eq!(compaction.data["turnId"], "turn_1");
    let context = rt.store().context(&id).await.unwrap();
    assert_eq!(context[0].kind, "checkpoint");
    assert_eq!(context[0].body["skills"][0]["name"], "style");
    assert_eq!(
        context[0].body["skills"][0]["body"],
        "Always answer in haiku."
    );
    // The current turn's message is kept verbatim after the checkpoint.
    let second: Message = serde_json::from_value(context[1].body.clone()).unwrap();
    assert_eq!(second, Message::user("second"));
    // History is append-only: nothing was deleted.
    let all = rt.store().messages(&id, 0, 1000).await.unwrap();
    assert!(all.len() > context.len());
}

#[tokio::test]
async fn manual_compact_clear_and_reset_emit_their_events() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "one"}, {"text": "summary"}]));
    let (id, _) = run_prompt(&rt, "hi").await;
    rt.compact(&id).await.unwrap();
    rt.clear(&id).await.unwrap();
    rt.reset(&id).await.unwrap();
    let kinds = kinds(&all_events(&rt, &id).await);
    let tail: Vec<&str> = kinds.iter().map(String::as_str).rev().take(6).collect();
    assert_eq!(
        tail,
        [
            "session.waiting",
            "session.reset",
            "session.waiting",
            "context.cleared",
            "session.waiting",
            "compaction.completed"
        ]
    );
    assert!(rt.store().context(&id).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_parked_turn_can_be_cancelled() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("deploy", Effect::Write, Approval::Always));
    p.write_build(&a, &[logging_script("deploy", "")]);
    let rt = p.runtime(json!([call("deploy", json!({})), {"text": "next"}]));
    let (id, _) = run_prompt(&rt, "deploy").await;
    rt.cancel(&id).await.unwrap();
    let session = rt.session(&id).await.unwrap().unwrap();
    assert_eq!(session.status, SessionStatus::Idle);
    assert!(!session.cancel_requested);
    assert!(rt.pending_inputs(&id).await.unwrap().is_empty());
    let kinds = kinds(&all_events(&rt, &id).await);
    assert!(kinds.ends_with(&["turn.cancelled".to_owned(), "session.waiting".to_owned()]));
    // The session still works.
    rt.post_message(&id, "again").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert!(p.side_lines().is_empty());
}

#[tokio::test]
async fn an_idle_session_moves_to_the_newest_build_a_busy_one_finishes_on_its_own() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("which", Effect::Read, Approval::Always));
    let old = p.write_build(
        &a,
        &[(
            "tools/which.sh".into(),
            "echo \"old\" >> \"$SIDE_FILE\"\n".into(),
        )],
    );
    let script =
        json!([call("which", json!({})), {"text": "a"}, call("which", json!({})), {"text": "b"}]);
    let rt = p.runtime(script);
    let (id, outcome) = run_prompt(&rt, "which?").await;
    assert!(matches!(outcome, DriveOutcome::WaitingInput(_)));
    // A new build lands while the turn is parked: the turn finishes on the old build.
    a.instructions = "You are the new agent.".into();
    let new = p.write_build(
        &a,
        &[(
            "tools/which.sh".into(),
            "echo \"new\" >> \"$SIDE_FILE\"\n".into(),
        )],
    );
    assert_ne!(old, new);
    rt.answer_input(&id, None, true, None).await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(p.side_lines(), ["old"]);
    assert_eq!(rt.session(&id).await.unwrap().unwrap().build_hash, old);
    // Its next message moves it.
    rt.post_message(&id, "again").await.unwrap();
    rt.drive(&id).await.unwrap();
    rt.answer_input(&id, None, true, None).await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(p.side_lines(), ["old", "new"]);
    assert_eq!(rt.session(&id).await.unwrap().unwrap().build_hash, new);
    let turn = rt.store().last_turn(&id).await.unwrap().unwrap();
    assert_eq!(turn.build_hash, new);
}

#[tokio::test]
async fn a_model_error_fails_the_turn_and_the_session_goes_on() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"error": "upstream exploded"}, {"text": "fine now"}]));
    let (id, outcome) = run_prompt(&rt, "hi").await;
    let DriveOutcome::Failed { code, message } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(code, "model_error");
    assert!(message.contains("upstream exploded"), "{message}");
    let events = all_events(&rt, &id).await;
    assert!(events.iter().any(|e| e.kind == "turn.failed"));
}

#[tokio::test]
async fn messages_are_accepted_before_anything_runs_and_processed_in_order() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "r1"}, {"text": "r2"}, {"text": "r3"}]));
    let id = rt.create_session(None).await.unwrap();
    rt.post_message(&id, "m1").await.unwrap();
    rt.post_message(&id, "m2").await.unwrap();
    rt.post_message(&id, "m3").await.unwrap();
    assert_eq!(rt.store().pending_inbox(&id).await.unwrap().len(), 3);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let received: Vec<String> = all_events(&rt, &id)
        .await
        .iter()
        .filter(|e| e.kind == "message.received")
        .map(|e| e.data["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(received, ["m1", "m2", "m3"]);
    assert!(matches!(
        rt.post_message("wrun_nope", "x").await,
        Err(RuntimeError::SessionNotFound(_))
    ));
    assert!(matches!(
        rt.post_message(&id, "  ").await,
        Err(RuntimeError::EmptyMessage)
    ));
}

#[tokio::test]
async fn follow_streams_stored_then_live_events_without_gaps() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "one two three"}, {"text": "four"}]));
    let (id, _) = run_prompt(&rt, "hi").await;
    let stored = all_events(&rt, &id).await.len() as u64;
    let mut follower = rt.follow(&id, 0);
    let driver = {
        let rt = rt.clone();
        let id = id.clone();
        tokio::spawn(async move {
            rt.post_message(&id, "again").await.unwrap();
            rt.drive(&id).await.unwrap()
        })
    };
    let mut seen = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(5), follower.next())
            .await
            .unwrap()
            .unwrap();
        let done = e.index >= stored && e.kind == "session.waiting";
        seen.push(e.index);
        if done {
            break;
        }
    }
    driver.await.unwrap();
    let expected: Vec<u64> = (0..seen.len() as u64).collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_sessions_driven_at_once_never_see_a_locked_database() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("noop", Effect::Read, Approval::Never));
    p.write_build(&a, &[("tools/noop.sh".to_owned(), "echo ok\n".to_owned())]);
    let rt = p.runtime(json!([call("noop", json!({})), {"text": "done"}]));
    let mut tasks = Vec::new();
    for i in 0..24 {
        let rt = rt.clone();
        tasks.push(tokio::spawn(async move {
            let id = rt.create_session(Some(format!("hi {i}"))).await.unwrap();
            rt.drive(&id).await.unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), DriveOutcome::Idle);
    }
}

#[tokio::test]
async fn cancel_stops_a_running_turn_and_kills_its_tool() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("slow", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("slow", "sleep 30")]);
    let rt = p.runtime(json!([call("slow", json!({})), {"text": "never"}]));
    let id = rt.create_session(Some("go".into())).await.unwrap();
    let task = {
        let rt = rt.clone();
        let id = id.clone();
        tokio::spawn(async move { rt.drive(&id).await.unwrap() })
    };
    eventually("the tool started", || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    let started = Instant::now();
    rt.cancel(&id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("cancel is prompt")
        .unwrap();
    assert_eq!(outcome, DriveOutcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(15));
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Cancelled);
    let kinds = kinds(&all_events(&rt, &id).await);
    assert!(kinds.ends_with(&["turn.cancelled".to_owned(), "session.waiting".to_owned()]));
    assert!(!rt.session(&id).await.unwrap().unwrap().cancel_requested);
}

#[tokio::test]
async fn steer_folds_a_message_into_the_running_turn() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.turn_policy = eve_compile::TurnPolicy::Steer;
    a.tools
        .push(script_tool("slow", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("slow", "sleep 0.3")]);
    let rt = p.runtime(json!([call("slow", json!({})), {"text": "done"}]));
    let id = rt.create_session(Some("first".into())).await.unwrap();
    let task = {
        let rt = rt.clone();
        let id = id.clone();
        tokio::spawn(async move { rt.drive(&id).await.unwrap() })
    };
    eventually("the tool started", || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    rt.post_message(&id, "also this").await.unwrap();
    assert_eq!(task.await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    let received: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.kind == "message.received")
        .map(|e| {
            (
                e.data["message"].as_str().unwrap(),
                e.data["turnId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(received, [("first", "turn_0"), ("also this", "turn_0")]);
    assert_eq!(rt.session(&id).await.unwrap().unwrap().turn_count, 1);
}

#[tokio::test]
async fn the_wall_clock_limit_stops_a_long_tool_and_the_turn() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.limits.max_turn_seconds = Some(1);
    a.tools
        .push(script_tool("slow", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("slow", "sleep 30")]);
    let rt = p.runtime(json!([call("slow", json!({})), {"text": "never"}]));
    let started = Instant::now();
    let (id, outcome) = run_prompt(&rt, "go").await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(&outcome, DriveOutcome::Failed { code, .. } if code == "max_turn_seconds"),
        "{outcome:?}"
    );
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Failed);
}

/// A caller that gives up on `EventCursor::next` midway (a `select!` that took another branch)
/// loses no event: the session's last event still comes, and ends the stream.
#[tokio::test]
async fn a_cursor_dropped_midway_loses_no_event() {
    use eve_runtime::server::{EventCursor, Next};
    use tokio_util::sync::CancellationToken;
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "done"}]));
    let (id, _) = run_prompt(&rt, "hi").await;
    let last = all_events(&rt, &id).await.len() as u64 - 1;
    // Give up after more and more polls, so that some attempts stop inside the read of the event
    // and some inside the rest check that follows it. Counted in polls, not time: a timer fires
    // on a millisecond tick, after which a fast machine has finished the whole call.
    let mut interrupted = 0;
    for attempt in 0..400u64 {
        let mut cursor =
            EventCursor::follow(rt.clone(), id.clone(), last, CancellationToken::new());
        let outcome = {
            let mut next = std::pin::pin!(cursor.next(None));
            let mut outcome = None;
            for _ in 0..=attempt % 100 {
                if let std::task::Poll::Ready(n) = futures::poll!(next.as_mut()) {
                    outcome = Some(n);
                    break;
                }
                tokio::task::yield_now().await;
            }
            outcome
        };
        match outcome {
            Some(Next::Event(e)) => {
                assert_eq!(e.index, last);
                continue;
            }
            Some(_) => panic!("the cursor ended before the last event"),
            None => interrupted += 1,
        }
        match tokio::time::timeout(Duration::from_secs(5), cursor.next(None)).await {
            Ok(Next::Event(e)) => assert_eq!(e.index, last, "attempt {attempt}"),
            Ok(_) => panic!("attempt {attempt}: the cursor ended without the last event"),
            Err(_) => panic!("attempt {attempt}: the last event was lost"),
        }
        assert!(
            matches!(cursor.next(None).await, Next::End),
            "the rest point ends the stream"
        );
    }
    println!("{interrupted} of 400 attempts cut short");
    assert!(interrupted > 0, "no attempt was cut short");
}

#[tokio::test]
async fn refused_inputs_do_not_open_a_breaker_for_this_session_or_another() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.default_tools = true;
    p.write_build(&a, &[]);
    let escape = || call("read_file", json!({"path": "../../outside.txt"}));
    let rt = p.runtime(json!([
        escape(),
        escape(),
        escape(),
        escape(),
        {"text": "cannot"}
    ]));
    let (first, outcome) = run_prompt(&rt, "read it").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&first, 0).await.unwrap();
    assert_eq!(calls.len(), 4);
    for c in &calls {
        let output = c.output.as_ref().unwrap().as_str().unwrap();
        assert!(output.contains("outside the workspace"), "{output}");
        assert!(!output.contains("temporarily disabled"), "{output}");
    }
    assert!(rt.store().breaker("read_file").await.unwrap().is_none());
    assert!(
        rt.store()
            .breaker(&format!("read_file@{first}"))
            .await
            .unwrap()
            .is_none()
    );
    let (second, _) = run_prompt(&rt, "read another").await;
    let calls = rt.store().tool_calls(&second, 0).await.unwrap();
    let output = calls[0].output.as_ref().unwrap().as_str().unwrap();
    assert!(!output.contains("temporarily disabled"), "{output}");
    assert!(
        output.contains("outside the workspace"),
        "the call ran: {output}"
    );
    // Every tool's breaker is scoped to the session (an agent-wide one opens only when many
    // sessions fail alike: `escape_fate`).
    assert!(eve_runtime::engine::breaker_scope_is_session("read_file"));
    assert!(eve_runtime::engine::breaker_scope_is_session("flaky"));
}
