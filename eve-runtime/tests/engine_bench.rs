//! Runtime benchmarks, run by `bench/runtime.sh` in release mode (ignored in the normal suite):
//! per-step overhead with the mock model and a no-op action, and resume time against history size.

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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// Context switches (voluntary and not) of every live thread of this process so far: each
/// hand-off between threads (a commit to the writer and back, a wake-up of a parked worker)
/// costs at least one, so their count per step shows the hand-offs a step makes.
fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut total = 0;
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            if let Some(rest) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += rest.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

fn runtime_with_client(p: &TestProject, client: MockClient) -> Runtime {
    let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
    runtime_on(p, client, Arc::new(store))
}

fn runtime_on(p: &TestProject, client: MockClient, store: Arc<SqliteStore>) -> Runtime {
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
        env: Arc::new(|_: &str| None),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

/// Runs `sessions` sessions one after the other, each one turn of `steps` steps, and times every
/// step after the first from consecutive `step.completed` events as they are committed.
async fn step_times(rt: &Runtime, sessions: usize, steps: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..sessions {
        let id = rt.create_session(None).await.unwrap();
        // A follower, not a bare broadcast receiver: it never loses an event when it lags.
        let from = rt.session(&id).await.unwrap().unwrap().event_count;
        let mut live = rt.follow(&id, from);
        let collector = tokio::spawn(async move {
            let mut marks = Vec::new();
            while let Ok(e) = live.next().await {
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

/// Runs `sessions` sessions one after the other with nobody following them, and times each
/// whole drive of one turn divided by its `steps` steps (the lease, the message taken into the
/// turn and its end included): what a step costs the driver, however promptly a follower is
/// scheduled to see it.
async fn drive_times(rt: &Runtime, sessions: usize, steps: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..sessions {
        let id = rt.create_session(None).await.unwrap();
        rt.post_message(&id, "go").await.unwrap();
        let t = Instant::now();
        assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
        out.push(t.elapsed() / steps as u32);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run bench/runtime.sh"]
async fn bench_step_overhead() {
    // `EVE_BENCH_SESSIONS=20` for a short run (under `strace -f`, say); `EVE_BENCH_ONLY=noop`
    // (or `load_skill`) measures one action alone (under `perf record`, say).
    let only = std::env::var("EVE_BENCH_ONLY").ok();
    let sessions: usize = std::env::var("EVE_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    const STEPS: usize = 5;
    for (label, tool, files) in [
        ("in-process no-op action (load_skill)", "load_skill", vec![]),
        (
            "no-op script tool (`true`, incl. process spawn)",
            "noop",
            vec![("tools/noop.sh".to_owned(), "true\n".to_owned())],
        ),
    ] {
        if only.as_deref().is_some_and(|only| only != tool) {
            continue;
        }
        let p = TestProject::new();
        let mut a = agent();
        a.config.limits.max_steps_per_turn = 100_000;
        a.config.compaction.enabled = false;
        a.skills.push(skill("s", "x"));
        let mut noop = script_tool("noop", Effect::Read, Approval::Never);
        noop.env.clear();
        a.tools.push(noop);
        p.write_build(&a, &files);
        let input = if tool == "load_skill" {
            json!({"name": "s"})
        } else {
            json!({})
        };
        let mut script: Vec<_> = (0..STEPS - 1)
            .map(|_| {
                json!({"tool_calls": [{"name": tool, "input": input}],
                            "usage": {"input_tokens": 1, "output_tokens": 1}})
            })
            .collect();
        script.push(json!({"text": "done", "usage": {"input_tokens": 1, "output_tokens": 1}}));
        let steps = load_script(&json!(script).to_string()).unwrap();
        let rt = runtime_with_client(&p, MockClient::from_steps(steps));
        let switched = context_switches();
        let mut times = step_times(&rt, sessions, STEPS).await;
        let switched = context_switches().saturating_sub(switched);
        times.sort();
        println!(
            "per-step, {label}: p50 {}  p99 {}  ({} steps; model call, journal and checkpoint commits included)",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            times.len()
        );
        println!(
            "context switches per step, {label}: {:.1}  (all threads, session setup included)",
            switched as f64 / (sessions * STEPS) as f64
        );
        let mut drives = drive_times(&rt, sessions, STEPS).await;
        drives.sort();
        println!(
            "per-step, {label}, no follower (whole drive / steps): p50 {}  p99 {}  ({} turns)",
            ms(percentile(&drives, 0.5)),
            ms(percentile(&drives, 0.99)),
            drives.len()
        );
    }
}

/// Builds a session with at least `events` events of ordinary turns (with compaction keeping the
/// context bounded, as it does in a long-lived session), then leaves a turn open as a crash would.
async fn history(p: &TestProject, events: u64) -> String {
    let rt = runtime_with_client(p, MockClient::new("echo", None).unwrap());
    let id = rt.create_session(None).await.unwrap();
    let mut n = 0;
    while rt.session(&id).await.unwrap().unwrap().event_count < events {
        n += 1;
        rt.post_message(&id, &format!("message number {n} with a few words"))
            .await
            .unwrap();
        rt.drive(&id).await.unwrap();
    }
    // An open turn, killed right after `step.started`.
    let session = rt.session(&id).await.unwrap().unwrap();
    let turn = TurnRecord {
        session_id: id.clone(),
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
            session_id: id.clone(),
            turn_seq: Some(session.turn_count),
            kind: MESSAGE_KIND_MESSAGE.into(),
            body: serde_json::to_value(Message::user("the last one")).unwrap(),
        });
    rt.store().commit(batch).await.unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run bench/runtime.sh"]
async fn bench_resume_time() {
    let mut baseline = None;
    for events in [100u64, 1_000, 10_000] {
        let p = TestProject::new();
        let mut a = agent();
        a.config.context_window = Some(2_000);
        a.config.compaction.threshold = 0.5;
        p.write_build(&a, &[]);
        let id = history(&p, events).await;
        let mut load = Vec::new();
        let mut finish = Vec::new();
        let mut open = Vec::new();
        for _ in 0..5 {
            // Load: a fresh store handle reads what resume needs (session, open turn, its calls,
            // pending input, the bounded context).
            let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
            let t = Instant::now();
            let s = store.session(&id).await.unwrap().unwrap();
            let turn = store.last_turn(&id).await.unwrap().unwrap();
            let _ = store.tool_calls(&id, turn.seq).await.unwrap();
            let _ = store.input_requests(&id, true).await.unwrap();
            let ctx = store.context(&id).await.unwrap();
            load.push(t.elapsed());
            assert!(s.event_count >= events && !ctx.is_empty());
        }
        // Finish: a new runtime drives the open turn to completion (one mock step).
        let p2_state = p.state_dir.clone();
        let backup = p2_state.join("eve.db.bak");
        {
            let conn = rusqlite::Connection::open(p2_state.join("eve.db")).unwrap();
            conn.execute("VACUUM INTO ?1", [backup.to_string_lossy()])
                .unwrap();
        }
        for _ in 0..5 {
            std::fs::copy(&backup, p2_state.join("eve.db")).unwrap();
            let _ = std::fs::remove_file(p2_state.join("eve.db-wal"));
            let _ = std::fs::remove_file(p2_state.join("eve.db-shm"));
            // A restored backup on purpose: its mark would (rightly) refuse the older file.
            let _ = std::fs::remove_file(p2_state.join("eve.db.mark"));
            let t = Instant::now();
            let store = Arc::new(SqliteStore::open(p.state_dir.join("eve.db")).unwrap());
            open.push(t.elapsed());
            let rt = runtime_on(&p, MockClient::new("echo", None).unwrap(), store.clone());
            assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
            finish.push(t.elapsed());
            // The next round restores the backup: this store must have stopped writing first.
            drop(rt);
            store.close_and_wait();
        }
        load.sort();
        finish.sort();
        open.sort();
        if std::env::var_os("EVE_BENCH_VERBOSE").is_some() {
            println!("  samples: load {load:?} finish {finish:?}");
        }
        let load50 = percentile(&load, 0.5);
        let finish50 = percentile(&finish, 0.5);
        let base = *baseline.get_or_insert(finish50);
        println!(
            "resume after {events:>6} events: load state {}  open store + finish the turn {}  ({:.2}x the 100-event time)",
            ms(load50),
            ms(finish50),
            finish50.as_secs_f64() / base.as_secs_f64()
        );
        // Opening alone: the store's start-up checks (integrity at start reads every page).
        println!(
            "resume after {events:>6} events: of which opening the store {}",
            ms(percentile(&open, 0.5))
        );
    }
}
