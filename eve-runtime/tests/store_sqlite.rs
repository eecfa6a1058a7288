//! The store contract run against the SQLite backend, and what only SQLite promises (a lease
//! of a dead process on this host is taken at once; a corrupt file is refused).

use std::path::PathBuf;
use std::sync::Arc;

use eve_runtime::store::*;

use crate::store_contract::{self, Backend};

/// A fresh database file in a temp dir; every `open` is another store on the same file, as two
/// processes would be.
pub struct Sqlite {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Sqlite {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("eve.db");
        Self { _dir: dir, path }
    }
}

impl Backend for Sqlite {
    fn open(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(&self.path).unwrap())
    }
}

crate::store_contract_tests!(Sqlite::new());

#[tokio::test]
async fn every_promise_in_one_run() {
    store_contract::run_all(Sqlite::new).await;
}

#[tokio::test]
async fn the_lease_of_a_dead_process_on_this_host_is_taken_at_once() {
    let backend = Sqlite::new();
    let store = backend.open();
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = exited.id();
    exited.wait().unwrap();
    let host = "this-host".to_owned();
    let dead = LeaseClaim {
        session_id: "wrun_d".into(),
        holder: "holder_dead".into(),
        pid: dead_pid,
        host: host.clone(),
        ttl_ms: 600_000,
    };
    assert_eq!(
        store.acquire_lease(&dead).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let alive = LeaseClaim {
        holder: "holder_alive".into(),
        pid: 1,
        ..dead.clone()
    };
    let ours = LeaseClaim {
        holder: "holder_ours".into(),
        pid: std::process::id(),
        ..dead.clone()
    };
    assert_eq!(
        store.acquire_lease(&ours).await.unwrap(),
        LeaseOutcome::Acquired
    );
    assert!(
        matches!(
            store.acquire_lease(&alive).await.unwrap(),
            LeaseOutcome::HeldBy { .. }
        ),
        "a running holder keeps its lease"
    );

    let strict: Arc<dyn Store> =
        Arc::new(SqliteStore::open_with(backend_path(&backend), Arc::new(ExpiryOnly)).unwrap());
    let again = LeaseClaim {
        session_id: "wrun_d2".into(),
        ..dead.clone()
    };
    assert_eq!(
        strict.acquire_lease(&again).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let other = LeaseClaim {
        holder: "holder_other".into(),
        pid: std::process::id(),
        ..again.clone()
    };
    assert!(
        matches!(
            strict.acquire_lease(&other).await.unwrap(),
            LeaseOutcome::HeldBy { .. }
        ),
        "under ExpiryOnly a dead pid does not free an unexpired lease"
    );
}

fn backend_path(backend: &Sqlite) -> PathBuf {
    backend.path.clone()
}

#[tokio::test]
async fn backend_errors_keep_the_database_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eve.db");
    std::fs::write(
        &path,
        b"this is not a database, just text long enough to be a header..",
    )
    .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("database error: "), "{text}");
    assert!(text.contains("not a database"), "{text}");
}

#[tokio::test]
async fn a_runtime_runs_on_the_store_it_is_given() {
    use eve_runtime::engine::{Runtime, RuntimeConfig, SettingsModelProvider};
    let backend = Sqlite::new();
    let store = backend.open();
    let state = tempfile::tempdir().unwrap();
    let models = Arc::new(SettingsModelProvider::new(Arc::new(|_: &str| None)));
    let runtime = Runtime::new(RuntimeConfig::with_store(
        state.path(),
        store.clone(),
        models,
    ));
    assert!(Arc::ptr_eq(runtime.store(), &store));
    let mut b = Batch::durable();
    b.push(Op::InsertSession(SessionRecord::new(
        "wrun_given".into(),
        "h".into(),
        "a".into(),
        None,
        now_ms(),
    )));
    store.commit(b).await.unwrap();
    assert!(runtime.session("wrun_given").await.unwrap().is_some());
    assert!(
        !state.path().join("eve.db").exists(),
        "no store is opened in the state folder"
    );
}

/// Commits `n` sessions named `wrun_<prefix><i>`.
async fn add_sessions(store: &dyn Store, prefix: &str, n: usize) {
    for i in 0..n {
        let mut b = Batch::durable();
        b.push(Op::InsertSession(SessionRecord::new(
            format!("wrun_{prefix}{i}"),
            "h".into(),
            "a".into(),
            None,
            now_ms(),
        )));
        store.commit(b).await.unwrap();
    }
}

/// Waits until the mark beside `db` records at least `sessions` sessions.
async fn mark_reaches(db: &std::path::Path, sessions: i64) {
    let mark = db.with_file_name("eve.db.mark");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let seen = std::fs::read_to_string(&mark)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["sessions"].as_i64())
            .unwrap_or(0);
        if seen >= sessions {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the mark never recorded {sessions} sessions"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Folds the WAL into the database file and closes it, as a clean shutdown leaves it.
fn checkpoint(db: &std::path::Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

fn refusal(db: &std::path::Path) -> String {
    match SqliteStore::open(db) {
        Ok(_) => panic!("a store that lost its history was opened"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_truncated_or_deleted_store_is_refused_not_served_empty() {
    let backend = Sqlite::new();
    let db = backend_path(&backend);
    {
        let store = SqliteStore::open(&db).unwrap();
        add_sessions(&store, "a", 2).await;
        mark_reaches(&db, 2).await;
    }
    checkpoint(&db);
    // Deleted with its WAL kept.
    let moved = db.with_file_name("moved.db");
    std::fs::rename(&db, &moved).unwrap();
    std::fs::write(db.with_file_name("eve.db-wal"), b"not empty").unwrap();
    let text = refusal(&db);
    assert!(
        text.contains("eve.db") && text.contains("write-ahead log"),
        "{text}"
    );
    assert!(text.contains("restore"), "{text}");
    // Truncated to 0 bytes.
    let _ = std::fs::remove_file(db.with_file_name("eve.db-wal"));
    let _ = std::fs::remove_file(db.with_file_name("eve.db-shm"));
    std::fs::write(&db, b"").unwrap();
    let text = refusal(&db);
    assert!(
        text.contains("0 bytes") && text.contains("2 sessions"),
        "{text}"
    );
    // Put back, it opens with its sessions.
    std::fs::rename(&moved, &db).unwrap();
    let store = SqliteStore::open(&db).unwrap();
    assert!(store.session("wrun_a1").await.unwrap().is_some());
}

#[tokio::test]
async fn a_rolled_back_store_is_refused_so_published_ids_never_change() {
    let backend = Sqlite::new();
    let db = backend_path(&backend);
    let old = db.with_file_name("old.db");
    {
        let store = SqliteStore::open(&db).unwrap();
        add_sessions(&store, "a", 1).await;
        mark_reaches(&db, 1).await;
    }
    checkpoint(&db);
    std::fs::copy(&db, &old).unwrap();
    {
        let store = SqliteStore::open(&db).unwrap();
        add_sessions(&store, "b", 3).await;
        mark_reaches(&db, 4).await;
    }
    checkpoint(&db);
    // The older file comes back (a lost WAL, a stale copy): fewer sessions than were published.
    std::fs::copy(&old, &db).unwrap();
    let text = refusal(&db);
    assert!(
        text.contains("fewer than") && text.contains("eve.db.mark"),
        "{text}"
    );
    // Deleting the mark says "this older copy is what I want".
    std::fs::remove_file(db.with_file_name("eve.db.mark")).unwrap();
    let store = SqliteStore::open(&db).unwrap();
    assert!(store.session("wrun_a0").await.unwrap().is_some());
}

/// Commits `n` events to `session`, one commit each.
async fn add_events(store: &dyn Store, session: &str, n: usize) {
    for i in 0..n {
        let mut b = Batch::durable();
        b.event(session, "probe", serde_json::json!({ "i": i }));
        store.commit(b).await.unwrap();
    }
}

/// The mark beside `db` as (sessions, events), once it records at least `events` events.
async fn mark_events_reach(db: &std::path::Path, events: i64) -> (i64, i64) {
    let mark = db.with_file_name("eve.db.mark");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let seen = std::fs::read_to_string(&mark)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .map(|v| {
                (
                    v["sessions"].as_i64().unwrap_or(0),
                    v["events"].as_i64().unwrap_or(0),
                )
            })
            .unwrap_or((0, 0));
        if seen.1 >= events {
            return seen;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the mark never recorded {events} events (it shows {seen:?})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_mark_counts_every_event_ever_stored_and_fewer_events_are_refused() {
    let backend = Sqlite::new();
    let db = backend_path(&backend);
    let old = db.with_file_name("old.db");
    let newer = db.with_file_name("newer.db");
    {
        let store = SqliteStore::open(&db).unwrap();
        add_sessions(&store, "a", 2).await;
        add_events(&store, "wrun_a0", 5).await;
        add_events(&store, "wrun_a1", 3).await;
        assert_eq!(mark_events_reach(&db, 8).await, (2, 8));
    }
    checkpoint(&db);
    std::fs::copy(&db, &old).unwrap();
    {
        let store = SqliteStore::open(&db).unwrap();
        add_events(&store, "wrun_a1", 4).await;
        assert_eq!(mark_events_reach(&db, 12).await, (2, 12));
    }
    checkpoint(&db);
    std::fs::copy(&db, &newer).unwrap();
    // The older copy has the same sessions but fewer events than were published.
    std::fs::copy(&old, &db).unwrap();
    let text = refusal(&db);
    assert!(
        text.contains("fewer than") && text.contains("12 events"),
        "{text}"
    );
    std::fs::copy(&newer, &db).unwrap();
    {
        // Pruning both sessions deletes their events; the mark never goes down.
        let store = SqliteStore::open(&db).unwrap();
        let cutoff = now_ms() + 1;
        while now_ms() <= cutoff {
            std::hint::spin_loop();
        }
        add_sessions(&store, "b", 1).await;
        let pruned = store.prune_sessions(cutoff).await.unwrap();
        assert_eq!(pruned.len(), 2, "{pruned:?}");
        add_events(&store, "wrun_b0", 1).await;
        assert_eq!(mark_events_reach(&db, 13).await, (3, 13));
        let conn = rusqlite::Connection::open(&db).unwrap();
        let left: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 1, "the pruned sessions' events are gone");
    }
    checkpoint(&db);
    // Its rows plus what was pruned match the mark: it opens.
    let store = SqliteStore::open(&db).unwrap();
    assert!(store.session("wrun_b0").await.unwrap().is_some());
}

#[tokio::test]
async fn a_damaged_page_is_refused_at_start() {
    let backend = Sqlite::new();
    let db = backend_path(&backend);
    {
        let store = SqliteStore::open(&db).unwrap();
        add_sessions(&store, "a", 50).await;
        mark_reaches(&db, 50).await;
    }
    checkpoint(&db);
    let mut bytes = std::fs::read(&db).unwrap();
    let page = 4096;
    assert!(bytes.len() > 3 * page, "{} bytes", bytes.len());
    let last = bytes.len() - page;
    for b in &mut bytes[last..] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    let text = refusal(&db);
    assert!(text.contains("eve.db"), "{text}");
    assert!(
        text.contains("damaged") || text.contains("malformed"),
        "{text}"
    );
}

/// Removes what `rm .eve/eve.db*` removes beside `db`.
fn remove_store_files(db: &std::path::Path) {
    for entry in std::fs::read_dir(db.parent().unwrap()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with("eve.db") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

#[tokio::test]
async fn a_store_deleted_with_its_mark_beside_workspaces_is_refused() {
    let backend = Sqlite::new();
    let db = backend_path(&backend);
    {
        let store = SqliteStore::open(&db).unwrap();
        add_sessions(&store, "a", 1).await;
        store.close_and_wait();
    }
    std::fs::create_dir_all(db.with_file_name("sandboxes").join("wrun_a0")).unwrap();
    std::fs::create_dir_all(db.with_file_name("workspaces")).unwrap();
    std::fs::write(db.with_file_name("workspaces").join("wrun_a0.json"), "{}").unwrap();
    remove_store_files(&db);
    let text = refusal(&db);
    for said in [
        "the store is missing and has no mark",
        "1 session workspace under",
        "1 workspace checkpoint index under",
        "eve store check",
        "EVE_NEW_STORE=1",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert!(!db.exists(), "the refusal created the database");
    // 0 bytes, the same.
    std::fs::write(&db, b"").unwrap();
    let text = refusal(&db);
    assert!(
        text.contains("the store is empty (0 bytes) and has no mark"),
        "{text}"
    );
    // Asked for on purpose, an empty store starts; from then on it opens as any store.
    drop(SqliteStore::open_new_ok(&db).unwrap());
    let store = SqliteStore::open(&db).unwrap();
    assert!(store.session("wrun_a0").await.unwrap().is_none());
}

#[tokio::test]
async fn a_missing_store_whose_mark_counts_releases_is_refused() {
    let backend = Sqlite::new();
    let db = backend_path(&backend);
    {
        let store = SqliteStore::open(&db).unwrap();
        let mut b = Batch::durable();
        b.push(Op::Release(ReleaseOp::Event {
            kind: "release.built".into(),
            data: serde_json::json!({}),
        }));
        store.commit(b).await.unwrap();
        let release = ReleaseRecord {
            id: "rel_1".into(),
            build_hash: "h".into(),
            source: None,
            created_at: 1,
            principal: "local".into(),
            checks: Checks {
                errors: 0,
                warnings: 0,
                gate: None,
                forced: false,
            },
            status: ReleaseStatus::Active,
            delta: eve_compile::Delta::default(),
            base: None,
            activated_at: Some(1),
            activated_by: Some("local".into()),
            previous: None,
            reason: None,
            failures: 0,
        };
        let mut b = Batch::durable();
        b.push(Op::Release(ReleaseOp::Put(Box::new(release))));
        store.commit(b).await.unwrap();
        store.close_and_wait();
    }
    let mark = std::fs::read_to_string(db.with_file_name("eve.db.mark")).unwrap();
    assert!(mark.contains("\"releases\":1"), "{mark}");
    std::fs::remove_file(&db).unwrap();
    let _ = std::fs::remove_file(db.with_file_name("eve.db-wal"));
    let _ = std::fs::remove_file(db.with_file_name("eve.db-shm"));
    let text = refusal(&db);
    assert!(text.contains("1 releases"), "{text}");
}

#[tokio::test]
async fn a_dead_writers_temp_mark_is_swept_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("eve.db");
    drop(SqliteStore::open(&db).unwrap());
    // A writer killed between writing its temp mark and renaming it (no such pid), and one
    // still alive (this process), which may be about to rename its own.
    let dead = dir.path().join("eve.db.mark.99999999.0.tmp");
    let live = dir
        .path()
        .join(format!("eve.db.mark.{}.999.tmp", std::process::id()));
    let other = dir.path().join("eve.db.mark.notes.tmp");
    for f in [&dead, &live, &other] {
        std::fs::write(f, "{}").unwrap();
    }
    drop(SqliteStore::open(&db).unwrap());
    assert!(
        !dead.exists(),
        "the dead writer's temp mark was left behind"
    );
    assert!(live.exists(), "a live writer's temp mark was removed");
    assert!(other.exists(), "a file that is no temp mark was removed");
}

/// A commit that need not wait for the disk runs on the caller's thread when the writer is
/// idle; while another process holds the write lock it must neither fail nor block the caller's
/// thread: it waits on the writer thread, and lands once the lock is released.
#[tokio::test]
async fn a_commit_behind_another_process_write_lock_waits_off_the_callers_thread() {
    let backend = Sqlite::new();
    let store = backend.open();
    let mut b = Batch::new();
    b.push(Op::InsertSession(SessionRecord::new(
        "wrun_locked".into(),
        "h".into(),
        "a".into(),
        None,
        now_ms(),
    )));
    store.commit(b).await.unwrap();
    let other = rusqlite::Connection::open(&backend.path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let committing = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut b = Batch::new();
            b.event("wrun_locked", "probe", serde_json::json!({}));
            store.commit(b).await
        })
    };
    // This test runs on one thread: a commit that waited for the lock on it would hold this
    // timer back until the lock was released, and the commit would have finished by then.
    let waiting = tokio::time::timeout(std::time::Duration::from_millis(300), async {
        while !committing.is_finished() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        waiting.is_err(),
        "the commit finished while another process held the write lock"
    );
    other.execute_batch("COMMIT").unwrap();
    let committed = committing.await.unwrap().unwrap();
    assert_eq!(committed.events.len(), 1);
    let events = store.events("wrun_locked", 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "probe");
}

/// The write connection does not checkpoint on its own (so no commit pays for a checkpoint on
/// its caller's thread): the writer thread does, so the WAL stays bounded however many commits
/// come back to back.
#[tokio::test]
async fn the_wal_stays_bounded_under_back_to_back_commits() {
    let backend = Sqlite::new();
    let store = backend.open();
    let mut b = Batch::new();
    b.push(Op::InsertSession(SessionRecord::new(
        "wrun_wal".into(),
        "h".into(),
        "a".into(),
        None,
        now_ms(),
    )));
    store.commit(b).await.unwrap();
    let padding = "x".repeat(3000);
    const COMMITS: usize = 3000;
    for i in 0..COMMITS {
        let mut b = Batch::new();
        b.event(
            "wrun_wal",
            "probe",
            serde_json::json!({ "i": i, "pad": padding }),
        );
        store.commit(b).await.unwrap();
    }
    // Unchecked, the WAL would hold every commit's pages: more than 3,000 × 3 pages of 4 KiB.
    let wal = std::fs::metadata(backend.path.with_file_name("eve.db-wal"))
        .unwrap()
        .len();
    assert!(
        wal < 24 * 1024 * 1024,
        "the WAL grew to {wal} bytes over {COMMITS} commits"
    );
    let events = store.events("wrun_wal", 0, COMMITS + 1).await.unwrap();
    assert_eq!(events.len(), COMMITS);
}
