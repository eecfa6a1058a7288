//! PostgreSQL against SQLite, on the same machine in the same run: per-step overhead, turn
//! latency and resume time against history size. Run by `bench/store_pg.sh` in release mode
//! (ignored in the normal suite); each line prints PostgreSQL's time with its ratio to SQLite's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Approval, Effect};
use eve_runtime::engine::{
    BreakerPolicy, DriveOutcome, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::Message;
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::*;
use serde_json::json;

use crate::engine_support::*;
use crate::store_postgres::{fresh_schema, server_url};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Sqlite,
    Postgres,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "SQLite",
            Kind::Postgres => "PostgreSQL",
        }
    }
}

/// Where one backend's store of one project lives.
struct Target {
    kind: Kind,
    /// The SQLite file or the PostgreSQL URL (a fresh schema).
    at: String,
}

impl Target {
    async fn new(kind: Kind, p: &TestProject, base: &str) -> Self {
        let at = match kind {
            Kind::Sqlite => p.state_dir.join("eve.db").display().to_string(),
            Kind::Postgres => fresh_schema(base).await,
        };
        Self { kind, at }
    }

    async fn open(&self) -> Arc<dyn Store> {
        match self.kind {
            Kind::Sqlite => Arc::new(SqliteStore::open(&self.at).unwrap()),
            Kind::Postgres => Arc::new(PgStore::connect(&self.at).await.unwrap()),
        }
    }
}

fn runtime(p: &TestProject, store: Arc<dyn Store>, client: MockClient) -> Runtime {
    runtime_with_env(p, store, client, true)
}

/// A runtime; `checkpoints: false` sets `EVE_WORKSPACE_CHECKPOINTS=off` (the baseline of the
/// workspace checkpoint's cost).
fn runtime_with_env(
    p: &TestProject,
    store: Arc<dyn Store>,
    client: MockClient,
    checkpoints: bool,
) -> Runtime {
    let model = ResolvedModel {
        client: Arc::new(client),
        model: "bench".into(),
        model_id: "mock/bench".into(),
        context_window: None,
        price_per_million: None,
    };
    Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| {
            (name == eve_runtime::env_vars::EVE_WORKSPACE_CHECKPOINTS && !checkpoints)
                .then(|| "off".to_owned())
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        isolated_roots: false,
        secrets: Default::default(),
    })
}

/// Times every step after the first of `sessions` one-turn sessions from consecutive
/// `step.completed` events, as in `engine_bench.rs`.
async fn step_times(rt: &Runtime, sessions: usize, steps: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..sessions {
        let id = rt.create_session(None).await.unwrap();
        let mut live = rt.subscribe(&id);
        let collector = tokio::spawn(async move {
            let mut marks = Vec::new();
            while let Ok(e) = live.recv().await {
                if e.kind == "step.completed" {
                    marks.push(Instant::now());
                }
                if e.kind == "session.waiting" {
                    break;
                }
            }
            marks
        });
        rt.post_message(&id, "go").await.unwrap();
        assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
        let marks = collector.await.unwrap();
        assert_eq!(marks.len(), steps);
        out.extend(marks.windows(2).map(|w| w[1] - w[0]));
    }
    out
}

/// Prints one result with its ratio to the first of its group (`base_name`).
fn line(
    what: &str,
    kind: Kind,
    (p50, p99): (Duration, Duration),
    base: &mut Option<Duration>,
    base_name: &str,
) {
    let base = *base.get_or_insert(p50);
    println!(
        "{what}, {}: p50 {}  p99 {}  ({:.2}x {base_name})",
        kind.name(),
        ms(p50),
        ms(p99),
        p50.as_secs_f64() / base.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run bench/store_pg.sh"]
async fn bench_store_step_overhead() {
    let Some(base) = server_url() else { return };
    const SESSIONS: usize = 50;
    const STEPS: usize = 5;
    for (label, body) in [
        (
            "per-step, no-op script tool (workspace unchanged)",
            "true\n",
        ),
        (
            "per-step, script tool writing a file (workspace checkpointed)",
            "date +%s%N >> log.txt\n",
        ),
    ] {
        let mut sqlite = None;
        for (kind, checkpoints) in [
            (Kind::Sqlite, false),
            (Kind::Sqlite, true),
            (Kind::Postgres, false),
            (Kind::Postgres, true),
        ] {
            let p = TestProject::new();
            let mut a = agent();
            a.config.limits.max_steps_per_turn = 100_000;
            a.config.compaction.enabled = false;
            let mut tool = script_tool("noop", Effect::Read, Approval::Never);
            tool.env.clear();
            a.tools.push(tool);
            p.write_build(&a, &[("tools/noop.sh".to_owned(), body.to_owned())]);
            let mut script: Vec<_> = (0..STEPS - 1)
                .map(|_| {
                    json!({"tool_calls": [{"name": "noop", "input": {}}],
                           "usage": {"input_tokens": 1, "output_tokens": 1}})
                })
                .collect();
            script.push(json!({"text": "done", "usage": {"input_tokens": 1, "output_tokens": 1}}));
            let steps = load_script(&json!(script).to_string()).unwrap();
            let target = Target::new(kind, &p, &base).await;
            let rt = runtime_with_env(
                &p,
                target.open().await,
                MockClient::from_steps(steps),
                checkpoints,
            );
            let mut times = step_times(&rt, SESSIONS, STEPS).await;
            times.sort();
            line(
                &format!(
                    "{label}, checkpoints {}",
                    if checkpoints { "on" } else { "off" }
                ),
                kind,
                (percentile(&times, 0.5), percentile(&times, 0.99)),
                &mut sqlite,
                "SQLite with checkpoints off",
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run bench/store_pg.sh"]
async fn bench_store_turn_latency() {
    let Some(base) = server_url() else { return };
    const TURNS: usize = 100;
    let mut sqlite = None;
    for kind in [Kind::Sqlite, Kind::Postgres] {
        let p = TestProject::new();
        p.write_build(&agent(), &[]);
        let target = Target::new(kind, &p, &base).await;
        let rt = runtime(
            &p,
            target.open().await,
            MockClient::new("echo", None).unwrap(),
        );
        let mut times = Vec::new();
        for i in 0..TURNS {
            let id = rt.create_session(None).await.unwrap();
            let t = Instant::now();
            rt.post_message(&id, &format!("hello number {i}"))
                .await
                .unwrap();
            assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
            times.push(t.elapsed());
        }
        times.sort();
        line(
            "turn latency (accept + one model step + turn end)",
            kind,
            (percentile(&times, 0.5), percentile(&times, 0.99)),
            &mut sqlite,
            "SQLite",
        );
    }
}

/// A turn left open right after `step.started`, as a crash leaves it.
async fn open_turn(store: &dyn Store, id: &str) {
    let session = store.session(id).await.unwrap().unwrap();
    let turn = TurnRecord {
        session_id: id.to_owned(),
        seq: session.turn_count,
        status: TurnStatus::Running,
        phase: TurnPhase::Model,
        step_index: 0,
        step_started: true,
        build_hash: session.build_hash.clone(),
        inbox_id: None,
        started_at: now_ms(),
        ended_at: None,
        stop_reason: None,
        usage: UsageTotals::default(),
    };
    let mut updated = session.clone();
    updated.status = SessionStatus::Running;
    updated.turn_count += 1;
    let mut batch = Batch::new();
    batch
        .push(Op::UpdateSession(updated))
        .push(Op::PutTurn(turn))
        .push(Op::AppendMessage {
            session_id: id.to_owned(),
            turn_seq: Some(session.turn_count),
            kind: MESSAGE_KIND_MESSAGE.into(),
            body: serde_json::to_value(Message::User {
                content: "the last one".into(),
            })
            .unwrap(),
        });
    store.commit(batch).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run bench/store_pg.sh"]
async fn bench_store_resume_time() {
    let Some(base) = server_url() else { return };
    let mut largest = Vec::new();
    for kind in [Kind::Sqlite, Kind::Postgres] {
        let mut first = None;
        for events in [100u64, 1_000, 10_000] {
            let p = TestProject::new();
            let mut a = agent();
            a.config.context_window = Some(2_000);
            a.config.compaction.threshold = 0.5;
            p.write_build(&a, &[]);
            let target = Target::new(kind, &p, &base).await;
            let id = {
                let rt = runtime(
                    &p,
                    target.open().await,
                    MockClient::new("echo", None).unwrap(),
                );
                let id = rt.create_session(None).await.unwrap();
                let mut n = 0;
                while rt.session(&id).await.unwrap().unwrap().event_count < events {
                    n += 1;
                    rt.post_message(&id, &format!("message number {n} with a few words"))
                        .await
                        .unwrap();
                    rt.drive(&id).await.unwrap();
                }
                id
            };
            let mut load = Vec::new();
            let mut finish = Vec::new();
            for _ in 0..5 {
                let store = target.open().await;
                open_turn(store.as_ref(), &id).await;
                // Load: what resume reads (session, open turn, its calls, pending input, the
                // bounded context), on a store handle just opened.
                let t = Instant::now();
                let s = store.session(&id).await.unwrap().unwrap();
                let turn = store.last_turn(&id).await.unwrap().unwrap();
                let _ = store.tool_calls(&id, turn.seq).await.unwrap();
                let _ = store.input_requests(&id, true).await.unwrap();
                let ctx = store.context(&id).await.unwrap();
                load.push(t.elapsed());
                assert!(s.event_count >= events && !ctx.is_empty());
                // Finish: a new runtime drives the open turn to its end (one mock step).
                let t = Instant::now();
                let rt = runtime(&p, store, MockClient::new("echo", None).unwrap());
                assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
                finish.push(t.elapsed());
            }
            load.sort();
            finish.sort();
            let (load50, finish50) = (percentile(&load, 0.5), percentile(&finish, 0.5));
            let base = *first.get_or_insert(finish50);
            println!(
                "resume after {events:>6} events, {}: load state {}  finish the turn {}  ({:.2}x the 100-event time)",
                kind.name(),
                ms(load50),
                ms(finish50),
                finish50.as_secs_f64() / base.as_secs_f64()
            );
            if events == 10_000 {
                largest.push(finish50);
            }
        }
    }
    if let [sqlite, pg] = largest[..] {
        println!(
            "resume after  10000 events: PostgreSQL {} against SQLite {} ({:.2}x SQLite)",
            ms(pg),
            ms(sqlite),
            pg.as_secs_f64() / sqlite.as_secs_f64()
        );
    }
}
