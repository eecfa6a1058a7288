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
            'commits: while let Ok(events) = live.recv().await {
                for e in events.iter() {
                    if e.kind == "step.completed" {
                        marks.push(Instant::now());
                    }
                    if e.kind == "session.waiting" {
                        break 'commits;
                    }
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
            body: serde_json::to_value(Message::user("the last one")).unwrap(),
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

// ---- what a step costs on the wire ---------------------------------------------------------

/// What crossed a [`WireCounter`] between two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Wire {
    /// Connections opened.
    connections: u64,
    /// Times a client spoke after the server had answered it (one round trip each; queries
    /// sent together before any answer, a pipeline, count once).
    round_trips: u64,
    /// Statements run: simple queries (`BEGIN`, `COMMIT`, `batch_execute`) and executes of
    /// prepared statements.
    statements: u64,
    /// Statements prepared (Parse messages): a statement cache that works sends none once warm.
    prepares: u64,
    /// Transactions ended (the server's ReadyForQuery going from in-transaction to idle).
    transactions: u64,
    /// Wall-clock time during which at least one connection waited for the server's answer
    /// (the rest is spent in the runtime, or idle).
    server_wait: Duration,
}

impl std::ops::Sub for Wire {
    type Output = Wire;
    fn sub(self, o: Wire) -> Wire {
        Wire {
            connections: self.connections.saturating_sub(o.connections),
            round_trips: self.round_trips.saturating_sub(o.round_trips),
            statements: self.statements.saturating_sub(o.statements),
            prepares: self.prepares.saturating_sub(o.prepares),
            transactions: self.transactions.saturating_sub(o.transactions),
            server_wait: self.server_wait.saturating_sub(o.server_wait),
        }
    }
}

impl std::fmt::Display for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} round trips, {} transactions, {} statements, {} prepares, {} new connections, \
             waiting on the server {}",
            self.round_trips,
            self.transactions,
            self.statements,
            self.prepares,
            self.connections,
            ms(self.server_wait)
        )
    }
}

#[derive(Default)]
struct WireCounts {
    connections: std::sync::atomic::AtomicU64,
    round_trips: std::sync::atomic::AtomicU64,
    statements: std::sync::atomic::AtomicU64,
    prepares: std::sync::atomic::AtomicU64,
    transactions: std::sync::atomic::AtomicU64,
    server_wait_ns: std::sync::atomic::AtomicU64,
    /// Connections with an answer outstanding, and since when at least one has.
    busy: std::sync::Mutex<(usize, Option<Instant>)>,
}

impl WireCounts {
    /// A connection started waiting for the server (`true`) or got its last answer (`false`).
    fn busy(&self, waiting: bool) {
        let mut b = self.busy.lock().unwrap();
        if waiting {
            if b.0 == 0 {
                b.1 = Some(Instant::now());
            }
            b.0 += 1;
        } else {
            b.0 = b.0.saturating_sub(1);
            if b.0 == 0
                && let Some(since) = b.1.take()
            {
                let ns = since.elapsed().as_nanos() as u64;
                self.server_wait_ns
                    .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// A loopback TCP proxy in front of the PostgreSQL server that reads the wire protocol as it
/// passes and counts round trips, statements, prepares and transactions (the server's view of
/// what the store sends, with nothing in the store's code changed to count).
struct WireCounter {
    counts: Arc<WireCounts>,
    port: u16,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for WireCounter {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl WireCounter {
    async fn start(server: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(WireCounts::default());
        let c = counts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
                    continue;
                };
                client.set_nodelay(true).unwrap();
                upstream.set_nodelay(true).unwrap();
                c.connections
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::spawn(relay(client, upstream, c.clone()));
            }
        });
        Self {
            counts,
            port,
            accept,
        }
    }

    fn snapshot(&self) -> Wire {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.counts;
        Wire {
            connections: c.connections.load(Relaxed),
            round_trips: c.round_trips.load(Relaxed),
            statements: c.statements.load(Relaxed),
            prepares: c.prepares.load(Relaxed),
            transactions: c.transactions.load(Relaxed),
            server_wait: Duration::from_nanos(c.server_wait_ns.load(Relaxed)),
        }
    }
}

/// Splits the complete messages off the front of `pending`: `(type, body)` each; `untyped` is
/// set while the client's startup messages (no type byte) are still to come.
fn messages(pending: &mut Vec<u8>, untyped: &mut bool) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let (head, kind) = if *untyped { (4, 0) } else { (5, 1) };
        if pending.len() < head {
            break;
        }
        let len = u32::from_be_bytes(pending[kind..kind + 4].try_into().unwrap()) as usize + kind;
        if pending.len() < len {
            break;
        }
        let t = if *untyped { 0 } else { pending[0] };
        out.push((t, pending[head..len].to_vec()));
        pending.drain(..len);
        if *untyped {
            let code = out
                .last()
                .and_then(|(_, b)| b.get(..4))
                .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
            // An SSL or GSS encryption request is followed by another untyped message.
            if !matches!(code, Some(80_877_103 | 80_877_104)) {
                *untyped = false;
            }
        }
    }
    out
}

/// Forwards one connection both ways, reading the messages as they pass. A round trip starts
/// when the client sends something that needs an answer (a Sync, a simple query, the startup
/// message) while nothing is outstanding; it ends with the ReadyForQuery that answers the
/// last outstanding one. Notifications arriving on an idle connection are not waits.
async fn relay(client: tokio::net::TcpStream, upstream: tokio::net::TcpStream, c: Arc<WireCounts>) {
    use std::sync::atomic::Ordering::Relaxed;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut cr, mut cw) = client.into_split();
    let (mut ur, mut uw) = upstream.into_split();
    let outstanding = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Single-byte answers the server owes (to an SSL or GSS encryption request).
    let single = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let up = {
        let (c, outstanding, single) = (c.clone(), outstanding.clone(), single.clone());
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut pending = Vec::new();
            let mut untyped = true;
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                for (t, body) in messages(&mut pending, &mut untyped) {
                    let code = body
                        .get(..4)
                        .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
                    let answered = match t {
                        0 if matches!(code, Some(80_877_103 | 80_877_104)) => {
                            single.fetch_add(1, Relaxed);
                            false
                        }
                        0 | b'S' => true,
                        b'Q' => {
                            c.statements.fetch_add(1, Relaxed);
                            true
                        }
                        b'E' => {
                            c.statements.fetch_add(1, Relaxed);
                            false
                        }
                        b'P' => {
                            c.prepares.fetch_add(1, Relaxed);
                            false
                        }
                        _ => false,
                    };
                    if answered && outstanding.fetch_add(1, Relaxed) == 0 {
                        c.round_trips.fetch_add(1, Relaxed);
                        c.busy(true);
                    }
                }
                if uw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = uw.shutdown().await;
        }
    };
    let down = {
        let (c, outstanding) = (c.clone(), outstanding.clone());
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut pending = Vec::new();
            let mut status = b'I';
            let mut untyped = false;
            loop {
                let n = match ur.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let mut skip = 0;
                while single.load(Relaxed) > 0 && pending.is_empty() && skip < n {
                    single.fetch_sub(1, Relaxed);
                    skip += 1;
                }
                pending.extend_from_slice(&buf[skip..n]);
                for (t, body) in messages(&mut pending, &mut untyped) {
                    if t == b'Z' && !body.is_empty() {
                        if status != b'I' && body[0] == b'I' {
                            c.transactions.fetch_add(1, Relaxed);
                        }
                        status = body[0];
                        let before = outstanding
                            .fetch_update(Relaxed, Relaxed, |o| Some(o.saturating_sub(1)))
                            .unwrap_or(0);
                        if before == 1 {
                            c.busy(false);
                        }
                    }
                }
                if cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = cw.shutdown().await;
        }
    };
    tokio::join!(up, down);
    if outstanding.load(Relaxed) > 0 {
        c.busy(false);
    }
}

/// `url` (of the test server, on TCP) pointed at `port` on loopback instead.
fn through(url: &str, port: u16) -> Option<String> {
    let config: tokio_postgres::Config = url.parse().ok()?;
    let server_port = *config.get_ports().first()?;
    let host = match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        _ => return None,
    };
    let from = format!("{host}:{server_port}");
    url.contains(&from)
        .then(|| url.replacen(&from, &format!("127.0.0.1:{port}"), 1))
}

fn server_addr(url: &str) -> Option<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let config: tokio_postgres::Config = url.parse().ok()?;
    let port = *config.get_ports().first()?;
    match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(h) => (h.as_str(), port).to_socket_addrs().ok()?.next(),
        _ => None,
    }
}

/// What a resumed turn and one no-op script-tool step send to PostgreSQL: round trips,
/// transactions, statements and prepares, counted on the wire by a proxy, and how much of the
/// wall clock is spent waiting for the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run bench/store_pg.sh"]
async fn bench_store_traffic() {
    let Some(base) = server_url() else { return };
    let Some(addr) = server_addr(&base) else {
        println!("traffic: skipped, the test server's URL is not a TCP address");
        return;
    };
    let proxy = WireCounter::start(addr).await;
    let url = through(&fresh_schema(&base).await, proxy.port).unwrap();
    const ROUNDS: usize = 5;

    // A resumed turn: a new store and runtime finish a turn left open after `step.started`.
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let id = {
        let store: Arc<dyn Store> = Arc::new(PgStore::connect(&url).await.unwrap());
        let rt = runtime(&p, store, MockClient::new("echo", None).unwrap());
        let id = rt.create_session(None).await.unwrap();
        rt.post_message(&id, "hello").await.unwrap();
        rt.drive(&id).await.unwrap();
        id
    };
    let mut resumed = Vec::new();
    for _ in 0..ROUNDS {
        let store: Arc<dyn Store> = Arc::new(PgStore::connect(&url).await.unwrap());
        open_turn(store.as_ref(), &id).await;
        let before = proxy.snapshot();
        let t = Instant::now();
        let rt = runtime(&p, store, MockClient::new("echo", None).unwrap());
        let created = t.elapsed();
        assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
        resumed.push((t.elapsed(), created, proxy.snapshot() - before));
    }
    resumed.sort_by_key(|(t, _, _)| *t);
    let (t, created, wire) = resumed[ROUNDS / 2];
    println!(
        "traffic, resumed turn (new store and runtime, one mock step), PostgreSQL: {} in {} \
         (the runtime created in {})",
        wire,
        ms(t),
        ms(created)
    );

    // One no-op script-tool step: a 5-step turn less a 1-step turn, over 4.
    let turn = |steps: usize| {
        let mut script: Vec<_> = (0..steps - 1)
            .map(|_| json!({"tool_calls": [{"name": "noop", "input": {}}]}))
            .collect();
        script.push(json!({"text": "done"}));
        MockClient::from_steps(load_script(&json!(script).to_string()).unwrap())
    };
    let p = TestProject::new();
    let mut a = agent();
    a.config.compaction.enabled = false;
    let mut tool = script_tool("noop", Effect::Read, Approval::Never);
    tool.env.clear();
    a.tools.push(tool);
    p.write_build(&a, &[("tools/noop.sh".to_owned(), "true\n".to_owned())]);
    let store: Arc<dyn Store> = Arc::new(PgStore::connect(&url).await.unwrap());
    let mut per = Vec::new();
    for steps in [1usize, 5] {
        let rt = runtime(&p, store.clone(), turn(steps));
        // A warm pool first: the first session of a runtime is not what a step costs.
        let warm = rt.create_session(None).await.unwrap();
        rt.post_message(&warm, "go").await.unwrap();
        rt.drive(&warm).await.unwrap();
        let mut runs = Vec::new();
        for _ in 0..ROUNDS {
            let id = rt.create_session(None).await.unwrap();
            rt.post_message(&id, "go").await.unwrap();
            let before = proxy.snapshot();
            let t = Instant::now();
            assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
            runs.push((t.elapsed(), proxy.snapshot() - before));
        }
        runs.sort_by_key(|(t, _)| *t);
        per.push(runs[ROUNDS / 2]);
    }
    let ((t1, w1), (t5, w5)) = (per[0], per[1]);
    println!(
        "traffic, turn of one model step (drive), PostgreSQL: {w1} in {}",
        ms(t1)
    );
    println!(
        "traffic, turn of four no-op tool steps and an answer (drive), PostgreSQL: {w5} in {}",
        ms(t5)
    );
    let d = w5 - w1;
    println!(
        "traffic, one no-op script-tool step, PostgreSQL: {:.1} round trips, {:.1} transactions, \
         {:.1} statements, {:.1} prepares, waiting on the server {} of {}",
        d.round_trips as f64 / 4.0,
        d.transactions as f64 / 4.0,
        d.statements as f64 / 4.0,
        d.prepares as f64 / 4.0,
        ms(d.server_wait / 4),
        ms(t5.saturating_sub(t1) / 4)
    );
}
