//! `approval: auto`: a scripted reviewer decides each call. A read-only call runs unasked; a
//! destructive one is asked with the reviewer's reason; a reviewer that answers garbage or times
//! out asks a principal (fail-closed); a `tool.before` hook's denial comes before any review; a
//! resume after the driver dies between the review and the run does not review again; the
//! reviewer's tokens are counted in the session's usage.

use std::sync::Arc;

use eve_compile::{Agent, Approval, Effect};
use eve_runtime::engine::{DriveOutcome, ModelProvider, ResolvedModel, Runtime};
use eve_runtime::model::ModelError;
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{ApprovalState, CallStatus, StoredEvent};
use serde_json::{Value, json};

use crate::engine_support::*;

/// The agent's model plays `main`; the review model (`mock/reviewer`) plays `reviewer`, whose
/// step 0 answers every review (a review request holds no assistant message).
struct Models {
    main: ResolvedModel,
    reviewer: ResolvedModel,
}

impl ModelProvider for Models {
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError> {
        Ok(match agent.config.model.as_deref() {
            Some("mock/reviewer") => self.reviewer.clone(),
            _ => self.main.clone(),
        })
    }
}

fn mock(id: &str, steps: &Value) -> ResolvedModel {
    ResolvedModel {
        client: Arc::new(MockClient::from_steps(
            load_script(&steps.to_string()).unwrap(),
        )),
        model: id.to_owned(),
        model_id: format!("mock/{id}"),
        context_window: None,
        price_per_million: None,
    }
}

/// A project with an `approval: auto` tool `sh` (effect `write`) reviewed by `mock/reviewer`.
fn project(review_seconds: Option<u64>) -> TestProject {
    let p = TestProject::new();
    let mut a = agent();
    a.config.review_model = Some("mock/reviewer".to_owned());
    a.config.limits.review_seconds = review_seconds;
    let mut tool = script_tool("sh", Effect::Write, Approval::Auto);
    tool.description = "Runs a shell command in the workspace.".to_owned();
    tool.input_schema = json!({"type": "object", "properties": {"cmd": {"type": "string"}}});
    a.tools.push(tool);
    p.write_build(&a, &[logging_script("sh", "")]);
    p
}

fn runtime(p: &TestProject, cmd: &str, reviewer: Value) -> Runtime {
    let main = json!([
        {"tool_calls": [{"name": "sh", "id": "c1", "input": {"cmd": cmd}}]},
        {"text": "done"}
    ]);
    p.runtime_with_models(Arc::new(Models {
        main: mock("main", &main),
        reviewer: mock("reviewer", &reviewer),
    }))
}

fn reviewed(events: &[StoredEvent]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e.kind == "approval.reviewed")
        .map(|e| &e.data)
        .collect()
}

fn runs(p: &TestProject) -> usize {
    p.side_lines()
        .iter()
        .filter(|l| l.starts_with("done sh"))
        .count()
}

#[tokio::test]
async fn a_read_only_command_runs_unasked_and_the_review_is_counted() {
    let p = project(None);
    let rt = runtime(
        &p,
        "ls -la",
        json!([{"text": "{\"safe\": true, \"reason\": \"it only lists files\"}",
                "usage": {"input_tokens": 100, "output_tokens": 7}}]),
    );
    let id = rt.create_session(Some("list".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(runs(&p), 1);
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].approval, ApprovalState::Reviewed);
    let events = all_events(&rt, &id).await;
    assert!(!kinds(&events).contains(&"input.requested".to_owned()));
    let verdicts = reviewed(&events);
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0]["verdict"], "safe");
    assert_eq!(verdicts[0]["reason"], "it only lists files");
    assert_eq!(verdicts[0]["callId"], "c1");
    assert_eq!(verdicts[0]["reviewer"], "mock/reviewer");
    // The review's tokens are in the session's totals, beside the two model steps'.
    let steps: u64 = events
        .iter()
        .filter(|e| e.kind == "step.completed")
        .map(|e| e.data["usage"]["inputTokens"].as_u64().unwrap())
        .sum();
    let session = rt.store().session(&id).await.unwrap().unwrap();
    assert_eq!(session.usage.input_tokens, steps + 100);
}

#[tokio::test]
async fn a_destructive_command_is_asked_with_the_reviewers_reason() {
    let p = project(None);
    let rt = runtime(
        &p,
        "rm -rf ~/project",
        json!([{"text": "{\"safe\": false, \"reason\": \"it deletes the user's project\"}"}]),
    );
    let id = rt.create_session(Some("clean up".into())).await.unwrap();
    let DriveOutcome::WaitingInput(requests) = rt.drive(&id).await.unwrap() else {
        panic!("expected an approval request");
    };
    assert_eq!(runs(&p), 0, "nothing ran before a principal answered");
    assert!(
        requests[0]
            .prompt
            .contains("The reviewer judged it not safe: it deletes the user's project"),
        "{}",
        requests[0].prompt
    );
    let events = all_events(&rt, &id).await;
    assert_eq!(reviewed(&events)[0]["verdict"], "unsafe");
    // A principal's approval runs it, without a second review.
    rt.answer_input(&id, Some(&requests[0].id), true, None)
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(runs(&p), 1);
    assert_eq!(reviewed(&all_events(&rt, &id).await).len(), 1);
}

#[tokio::test]
async fn a_reviewer_answering_garbage_asks_a_principal() {
    let p = project(None);
    let rt = runtime(&p, "ls", json!([{"text": "Looks fine to me, go ahead!"}]));
    let id = rt.create_session(Some("list".into())).await.unwrap();
    let DriveOutcome::WaitingInput(requests) = rt.drive(&id).await.unwrap() else {
        panic!("a reviewer that cannot be read must not let the call run");
    };
    assert!(
        requests[0].prompt.contains("The reviewer could not decide"),
        "{}",
        requests[0].prompt
    );
    assert_eq!(runs(&p), 0);
    assert_eq!(
        reviewed(&all_events(&rt, &id).await)[0]["verdict"],
        "failed"
    );
}

#[tokio::test]
async fn a_reviewer_past_its_deadline_asks_a_principal() {
    let p = project(Some(1));
    let rt = runtime(
        &p,
        "ls",
        json!([{"text": "{\"safe\": true, \"reason\": \"too late\"}", "delay_ms": 5000}]),
    );
    let id = rt.create_session(Some("list".into())).await.unwrap();
    let started = std::time::Instant::now();
    let DriveOutcome::WaitingInput(requests) = rt.drive(&id).await.unwrap() else {
        panic!("a reviewer that times out must not let the call run");
    };
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    assert!(
        requests[0].prompt.contains("did not answer within 1 s"),
        "{}",
        requests[0].prompt
    );
    assert_eq!(runs(&p), 0);
}

#[tokio::test]
async fn a_hook_denial_comes_before_the_reviewer() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.review_model = Some("mock/reviewer".to_owned());
    a.tools
        .push(script_tool("sh", Effect::Write, Approval::Auto));
    a.hooks.push(eve_compile::Hook {
        name: "guard".to_owned(),
        source: "hooks/guard.sh".to_owned(),
        events: vec!["tool.before".to_owned()],
        timeout_ms: 5_000,
        env: Vec::new(),
        runner: eve_compile::Runner::Script {
            path: "hooks/guard.sh".to_owned(),
            interpreter: vec!["sh".to_owned()],
        },
    });
    p.write_build(
        &a,
        &[
            logging_script("sh", ""),
            (
                "hooks/guard.sh".to_owned(),
                "cat >/dev/null\necho '{\"decision\": \"deny\", \"reason\": \"frozen\"}'\n"
                    .to_owned(),
            ),
        ],
    );
    let rt = runtime(
        &p,
        "ls",
        json!([{"text": "{\"safe\": true, \"reason\": \"fine\"}"}]),
    );
    let id = rt.create_session(Some("list".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Denied);
    assert!(reviewed(&all_events(&rt, &id).await).is_empty());
    assert_eq!(runs(&p), 0);
}

/// The driver dies after the verdict is journaled, while the call runs: the resumed turn runs
/// the call (a read tool is re-run) on the journaled verdict, never asking the reviewer again.
#[tokio::test]
async fn a_resume_after_the_review_does_not_review_again() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.review_model = Some("mock/reviewer".to_owned());
    a.tools
        .push(script_tool("look", Effect::Read, Approval::Auto));
    p.write_build(&a, &[logging_script("look", "sleep 0.5")]);
    let main = json!([
        {"tool_calls": [{"name": "look", "id": "c1", "input": {}}]},
        {"text": "done"}
    ]);
    let reviewer = json!([{"text": "{\"safe\": true, \"reason\": \"reads only\"}"}]);
    let make = || {
        p.runtime_with_models(Arc::new(Models {
            main: mock("main", &main),
            reviewer: mock("reviewer", &reviewer),
        }))
    };
    let rt = make();
    let id = rt.create_session(Some("look".into())).await.unwrap();
    let task = {
        let rt = rt.clone();
        let id = id.clone();
        tokio::spawn(async move { rt.drive(&id).await })
    };
    eventually("the reviewed call started", || {
        p.side_lines().iter().any(|l| l.starts_with("start look"))
    })
    .await;
    task.abort();
    let _ = task.await;
    drop(rt);

    let rt = make();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    assert_eq!(reviewed(&events).len(), 1, "{:?}", kinds(&events));
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].approval, ApprovalState::Reviewed);
}
