//! Class 10 of the trust boundary, secrets and damage, tried as an attacker (or an accident)
//! would: a tool writes the secret it was given into its workspace, and the workspace is
//! checkpointed into the store; bytes inside one page of a session's events are flipped, and a
//! client streams the session. Each attack has its twin: the same secret reaching the store
//! with the checkpoint redaction switched off (a test-only switch), the same damage failing a
//! direct read of the row, so neither test passes by accident.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use eve_compile::{Approval, Effect};
use eve_runtime::engine::{
    BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{Batch, CheckStatus, SqliteStore, Store};
use serde_json::{Value, json};

use crate::engine_support::*;
use crate::server_support::{AgentDir, TestServer};

const SECRET: &str = "tok-9f3c2e71d5a8b4";

/// The tool that leaks: the secret as written, inside an HTTP header line, and base64-encoded
/// in a `user:token` pair, as a `curl` trace or a basic-auth config would hold it.
const LEAK: &str = "cat >/dev/null\ncd \"$EVE_WORKSPACE\"\n\
    printf 'token=%s\\n' \"$SECRET_TOKEN\" > config.env\n\
    printf 'Authorization: Bearer %s\\n' \"$SECRET_TOKEN\" > trace.log\n\
    printf 'user:%s' \"$SECRET_TOKEN\" | base64 > auth.b64\n\
    echo '{\"ok\": true}'\n";

fn leaky_project() -> TestProject {
    let p = TestProject::new();
    let mut a = agent();
    let mut leak = script_tool("leak", Effect::Read, Approval::Never);
    leak.env.push("SECRET_TOKEN".to_owned());
    a.tools.push(leak);
    a.tools
        .push(script_tool("peek", Effect::Read, Approval::Never));
    p.write_build(
        &a,
        &[
            ("tools/leak.sh".to_owned(), LEAK.to_owned()),
            (
                "tools/peek.sh".to_owned(),
                "cat >/dev/null\necho '{\"ok\": true}'\n".to_owned(),
            ),
        ],
    );
    p
}

/// A runtime on `p` whose tools see `SECRET_TOKEN` (and whose model plays `steps`).
fn runtime_with_secret(p: &TestProject, steps: Value) -> Runtime {
    let model = ResolvedModel {
        client: Arc::new(MockClient::from_steps(
            load_script(&steps.to_string()).unwrap(),
        )),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let side = p.side_file.clone();
    let config = RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(SqliteStore::open(p.state_dir.join("eve.db")).unwrap()) as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| match name {
            "SIDE_FILE" => Some(side.to_string_lossy().into_owned()),
            "SECRET_TOKEN" => Some(SECRET.to_owned()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    };
    Runtime::new(config)
}

fn call(name: &str) -> Value {
    json!({"tool_calls": [{"name": name, "input": {}}]})
}

/// Every byte of the store's files (the database and its write-ahead log).
fn raw_store(state_dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["eve.db", "eve.db-wal"] {
        if let Ok(b) = std::fs::read(state_dir.join(name)) {
            bytes.extend(b);
        }
    }
    bytes
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The base64 line `auth.b64` holds.
fn encoded_pair() -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("user:{SECRET}"))
}

/// Runs the leaking tool in a session; returns the runtime, the session and its stored blobs
/// by workspace path.
/// `in_clear`: the runtime's checkpoints skip the redaction (the protection off, for the twin).
async fn leak(p: &TestProject, in_clear: bool) -> (Runtime, String, Vec<(String, Vec<u8>)>) {
    let rt = runtime_with_secret(p, json!([call("leak"), {"text": "done"}]));
    rt.set_checkpoint_secrets_in_clear_for_tests(in_clear);
    let (id, _) = run_prompt(&rt, "write your config").await;
    let local = p.state_dir.join("sandboxes").join(&id);
    let written = std::fs::read_to_string(local.join("config.env")).unwrap();
    assert_eq!(written, format!("token={SECRET}\n"), "the attack ran");
    let checkpoint = rt
        .store()
        .workspace(&id)
        .await
        .unwrap()
        .expect("the workspace was checkpointed");
    let mut blobs = Vec::new();
    for entry in &checkpoint.entries {
        let data = rt.store().blob(&entry.hash).await.unwrap().unwrap();
        blobs.push((entry.path.clone(), data));
    }
    assert_eq!(blobs.len(), 3, "{:?}", checkpoint.entries);
    (rt, id, blobs)
}

#[tokio::test]
async fn a_secret_a_tool_writes_into_its_workspace_is_never_stored_in_clear() {
    let p = leaky_project();
    let (rt, id, blobs) = leak(&p, false).await;
    for (path, data) in &blobs {
        assert!(
            !holds(data, SECRET),
            "{path}: {}",
            String::from_utf8_lossy(data)
        );
        assert!(
            holds(data, "${SECRET_TOKEN}"),
            "{path}: {}",
            String::from_utf8_lossy(data)
        );
    }
    let raw = raw_store(&p.state_dir);
    assert!(!holds(&raw, SECRET), "the store's bytes hold the secret");
    assert!(
        !holds(&raw, &encoded_pair()),
        "the store's bytes hold the secret base64-encoded"
    );
    // Another node (or this one after losing its copy) restores the workspace from the store:
    // it sees `${SECRET_TOKEN}` where the value was, as documented.
    let local = p.state_dir.join("sandboxes").join(&id);
    assert!(
        rt.remove_local_workspaces(std::slice::from_ref(&id))
            .is_empty()
    );
    assert!(!local.exists());
    rt.shutdown().await;
    drop(rt);
    // The scripted model answers by position in the session: the first turn's two steps, then
    // this turn's.
    let rt = runtime_with_secret(
        &p,
        json!([call("leak"), {"text": "done"}, call("peek"), {"text": "seen"}]),
    );
    rt.post_message(&id, "look again").await.unwrap();
    rt.drive(&id).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(local.join("config.env")).unwrap(),
        "token=${SECRET_TOKEN}\n"
    );
    assert_eq!(
        std::fs::read_to_string(local.join("trace.log")).unwrap(),
        "Authorization: Bearer ${SECRET_TOKEN}\n"
    );
    let restored = std::fs::read_to_string(local.join("auth.b64")).unwrap();
    assert!(restored.contains("${SECRET_TOKEN}"), "{restored}");
    rt.shutdown().await;
}

#[tokio::test]
async fn without_the_redaction_the_secret_reaches_the_store() {
    let p = leaky_project();
    let (rt, _, blobs) = leak(&p, true).await;
    let config = blobs.iter().find(|(path, _)| path == "config.env").unwrap();
    assert_eq!(config.1, format!("token={SECRET}\n").into_bytes());
    let auth = blobs.iter().find(|(path, _)| path == "auth.b64").unwrap();
    assert!(holds(&auth.1, &encoded_pair()));
    let raw = raw_store(&p.state_dir);
    assert!(
        holds(&raw, SECRET),
        "the twin must see the secret in the store's bytes"
    );
    rt.shutdown().await;
}

/// Flips 16 bytes inside the data of the event `index` of `session`, in the database file (the
/// write-ahead log folded in first), where SQLite keeps no checksum of a row.
fn damage_event(db: &Path, session: &str, index: u64) {
    let read = || -> rusqlite::Result<String> {
        let conn = rusqlite::Connection::open(db)?;
        conn.query_row(
            "SELECT data FROM events WHERE session_id = ?1 AND idx = ?2",
            rusqlite::params![session, index as i64],
            |r| r.get(0),
        )
    };
    let conn = rusqlite::Connection::open(db).unwrap();
    let (id, kind): (String, String) = conn
        .query_row(
            "SELECT id, type FROM events WHERE session_id = ?1 AND idx = ?2",
            rusqlite::params![session, index as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let clean = std::fs::read(db).unwrap();
    // In the row, the id is followed by the type, then the data. A stale copy of the row may
    // sit in a page freed by a split: the live one is the copy whose damage the read sees.
    let needle = format!("{id}{kind}");
    let found: Vec<usize> = clean
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle.as_bytes())
        .map(|(i, _)| i + needle.len())
        .collect();
    assert!(!found.is_empty(), "the row of event {index} is in the file");
    let page = 4096;
    for start in found {
        assert_eq!(
            start / page,
            (start + 15) / page,
            "the 16 bytes are in one page"
        );
        let mut bytes = clean.clone();
        for b in &mut bytes[start..start + 16] {
            *b ^= 0xFF;
        }
        std::fs::write(db, &bytes).unwrap();
        if read().is_err() {
            return;
        }
    }
    panic!("no copy of event {index} in the file is the one SQLite reads");
}

/// Reads a stream response's body to its end (the text, and whether it ended cleanly).
async fn body_of(response: reqwest::Response) -> String {
    tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the stream did not end")
        .unwrap()
}

#[tokio::test]
async fn a_read_that_hits_damage_is_an_error_never_an_empty_stream() {
    let server = TestServer::start(AgentDir::new()).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    // Enough events that a bounded read's second page (256 at a time) holds the damage and a
    // follow's first read (512) does too.
    let mut batch = Batch::new();
    for i in 0..400 {
        batch.event(&id, "probe", json!({"i": i, "pad": "x".repeat(40)}));
    }
    server.runtime.store().commit(batch).await.unwrap();
    let count = server.count(&id).await;
    let agent = server.stop_keeping().await;
    let db = agent.root().join(".eve/eve.db");
    damage_event(&db, &id, 300);
    {
        // The twin: the damage is real. A direct read of the row fails...
        let conn = rusqlite::Connection::open(&db).unwrap();
        let read: rusqlite::Result<String> = conn.query_row(
            "SELECT data FROM events WHERE session_id = ?1 AND idx = 300",
            [&id],
            |r| r.get(0),
        );
        assert!(read.is_err(), "the damaged row still reads: {read:?}");
        // ...while SQLite's own start-up check passes it, as in the report.
        let quick: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(quick, "ok");
    }
    // `eve store check` finds it (the healthy twin passes below).
    let report = SqliteStore::check_file(&db).await;
    assert!(!report.ok(), "{report:#?}");
    let failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::Failed)
        .map(|c| c.name)
        .collect();
    assert!(failed.contains(&"events"), "{report:#?}");
    assert!(
        report
            .checks
            .iter()
            .flat_map(|c| &c.problems)
            .any(|p| p.contains(&id) && p.contains("300")),
        "{report:#?}"
    );

    // The server starts (the damage passes the start check) and says what it cannot read.
    let server = TestServer::start(agent).await;
    // Before anything is sent: the route's error.
    for query in ["?follow=false&startIndex=290", "", "?startIndex=300"] {
        let response = server.stream_response(&id, query).await;
        assert_eq!(response.status(), 500, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["ok"], false, "{body}");
        assert_eq!(body["code"], "store_damaged", "{body}");
        assert!(
            body["error"].as_str().unwrap().contains("eve store check"),
            "{body}"
        );
    }
    // After events were sent: the last line says so.
    let response = server.stream_response(&id, "?follow=false").await;
    assert_eq!(response.status(), 200);
    let text = body_of(response).await;
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 257, "256 events, then the error");
    assert_eq!(lines[255]["type"], "probe");
    let last = &lines[256];
    assert_eq!(last["type"], "stream.error", "{last}");
    assert_eq!(last["data"]["code"], "store_damaged", "{last}");
    assert!(last["meta"]["id"].is_null(), "not a stored event: {last}");
    // The same over SSE.
    let response = server
        .http
        .get(server.url(&format!("/eve/v1/session/{id}/stream?follow=false")))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let text = body_of(response).await;
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(
        last.starts_with("data: {\"type\":\"stream.error\""),
        "{last}"
    );
    // Past the damage, the session still streams.
    let tail = server.stream(&id, "?follow=false&startIndex=301").await;
    assert_eq!(tail.len() as u64, count - 301);
    server.stop().await;
}

#[tokio::test]
async fn the_full_check_passes_a_healthy_store() {
    let p = leaky_project();
    let (rt, _, _) = leak(&p, false).await;
    rt.shutdown().await;
    let report = SqliteStore::check_file(p.state_dir.join("eve.db")).await;
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.counts.sessions, 1);
    assert!(report.counts.events > 5, "{report:#?}");
    assert_eq!(report.counts.blobs, 3);
    let names: Vec<_> = report.checks.iter().map(|c| c.name).collect();
    for name in ["integrity_check", "texts", "events", "workspaces"] {
        assert!(names.contains(&name), "{names:?}");
    }
}

/// On PostgreSQL the check says plainly what ran: `amcheck` when the database has it (skipped,
/// saying so, when it does not), then eve's consistency checks, which find rows changed under the
/// store (an event that no longer decodes, a blob whose contents no longer match its hash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_check_on_postgresql_says_what_ran_and_finds_changed_rows() {
    use eve_runtime::store::{Op, PgStore, SessionRecord, WorkspaceEntry, WorkspacePut, now_ms};
    let Some(base) = crate::store_postgres::server_url() else {
        return;
    };
    let url = crate::store_postgres::fresh_schema(&base).await;
    let store = PgStore::connect(&url).await.unwrap();
    let mut batch = Batch::durable();
    batch.push(Op::InsertSession(SessionRecord::new(
        "wrun_pgcheck".into(),
        "h".into(),
        "a".into(),
        None,
        now_ms(),
    )));
    for i in 0..5 {
        batch.event("wrun_pgcheck", "probe", json!({ "i": i }));
    }
    store.commit(batch).await.unwrap();
    let data = b"hello".to_vec();
    let hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&data))
    };
    store
        .put_workspace(WorkspacePut {
            session_id: "wrun_pgcheck".into(),
            entries: vec![WorkspaceEntry {
                path: "a.txt".into(),
                hash: hash.clone(),
                size: 5,
                mode: 0o644,
            }],
            dirs: Vec::new(),
            blobs: vec![(hash.clone(), data)],
            fence: None,
        })
        .await
        .unwrap();

    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let installed = client
        .query_opt("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'", &[])
        .await
        .unwrap()
        .is_some();
    let report = store.check().await;
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.backend, "postgres");
    assert_eq!(report.counts.events, 5);
    let amcheck = report.checks.iter().find(|c| c.name == "amcheck").unwrap();
    if installed {
        assert_eq!(amcheck.status, CheckStatus::Passed, "{amcheck:?}");
    } else {
        assert_eq!(amcheck.status, CheckStatus::Skipped, "{amcheck:?}");
        assert!(
            amcheck.detail.contains("not installed")
                && amcheck.detail.contains("only eve's consistency checks ran"),
            "{amcheck:?}"
        );
    }

    // Rows changed under the store: eve's own checks see them.
    client
        .execute(
            "UPDATE events SET data = '{\"i\": ' WHERE session_id = 'wrun_pgcheck' AND idx = 3",
            &[],
        )
        .await
        .unwrap();
    client
        .execute("UPDATE workspace_blobs SET data = 'jello'::bytea", &[])
        .await
        .unwrap();
    let report = store.check().await;
    assert!(!report.ok(), "{report:#?}");
    let problems: Vec<&String> = report.checks.iter().flat_map(|c| &c.problems).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("session wrun_pgcheck: events: index 3 cannot be read")),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("a.txt") && p.contains("holds contents whose SHA-256")),
        "{problems:#?}"
    );
}
