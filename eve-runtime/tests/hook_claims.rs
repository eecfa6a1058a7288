//! Observe-hook delivery shared by two nodes of a fleet on one PostgreSQL store: the node that
//! drives the sessions and a node watching the store both see every event, and each event
//! reaches the hook once, because only the holder of a session's delivery claim delivers. The
//! twin turns the claim off (the test-only switch) and sees events delivered twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::{Hook, Runner};
use eve_runtime::engine::{
    BreakerPolicy, DriveOutcome, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::mock::MockClient;
use eve_runtime::store::{PgStore, Store};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine_support::*;

/// A node on the project's builds and the store at `url`.
async fn node(p: &TestProject, url: &str, no_claim: bool) -> Runtime {
    let store = Arc::new(PgStore::connect(url).await.unwrap()) as Arc<dyn Store>;
    let side = p.side_file.clone();
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
        env: Arc::new(move |name: &str| match name {
            "SIDE_FILE" => Some(side.to_string_lossy().into_owned()),
            "EVE_TEST_NO_HOOK_CLAIM" if no_claim => Some("1".to_owned()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(5),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

/// Node 1 drives `turns` sessions while node 2 watches the store: `(events stored, times each
/// event id reached the hook)`, once delivery has settled. `None` when PostgreSQL tests are
/// skipped.
async fn race(turns: usize, no_claim: bool) -> Option<(usize, HashMap<String, usize>)> {
    let base = crate::store_postgres::server_url()?;
    let url = crate::store_postgres::fresh_schema(&base).await;
    let p = TestProject::new();
    let mut a = agent();
    a.hooks.push(Hook {
        name: "audit".to_owned(),
        source: "hooks/audit.sh".to_owned(),
        events: vec!["*".to_owned()],
        timeout_ms: 5_000,
        env: vec!["SIDE_FILE".to_owned()],
        runner: Runner::Script {
            path: "hooks/audit.sh".to_owned(),
            interpreter: vec!["sh".to_owned()],
        },
    });
    p.write_build(
        &a,
        &[(
            "hooks/audit.sh".to_owned(),
            "input=$(cat)\nsleep 0.05\nprintf '%s\\n' \"$input\" >> \"$SIDE_FILE\"\n".to_owned(),
        )],
    );
    let driver = node(&p, &url, no_claim).await;
    let watcher = node(&p, &url, no_claim).await;
    let shutdown = CancellationToken::new();
    watcher.resume_all().await.unwrap();
    watcher.watch_store(shutdown.clone());
    let mut ids = Vec::new();
    for i in 0..turns {
        let id = driver
            .create_session(Some(format!("hello {i}")))
            .await
            .unwrap();
        // The watching node may take the session first: then it drives it.
        let outcome = driver.drive(&id).await.unwrap();
        assert!(
            matches!(outcome, DriveOutcome::Idle | DriveOutcome::Busy { .. }),
            "{outcome:?}"
        );
        ids.push(id);
    }
    for id in &ids {
        let store = driver.store().clone();
        let id = id.clone();
        let mut done = false;
        for _ in 0..2000 {
            let turn = store.last_turn(&id).await.unwrap();
            if turn.is_some_and(|t| t.status == eve_runtime::store::TurnStatus::Completed) {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(done, "the turn of {id} completed");
    }
    let mut stored = 0;
    for id in &ids {
        stored += all_events(&driver, id).await.len();
    }
    let delivered = || -> HashMap<String, usize> {
        let mut times = HashMap::new();
        for line in p.side_lines() {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && let Some(id) = v["id"].as_str()
            {
                *times.entry(id.to_owned()).or_insert(0) += 1;
            }
        }
        times
    };
    eventually("every event delivered", || delivered().len() >= stored).await;
    // Anything delivered twice would arrive now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    shutdown.cancel();
    Some((stored, delivered()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_store_deliver_each_event_to_a_hook_once() {
    let turns = 6;
    let Some((stored, times)) = race(turns, false).await else {
        return;
    };
    let deliveries: usize = times.values().sum();
    eprintln!("{turns} turns, {stored} events stored, {deliveries} deliveries");
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(times.len(), stored);
}

/// The twin: without the claim, the same two nodes deliver events twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_claim_two_nodes_deliver_events_twice() {
    let turns = 6;
    let Some((stored, times)) = race(turns, true).await else {
        return;
    };
    let deliveries: usize = times.values().sum();
    let twice = times.values().filter(|n| **n > 1).count();
    eprintln!(
        "without the claim: {turns} turns, {stored} events stored, {deliveries} deliveries, \
         {twice} delivered more than once"
    );
    assert!(twice > 0, "the race was never run into");
}
