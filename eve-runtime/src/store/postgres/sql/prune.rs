//! Pruning old sessions in PostgreSQL (see `Store::prune_sessions`): an idle root session with
//! every subagent session below it and every row they own, deleted in the caller's transaction.

use deadpool_postgres::GenericClient;

use super::{execute, g, query};
use crate::store::{SESSION_TABLES, StoreResult, session_note_namespaces};

/// See `Store::prune_sessions` (the same rows as SQLite's `prune.rs`; the candidates are locked
/// with `FOR UPDATE SKIP LOCKED`, so a node taking a session at that moment keeps it).
pub(in crate::store::postgres) async fn prune<C: GenericClient>(
    c: &C,
    cutoff: i64,
    now: i64,
) -> StoreResult<Vec<String>> {
    let roots = query(
        c,
        "SELECT s.id FROM sessions s WHERE s.parent_id IS NULL AND s.status = 'idle' \
         AND s.updated_at < $1 \
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = s.id \
                         AND l.holder != '' AND l.expires_at > $2) \
         AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
                         AND i.consumed_turn IS NULL) \
         ORDER BY s.updated_at FOR UPDATE SKIP LOCKED",
        &[&cutoff, &now],
    )
    .await?;
    let mut deleted = Vec::new();
    for row in &roots {
        let root: String = g(row, 0)?;
        let mut ids = vec![root.clone()];
        for child in query(
            c,
            "SELECT session_id FROM subagent_sessions WHERE root_id = $1",
            &[&root],
        )
        .await?
        {
            ids.push(g(&child, 0)?);
        }
        for id in &ids {
            for (table, column) in SESSION_TABLES {
                execute(
                    c,
                    &format!("DELETE FROM {table} WHERE {column} = $1"),
                    &[id],
                )
                .await?;
            }
            for ns in session_note_namespaces(id) {
                execute(c, "DELETE FROM notes WHERE namespace = $1", &[&ns]).await?;
            }
        }
        deleted.extend(ids);
    }
    Ok(deleted)
}
