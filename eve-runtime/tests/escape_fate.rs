//! Boxes share no fate, through real sessions: one session holding its processes, memory and
//! disk at their limits makes no other session's tools fail; a call's memory is bounded in total;
//! what a call writes past the workspace quota is stopped while it runs and does not stay; a tool
//! failing in one session is refused there only, and everywhere only when many sessions fail
//! alike.
//!
//! Each protection has its twin: the same attack with the runtime's test-only shared fate (every
//! box on uid 65534, no cgroup, no quota watch: the behaviour before), where it succeeds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Agent, Provider, SandboxLimits};
use eve_runtime::engine::{
    BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{SqliteStore, Store};
use serde_json::{Value, json};

use crate::engine_support::{TestProject, agent, run_prompt};

const MIB: u64 = 1 << 20;
/// The workspace quota of these tests.
const QUOTA: u64 = 8 * MIB;

/// An agent whose `bash` runs isolated with small limits: 64 processes, 256 MiB.
fn small_agent() -> Agent {
    let mut a = agent();
    a.config.default_tools = true;
    a.sandbox.provider = Provider::Isolated;
    a.sandbox.limits = SandboxLimits {
        memory: 256 * MIB,
        processes: 64,
        ..SandboxLimits::default()
    };
    a
}

/// A runtime on `p` whose model plays `steps` (every session the same script), with the
/// The twins run every box on one uid, whose process count is the host's: two twins at once (the
/// test harness runs tests in parallel) would fail each other, which is the very fate they show.
/// The tests of this file take turns.
static TAKE_TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// workspace quota at [`QUOTA`]; `shared` turns on the test-only shared fate.
fn runtime(p: &TestProject, steps: Value, shared: bool) -> Runtime {
    let steps = load_script(&steps.to_string()).unwrap();
    let model = ResolvedModel {
        client: Arc::new(MockClient::from_steps(steps)),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
    let config = RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(store) as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| match name {
            "EVE_WORKSPACE_MAX_BYTES" => Some(QUOTA.to_string()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    };
    let rt = Runtime::new(config);
    rt.executor().set_shared_fate(shared);
    rt
}

fn bash_call(command: &str) -> Value {
    json!({"name": "bash", "input": {"command": command, "timeout_ms": 120_000}})
}

/// Every call of a session: (is it an error, what the model saw).
async fn outputs(rt: &Runtime, session: &str) -> Vec<(bool, String)> {
    rt.store()
        .tool_calls(session, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            let text = match c.output {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => String::new(),
            };
            (c.is_error, text)
        })
        .collect()
}

fn workspace(p: &TestProject, session: &str) -> PathBuf {
    p.state_dir.join("sandboxes").join(session)
}

fn size_of(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        total += m.len();
        if m.is_dir() {
            total += size_of(&e.path());
        }
    }
    total
}

/// Forks until refused, notes how many in `holding`, holds every process until `release`, and
/// keeps taking any process slot that frees up meanwhile (its other calls start and end short
/// processes), so a limit it shares stays full however the calls interleave.
const HOLD_PROCESSES: &str = r#"python3 -c '
import os, time
n = 0
def grab():
    global n
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:
        while not os.path.exists("release"):
            time.sleep(0.2)
        os._exit(0)
    n += 1
    return True
while n < 4096 and grab():
    pass
while not os.path.exists("release"):
    # Written again and again: a parallel call stopped at the quota removes what changed.
    open("holding", "w").write(str(n))
    while n < 4096 and grab():
        pass
    time.sleep(0.01)
print("held", n)
'"#;

/// Three processes of 40% of the 256 MiB limit each, holding until `release`.
const HOLD_MEMORY: &str = r#"for i in 1 2 3; do python3 -c '
import os, time
b = b"x" * (256 * 1024 * 1024 * 4 // 10)
while not os.path.exists("release"):
    time.sleep(0.1)
print("memory held")
' & done; wait"#;

/// Fills the workspace to just under its 8 MiB quota (7 MiB in 1 MiB files), then holds until
/// `release`. (Past the quota, every call of the session running then is stopped: see
/// `a_write_past_the_workspace_quota_is_stopped_and_does_not_stay`.)
const FILL_DISK: &str = r#"mkdir -p fill; i=0; while [ $i -lt 7 ]; do head -c 1048576 /dev/zero > fill/f$i || exit 9; i=$((i+1)); done; echo wrote all; while [ ! -e release ]; do sleep 0.1; done"#;

/// What another session does: fork, allocate, write.
const ORDINARY: &str = r#"for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait; echo fine; python3 -c 'b = b"x" * (20 * 1024 * 1024); print("memory ok")'; head -c 1048576 /dev/zero > f && echo disk ok"#;

/// Lines `memory held` in a call's output.
fn count_held(text: &str) -> usize {
    text.lines().filter(|l| l.trim() == "memory held").count()
}

struct Held {
    attacker: Vec<(bool, String)>,
    other: Vec<(bool, String)>,
    attacker_workspace: u64,
}

/// Session A (one project) holds its processes, memory and disk; session B (another project,
/// another runtime: like two eve processes on one host) runs an ordinary call meanwhile.
async fn one_holds_another_works(shared: bool) -> Held {
    let (pa, pb) = (TestProject::new(), TestProject::new());
    pa.write_build(&small_agent(), &[]);
    pb.write_build(&small_agent(), &[]);
    let rt_a = runtime(
        &pa,
        json!([
            {"tool_calls": [bash_call(HOLD_PROCESSES), bash_call(HOLD_MEMORY), bash_call(FILL_DISK)]},
            {"text": "held"}
        ]),
        shared,
    );
    let rt_b = runtime(
        &pb,
        json!([{"tool_calls": [bash_call(ORDINARY)]}, {"text": "done"}]),
        shared,
    );
    let a = rt_a.create_session(Some("hold".into())).await.unwrap();
    let driving = {
        let (rt, a) = (rt_a.clone(), a.clone());
        tokio::spawn(async move { rt.drive(&a).await })
    };
    let ws = workspace(&pa, &a);
    let start = Instant::now();
    while !ws.join("holding").exists() {
        if start.elapsed() > Duration::from_secs(60) {
            let listing: Vec<_> = std::fs::read_dir(&ws)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            panic!(
                "session A never held its processes; its workspace: {listing:?}; calls: {:?}",
                outputs(&rt_a, &a).await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The memory settles (or is killed) and the disk call is stopped, or has written all.
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "session A holds {} processes",
        std::fs::read_to_string(ws.join("holding")).unwrap_or_default()
    );
    let (b, _) = run_prompt(&rt_b, "work").await;
    let other = outputs(&rt_b, &b).await;
    std::fs::write(ws.join("release"), "").unwrap();
    driving.await.unwrap().unwrap();
    let attacker = outputs(&rt_a, &a).await;
    Held {
        attacker,
        other,
        attacker_workspace: size_of(&ws),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_at_its_limits_does_not_make_another_fail() {
    let _turn = TAKE_TURNS.lock().await;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: per-box uids and cgroups need eve to run as root");
        return;
    }
    let held = one_holds_another_works(false).await;
    eprintln!(
        "protected: A saw {:?}\nB saw {:?}",
        held.attacker, held.other
    );
    let (b_error, b_text) = &held.other[0];
    assert!(!b_error, "the other session's call failed: {b_text}");
    for line in ["fine", "memory ok", "disk ok"] {
        assert!(b_text.contains(line), "{line}: {b_text}");
    }
    let texts: Vec<&str> = held.attacker.iter().map(|(_, t)| t.as_str()).collect();
    let procs = texts
        .iter()
        .find(|t| t.contains("held "))
        .expect("the holder ran");
    let n: u64 = procs
        .split_whitespace()
        .skip_while(|w| *w != "held")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap();
    // The holder and its children: the call's 64 processes at most.
    assert!(n < 64, "the holder forked past its 64 processes: {n}");
    let memory = texts[1];
    assert!(count_held(memory) < 3, "three 40% processes held: {memory}");
    assert!(texts[2].contains("wrote all"), "{}", texts[2]);
    assert!(
        held.attacker_workspace > 6 * MIB && held.attacker_workspace <= QUOTA,
        "A's workspace holds {} bytes",
        held.attacker_workspace
    );

    // Twin: one uid for every box, no cgroup, no quota watch.
    let held = one_holds_another_works(true).await;
    eprintln!(
        "shared fate: A saw {:?}\nB saw {:?}",
        held.attacker, held.other
    );
    let (b_error, b_text) = &held.other[0];
    let all_worked = ["fine", "memory ok", "disk ok"]
        .iter()
        .all(|line| b_text.contains(line));
    assert!(
        *b_error || !all_worked,
        "the shared fate must make the other session fail: {b_text}"
    );
    assert!(b_text.contains("temporarily unavailable"), "{b_text}");
}

#[tokio::test]
async fn a_calls_memory_is_bounded_in_total() {
    let _turn = TAKE_TURNS.lock().await;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: cgroups need eve to run as root here");
        return;
    }
    let three = r#"for i in 1 2 3; do python3 -c 'import time; b = b"x" * (256 * 1024 * 1024 * 4 // 10); time.sleep(1.5); print("memory held")' & done; wait"#;
    let mut seen = Vec::new();
    for shared in [false, true] {
        let p = TestProject::new();
        p.write_build(&small_agent(), &[]);
        let rt = runtime(
            &p,
            json!([{"tool_calls": [bash_call(three)]}, {"text": "done"}]),
            shared,
        );
        let (id, _) = run_prompt(&rt, "allocate").await;
        seen.push(outputs(&rt, &id).await.remove(0).1);
    }
    eprintln!("per call: {}\nper process only: {}", seen[0], seen[1]);
    assert!(count_held(&seen[0]) < 3, "{}", seen[0]);
    assert_eq!(count_held(&seen[1]), 3, "{}", seen[1]);
}

#[tokio::test]
async fn a_write_past_the_workspace_quota_is_stopped_and_does_not_stay() {
    let _turn = TAKE_TURNS.lock().await;
    let endless = r#"mkdir -p fill; i=0; while [ $i -lt 48 ]; do head -c 1048576 /dev/zero > fill/f$i; i=$((i+1)); done; echo wrote all"#;
    let mut runs = Vec::new();
    for shared in [false, true] {
        let p = TestProject::new();
        p.write_build(&small_agent(), &[]);
        let rt = runtime(
            &p,
            json!([{"tool_calls": [bash_call(endless)]}, {"text": "done"}]),
            shared,
        );
        let (id, _) = run_prompt(&rt, "fill").await;
        let (is_error, text) = outputs(&rt, &id).await.remove(0);
        runs.push((is_error, text, size_of(&workspace(&p, &id))));
    }
    let (error, text, left) = &runs[0];
    eprintln!("quota: {text} ({left} bytes left)");
    assert!(
        *error && text.contains("the sandbox stopped the call"),
        "{text}"
    );
    assert!(text.contains("past its quota"), "{text}");
    assert!(text.contains("EVE_WORKSPACE_MAX_BYTES"), "{text}");
    assert!(*left <= QUOTA, "{left} bytes stayed");
    let (error, text, left) = &runs[1];
    assert!(!error && text.contains("wrote all"), "shared fate: {text}");
    assert!(*left > 40 * MIB, "shared fate: {left} bytes");
}

#[tokio::test]
async fn a_tool_failing_in_one_session_is_refused_there_only_until_many_fail_alike() {
    // Every session plays the same script; a session whose workspace holds `ok` succeeds.
    let attempt = bash_call("test -e ok || { echo broken >&2; exit 1; }; echo works");
    let p = TestProject::new();
    let mut a = agent();
    a.config.default_tools = true;
    p.write_build(&a, &[]);
    let rt = runtime(
        &p,
        json!([
            {"tool_calls": [attempt.clone()]},
            {"tool_calls": [attempt.clone()]},
            {"tool_calls": [attempt.clone()]},
            {"tool_calls": [attempt]},
            {"text": "done"}
        ]),
        false,
    );
    let session = |ok: bool| {
        let (rt, p) = (rt.clone(), &p);
        async move {
            let id = rt.create_session(Some("go".into())).await.unwrap();
            if ok {
                let ws = workspace(p, &id);
                std::fs::create_dir_all(&ws).unwrap();
                std::fs::write(ws.join("ok"), "").unwrap();
            }
            rt.drive(&id).await.unwrap();
            outputs(&rt, &id).await
        }
    };
    // Session A breaks `bash` for itself: the fourth call is refused in A.
    let first = session(false).await;
    assert_eq!(first.len(), 4);
    assert!(
        first[3].1.contains("temporarily disabled in this session"),
        "{:?}",
        first[3]
    );
    // Session B is not refused: its calls run and work.
    let second = session(true).await;
    assert!(
        second.iter().all(|(e, t)| !e && t.contains("works")),
        "{second:?}"
    );
    // B's success shows the tool works: A's trip no longer counts. Three more sessions fail
    // alike: three distinct sessions tripped, so the tool is refused in every session, even one
    // where it would work.
    for _ in 0..3 {
        let failed = session(false).await;
        assert!(failed[3].1.contains("in this session"), "{failed:?}");
    }
    let fifth = session(true).await;
    assert!(
        fifth[0]
            .1
            .contains("temporarily disabled for every session"),
        "{:?}",
        fifth[0]
    );
    eprintln!("agent-wide refusal after 3 sessions: {}", fifth[0].1);
}
