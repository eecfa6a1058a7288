//! `GET /eve/v1/traces` through the real server on `127.0.0.1:0`, with tracing on and the local
//! trace store in a temporary folder: after a turn with a tool call, the session's trace holds the
//! turn's span, its step, the model call and the tool call, each under its parent, with start and
//! end (what the console draws as a waterfall).
//!
//! Access is the operators': a stranger without credentials gets 401, a caller who is not an
//! operator (the session's own owner) 403 and no span; its twin, the operator's token, reads them.

use std::sync::Arc;
use std::time::Duration;

use eve_runtime::engine::{FixedModelProvider, ResolvedModel};
use eve_runtime::model::mock::MockClient;
use eve_runtime::redact::Secrets;
use eve_runtime::server::RouterOptions;
use eve_runtime::telemetry::config::{Local, Sampling};
use eve_runtime::telemetry::{Telemetry, TelemetryConfig};
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const OPS: &str = "ops-token-0123456789";
const USER: &str = "user-token-0123456789";

const SCRIPT: &str = r#"[
  {"tool_calls": [{"name": "get_weather", "input": {"city": "Paris"}, "id": "c1"}],
   "usage": {"input_tokens": 120, "output_tokens": 9}},
  {"text": "Sunny in Paris.", "usage": {"input_tokens": 150, "output_tokens": 5}}
]"#;

async fn start(traces: &std::path::Path) -> TestServer {
    let agent = AgentDir::standard();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${OPS_TOKEN}\", \"${USER_TOKEN}\"]\n\
         operators:\n  principals: [\"token:OPS_TOKEN\"]\n",
    );
    let server = TestServer::start_full(
        agent,
        &[("OPS_TOKEN", OPS), ("USER_TOKEN", USER)],
        |c| c,
        |c| {
            let model = ResolvedModel {
                client: Arc::new(MockClient::new("echo", Some(SCRIPT)).unwrap()),
                model: "scripted".to_owned(),
                model_id: "mock/scripted".to_owned(),
                context_window: None,
                price_per_million: None,
            };
            c.models = Arc::new(FixedModelProvider(model));
        },
        |_| RouterOptions::default(),
    )
    .await;
    let config = TelemetryConfig {
        service_name: "eve-test".into(),
        otlp: None,
        local: Some(Local {
            path: traces.join("traces.db"),
            max_age: Duration::from_secs(3600),
            max_bytes: 1 << 30,
            retain: 20,
        }),
        sampling: Sampling::AlwaysOn,
        capture_content: false,
    };
    server
        .runtime
        .set_telemetry(Telemetry::new(config, Arc::new(Secrets::new())).unwrap());
    server
}

async fn traces(server: &TestServer, token: Option<&str>, session: &str) -> (u16, Value) {
    let mut request = server
        .http
        .get(server.url(&format!("/eve/v1/traces?session={session}")));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(json!(text)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_a_turn_as_its_spans_and_only_operators_do() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    // The user's own session.
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .bearer_auth(USER)
        .json(&json!({"message": "Weather?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let created: Value = response.json().await.unwrap();
    let id = created["sessionId"].as_str().unwrap().to_owned();
    server
        .until_rest_as(&format!("Bearer {USER}"), &id, 0)
        .await;

    // The twin first: the operator reads the spans (written to the store within a second).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let trace = loop {
        let (status, body) = traces(&server, Some(OPS), &id).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["enabled"], true, "{body}");
        let found = body["traces"].as_array().unwrap().iter().find(|t| {
            t["spans"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"].as_str().unwrap().starts_with("invoke_agent"))
        });
        if let Some(trace) = found {
            break trace.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no turn span arrived: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let spans = trace["spans"].as_array().unwrap();
    let named = |prefix: &str| {
        spans
            .iter()
            .find(|s| s["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no span `{prefix}…`: {trace:#}"))
    };
    let turn = named("invoke_agent");
    let tool = named("execute_tool get_weather");
    let chat = named("chat scripted");
    let step = spans
        .iter()
        .find(|s| s["name"] == "agent.step" && s["spanId"] == tool["parentId"])
        .unwrap_or_else(|| panic!("the tool call's step: {trace:#}"));
    assert_eq!(step["parentId"], turn["spanId"], "{trace:#}");
    assert!(
        spans
            .iter()
            .filter(|s| s["name"] == "agent.step")
            .any(|s| s["spanId"] == chat["parentId"]),
        "a model call sits under a step: {trace:#}"
    );
    for span in spans {
        assert!(span["endUs"].as_i64() >= span["startUs"].as_i64(), "{span}");
        assert_eq!(span["sessionId"], id.as_str(), "{span}");
    }
    assert_eq!(tool["attributes"]["eve.tool.outcome"], "completed");
    assert_eq!(trace["sessionId"], id.as_str());

    // The attack: a stranger, a wrong token, and the session's own owner, who is no operator.
    let (status, body) = traces(&server, None, &id).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = traces(&server, Some("wrong-token"), &id).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = traces(&server, Some(USER), &id).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "forbidden", "{body}");
    assert!(!body.to_string().contains("execute_tool"), "{body}");

    // A bad query is a coded 400.
    let response = server
        .http
        .get(server.url("/eve/v1/traces?limit=0"))
        .bearer_auth(OPS)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "invalid_query", "{body}");
    server.stop().await;
}
