//! The built-in `agent`: the root agent calls a fresh copy of itself as a subagent
//! (`{message, task_id?}`), and the copy is not offered `agent` in turn.

use eve_runtime::engine::DriveOutcome;
use eve_runtime::store::CallStatus;
use serde_json::json;

use crate::composition::{PerAgent, call, children, root_calls, runtime};
use crate::engine_support::*;

#[tokio::test]
async fn the_root_calls_a_copy_of_itself_which_cannot_call_agent_again() {
    let p = TestProject::new();
    let mut root = agent();
    root.config.builtins = Some(vec!["agent".to_owned()]);
    root.config.default_tools = true;
    p.write_build(&root, &[]);
    let models = PerAgent::default();
    models.set(
        "",
        json!([call("agent", "c1", json!({"message": "count to three"})), {"text": "root done"}]),
    );
    // The copy runs at path `#copy`; it tries `agent` itself, which it is not offered.
    models.set(
        "#copy",
        json!([call("agent", "k1", json!({"message": "and again"})), {"text": "one two three"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("go".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);

    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].name, "agent");
    assert_eq!(calls[0].status, CallStatus::Completed, "{calls:?}");
    let output = calls[0].output.clone().unwrap();
    assert_eq!(output["answer"], "one two three", "{output}");
    let task_id = output["task_id"].as_str().unwrap().to_owned();

    let kids = children(&rt, &id).await;
    assert_eq!(kids.len(), 1, "one copy");
    let child_calls = root_calls(&rt, &kids[0], 0).await;
    assert_eq!(child_calls.len(), 1, "{child_calls:?}");
    assert_ne!(
        child_calls[0].status,
        CallStatus::Completed,
        "{child_calls:?}"
    );
    let said = child_calls[0]
        .output
        .clone()
        .unwrap_or_default()
        .to_string();
    assert!(said.contains("no tool named `agent`"), "{said}");
    assert!(
        children(&rt, &kids[0]).await.is_empty(),
        "the copy started no copy"
    );

    assert!(task_id.starts_with(&format!("{id}:")), "{task_id}");
}

#[tokio::test]
async fn agent_is_off_when_default_tools_turns_it_off() {
    let p = TestProject::new();
    let mut root = agent();
    root.config.default_tools = true;
    root.config.builtins = Some(vec!["bash".to_owned()]);
    p.write_build(&root, &[]);
    let models = PerAgent::default();
    models.set(
        "",
        json!([call("agent", "c1", json!({"message": "hi"})), {"text": "ok"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("go".into())).await.unwrap();
    rt.drive(&id).await.unwrap();
    let calls = root_calls(&rt, &id, 0).await;
    assert_ne!(calls[0].status, CallStatus::Completed, "{calls:?}");
    assert!(children(&rt, &id).await.is_empty());
}
