//! The opt-in built-in `sleep`: the turn parks on a durable timer with no driver held, resumes
//! with how long it slept (across a runtime restart too), refuses a wait over the agent's cap,
//! and ends early on a steering message or the turn's cancellation.

use std::time::{Duration, Instant};

use eve_compile::{Agent, TurnPolicy};
use eve_runtime::engine::{DriveOutcome, Runtime};
use eve_runtime::model::Message;
use eve_runtime::store::{CallStatus, TurnStatus};
use serde_json::{Value, json};

use crate::engine_support::*;

fn sleeper() -> Agent {
    let mut a = agent();
    a.config.default_tools = true;
    a.config.builtins = Some(vec!["sleep".to_owned()]);
    a
}

fn sleep_then(seconds: f64, answer: &str) -> Value {
    json!([
        {"tool_calls": [{"name": "sleep", "input": {"seconds": seconds}}]},
        {"text": answer}
    ])
}

/// The tool results the model was given, in order.
async fn tool_results(rt: &Runtime, id: &str) -> Vec<String> {
    rt.store()
        .context(id)
        .await
        .unwrap()
        .iter()
        .filter_map(
            |m| match serde_json::from_value::<Message>(m.body.clone()).ok()? {
                Message::Tool { content, .. } => Some(content),
                _ => None,
            },
        )
        .collect()
}

/// Waits (20 s at most) until `ok` answers true.
async fn until<F, Fut>(what: &str, mut ok: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn last_turn_status(rt: &Runtime, id: &str) -> TurnStatus {
    rt.store().last_turn(id).await.unwrap().unwrap().status
}

async fn timers(rt: &Runtime, id: &str) -> usize {
    rt.store()
        .notes(&format!("timers:{id}"))
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_sleep_parks_the_turn_without_a_driver_and_resumes_with_how_long_it_slept() {
    let p = TestProject::new();
    p.write_build(&sleeper(), &[]);
    let rt = p.runtime(sleep_then(1.5, "rested"));
    let id = rt.create_session(Some("wait a bit".into())).await.unwrap();
    let began = Instant::now();
    // The drive returns at once: the turn is parked, nobody waits for the timer.
    let outcome = rt.drive(&id).await.unwrap();
    assert_eq!(outcome, DriveOutcome::WaitingInput(Vec::new()));
    assert!(
        began.elapsed() < Duration::from_millis(1_400),
        "the drive waited"
    );
    assert_eq!(last_turn_status(&rt, &id).await, TurnStatus::Waiting);
    assert_eq!(timers(&rt, &id).await, 1, "the timer is a row in the store");
    // Driven early (a watcher, another node): it parks again, quietly.
    let before = all_events(&rt, &id).await.len();
    assert_eq!(
        rt.drive(&id).await.unwrap(),
        DriveOutcome::WaitingInput(Vec::new())
    );
    assert_eq!(
        all_events(&rt, &id).await.len(),
        before,
        "no events on an early wake"
    );
    // The runtime wakes it when the timer is due.
    until("the turn resumed and completed", || async {
        last_turn_status(&rt, &id).await == TurnStatus::Completed
    })
    .await;
    assert!(
        began.elapsed() >= Duration::from_millis(1_500),
        "woke early"
    );
    let results = tool_results(&rt, &id).await;
    let out: Value = serde_json::from_str(&results[0]).unwrap();
    let waited = out["waitedSeconds"].as_f64().unwrap();
    assert!((1.5..10.0).contains(&waited), "{out}");
    assert_eq!(timers(&rt, &id).await, 0, "the timer went with the result");
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Completed);
    let kinds = kinds(&all_events(&rt, &id).await);
    assert!(!kinds.iter().any(|k| k == "input.requested"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "turn.completed"), "{kinds:?}");
}

#[tokio::test]
async fn a_sleep_survives_a_runtime_restart_and_fires_once() {
    let p = TestProject::new();
    p.write_build(&sleeper(), &[]);
    let script = sleep_then(2.0, "back");
    let rt = p.runtime(script.clone());
    let id = rt.create_session(Some("wait".into())).await.unwrap();
    let began = Instant::now();
    rt.drive(&id).await.unwrap();
    assert_eq!(last_turn_status(&rt, &id).await, TurnStatus::Waiting);
    // The process stops mid-sleep: its in-memory wake-up goes with it.
    drop(rt);
    let rt = p.runtime(script);
    let resumed = rt.resume_all().await.unwrap();
    assert!(
        resumed.contains(&id),
        "the parked turn is found at start-up"
    );
    until("the turn completed after the restart", || async {
        last_turn_status(&rt, &id).await == TurnStatus::Completed
    })
    .await;
    assert!(began.elapsed() >= Duration::from_secs(2), "woke early");
    let results = tool_results(&rt, &id).await;
    assert_eq!(results.len(), 1, "settled once: {results:?}");
    let out: Value = serde_json::from_str(&results[0]).unwrap();
    assert!(out["waitedSeconds"].as_f64().unwrap() >= 2.0, "{out}");
    let completed = kinds(&all_events(&rt, &id).await)
        .iter()
        .filter(|k| *k == "action.result")
        .count();
    assert_eq!(completed, 1);
}

#[tokio::test]
async fn a_sleep_longer_than_the_cap_is_refused_with_a_code() {
    let p = TestProject::new();
    let mut a = sleeper();
    a.config.limits.max_sleep_seconds = Some(5);
    p.write_build(&a, &[]);
    let rt = p.runtime(sleep_then(6.0, "ok"));
    let id = rt.create_session(Some("wait long".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let results = tool_results(&rt, &id).await;
    assert!(results[0].contains("SLEEP_TOO_LONG"), "{results:?}");
    assert!(results[0].contains("at most 5 seconds"), "{results:?}");
    assert_eq!(timers(&rt, &id).await, 0);
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Failed);
}

#[tokio::test]
async fn cancelling_the_turn_ends_the_sleep() {
    let p = TestProject::new();
    p.write_build(&sleeper(), &[]);
    let rt = p.runtime(sleep_then(30.0, "never"));
    let id = rt.create_session(Some("wait".into())).await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(last_turn_status(&rt, &id).await, TurnStatus::Waiting);
    rt.cancel(&id).await.unwrap();
    until("the turn was cancelled", || async {
        last_turn_status(&rt, &id).await == TurnStatus::Cancelled
    })
    .await;
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert!(calls[0].status.is_terminal(), "{:?}", calls[0].status);
    assert_ne!(calls[0].status, CallStatus::Completed);
    assert_eq!(timers(&rt, &id).await, 0, "the timer went with the turn");
}

#[tokio::test]
async fn a_steering_message_ends_the_sleep_early() {
    let p = TestProject::new();
    let mut a = sleeper();
    a.config.turn_policy = TurnPolicy::Steer;
    p.write_build(&a, &[]);
    let rt = p.runtime(sleep_then(30.0, "heard you"));
    let id = rt.create_session(Some("wait".into())).await.unwrap();
    rt.drive(&id).await.unwrap();
    let began = Instant::now();
    rt.post_message(&id, "never mind, go on").await.unwrap();
    until("the turn went on", || async {
        rt.drive(&id).await.unwrap();
        last_turn_status(&rt, &id).await == TurnStatus::Completed
    })
    .await;
    assert!(
        began.elapsed() < Duration::from_secs(25),
        "it slept the full time"
    );
    let results = tool_results(&rt, &id).await;
    assert_eq!(
        results[0], "Stopped early because a new message arrived.",
        "{results:?}"
    );
    assert_eq!(timers(&rt, &id).await, 0);
}

/// A server's store watch leaves a turn it will wake itself alone until its timer is due:
/// looking every fifth of the lease's time would drive the session (a lease taken and given back)
/// only to park it again.
#[tokio::test]
async fn the_store_watch_leaves_a_sleeping_turn_alone_until_its_timer() {
    use eve_runtime::engine::{BreakerPolicy, FixedModelProvider, ResolvedModel, RuntimeConfig};
    use eve_runtime::model::mock::{MockClient, load_script};
    use eve_runtime::store::{SqliteStore, Store};
    use std::sync::Arc;

    let p = TestProject::new();
    p.write_build(&sleeper(), &[]);
    let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
    let counting = crate::counting_store::CountingStore::new(Arc::new(store));
    let steps = load_script(&sleep_then(3.0, "rested").to_string()).unwrap();
    let rt = Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: counting.clone() as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(ResolvedModel {
            client: Arc::new(MockClient::from_steps(steps)),
            model: "script".to_owned(),
            model_id: "mock/script".to_owned(),
            context_window: None,
            price_per_million: None,
        })),
        env: Arc::new(|_: &str| None),
        autostart: true,
        // The watch looks every 200 ms.
        lease_ttl: Duration::from_secs(1),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    });
    let shutdown = tokio_util::sync::CancellationToken::new();
    let watch = rt.watch_store(shutdown.clone());
    let id = rt.create_session(Some("wait a bit".into())).await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(timers(&rt, &id).await, 1, "the turn is parked on its timer");
    let leases = || {
        counting
            .calls()
            .iter()
            .filter(|c| matches!(**c, "take_lease" | "acquire_lease"))
            .count()
    };
    let before = leases();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let taken = leases() - before;
    println!("leases taken while the turn slept 2 s (the watch looks every 200 ms): {taken}");
    assert!(
        taken <= 1,
        "the watch drove the sleeping session {taken} times before its timer was due"
    );
    // It still wakes on time, by its own timer.
    until("the turn completes after its sleep", || async {
        last_turn_status(&rt, &id).await == TurnStatus::Completed
    })
    .await;
    shutdown.cancel();
    let _ = watch.await;
}
