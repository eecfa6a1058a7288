//! A server that reports no usage (llama.cpp, some proxies): eve estimates it from the request and
//! the answer, marks it estimated, and token limits still apply.

use std::sync::Arc;

use eve_runtime::model::Provider;
use eve_runtime::model::openai::OpenAiClient;

use super::fast_settings;
use super::server::{Reply, TestServer};
use super::wire::oa;
use crate::engine_support::{TestProject, agent, all_events, kinds, run_prompt};

fn answer(text: &str) -> Reply {
    Reply::sse(&[oa::text(text), oa::finish("stop"), oa::done()])
}

#[tokio::test]
async fn usage_a_server_does_not_report_is_estimated_and_limits_apply() {
    let server = TestServer::start(vec![
        answer(&"a long answer ".repeat(40)),
        answer("never asked for"),
    ])
    .await;
    let p = TestProject::new();
    let mut a = agent();
    a.config.limits.max_tokens = Some(100);
    p.write_build(&a, &[]);
    let settings = fast_settings(Provider::Vllm, &format!("{}/v1", server.url));
    let rt = p.runtime_on(
        Arc::new(OpenAiClient::new(&settings).unwrap()),
        Some(1_000_000),
    );
    let (id, _) = run_prompt(&rt, "hello").await;
    let events = all_events(&rt, &id).await;
    let step = events
        .iter()
        .find(|e| e.kind == "step.completed")
        .expect("a step completed");
    let usage = &step.data["usage"];
    assert_eq!(usage["estimated"], true, "{usage}");
    assert!(usage["inputTokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage["outputTokens"].as_u64().unwrap() >= 140, "{usage}");

    // The estimate counts against `limits.max_tokens`: the next turn asks before its model call.
    rt.post_message(&id, "and now?").await.unwrap();
    rt.drive(&id).await.unwrap();
    let events = all_events(&rt, &id).await;
    let asked = events
        .iter()
        .rev()
        .find(|e| e.kind == "input.requested")
        .unwrap_or_else(|| panic!("the limit applied: {:?}", kinds(&events)));
    assert_eq!(
        asked.data["requests"][0]["kind"], "session-limit",
        "{}",
        asked.data
    );
    assert_eq!(server.requests().len(), 1, "no model call past the limit");
}
