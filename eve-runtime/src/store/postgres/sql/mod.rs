//! The SQL of the PostgreSQL store: applying a batch, reads, leases, schedules, composition and
//! channel rows.
//!
//! Every function takes a [`GenericClient`] (a pooled connection or a transaction) and prepares
//! its statements through deadpool's per-connection cache. Concurrency is PostgreSQL's, not a
//! writer thread's: a batch runs in one `READ COMMITTED` transaction, and the per-session
//! counters (event index, message sequence) are advanced by `UPDATE … RETURNING` on the session
//! row, whose row lock serialises writers of one session until commit, so indexes stay dense
//! and are never handed out twice, on any number of nodes. Claims that must happen once across
//! the fleet (a schedule fire, a platform delivery, a lease) are decided inside the transaction
//! that writes their effects, under a row or advisory lock.
//!
//! The statements of the run loop are named here, so every new connection can prepare them at
//! once ([`hot_statements`]); the rest lives with its feature: `apply.rs` plans and sends a
//! batch (through `pipeline.rs`), `reads.rs`, `leases.rs`, `schedules.rs`, `composition.rs`,
//! `channels.rs`, `notes.rs` and `prune.rs` hold their own statements, and `rows.rs` reads
//! and binds the shared row mapping (`store/rows/`) through the driver.

mod answers;
mod apply;
mod channels;
mod composition;
mod leases;
mod notes;
mod pipeline;
mod prune;
mod reads;
mod rows;
mod schedules;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql};

use self::apply::PLANNED_SQL;
use self::pipeline::Strict;
use crate::store::StoreResult;
use crate::store::rows::{
    CALL_COLS, Cell, INBOX_COLS, LEASE_COLS, REQUEST_COLS, SESSION_COLS, TURN_COLS, to_i64 as i,
    to_u64 as u,
};

pub(super) use self::apply::apply;
pub(super) use self::channels::{
    claim_delivery, claim_replies, insert_reply, renew_replies, replies, reply, start_send,
    update_reply,
};
pub(super) use self::composition::{
    descendant_requests, descendant_usage, dynamic_resolved, dynamic_tools, hook_cursors,
    inbox_turn, link, link_by_token, sessions_behind_hooks, subagent_call, subagent_call_by_inbox,
    turn_inbox,
};
pub(super) use self::leases::{acquire, check_fences, lease, release, renew, take};
pub(super) use self::notes::{note, notes, notes_under};
pub(super) use self::prune::prune;
pub(super) use self::reads::{
    breaker, context, drive_state, events, input_request, input_requests, last_turn, messages,
    pending_inbox, session, sessions, sessions_with_work, steps, tool_calls, turn, turn_view,
};
pub(super) use self::rows::{all, bind, opt};
pub(super) use self::schedules::{claim_schedule, schedule_fires, schedule_states};

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

fn g<'a, T: FromSql<'a>>(row: &'a Row, idx: usize) -> StoreResult<T> {
    Ok(row.try_get(idx)?)
}

async fn query<C: GenericClient>(c: &C, sql: &str, params: Params<'_>) -> StoreResult<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}

async fn query_opt<C: GenericClient>(
    c: &C,
    sql: &str,
    params: Params<'_>,
) -> StoreResult<Option<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query_opt(&stmt, params).await?)
}

async fn execute<C: GenericClient>(c: &C, sql: &str, params: Params<'_>) -> StoreResult<u64> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, params).await?)
}

/// Runs `sql` with a record's `values`; returns the rows it changed.
async fn write<C: GenericClient>(c: &C, sql: &str, values: &[Cell]) -> StoreResult<u64> {
    execute(c, sql, &rows::bind(values)).await
}

fn limit(n: usize) -> Option<i64> {
    i64::try_from(n).ok()
}

// ---- the statements of the run loop, by name (warmed on new connections) ----------------

const CONTEXT_SQL: &str = "SELECT m.session_id, m.seq, m.turn_seq, m.kind, m.body, m.at FROM messages m \
         JOIN sessions s ON s.id = m.session_id \
         WHERE m.session_id=$1 AND m.seq >= s.context_start ORDER BY m.seq";
const HAS_CHILDREN_SQL: &str = "SELECT 1 FROM subagent_sessions WHERE parent_id=$1 LIMIT 1";
const DYNAMIC_RESOLVED_SQL: &str = "SELECT 1 FROM dynamic_resolutions WHERE session_id=$1 \
         AND turn_seq=(SELECT max(seq) FROM turns WHERE session_id=$1)";
const FENCE_SQL: &str = Strict::FENCE;
const NOTIFY_SQL: &str = "SELECT pg_notify($1, $2)";
const LEASE_INSERT_SQL: &str = "INSERT INTO leases (session_id, holder, pid, host, expires_at, acquired_at, token) \
         VALUES ($1,$2,$3,$4,$5,$6,nextval('lease_tokens')) ON CONFLICT (session_id) DO NOTHING \
         RETURNING token";
const LEASE_TAKE_SQL: &str = "UPDATE leases SET holder=$2, pid=$3, host=$4, expires_at=$5, acquired_at=$6, \
         token = CASE WHEN holder=$2 THEN token ELSE nextval('lease_tokens') END \
         WHERE session_id=$1 RETURNING token";
const SESSION_EXISTS_SQL: &str = "SELECT 1 FROM sessions WHERE id=$1";
const RELEASE_SQL: &str = "WITH r AS (UPDATE leases SET holder='', expires_at=0 WHERE session_id=$1 AND holder=$2) \
         SELECT pg_notify($3, $4)";
static INBOX_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {INBOX_COLS} FROM inbox WHERE session_id=$1 AND consumed_turn IS NULL ORDER BY ord"
    )
});
static SESSION_SQL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {SESSION_COLS} FROM sessions WHERE id=$1"));
static LAST_TURN_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {TURN_COLS} FROM turns WHERE session_id=$1 ORDER BY seq DESC LIMIT 1")
});
static LEASE_SQL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {LEASE_COLS} FROM leases WHERE session_id=$1"));
static REQUESTS_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {REQUEST_COLS} FROM input_requests \
         WHERE session_id=$1 AND (NOT $2 OR status='pending') ORDER BY ord"
    )
});
static TOOL_CALLS_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {CALL_COLS} FROM tool_calls WHERE session_id=$1 AND turn_seq=$2 \
         ORDER BY step_index, position"
    )
});
static LEASE_LOCK_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {LEASE_COLS} FROM leases WHERE session_id=$1 FOR UPDATE SKIP LOCKED")
});

/// The statements of a step and of a resumed turn: prepared on every new connection in one
/// pipelined round trip, so no step waits for a prepare.
pub(super) fn hot_statements() -> Vec<String> {
    let mut all = PLANNED_SQL.clone();
    all.extend(
        [
            CONTEXT_SQL,
            HAS_CHILDREN_SQL,
            DYNAMIC_RESOLVED_SQL,
            FENCE_SQL,
            NOTIFY_SQL,
            LEASE_INSERT_SQL,
            LEASE_TAKE_SQL,
            SESSION_EXISTS_SQL,
            RELEASE_SQL,
        ]
        .map(String::from),
    );
    all.extend(
        [
            &*INBOX_SQL,
            &*SESSION_SQL,
            &*LAST_TURN_SQL,
            &*LEASE_SQL,
            &*REQUESTS_SQL,
            &*TOOL_CALLS_SQL,
            &*LEASE_LOCK_SQL,
        ]
        .map(String::clone),
    );
    all
}
