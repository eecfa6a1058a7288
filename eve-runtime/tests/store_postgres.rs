//! The store contract run against PostgreSQL, and what only a shared server promises (a wrong
//! URL fails loudly, with the password redacted; two nodes migrating at once both start).
//!
//! Each backend is a fresh schema of the test server (`EVE_TEST_POSTGRES_URL`, exported by
//! `scripts/test.sh` after `scripts/postgres.sh start`), so the tests run in parallel. Without a
//! URL these tests fail, saying how to start the server, unless `EVE_SKIP_POSTGRES=1` is set
//! (then each says SKIPPED).

use std::sync::Arc;

use eve_runtime::store::*;

use crate::store_contract::{self, Backend};

/// The test server's URL; `None` (after saying SKIPPED) only when skipping was asked for.
pub fn server_url() -> Option<String> {
    match std::env::var(eve_runtime::env_vars::EVE_TEST_POSTGRES_URL) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var(eve_runtime::env_vars::EVE_SKIP_POSTGRES).as_deref() == Ok("1") => {
            eprintln!("SKIPPED: PostgreSQL test (EVE_SKIP_POSTGRES=1)");
            None
        }
        _ => panic!(
            "this test needs PostgreSQL: run `scripts/postgres.sh start` and export \
             EVE_TEST_POSTGRES_URL=$(scripts/postgres.sh url) (scripts/test.sh does both), \
             or set EVE_SKIP_POSTGRES=1 to skip it"
        ),
    }
}

/// `url` with `options=-csearch_path=<schema>` added: a store opened on it lives in that schema.
pub fn url_in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

/// Runs `f` to completion from synchronous code inside a multi-threaded tokio test.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// A new empty schema on the test server; returns the URL of a store in it.
pub async fn fresh_schema(base: &str) -> String {
    let schema = format!("t_{}", ulid::Ulid::new().to_string().to_ascii_lowercase());
    let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {base}: {e}"));
    let conn = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    drop(client);
    let _ = conn.await;
    url_in_schema(base, &schema)
}

/// A fresh schema; every `open` is another store on it, as two nodes would be.
pub struct Postgres {
    url: String,
}

impl Postgres {
    /// `None` when PostgreSQL tests are skipped.
    pub fn new() -> Option<Self> {
        let base = server_url()?;
        Some(Self {
            url: block_on(fresh_schema(&base)),
        })
    }
}

impl Backend for Postgres {
    fn open(&self) -> Arc<dyn Store> {
        Arc::new(block_on(PgStore::connect(&self.url)).unwrap())
    }
}

crate::store_contract_tests!(match Postgres::new() {
    Some(b) => b,
    None => return,
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_promise_in_one_run() {
    if server_url().is_none() {
        return;
    }
    store_contract::run_all(|| Postgres::new().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_lives_in_the_schema_its_url_names() {
    let Some(base) = server_url() else { return };
    let url = fresh_schema(&base).await;
    let store = PgStore::connect(&url).await.unwrap();
    let mut b = Batch::durable();
    b.push(Op::InsertSession(SessionRecord::new(
        "wrun_schema".into(),
        "h".into(),
        "a".into(),
        None,
        now_ms(),
    )));
    store.commit(b).await.unwrap();
    let other = PgStore::connect(&fresh_schema(&base).await).await.unwrap();
    assert!(other.session("wrun_schema").await.unwrap().is_none());
    assert!(store.session("wrun_schema").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_migrate_once() {
    let Some(base) = server_url() else { return };
    let url = fresh_schema(&base).await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move { PgStore::connect(&url).await }));
    }
    for t in tasks {
        t.await.unwrap().expect("every node starts");
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let versions: Vec<i64> = client
        .query("SELECT version FROM eve_schema ORDER BY version", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let expected: Vec<i64> = (1..=versions.len() as i64).collect();
    assert!(!versions.is_empty());
    assert_eq!(versions, expected, "each migration applied once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_with_the_url_and_cause_password_redacted() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://eve:hunter2@127.0.0.1:{port}/eve");
    let err = PgStore::connect(&url).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    assert!(
        text.contains(&format!("postgres://eve:***@127.0.0.1:{port}/eve")),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.to_ascii_lowercase().contains("refused"), "{text}");

    let err = PgStore::connect("postgres://eve:pw@127.0.0.1:notaport/eve")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("invalid URL"), "{err}");
}

/// The Unix socket of the test cluster of `scripts/postgres.sh` (`target/postgres/sock`), with
/// the server's port; `None` when the tests use another server.
fn test_cluster_socket(base: &str) -> Option<(std::path::PathBuf, u16)> {
    let config: tokio_postgres::Config = base.parse().ok()?;
    let port = *config.get_ports().first()?;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/postgres/sock");
    dir.join(format!(".s.PGSQL.{port}"))
        .exists()
        .then(|| (dir.canonicalize().unwrap(), port))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_url_reaches_the_same_store() {
    let Some(base) = server_url() else { return };
    let Some((dir, port)) = test_cluster_socket(&base) else {
        eprintln!("SKIPPED: the test server is not scripts/postgres.sh's cluster (no socket)");
        return;
    };
    let tcp = fresh_schema(&base).await;
    let schema = tcp.rsplit_once("search_path%3D").unwrap().1.to_owned();
    let socket_url = format!(
        "postgres:///postgres?host={}&port={port}&user=postgres&options=-csearch_path%3D{schema}",
        dir.display()
    );
    let over_socket = PgStore::connect(&socket_url).await.unwrap();
    let mut b = Batch::durable();
    b.push(Op::InsertSession(SessionRecord::new(
        "wrun_socket".into(),
        "h".into(),
        "a".into(),
        None,
        now_ms(),
    )));
    over_socket.commit(b).await.unwrap();
    let over_tcp = PgStore::connect(&tcp).await.unwrap();
    assert!(over_tcp.session("wrun_socket").await.unwrap().is_some());

    // A URL without a host looks in the default socket folders, and says so when none is there.
    let err = PgStore::connect("postgres:///postgres?port=1&user=postgres")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    assert!(text.contains("/var/run/postgresql"), "{text}");
    assert!(text.contains("host="), "{text}");
}
