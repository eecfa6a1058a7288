//! Resume after a driver dies mid-work (simulated in-process by aborting it; the real-process
//! SIGKILL tests live in eve-cli's crash suite).

use std::time::Duration;

use eve_compile::{Approval, Effect};
use eve_runtime::engine::{DriveOutcome, Runtime};
use eve_runtime::model::Message;
use eve_runtime::store::{CallStatus, TurnStatus};
use serde_json::json;

use crate::engine_support::*;

/// Drives `id` in a task and aborts it once `until` holds.
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

fn tool_messages(rows: &[eve_runtime::store::MessageRecord]) -> Vec<String> {
    rows.iter()
        .filter_map(
            |m| match serde_json::from_value::<Message>(m.body.clone()).ok()? {
                Message::Tool { content, .. } => Some(content),
                _ => None,
            },
        )
        .collect()
}

#[tokio::test]
async fn an_interrupted_write_call_is_not_rerun_and_the_model_is_told() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("charge", Effect::Write, Approval::Never));
    p.write_build(&a, &[logging_script("charge", "sleep 0.5")]);
    let script = json!([{"tool_calls": [{"name": "charge", "input": {}}]}, {"text": "checked"}]);
    let rt = p.runtime(script.clone());
    let id = rt.create_session(Some("charge it".into())).await.unwrap();
    drive_and_abort(&rt, &id, || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    drop(rt);
    let rt = p.runtime(script);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let starts = p
        .side_lines()
        .iter()
        .filter(|l| l.starts_with("start"))
        .count();
    assert_eq!(starts, 1, "never silently re-run: {:?}", p.side_lines());
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Interrupted);
    let told = tool_messages(&rt.store().context(&id).await.unwrap());
    assert!(told[0].contains("outcome is"), "{told:?}");
    assert!(told[0].contains("unknown"), "{told:?}");
    let turn = rt.store().last_turn(&id).await.unwrap().unwrap();
    assert_eq!(turn.status, TurnStatus::Completed);
}

#[tokio::test]
async fn an_interrupted_read_call_is_rerun_with_the_same_idempotency_key() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("fetch", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("fetch", "sleep 0.3")]);
    let script = json!([{"tool_calls": [{"name": "fetch", "input": {}}]}, {"text": "ok"}]);
    let rt = p.runtime(script.clone());
    let id = rt.create_session(Some("fetch".into())).await.unwrap();
    drive_and_abort(&rt, &id, || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    drop(rt);
    let rt = p.runtime(script);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let starts: Vec<String> = p
        .side_lines()
        .into_iter()
        .filter(|l| l.starts_with("start"))
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    let key = |l: &str| l.split(' ').nth(3).unwrap().to_owned();
    assert_eq!(key(&starts[0]), key(&starts[1]), "same idempotency key");
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].attempts, 2);
}

#[tokio::test]
async fn an_interrupted_write_call_that_needs_approval_is_asked_again() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("wire", Effect::Write, Approval::Always));
    p.write_build(&a, &[logging_script("wire", "sleep 0.5")]);
    let script = json!([{"tool_calls": [{"name": "wire", "input": {}}]}, {"text": "ok"}]);
    let rt = p.runtime(script.clone());
    let (id, _) = run_prompt(&rt, "wire").await;
    rt.answer_input(&id, None, true, None).await.unwrap();
    drive_and_abort(&rt, &id, || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    drop(rt);
    let rt = p.runtime(script);
    let outcome = rt.drive(&id).await.unwrap();
    let DriveOutcome::WaitingInput(requests) = outcome else {
        panic!("asked again expected, got {outcome:?}");
    };
    assert!(
        requests[0].prompt.contains("interrupted"),
        "{}",
        requests[0].prompt
    );
    rt.answer_input(&id, None, true, None).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let starts = p
        .side_lines()
        .iter()
        .filter(|l| l.starts_with("start"))
        .count();
    assert_eq!(starts, 2, "re-run only because a person approved it again");
}

#[tokio::test]
async fn a_driver_killed_mid_stream_redoes_the_step_once() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let script = json!([{"text": "a b c d e f g h", "delay_ms": 30}]);
    let rt = p.runtime(script.clone());
    let id = rt.create_session(Some("hi".into())).await.unwrap();
    let store = rt.store().clone();
    let sid = id.clone();
    let task = {
        let rt = rt.clone();
        let id = id.clone();
        tokio::spawn(async move { rt.drive(&id).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = store.events(&sid, 0, 1000).await.unwrap();
        if events.iter().any(|e| e.kind == "message.appended") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the model stream never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    task.abort();
    let _ = task.await;
    drop(rt);
    let rt = p.runtime(script);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let steps = rt.store().steps(&id, 0).await.unwrap();
    assert_eq!(steps.len(), 1);
    let events = all_events(&rt, &id).await;
    assert_eq!(
        events.iter().filter(|e| e.kind == "step.started").count(),
        1,
        "step.started is not repeated for the redone step"
    );
    assert_eq!(
        events.iter().filter(|e| e.kind == "turn.completed").count(),
        1
    );
}

#[tokio::test]
async fn resume_all_restarts_every_session_with_work() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "hello"}]));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(rt.create_session(Some("hi".into())).await.unwrap());
    }
    drop(rt);
    // A server-style runtime (autostart) picks them all up.
    let mut rt = p.runtime(json!([{"text": "hello"}]));
    rt = {
        let _ = &mut rt;
        rt
    };
    let found = rt.resume_all().await.unwrap();
    assert_eq!(found.len(), 3);
    for id in &ids {
        rt.settled(id).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline
            && !rt
                .store()
                .last_turn(id)
                .await
                .unwrap()
                .is_some_and(|t| t.status == TurnStatus::Completed)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let turn = rt.store().last_turn(id).await.unwrap().unwrap();
        assert_eq!(turn.status, TurnStatus::Completed);
    }
    assert!(rt.store().sessions_with_work().await.unwrap().is_empty());
}

/// A clear sent the moment `session.waiting` shows (as `eve chat` sends `/clear` or `/compact`
/// right after a turn) is not refused while the driver that sent it reads for more work and
/// gives back its lease: it waits for that driver to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_sent_as_a_turn_ends_waits_for_its_driver_to_stop() {
    const TURNS: usize = 200;
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let steps: Vec<serde_json::Value> = (0..TURNS)
        .map(|i| json!({"text": format!("reply {i}")}))
        .collect();
    let rt = p.runtime(json!(steps));
    let id = rt.create_session(None).await.unwrap();
    let mut refused = Vec::new();
    for i in 0..TURNS {
        let mut live = rt.subscribe(&id);
        rt.post_message(&id, &format!("message {i}")).await.unwrap();
        let driver = {
            let (rt, id) = (rt.clone(), id.clone());
            tokio::spawn(async move { rt.drive(&id).await })
        };
        loop {
            match live.recv().await {
                Ok(events) if events.iter().any(|e| e.kind == "session.waiting") => break,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("the live events ended: {e}"),
            }
        }
        if let Err(e) = rt.clear(&id).await {
            refused.push(e.to_string());
        }
        assert_eq!(driver.await.unwrap().unwrap(), DriveOutcome::Idle);
    }
    println!(
        "{TURNS} clears sent as their turn's session.waiting showed: {} refused",
        refused.len()
    );
    assert!(refused.is_empty(), "{refused:?}");
}
