//! The PostgreSQL schema: versioned migrations, applied at start under an advisory lock.
//!
//! Several `eve serve` nodes may start at the same moment on one database: each takes a
//! transaction-scoped advisory lock (keyed by the schema the store lives in) before it reads the
//! version, so exactly one applies a migration and the others find it applied. Each entry moves
//! the schema from version `i` to `i + 1` in the same transaction as its version row. Never edit
//! a released entry: add a new one. The tables mirror the SQLite backend's, with an explicit
//! `ord` column where SQLite relies on `rowid` order, and a fencing token on leases.

use deadpool_postgres::Client;

use crate::store::{StoreError, StoreResult};

/// Brings the schema up to date, refusing a database written by a newer eve.
pub(super) async fn migrate(client: &mut Client) -> StoreResult<()> {
    let supported = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('eve-migrate:' || current_schema()))",
        &[],
    )
    .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS eve_schema (version BIGINT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .await?;
    let version: i64 = tx
        .query_opt("SELECT MAX(version) FROM eve_schema", &[])
        .await?
        .and_then(|r| r.get::<_, Option<i64>>(0))
        .unwrap_or(0);
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
        tx.batch_execute(sql).await?;
        let v = i64::try_from(i + 1).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO eve_schema (version, applied_at) VALUES ($1, $2)",
            &[&v, &crate::store::now_ms()],
        )
        .await?;
    }
    tx.commit().await?;
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
    turn_count BIGINT NOT NULL DEFAULT 0,
    event_count BIGINT NOT NULL DEFAULT 0,
    message_count BIGINT NOT NULL DEFAULT 0,
    context_start BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    loaded_skills TEXT NOT NULL DEFAULT '[]',
    approved_tools TEXT NOT NULL DEFAULT '[]',
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX sessions_by_created ON sessions(created_at);
CREATE INDEX sessions_by_schedule ON sessions(schedule, created_at) WHERE schedule IS NOT NULL;
CREATE INDEX sessions_by_status ON sessions(status);

CREATE TABLE inbox (
    ord BIGSERIAL,
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    text TEXT NOT NULL,
    accepted_at BIGINT NOT NULL,
    consumed_turn BIGINT
);
CREATE INDEX inbox_pending ON inbox(session_id, ord) WHERE consumed_turn IS NULL;

CREATE TABLE messages (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    turn_seq BIGINT,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE turns (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    status TEXT NOT NULL,
    phase TEXT NOT NULL,
    step_index BIGINT NOT NULL,
    step_started BOOLEAN NOT NULL,
    build_hash TEXT NOT NULL,
    inbox_id TEXT,
    started_at BIGINT NOT NULL,
    ended_at BIGINT,
    stop_reason TEXT,
    usage TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE steps (
    session_id TEXT NOT NULL,
    turn_seq BIGINT NOT NULL,
    step_index BIGINT NOT NULL,
    model_id TEXT NOT NULL,
    response TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (session_id, turn_seq, step_index)
);

CREATE TABLE tool_calls (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    turn_seq BIGINT NOT NULL,
    step_index BIGINT NOT NULL,
    position BIGINT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    effect TEXT NOT NULL,
    status TEXT NOT NULL,
    approval TEXT NOT NULL,
    output TEXT,
    is_error BOOLEAN NOT NULL,
    attempts BIGINT NOT NULL,
    started_at BIGINT,
    ended_at BIGINT,
    PRIMARY KEY (session_id, turn_seq, call_id)
);
CREATE INDEX tool_calls_by_turn ON tool_calls(session_id, turn_seq, step_index, position);

CREATE TABLE input_requests (
    ord BIGSERIAL,
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_seq BIGINT NOT NULL,
    step_index BIGINT NOT NULL,
    call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    prompt TEXT NOT NULL,
    action TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    created_at BIGINT NOT NULL,
    answered_at BIGINT,
    responder TEXT
);
CREATE INDEX input_requests_by_session ON input_requests(session_id, status, ord);

CREATE TABLE events (
    session_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (session_id, idx)
);

CREATE TABLE breakers (
    tool TEXT PRIMARY KEY,
    consecutive_failures BIGINT NOT NULL,
    open_until BIGINT NOT NULL,
    backoff_ms BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE SEQUENCE lease_tokens;
CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid BIGINT NOT NULL,
    host TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL,
    token BIGINT NOT NULL
);

CREATE TABLE schedules (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    next_fire_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE schedule_fires (
    schedule TEXT NOT NULL,
    fire_at BIGINT NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL,
    session_id TEXT,
    detail TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (schedule, fire_at, trigger)
);
CREATE INDEX schedule_fires_queued ON schedule_fires(schedule, fire_at) WHERE status = 'queued';

CREATE TABLE subagent_sessions (
    ord BIGSERIAL,
    session_id TEXT PRIMARY KEY,
    parent_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    root_id TEXT NOT NULL,
    agent_path TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX subagent_sessions_by_token ON subagent_sessions(parent_id, call_id);
CREATE INDEX subagent_sessions_by_root ON subagent_sessions(root_id);

CREATE TABLE subagent_calls (
    parent_id TEXT NOT NULL,
    turn_seq BIGINT NOT NULL,
    call_id TEXT NOT NULL,
    child_id TEXT NOT NULL,
    inbox_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    budget TEXT NOT NULL,
    created_at BIGINT NOT NULL,
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
    turn_seq BIGINT NOT NULL,
    resolved_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, name)
);

CREATE TABLE dynamic_resolutions (
    session_id TEXT NOT NULL,
    turn_seq BIGINT NOT NULL,
    detail TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (session_id, turn_seq)
);

CREATE TABLE hook_cursors (
    session_id TEXT NOT NULL,
    hook TEXT NOT NULL,
    delivered BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, hook)
);

CREATE TABLE channel_deliveries (
    channel TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    accepted_at BIGINT NOT NULL,
    PRIMARY KEY (channel, delivery_id)
);
CREATE INDEX channel_deliveries_by_age ON channel_deliveries(accepted_at);

CREATE TABLE channel_replies (
    inbox_id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    session_id TEXT NOT NULL,
    from_index BIGINT NOT NULL,
    address TEXT NOT NULL,
    announced TEXT NOT NULL DEFAULT '[]',
    done BOOLEAN NOT NULL DEFAULT FALSE,
    detail TEXT,
    owner_pid BIGINT NOT NULL,
    owner_host TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX channel_replies_owed ON channel_replies(created_at) WHERE NOT done;
CREATE INDEX channel_replies_done ON channel_replies(updated_at) WHERE done;
"#,
    // 1 → 2: notes: the agent's memory (scoped to the agent, a user or a session) and what a
    // session fixes at its start (the environment probe).
    r#"
CREATE TABLE notes (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);
"#,
    // 2 → 3: the messages each turn took (its own and those steered into it), for the delivery
    // ids of its events.
    r#"
CREATE INDEX inbox_by_turn ON inbox(session_id, consumed_turn, ord) WHERE consumed_turn IS NOT NULL;
"#,
    // 3 → 4: releases: every build handed to the runtime (the active one, superseded, rolled back,
    // rejected or pending ones), and their audit events, numbered densely.
    r#"
CREATE TABLE releases (
    id TEXT PRIMARY KEY,
    build_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX releases_status ON releases(status);
CREATE TABLE release_events (
    idx BIGINT PRIMARY KEY,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    at BIGINT NOT NULL
);
"#,
    // 4 → 5: builds and session workspaces in the store: a build (manifest, diagnostics, pack) by
    // its content hash, so a node can run a session pinned to a build it never built; the
    // latest checkpoint of each session's workspace, whose file contents are blobs keyed by
    // their SHA-256 (shared across steps and sessions).
    r#"
CREATE TABLE builds (
    hash TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    diagnostics TEXT NOT NULL,
    pack BYTEA NOT NULL,
    bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX builds_by_created ON builds(created_at);

CREATE TABLE workspace_blobs (
    hash TEXT PRIMARY KEY,
    data BYTEA NOT NULL,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE workspace_checkpoints (
    session_id TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    tree TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
"#,
    // A channel reply's owner holds it under an expiry it renews and a fencing token that grows
    // with each new owner; `sending` records a message whose send has started.
    r#"
ALTER TABLE channel_replies ADD COLUMN owner_token BIGINT NOT NULL DEFAULT 1;
ALTER TABLE channel_replies ADD COLUMN owner_expires_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE channel_replies ADD COLUMN sending TEXT;
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
