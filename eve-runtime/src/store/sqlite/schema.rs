//! The SQLite schema: connection settings and migrations, applied in order by `PRAGMA user_version`.
//!
//! Each entry moves the schema from version `i` to `i + 1` inside one transaction. Never edit a
//! released entry: add a new one.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

use crate::store::{StoreError, StoreResult};

/// How long a connection waits for another process's write lock.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Statements each connection keeps prepared: a turn's writes and the run loop's reads are more
/// than rusqlite's default of 16, which would push each other out and be parsed again; every
/// statement of the store fits.
const STATEMENT_CACHE: usize = 256;

/// Opens a connection with the store's settings (WAL, `synchronous=NORMAL`, foreign keys).
pub(super) fn open_connection(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The query planner's stability guarantee: a statement's plan does not depend on the values
    // bound to it. Without it, SQLite (built with STAT4, as here) marks every parameter compared
    // with an indexed column, and binding another value there (another session's id) throws the
    // prepared statement away and parses and plans it again, on every read of the run loop and
    // on writes that alternate between sessions. The store has no statistics tables and no
    // partial index chosen by a bound value, so no plan changes.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// Brings the schema up to date, refusing a file written by a newer eve.
pub(super) fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let supported = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > supported {
        return Err(StoreError::TooNew {
            found: version,
            supported,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Migrations; index `i` upgrades from version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    build_hash TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    parent_id TEXT,
    parent_call_id TEXT,
    schedule TEXT,
    turn_count INTEGER NOT NULL DEFAULT 0,
    event_count INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    context_start INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    loaded_skills TEXT NOT NULL DEFAULT '[]',
    approved_tools TEXT NOT NULL DEFAULT '[]',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX sessions_by_created ON sessions(created_at);
CREATE INDEX sessions_by_schedule ON sessions(schedule, created_at) WHERE schedule IS NOT NULL;
CREATE INDEX sessions_by_status ON sessions(status);

CREATE TABLE inbox (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    text TEXT NOT NULL,
    accepted_at INTEGER NOT NULL,
    consumed_turn INTEGER
);
CREATE INDEX inbox_pending ON inbox(session_id, accepted_at) WHERE consumed_turn IS NULL;

CREATE TABLE messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn_seq INTEGER,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE turns (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    phase TEXT NOT NULL,
    step_index INTEGER NOT NULL,
    step_started INTEGER NOT NULL,
    build_hash TEXT NOT NULL,
    inbox_id TEXT,
    started_at INTEGER NOT NULL,
    ended_at INTEGER,
    stop_reason TEXT,
    usage TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE steps (
    session_id TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    step_index INTEGER NOT NULL,
    model_id TEXT NOT NULL,
    response TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (session_id, turn_seq, step_index)
) WITHOUT ROWID;

CREATE TABLE tool_calls (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    step_index INTEGER NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    effect TEXT NOT NULL,
    status TEXT NOT NULL,
    approval TEXT NOT NULL,
    output TEXT,
    is_error INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER,
    PRIMARY KEY (session_id, turn_seq, call_id)
);
CREATE INDEX tool_calls_by_turn ON tool_calls(session_id, turn_seq, step_index, position);

CREATE TABLE input_requests (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    step_index INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    prompt TEXT NOT NULL,
    action TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    created_at INTEGER NOT NULL,
    answered_at INTEGER
);
CREATE INDEX input_requests_by_session ON input_requests(session_id, status, created_at);

CREATE TABLE events (
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (session_id, idx)
) WITHOUT ROWID;

CREATE TABLE breakers (
    tool TEXT PRIMARY KEY,
    consecutive_failures INTEGER NOT NULL,
    open_until INTEGER NOT NULL,
    backoff_ms INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL
);
"#,
    // 1 → 2: schedules. One row per schedule holds its next fire time, which a scheduler claims by
    // compare-and-set in the transaction that creates the fire's session; one row per fire says
    // what became of it (started, skipped, missed, queued).
    r#"
CREATE TABLE schedules (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    next_fire_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE schedule_fires (
    schedule TEXT NOT NULL,
    fire_at INTEGER NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL,
    session_id TEXT,
    detail TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (schedule, fire_at, trigger)
);
CREATE INDEX schedule_fires_queued ON schedule_fires(schedule, fire_at) WHERE status = 'queued';
"#,
    // 2 → 3: composition. Subagent sessions (a child's link to the parent call that created it, the
    // agent it runs, its root) and the parent calls waiting on a child's turn (with the budget passed
    // down); dynamic tool definitions resolved for a session (with the build their script lives in);
    // delivery cursors of observe hooks.
    r#"
CREATE TABLE subagent_sessions (
    session_id TEXT PRIMARY KEY,
    parent_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    root_id TEXT NOT NULL,
    agent_path TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX subagent_sessions_by_token ON subagent_sessions(parent_id, call_id);
CREATE INDEX subagent_sessions_by_root ON subagent_sessions(root_id);

CREATE TABLE subagent_calls (
    parent_id TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    child_id TEXT NOT NULL,
    inbox_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    budget TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (parent_id, turn_seq, call_id)
);
CREATE INDEX subagent_calls_by_inbox ON subagent_calls(inbox_id);

CREATE TABLE dynamic_tools (
    session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    provider TEXT NOT NULL,
    description TEXT NOT NULL,
    input_schema TEXT NOT NULL,
    provider_tool TEXT NOT NULL,
    build_hash TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    resolved_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, name)
);

CREATE TABLE dynamic_resolutions (
    session_id TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    detail TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (session_id, turn_seq)
);

CREATE TABLE hook_cursors (
    session_id TEXT NOT NULL,
    hook TEXT NOT NULL,
    delivered INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, hook)
);
"#,
    // 3 → 4: platform channels. Delivery ids already accepted (Slack `event_id`, Telegram
    // `update_id`), written with the inbox message so a platform's retry after a restart is
    // recognised; replies owed to a platform (where the answer goes, which approvals were
    // announced), so a restarted server posts what a killed one could not.
    r#"
CREATE TABLE channel_deliveries (
    channel TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    accepted_at INTEGER NOT NULL,
    PRIMARY KEY (channel, delivery_id)
) WITHOUT ROWID;
CREATE INDEX channel_deliveries_by_age ON channel_deliveries(accepted_at);

CREATE TABLE channel_replies (
    inbox_id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    session_id TEXT NOT NULL,
    from_index INTEGER NOT NULL,
    address TEXT NOT NULL,
    announced TEXT NOT NULL DEFAULT '[]',
    done INTEGER NOT NULL DEFAULT 0,
    detail TEXT,
    owner_pid INTEGER NOT NULL,
    owner_host TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX channel_replies_owed ON channel_replies(created_at) WHERE done = 0;
CREATE INDEX channel_replies_done ON channel_replies(updated_at) WHERE done = 1;
"#,
    // 4 → 5: who answered an input request (the authenticated principal), kept with the answer
    // so `approval.settled` and an audit of the store agree.
    r#"
ALTER TABLE input_requests ADD COLUMN responder TEXT;
"#,
    // 5 → 6: fencing tokens. Every new holder of a session's lease gets a larger token; a commit
    // carrying an older one is refused. A released lease keeps its row (holder emptied) so the
    // token never goes back.
    r#"
ALTER TABLE leases ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
"#,
    // 6 → 7: notes: the agent's memory (scoped to the agent, a user or a session) and what a
    // session fixes at its start (the environment probe).
    r#"
CREATE TABLE notes (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"#,
    // 7 → 8: what pruning deleted, so the store's high-water mark (sessions and events ever
    // stored) keeps growing when old sessions are pruned.
    r#"
CREATE TABLE store_pruned (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    sessions INTEGER NOT NULL,
    events INTEGER NOT NULL
);
INSERT INTO store_pruned (id, sessions, events) VALUES (1, 0, 0);
"#,
    // 8 → 9: the messages each turn took (its own and those steered into it), for the delivery
    // ids of its events.
    r#"
CREATE INDEX inbox_by_turn ON inbox(session_id, consumed_turn) WHERE consumed_turn IS NOT NULL;
"#,
    // 9 → 10: releases: every build handed to the runtime (the active one, superseded, rolled back,
    // rejected or pending ones), and their audit events, numbered densely.
    r#"
CREATE TABLE releases (
    id TEXT PRIMARY KEY,
    build_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX releases_status ON releases(status);
CREATE TABLE release_events (
    idx INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    at INTEGER NOT NULL
);
"#,
    // 10 → 11: builds and session workspaces in the store: a build (manifest, diagnostics, pack) by
    // its content hash, so a node can run a session pinned to a build it never built; the
    // latest checkpoint of each session's workspace, whose file contents are blobs keyed by
    // their SHA-256 (shared across steps and sessions).
    r#"
CREATE TABLE builds (
    hash TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    diagnostics TEXT NOT NULL,
    pack BLOB NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX builds_by_created ON builds(created_at);

CREATE TABLE workspace_blobs (
    hash TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE workspace_checkpoints (
    session_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    tree TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
"#,
    // The store's counts for its high-water mark (`integrity.rs`: sessions and events ever stored,
    // pruned ones included), kept by triggers in the same transactions as the rows, so the
    // writer refreshes the mark by reading one row instead of counting every event.
    r#"
CREATE TABLE store_counts (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    sessions INTEGER NOT NULL,
    events INTEGER NOT NULL
);
INSERT INTO store_counts (id, sessions, events) VALUES (1,
    (SELECT count(*) FROM sessions) + (SELECT sessions FROM store_pruned WHERE id = 1),
    (SELECT count(*) FROM events) + (SELECT events FROM store_pruned WHERE id = 1));
CREATE TRIGGER store_counts_sessions AFTER INSERT ON sessions
BEGIN UPDATE store_counts SET sessions = sessions + 1 WHERE id = 1; END;
CREATE TRIGGER store_counts_events AFTER INSERT ON events
BEGIN UPDATE store_counts SET events = events + 1 WHERE id = 1; END;
"#,
    // A channel reply's owner holds it under an expiry it renews and a fencing token that grows
    // with each new owner; `sending` records a message whose send has started.
    r#"
ALTER TABLE channel_replies ADD COLUMN owner_token INTEGER NOT NULL DEFAULT 1;
ALTER TABLE channel_replies ADD COLUMN owner_expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channel_replies ADD COLUMN sending TEXT;
"#,
    // Tool calls keyed by their primary key alone (`WITHOUT ROWID`), with no second index: a
    // turn's calls are the key's prefix, few enough to sort by step and position when read. A
    // step's call was written into three b-trees (the rows, the key's index and
    // `tool_calls_by_turn`), three pages of the step's commit; now one.
    r#"
CREATE TABLE tool_calls_keyed (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    step_index INTEGER NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    effect TEXT NOT NULL,
    status TEXT NOT NULL,
    approval TEXT NOT NULL,
    output TEXT,
    is_error INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER,
    PRIMARY KEY (session_id, turn_seq, call_id)
) WITHOUT ROWID;
INSERT INTO tool_calls_keyed (session_id, call_id, turn_seq, step_index, position, kind, name,
    input, idempotency_key, effect, status, approval, output, is_error, attempts, started_at,
    ended_at)
SELECT session_id, call_id, turn_seq, step_index, position, kind, name, input, idempotency_key,
    effect, status, approval, output, is_error, attempts, started_at, ended_at FROM tool_calls;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_keyed RENAME TO tool_calls;
"#,
    // The principal that started each session (`jwt:<sub>`, `token:NAME`, `slack:U…`, `local`),
    // so a principal reaches only its own sessions. Sessions stored before have none: only
    // operators reach them.
    r#"
ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE INDEX sessions_by_owner ON sessions(owner, created_at) WHERE owner IS NOT NULL;
"#,
    // What a message asks of the turn that takes it (`outputSchema`, `clientContext`,
    // `turnPolicy`), as JSON; none for a plain message.
    r#"
ALTER TABLE inbox ADD COLUMN input TEXT;
"#,
];

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::*;

    /// A store written before tool calls were keyed by their primary key alone keeps its calls,
    /// read back in step and position order.
    #[test]
    fn tool_calls_survive_the_move_to_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open_connection(&dir.path().join("eve.db")).unwrap();
        let before = MIGRATIONS
            .iter()
            .position(|m| m.contains("CREATE TABLE tool_calls_keyed"))
            .unwrap();
        let tx = conn.transaction().unwrap();
        for sql in &MIGRATIONS[..before] {
            tx.execute_batch(sql).unwrap();
        }
        tx.pragma_update(None, "user_version", before as i64)
            .unwrap();
        for (call, step, position) in [("c_late", 1, 0), ("c_b", 0, 1), ("c_a", 0, 0)] {
            tx.execute(
                "INSERT INTO tool_calls (session_id, call_id, turn_seq, step_index, position, \
                 kind, name, input, idempotency_key, effect, status, approval, output, is_error, \
                 attempts) VALUES ('wrun_1', ?1, 1, ?2, ?3, 'tool-call', 'echo', '{}', ?1, \
                 'read', 'completed', 'none', '\"ok\"', 0, 1)",
                rusqlite::params![call, step, position],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        migrate(&mut conn).unwrap();
        let calls = crate::store::sqlite::reads::tool_calls(&conn, "wrun_1", 1).unwrap();
        assert_eq!(
            calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
            ["c_a", "c_b", "c_late"]
        );
        assert_eq!(calls[0].output, Some(serde_json::json!("ok")));
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE tbl_name = 'tool_calls' \
                 AND type = 'index'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            indexes, 0,
            "a table without rowid needs no index of its own key"
        );
    }

    /// A session stored before sessions recorded their owner has none once migrated (only
    /// operators reach it); sessions stored after keep theirs.
    #[test]
    fn sessions_stored_before_owners_have_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open_connection(&dir.path().join("eve.db")).unwrap();
        let before = MIGRATIONS
            .iter()
            .position(|m| m.contains("ADD COLUMN owner"))
            .unwrap();
        let tx = conn.transaction().unwrap();
        for sql in &MIGRATIONS[..before] {
            tx.execute_batch(sql).unwrap();
        }
        tx.pragma_update(None, "user_version", before as i64)
            .unwrap();
        tx.execute(
            "INSERT INTO sessions (id, status, build_hash, agent_name, created_at, updated_at) \
             VALUES ('wrun_old', 'idle', 'h', 'a', 1, 1)",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
        migrate(&mut conn).unwrap();
        let old = crate::store::sqlite::reads::session(&conn, "wrun_old")
            .unwrap()
            .unwrap();
        assert_eq!(old.owner, None);
    }

    /// A statement of the run loop bound to one session after another stays prepared: it is
    /// not parsed and planned again for each new session.
    #[test]
    fn statements_stay_prepared_across_bound_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open_connection(&dir.path().join("eve.db")).unwrap();
        migrate(&mut conn).unwrap();
        for sql in [
            "SELECT seq FROM turns WHERE session_id=?1 ORDER BY seq DESC LIMIT 1",
            "SELECT id FROM inbox WHERE session_id=?1 AND consumed_turn IS NULL ORDER BY rowid",
            "SELECT idx FROM events WHERE session_id=?1 AND idx>=?2 ORDER BY idx LIMIT 10",
        ] {
            for i in 0..5_i64 {
                let mut stmt = conn.prepare_cached(sql).unwrap();
                let session = format!("wrun_{i}");
                let mut rows = if stmt.parameter_count() == 1 {
                    stmt.query(rusqlite::params![session]).unwrap()
                } else {
                    stmt.query(rusqlite::params![session, i]).unwrap()
                };
                assert!(rows.next().unwrap().is_none());
            }
            let stmt = conn.prepare_cached(sql).unwrap();
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
        }
    }
}
