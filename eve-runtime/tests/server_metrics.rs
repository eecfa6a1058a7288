//! `/metrics` through the real server on `127.0.0.1:0`, over real SQLite, read by a real
//! Prometheus text-format parser (`prometheus_client`'s `text_string_to_metric_families`, from
//! the test venv of `scripts/setup-test-deps.sh`): after a scripted session of two turns (tools
//! that complete, an unknown tool that fails, a tool call with invalid input), the counters equal
//! what the stored events say (turns, steps, tool calls by tool and outcome, tokens by model).
//!
//! Access is the channel's: a stranger without credentials gets 401, a caller who is not an
//! operator 403; its twin, the operator's token, reads them.

use std::collections::BTreeMap;
use std::sync::Arc;

use eve_runtime::engine::{FixedModelProvider, ResolvedModel};
use eve_runtime::model::mock::MockClient;
use eve_runtime::server::RouterOptions;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const OPS: &str = "ops-token-0123456789";
const USER: &str = "user-token-0123456789";

/// Two turns: the first calls `get_weather` and a tool that does not exist, then answers; the
/// second calls `get_weather` with input its schema refuses and `get_weather` properly, then
/// answers. Every step reports its usage.
const SCRIPT: &str = r#"[
  {"tool_calls": [{"name": "get_weather", "input": {"city": "Paris"}, "id": "c1"},
                  {"name": "no_such_tool", "input": {}, "id": "c2"}],
   "usage": {"input_tokens": 120, "output_tokens": 9, "cache_read_tokens": 40}},
  {"text": "Sunny in Paris.", "usage": {"input_tokens": 150, "output_tokens": 5}},
  {"tool_calls": [{"name": "get_weather", "input": {"town": 3}, "id": "c3"},
                  {"name": "get_weather", "input": {"city": "Lyon"}, "id": "c4"}],
   "usage": {"input_tokens": 200, "output_tokens": 11}},
  {"text": "Sunny in Lyon too.", "usage": {"input_tokens": 230, "output_tokens": 6}}
]"#;

async fn start() -> TestServer {
    let agent = AgentDir::standard();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${OPS_TOKEN}\", \"${USER_TOKEN}\"]\n\
         operators:\n  principals: [\"token:OPS_TOKEN\"]\n",
    );
    TestServer::start_full(
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
    .await
}

fn python() -> std::path::PathBuf {
    std::env::var_os("EVE_TEST_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python"),
        Into::into,
    )
}

/// `text` parsed by `prometheus_client`'s parser: every sample as `name{k="v",…}` → value.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the test venv's python (run scripts/setup-test-deps.sh)");
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn metrics(server: &TestServer, token: Option<&str>) -> (u16, String, String) {
    let mut request = server.http.get(server.url("/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.text().await.unwrap())
}

async fn send(server: &TestServer, path: &str, body: Value) -> Value {
    let response = server
        .http
        .post(server.url(path))
        .bearer_auth(OPS)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_events_say() {
    let server = start().await;
    let created = send(&server, "/eve/v1/session", json!({"message": "Weather?"})).await;
    let id = created["sessionId"].as_str().unwrap().to_owned();
    let auth = format!("Bearer {OPS}");
    let first = server.until_rest_as(&auth, &id, 0).await;
    send(
        &server,
        &format!("/eve/v1/session/{id}"),
        json!({"message": "And Lyon?"}),
    )
    .await;
    server.until_rest_as(&auth, &id, first.len() as u64).await;
    let events = server.stored_as(&auth, &id, 0).await;

    // What the stored events say.
    let of = |kind: &'static str| events.iter().filter(move |e| e["type"] == kind);
    let mut calls: BTreeMap<(String, String), f64> = BTreeMap::new();
    for e in of("action.result") {
        let key = (
            e["data"]["result"]["toolName"].as_str().unwrap().to_owned(),
            e["data"]["status"].as_str().unwrap().to_owned(),
        );
        *calls.entry(key).or_default() += 1.0;
    }
    let tokens = |field: &str| {
        of("step.completed")
            .map(|e| e["data"]["usage"][field].as_u64().unwrap() as f64)
            .sum::<f64>()
    };
    assert_eq!(of("turn.completed").count(), 2, "{events:#?}");
    assert_eq!(
        calls.get(&("no_such_tool".into(), "failed".into())),
        Some(&1.0),
        "{calls:?}"
    );
    assert_eq!(
        calls.get(&("get_weather".into(), "completed".into())),
        Some(&2.0),
        "{calls:?}"
    );

    let (status, kind, text) = metrics(&server, Some(OPS)).await;
    assert_eq!(status, 200, "{text}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let samples = parse(&text);
    let get = |name: &str| samples.get(name).copied().unwrap_or(0.0);
    assert_eq!(
        get("eve_turns_started_total{}"),
        of("turn.started").count() as f64
    );
    assert_eq!(
        get("eve_turns_completed_total{}"),
        of("turn.completed").count() as f64
    );
    assert_eq!(get("eve_turns_failed_total{}"), 0.0);
    assert_eq!(
        get("eve_steps_total{}"),
        of("step.completed").count() as f64
    );
    let mut counted: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (name, value) in &samples {
        if let Some(labels) = name.strip_prefix("eve_tool_calls_total{") {
            let (outcome, tool) = labels
                .trim_end_matches('}')
                .split_once(',')
                .map(|(o, t)| {
                    let value = |s: &str| s.split_once('=').unwrap().1.trim_matches('"').to_owned();
                    (value(o), value(t))
                })
                .unwrap();
            counted.insert((tool, outcome), *value);
        }
    }
    assert_eq!(counted, calls, "tool calls by tool and outcome:\n{text}");
    for (kind, field) in [
        ("input", "inputTokens"),
        ("output", "outputTokens"),
        ("cached", "cacheReadTokens"),
    ] {
        assert_eq!(
            get(&format!(
                "eve_model_tokens_total{{kind=\"{kind}\",model=\"mock/scripted\"}}"
            )),
            tokens(field),
            "{kind} tokens:\n{text}"
        );
    }
    assert_eq!(
        tokens("inputTokens"),
        700.0,
        "the script's usage is the events'"
    );
    assert_eq!(
        get("eve_model_call_duration_seconds_count{model=\"mock/scripted\"}"),
        of("step.completed").count() as f64
    );
    assert!(get("eve_store_commit_duration_seconds_count{}") > 0.0);
    assert!(
        samples
            .keys()
            .any(|k| k.starts_with("eve_sandbox_spawn_duration_seconds_count{")),
        "{text}"
    );
    assert!(samples.contains_key("eve_approvals_waiting{}"), "{text}");
    assert!(samples.contains_key("eve_sessions_active{}"), "{text}");
    assert!(samples.contains_key("eve_tasks_working{}"), "{text}");
    assert!(!text.contains(&id), "no session id in a label");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_behind_the_channels_auth() {
    let server = start().await;
    // The attack: a stranger, and a caller who is no operator.
    let (status, _, body) = metrics(&server, None).await;
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("eve_turns"), "{body}");
    let (status, _, body) = metrics(&server, Some("wrong-token")).await;
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = metrics(&server, Some(USER)).await;
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("eve_turns"), "{body}");
    // The twin: the operator's credentials read them.
    let (status, _, body) = metrics(&server, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("eve_turns_started_total 0"), "{body}");
    server.stop().await;
}
