//! The SQLite store: migrations, atomic batches, event indexes, leases.

use eve_runtime::store::*;
use serde_json::json;

fn session(id: &str) -> SessionRecord {
    SessionRecord {
        id: id.to_owned(),
        status: SessionStatus::Idle,
        build_hash: "h".into(),
        agent_name: "a".into(),
        parent_id: None,
        parent_call_id: None,
        schedule: Some("nightly".into()),
        turn_count: 0,
        event_count: 0,
        message_count: 0,
        context_start: 0,
        usage: UsageTotals::default(),
        cost_usd: 0.0,
        loaded_skills: vec![],
        approved_tools: vec![],
        cancel_requested: false,
        created_at: now_ms(),
        updated_at: now_ms(),
        owner: None,
    }
}

#[tokio::test]
async fn opening_twice_migrates_once_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eve.db");
    let store = SqliteStore::open(&path).unwrap();
    let version_of = |path: &std::path::Path| -> i64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    let first = version_of(&path);
    assert!(first >= 1);
    let mut b = Batch::durable();
    b.push(Op::InsertSession(session("wrun_1")));
    store.commit(b).await.unwrap();
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.session("wrun_1").await.unwrap().is_some());
    assert_eq!(version_of(&path), first, "a second open migrates nothing");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_failing_batch_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("eve.db")).unwrap();
    let mut b = Batch::new();
    b.push(Op::InsertSession(session("wrun_1")));
    store.commit(b).await.unwrap();
    let mut b = Batch::new();
    b.event("wrun_1", "turn.started", json!({}));
    b.event("wrun_missing", "turn.started", json!({}));
    assert!(store.commit(b).await.is_err());
    assert!(store.events("wrun_1", 0, 10).await.unwrap().is_empty());
    let s = store.session("wrun_1").await.unwrap().unwrap();
    assert_eq!(s.event_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_indexes_are_dense_per_session_under_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("eve.db")).unwrap();
    for id in ["wrun_a", "wrun_b"] {
        let mut b = Batch::new();
        b.push(Op::InsertSession(session(id)));
        store.commit(b).await.unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = if i % 2 == 0 { "wrun_a" } else { "wrun_b" };
            let mut b = Batch::new();
            b.event(id, "x", json!({"i": i}));
            store.commit(b).await.unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for id in ["wrun_a", "wrun_b"] {
        let events = store.events(id, 0, 1000).await.unwrap();
        let idx: Vec<u64> = events.iter().map(|e| e.index).collect();
        assert_eq!(idx, (0..100).collect::<Vec<u64>>());
        assert_eq!(store.events(id, 98, 10).await.unwrap().len(), 2);
    }
    let listed = store
        .sessions(&SessionFilter {
            schedule: Some("nightly".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
}

#[tokio::test]
async fn a_lease_is_exclusive_until_its_holder_dies_or_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("eve.db")).unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let live = LeaseClaim {
        session_id: "wrun_1".into(),
        holder: "other".into(),
        pid: child.id(),
        host: "here".into(),
        ttl_ms: 60_000,
    };
    assert_eq!(
        store.acquire_lease(&live).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let me = LeaseClaim {
        holder: "me".into(),
        pid: std::process::id(),
        ..live.clone()
    };
    assert!(matches!(
        store.acquire_lease(&me).await.unwrap(),
        LeaseOutcome::HeldBy { .. }
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        store.acquire_lease(&me).await.unwrap(),
        LeaseOutcome::Acquired
    );
    assert!(store.renew_lease(&me).await.unwrap());
    assert!(!store.renew_lease(&live).await.unwrap());
    // Another host's live-looking lease is respected until it expires.
    let remote = LeaseClaim {
        session_id: "wrun_2".into(),
        holder: "remote".into(),
        pid: 1,
        host: "elsewhere".into(),
        ttl_ms: -1,
    };
    store.acquire_lease(&remote).await.unwrap();
    let me2 = LeaseClaim {
        session_id: "wrun_2".into(),
        ..me.clone()
    };
    assert_eq!(
        store.acquire_lease(&me2).await.unwrap(),
        LeaseOutcome::Acquired,
        "expired"
    );
    store.release_lease("wrun_2", "me").await.unwrap();
}

/// A store notices commits of other connections to its file (other processes), not its own.
#[tokio::test]
async fn commits_of_other_processes_are_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eve.db");
    let ours = SqliteStore::open(&path).unwrap();
    let theirs = SqliteStore::open(&path).unwrap();
    let mut seen = ours.foreign_commits().unwrap();
    seen.mark_unchanged();
    let mut b = Batch::durable();
    b.push(Op::InsertSession(session("wrun_ours")));
    ours.commit(b).await.unwrap();
    // Several watch intervals: our own commit is not reported.
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(700), seen.changed()).await;
    assert!(quiet.is_err(), "our own commit was reported as foreign");
    let mut b = Batch::durable();
    b.push(Op::InsertSession(session("wrun_theirs")));
    theirs.commit(b).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), seen.changed())
        .await
        .expect("another connection's commit is noticed")
        .unwrap();
}

/// A server's start waits for its store to warm, but not behind another process's write lock:
/// with the file's write lock held elsewhere for longer than a write waits for it (10 s), the
/// start goes on after its bound (with the bound at a minute, this waits the 10 s and fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_does_not_wait_behind_another_writer_to_warm_its_store() {
    let p = crate::engine_support::TestProject::new();
    p.write_build(&crate::engine_support::agent(), &[]);
    let rt = p.runtime(json!([]));
    let other = rusqlite::Connection::open(p.state_dir.join("eve.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    rt.warm_up().await;
    let waited = started.elapsed();
    other.execute_batch("COMMIT").unwrap();
    assert!(
        waited < std::time::Duration::from_secs(5),
        "the start waited {waited:?} behind another writer"
    );
}
