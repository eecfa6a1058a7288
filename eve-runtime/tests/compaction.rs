//! When compaction fires: its estimate counts everything a request carries (the tools' schemas
//! included) and takes the larger of that and the usage the provider last reported.

use eve_compile::{Approval, Effect};
use serde_json::json;

use crate::engine_support::{TestProject, agent, all_events, run_prompt, script_tool};

/// The turn ids that compacted, in order.
async fn compacted_turns(rt: &eve_runtime::engine::Runtime, id: &str) -> Vec<String> {
    all_events(rt, id)
        .await
        .iter()
        .filter(|e| e.kind == "compaction.completed")
        .map(|e| e.data["turnId"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn the_tools_schemas_count_toward_the_window() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.context_window = Some(800);
    // Requests of about 1,900 tokens, nearly all of them the tools' descriptions and schemas.
    for i in 0..4 {
        let mut tool = script_tool(&format!("tool{i}"), Effect::Read, Approval::Never);
        tool.description = "Looks things up in the archive. ".repeat(50);
        tool.input_schema = json!({"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look up. ".repeat(10)}
        }});
        a.tools.push(tool);
    }
    p.write_build(&a, &[]);
    let rt = p.runtime(json!([
        {"text": "one", "usage": {"input_tokens": 1}},
        {"text": "SUMMARY: the user said first", "usage": {"input_tokens": 1}},
        {"text": "two", "usage": {"input_tokens": 1}}
    ]));
    let (id, _) = run_prompt(&rt, "first").await;
    rt.post_message(&id, "second").await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(compacted_turns(&rt, &id).await, ["turn_1"]);
}

#[tokio::test]
async fn the_usage_the_provider_last_reported_counts_from_the_next_turn_on() {
    let p = TestProject::new();
    let mut a = agent();
    a.config.context_window = Some(800);
    p.write_build(&a, &[]);
    // Small messages, but the provider says the first call took 1,500 tokens of prompt.
    let rt = p.runtime(json!([
        {"text": "one", "usage": {"input_tokens": 1500}},
        {"text": "SUMMARY: the user said first", "usage": {"input_tokens": 1}},
        {"text": "two", "usage": {"input_tokens": 1}}
    ]));
    let (id, _) = run_prompt(&rt, "first").await;
    rt.post_message(&id, "second").await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(compacted_turns(&rt, &id).await, ["turn_1"]);
}

/// A model client whose provider does not say its context window, counting how often it is asked.
struct Unsaid {
    mock: eve_runtime::model::mock::MockClient,
    asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl eve_runtime::model::ModelClient for Unsaid {
    async fn stream(
        &self,
        request: &eve_runtime::model::ModelRequest,
        on_event: &mut (dyn FnMut(eve_runtime::model::ModelEvent) + Send),
    ) -> Result<eve_runtime::model::ModelResponse, eve_runtime::model::ModelError> {
        self.mock.stream(request, on_event).await
    }

    async fn context_window(&self, _model: &str) -> Option<u64> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        None
    }
}

#[tokio::test]
async fn a_provider_that_does_not_say_its_window_is_not_asked_at_every_turn() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    p.write_build(&a, &[]);
    let call = json!({"tool_calls": [{"name": "lookup", "input": {}}]});
    let steps = json!([call, call, {"text": "one"}, call, {"text": "two"}, {"text": "three"}]);
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = Unsaid {
        mock: eve_runtime::model::mock::MockClient::from_steps(
            eve_runtime::model::mock::load_script(&steps.to_string()).unwrap(),
        ),
        asked: asked.clone(),
    };
    let rt = p.runtime_on(std::sync::Arc::new(client), None);
    let (id, _) = run_prompt(&rt, "first").await;
    for message in ["second", "third"] {
        rt.post_message(&id, message).await.unwrap();
        rt.drive(&id).await.unwrap();
    }
    let requests = all_events(&rt, &id)
        .await
        .iter()
        .filter(|e| e.kind == "step.started")
        .count();
    let asked = asked.load(std::sync::atomic::Ordering::SeqCst);
    println!("three turns of {requests} steps asked the provider for its window {asked} time(s)");
    assert_eq!(requests, 6, "the script's six model calls");
    assert_eq!(asked, 1, "asked once in three turns");
}
