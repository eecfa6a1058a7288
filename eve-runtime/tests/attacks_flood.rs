//! Strangers sharing one server through the MCP channel (`channels/mcp.yaml`), on the real server
//! on `127.0.0.1:0` over real SQLite: Bob floods `agent_start` and `agent_update` follow-ups while
//! Alice starts one invocation. The model serves one call at a time (a provider with one slot, as
//! a local model server has), so every turn Bob gets in flight is time Alice waits.
//!
//! With the channel's per-principal `limits:` Bob is refused past his bounds with eve's
//! `conflict` code (`retryable: true`) and Alice's invocation completes within a bound; the twin
//! (the test-only switch that turns the limits off) lets every flood call through, and Alice's
//! invocation waits behind Bob's turns well past that bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_runtime::engine::{FixedModelProvider, ResolvedModel};
use eve_runtime::model::mock::MockClient;
use eve_runtime::model::{ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse};
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

pub(crate) const ALICE: &str = "alice-token-0123456789";
pub(crate) const BOB: &str = "bob-token-0123456789";

/// Time the model takes per call.
pub(crate) const CALL: Duration = Duration::from_millis(500);
/// Invocations Bob tries to start, and follow-ups he tries to send.
const STARTS: usize = 24;
const FOLLOW_UPS: usize = 12;
/// How long Alice's invocation may take with the limits on (Bob holds at most two turns, each
/// a call or two ahead of hers).
const BOUND: Duration = Duration::from_secs(5);

/// The echo model behind one slot: each call waits its turn, then takes [`CALL`].
struct OneSlot {
    mock: MockClient,
    slot: tokio::sync::Mutex<()>,
}

#[async_trait::async_trait]
impl ModelClient for OneSlot {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let _held = self.slot.lock().await;
        tokio::time::sleep(CALL).await;
        self.mock.stream(request, on_event).await
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.mock.context_window(model).await
    }
}

/// Gives a test server's runtime the [`OneSlot`] model, so a flood queues behind one slot.
pub(crate) fn one_slot_model(config: &mut eve_runtime::engine::RuntimeConfig) {
    let model = ResolvedModel {
        client: Arc::new(OneSlot {
            mock: MockClient::new("echo", None).unwrap(),
            slot: tokio::sync::Mutex::new(()),
        }),
        model: "echo".to_owned(),
        model_id: "mock/echo".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    config.models = Arc::new(FixedModelProvider(model));
}

async fn start(limits_off: bool) -> TestServer {
    let agent = AgentDir::standard();
    agent.file(
        "channels/mcp.yaml",
        "auth:\n  type: bearer\n  tokens:\n    - ${ALICE_TOKEN}\n    - ${BOB_TOKEN}\n\
         limits:\n  in_flight: 2\n  queued: 4\n",
    );
    TestServer::start_full(
        agent,
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
        move |mut c| {
            if let Some(m) = c.mcp.take() {
                let mut m = (*m).clone();
                m.limits_off_for_tests = limits_off;
                c.mcp = Some(Arc::new(m));
            }
            c
        },
        one_slot_model,
        |_| eve_runtime::server::RouterOptions::default(),
    )
    .await
}

/// `tools/call` of `name` as `token`: the tool result (`isError`, `structuredContent`).
async fn tool(http: &reqwest::Client, base: &str, token: &str, name: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": args}});
    let response = http
        .post(format!("{base}/eve/v1/mcp"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let json: Value = response.json().await.unwrap();
    json["result"].clone()
}

/// What one flood looked like, and how long Alice's invocation (or turn) took.
pub(crate) struct Flood {
    pub(crate) started: usize,
    pub(crate) refused: usize,
    pub(crate) followed: usize,
    pub(crate) refused_follow_ups: usize,
    pub(crate) alice: Duration,
}

async fn flood(server: &TestServer) -> Flood {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let base = server.base.clone();
    // Bob's starts, all at once.
    let starts = futures::future::join_all((0..STARTS).map(|i| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            tool(
                &http,
                &base,
                BOB,
                "agent_start",
                json!({"message": format!("flood {i}")}),
            )
            .await
        }
    }))
    .await;
    let mut started = Vec::new();
    let mut refused = 0;
    for r in &starts {
        if r["isError"] == true {
            let error = &r["structuredContent"]["error"];
            assert_eq!(error["code"], "conflict", "{r}");
            assert_eq!(error["retryable"], true, "{r}");
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("Too many invocations in flight"),
                "{r}"
            );
            refused += 1;
        } else {
            started.push(
                r["structuredContent"]["invocationId"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    // Bob's follow-ups to the first one he got, all at once.
    let target = started[0].clone();
    let follow_ups = futures::future::join_all((0..FOLLOW_UPS).map(|i| {
        let (http, base, target) = (http.clone(), base.clone(), target.clone());
        async move {
            tool(
                &http,
                &base,
                BOB,
                "agent_update",
                json!({"invocationId": target, "message": format!("more {i}")}),
            )
            .await
        }
    }))
    .await;
    let mut followed = 0;
    let mut refused_follow_ups = 0;
    for r in &follow_ups {
        if r["isError"] == true {
            let error = &r["structuredContent"]["error"];
            assert_eq!(error["code"], "conflict", "{r}");
            assert_eq!(error["retryable"], true, "{r}");
            refused_follow_ups += 1;
        } else {
            followed += 1;
        }
    }
    // Alice, a stranger to Bob, starts one invocation and polls it to the end.
    let began = Instant::now();
    let mine = tool(
        &http,
        &base,
        ALICE,
        "agent_start",
        json!({"message": "hello"}),
    )
    .await;
    assert_ne!(mine["isError"], true, "Alice was refused: {mine}");
    let id = mine["structuredContent"]["invocationId"]
        .as_str()
        .unwrap()
        .to_owned();
    loop {
        let state = tool(
            &http,
            &base,
            ALICE,
            "agent_get",
            json!({"invocationId": id}),
        )
        .await;
        match state["structuredContent"]["status"].as_str() {
            Some("completed") => break,
            Some("working") => {}
            other => panic!("Alice's invocation ended {other:?}: {state}"),
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "Alice's invocation never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Flood {
        started: started.len(),
        refused,
        followed,
        refused_follow_ups,
        alice: began.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flooder_is_refused_past_its_bounds_and_a_stranger_is_not_starved() {
    let server = start(false).await;
    let f = flood(&server).await;
    println!(
        "limits on: starts tried {STARTS}, admitted {}, refused {}; follow-ups tried \
         {FOLLOW_UPS}, admitted {}, refused {}; Alice's invocation took {:?}",
        f.started, f.refused, f.followed, f.refused_follow_ups, f.alice
    );
    // `in_flight: 2` (a third may pass if one of the two finished during the burst).
    assert!(f.started <= 3, "{} starts admitted", f.started);
    assert_eq!(f.started + f.refused, STARTS);
    // `queued: 4` (a turn may take some of them during the burst).
    assert!(
        f.refused_follow_ups >= FOLLOW_UPS / 2,
        "only {} follow-ups refused",
        f.refused_follow_ups
    );
    assert!(
        f.alice < BOUND,
        "Alice's invocation took {:?}, past {BOUND:?}",
        f.alice
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twin_without_the_limits_the_flooder_starves_the_stranger() {
    let server = start(true).await;
    let f = flood(&server).await;
    println!(
        "limits off: starts tried {STARTS}, admitted {}, refused {}; follow-ups tried \
         {FOLLOW_UPS}, admitted {}, refused {}; Alice's invocation took {:?}",
        f.started, f.refused, f.followed, f.refused_follow_ups, f.alice
    );
    assert_eq!(f.started, STARTS);
    assert_eq!(f.followed, FOLLOW_UPS);
    assert!(
        f.alice > BOUND,
        "without limits Alice's invocation still took only {:?}",
        f.alice
    );
    server.stop().await;
}
