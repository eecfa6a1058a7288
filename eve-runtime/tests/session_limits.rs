//! Session limits as eve has them, through the real server: a session over its token or cost
//! budget asks (`input.requested` of kind `session-limit`, Continue/Stop) and the answer holds
//! across a restart; a session nobody can be asked for fails with eve's code; an idle session
//! past `limits.session_timeout` answers `410 session_expired` on every route that addresses it;
//! `retention:` prunes expired sessions, and exactly them, once across two runtimes on one store.

use std::sync::Arc;
use std::time::Duration;

use eve_runtime::schedule::{ManualClock, Scheduler, SchedulerConfig};
use eve_runtime::server::{self, RouterOptions, ServerConfig};
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer, runtime};

/// An agent whose session budget is `limits` (YAML lines under `limits:`), with `get_weather`.
fn agent(limits: &str) -> AgentDir {
    let agent = AgentDir::new();
    agent
        .file(
            "agent.yaml",
            &format!("default_tools: false\nlimits:\n{limits}\n"),
        )
        .tool(
            "get_weather",
            "description: Get the weather.\neffect: read\ninput: {type: object}",
            "cat >/dev/null\necho '{\"condition\":\"Sunny\"}'\n",
        );
    agent
}

fn of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Sends `message` to `id` and follows it to rest; returns the events from where it started.
async fn send(server: &TestServer, id: &str, message: &str) -> Vec<Value> {
    let from = server.count(id).await;
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": message}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    server.until_rest(id, from).await
}

/// A session whose first turn spent its budget of 10 tokens, parked on the request its second
/// message raised: the server, the session and the request as `input.requested` showed it.
async fn over_budget() -> (TestServer, String, Value) {
    let server = TestServer::start(agent("  max_tokens: 10")).await;
    let id = server.create("hello").await;
    let first = server.until_rest(&id, 0).await;
    assert_eq!(of(&first, "turn.completed").len(), 1, "{first:?}");
    let events = send(&server, &id, "again").await;
    let asked = of(&events, "input.requested");
    assert_eq!(asked.len(), 1, "{events:?}");
    assert!(
        of(&events, "step.started").is_empty(),
        "no model call over the budget: {events:?}"
    );
    assert_eq!(of(&events, "turn.waiting")[0]["data"]["on"], "input");
    let request = asked[0]["data"]["requests"][0].clone();
    (server, id, request)
}

#[tokio::test]
async fn a_session_over_its_budget_asks_in_eves_shape_and_continue_goes_on_after_a_restart() {
    let (server, id, request) = over_budget().await;
    assert_eq!(request["kind"], "session-limit");
    assert_eq!(request["display"], "confirmation");
    assert_eq!(request["allowFreeform"], false);
    let options: Vec<&str> = request["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(options, ["continue", "stop"]);
    assert_eq!(request["options"][0]["label"], "Approve");
    assert_eq!(request["options"][1]["style"], "danger");
    assert_eq!(request["action"]["toolName"], "session_limit_continuation");
    assert_eq!(request["action"]["input"]["limit"], 10);
    let used = request["action"]["input"]["usedTokens"].as_u64().unwrap();
    assert!(used >= 10, "{request}");
    let request_id = request["requestId"].as_str().unwrap().to_owned();
    assert_eq!(request_id, format!("{id}:1:limit:tokens:{used}"));
    assert_eq!(request["action"]["callId"], request_id.as_str());
    assert!(
        request["prompt"]
            .as_str()
            .unwrap()
            .starts_with("This session has hit the token limit (10) per session."),
        "{request}"
    );

    // The request outlives the process; the answer comes to the next one.
    let server = server.restart().await;
    let from = server.count(&id).await;
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": request_id, "optionId": "continue"}]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let events = server.until_rest(&id, from).await;
    let resolved = of(&events, "input.resolved");
    assert_eq!(resolved.len(), 1, "{events:?}");
    let resolution = &resolved[0]["data"]["resolutions"][0];
    assert_eq!(resolution["kind"], "session-limit");
    assert_eq!(resolution["outcome"], "answered");
    assert_eq!(resolution["response"]["optionId"], "continue");
    assert!(
        of(&events, "approval.settled").is_empty(),
        "a budget is answered, not approved: {events:?}"
    );
    // The same turn goes on with a fresh window and answers.
    let completed = of(&events, "message.completed");
    assert_eq!(completed.len(), 1, "{events:?}");
    assert_eq!(completed[0]["data"]["message"], "You said: again");
    assert_eq!(completed[0]["data"]["sequence"], 1);
    assert_eq!(of(&events, "turn.completed").len(), 1, "{events:?}");
    server.stop().await;
}

#[tokio::test]
async fn stop_cancels_the_turn_after_a_restart_and_the_next_message_asks_again() {
    let (server, id, request) = over_budget().await;
    let request_id = request["requestId"].as_str().unwrap().to_owned();
    let server = server.restart().await;
    // An option the request does not have is refused and leaves it pending.
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": request_id, "optionId": "later"}]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let from = server.count(&id).await;
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": request_id, "optionId": "stop"}]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let events = server.until_rest(&id, from).await;
    assert_eq!(
        of(&events, "input.resolved")[0]["data"]["resolutions"][0]["response"]["optionId"],
        "stop"
    );
    assert_eq!(of(&events, "turn.cancelled").len(), 1, "{events:?}");
    assert_eq!(of(&events, "session.waiting").len(), 1, "{events:?}");
    assert!(of(&events, "step.started").is_empty(), "{events:?}");
    assert!(of(&events, "turn.failed").is_empty(), "{events:?}");

    // Still over budget: the next message asks again, in its own turn.
    let events = send(&server, &id, "once more").await;
    let asked = of(&events, "input.requested");
    assert_eq!(asked.len(), 1, "{events:?}");
    let again = asked[0]["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap();
    assert!(
        again.starts_with(&format!("{id}:2:limit:tokens:")),
        "{again}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_cost_budget_asks_with_eves_token_cost_shape() {
    let server = TestServer::start(agent(
        "  max_cost_usd: 0.0001\n  price_per_million: {input: 1000, output: 1000}",
    ))
    .await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let events = send(&server, &id, "again").await;
    let request = &of(&events, "input.requested")[0]["data"]["requests"][0];
    assert_eq!(request["action"]["input"]["kind"], "token-cost");
    assert_eq!(request["action"]["input"]["limitUsd"], 0.0001);
    assert!(request["action"]["input"]["usedCostUsd"].as_f64().unwrap() >= 0.0001);
    assert!(
        request["requestId"]
            .as_str()
            .unwrap()
            .contains(":1:limit:token-cost:"),
        "{request}"
    );
    assert_eq!(
        request["options"][0]["description"],
        "Grant a fresh model token-cost budget"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_scheduled_session_over_its_budget_fails_with_eves_code() {
    let agent = agent("  max_tokens: 10");
    agent.file(
        "schedules/report.md",
        "---\ncron: \"0 0 1 1 *\"\ntimezone: UTC\n---\n/tool get_weather {}\n",
    );
    agent.build();
    let rt = runtime(&agent.root());
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let scheduler = Scheduler::with_config(
        rt.clone(),
        clock,
        SchedulerConfig {
            grace: Duration::from_secs(60),
            max_sleep: Duration::from_millis(50),
            queue_limit: 3,
        },
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let options = RouterOptions {
        dev: Some(scheduler),
        ..RouterOptions::default()
    };
    let config = ServerConfig {
        shutdown: stop.clone(),
        ..ServerConfig::default()
    };
    let router = server::router_with(rt.clone(), config, options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = stop.clone();
    tokio::spawn(async move { server::serve(listener, router, serving).await.unwrap() });
    let response = reqwest::Client::new()
        .post(format!("{base}/eve/v1/dev/schedules/report"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    let id = body["sessionId"].as_str().unwrap().to_owned();
    rt.settled(&id).await;
    let events = rt.events(&id, 0, 0).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert!(
        !kinds.contains(&"input.requested"),
        "nobody to ask: {kinds:?}"
    );
    let failed = events
        .iter()
        .find(|e| e.kind == "turn.failed")
        .unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(
        failed.data["error"]["code"], "SESSION_TOKEN_LIMIT_REACHED",
        "{}",
        failed.data
    );
    // The tool's step ran; the step after it did not.
    assert_eq!(kinds.iter().filter(|k| **k == "step.started").count(), 1);
    stop.cancel();
}

#[tokio::test]
async fn an_idle_session_past_its_timeout_answers_410_on_every_route() {
    let server = TestServer::start(agent("  session_timeout: 1s")).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    // Still fresh: served.
    let (status, _) = server.get(&format!("/eve/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let expired = |status: u16, body: &Value| {
        assert_eq!(status, 410, "{body}");
        assert_eq!(
            body,
            &json!({"code": "session_expired", "error": "Session history is no longer available.",
                    "ok": false})
        );
    };
    let (status, body) = server.get(&format!("/eve/v1/sessions/{id}")).await;
    expired(status, &body);
    let response = server.stream_response(&id, "?follow=false").await;
    assert_eq!(response.status().as_u16(), 410);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.unwrap();
    expired(410, &body);
    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}"), json!({"message": "hi"}))
        .await;
    expired(status, &body);
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"inputResponses": [{"requestId": "apr_1", "optionId": "approve"}]}),
        )
        .await;
    expired(status, &body);
    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/cancel"), json!({}))
        .await;
    expired(status, &body);
    // A new session is served as ever.
    let fresh = server.create("hello").await;
    assert_eq!(
        server.get(&format!("/eve/v1/sessions/{fresh}")).await.0,
        200
    );
    server.stop().await;
}

#[tokio::test]
async fn retention_prunes_exactly_the_expired_sessions_once_across_two_runtimes() {
    let dir = agent("  session_timeout: 1s");
    dir.file(
        "agent.yaml",
        "default_tools: false\nretention: 0\nlimits:\n  session_timeout: 1s\n",
    );
    let server = TestServer::start(dir).await;
    let old = server.create("/tool get_weather {}").await;
    server.until_rest(&old, 0).await;
    let workspace = server.agent.root().join(".eve/sandboxes").join(&old);
    assert!(workspace.is_dir(), "the tool ran in a workspace");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let live = server.create("hello").await;
    server.until_rest(&live, 0).await;

    // Two runtimes on one store: one prunes, the other finds it done for this interval (two
    // runtimes racing are the fleet test's, on PostgreSQL below: on one host's SQLite file a
    // claim of this very process is taken over, as a restarted runtime's would be).
    let other = runtime(&server.agent.root());
    let every = Duration::from_secs(3_600);
    let pruned = server.runtime.prune_expired(every).await.unwrap().unwrap();
    assert_eq!(other.prune_expired(every).await.unwrap(), None);
    assert_eq!(pruned.sessions, vec![old.clone()]);
    assert!(server.runtime.session(&old).await.unwrap().is_none());
    assert!(!workspace.exists(), "its workspace went with it");
    assert!(server.runtime.events(&old, 0, 0).await.unwrap().is_empty());
    // The live session is untouched.
    let kept = server.runtime.session(&live).await.unwrap().unwrap();
    assert!(kept.event_count > 0);
    assert_eq!(server.get(&format!("/eve/v1/sessions/{live}")).await.0, 200);
    // Within the interval, neither prunes again.
    assert!(server.runtime.prune_expired(every).await.unwrap().is_none());
    assert!(other.prune_expired(every).await.unwrap().is_none());
    server.stop().await;
}

/// Two nodes of a fleet on one PostgreSQL store: the expired session is pruned, by one of them,
/// and the live one is kept (the same promise as on SQLite above, through the other backend).
#[tokio::test]
async fn retention_prunes_once_across_a_fleet_on_postgres() {
    use crate::engine_support::{TestProject, agent as engine_agent, run_prompt};
    use eve_runtime::engine::{
        BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
    };
    use eve_runtime::model::mock::MockClient;
    use eve_runtime::store::{PgStore, Store};

    let Some(base) = crate::store_postgres::server_url() else {
        return;
    };
    let url = crate::store_postgres::fresh_schema(&base).await;
    let p = TestProject::new();
    let mut a = engine_agent();
    a.config.limits.session_timeout_ms = Some(1_000);
    a.config.retention_ms = Some(0);
    p.write_build(&a, &[]);
    let node = |store: Arc<dyn Store>| {
        let model = ResolvedModel {
            client: Arc::new(MockClient::new("echo", None).unwrap()),
            model: "echo".to_owned(),
            model_id: "mock/echo".to_owned(),
            context_window: None,
            price_per_million: None,
        };
        Runtime::new(RuntimeConfig {
            state_dir: p.state_dir.clone(),
            store,
            models: Arc::new(FixedModelProvider(model)),
            env: Arc::new(|name: &str| std::env::var(name).ok()),
            autostart: false,
            lease_ttl: Duration::from_secs(5),
            breaker: BreakerPolicy::default(),
            sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
            secrets: Default::default(),
            isolated_roots: false,
        })
    };
    let one = node(Arc::new(PgStore::connect(&url).await.unwrap()));
    let two = node(Arc::new(PgStore::connect(&url).await.unwrap()));
    let (old, _) = run_prompt(&one, "hello").await;
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let (live, _) = run_prompt(&two, "hello").await;
    let every = Duration::from_secs(3_600);
    let (a, b) = tokio::join!(one.prune_expired(every), two.prune_expired(every));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.is_some() ^ b.is_some(),
        "exactly one node prunes: {a:?} {b:?}"
    );
    assert_eq!(a.or(b).unwrap().sessions, vec![old.clone()]);
    assert!(two.session(&old).await.unwrap().is_none());
    assert!(one.events(&old, 0, 0).await.unwrap().is_empty());
    assert!(one.session(&live).await.unwrap().is_some());
    assert!(one.prune_expired(every).await.unwrap().is_none());
    assert!(two.prune_expired(every).await.unwrap().is_none());
}
