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
