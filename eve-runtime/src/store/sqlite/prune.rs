//! Pruning old sessions: an idle root session last updated before a cutoff, with every subagent
//! session below it and every row they own, is deleted in one transaction. What was deleted is
//! added to `store_pruned`, so the store's high-water mark (`integrity.rs`: sessions and events
//! ever stored) still only grows and a pruned store is not mistaken for a rolled-back one.

use rusqlite::{Connection, params};

use crate::store::{SESSION_TABLES, StoreResult, session_note_namespaces};

/// Deletes the idle root sessions updated before `cutoff` (ms) that no live lease holds and no
/// message waits in, with their subagent sessions; returns every deleted id.
pub(super) fn prune(conn: &Connection, cutoff: i64, now: i64) -> StoreResult<Vec<String>> {
    let roots: Vec<String> = {
        let mut stmt = conn.prepare(
            "SELECT s.id FROM sessions s WHERE s.parent_id IS NULL AND s.status = 'idle' \
             AND s.updated_at < ?1 \
             AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = s.id \
                             AND l.holder != '' AND l.expires_at > ?2) \
             AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = s.id \
                             AND i.consumed_turn IS NULL) \
             ORDER BY s.updated_at",
        )?;
        let rows = stmt.query_map(params![cutoff, now], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut deleted = Vec::new();
    for root in roots {
        let mut ids = vec![root.clone()];
        let mut stmt =
            conn.prepare_cached("SELECT session_id FROM subagent_sessions WHERE root_id = ?1")?;
        let children = stmt.query_map([&root], |r| r.get::<_, String>(0))?;
        for child in children {
            ids.push(child?);
        }
        for id in &ids {
            let events: i64 = conn.query_row(
                "SELECT count(*) FROM events WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )?;
            conn.execute(
                "UPDATE store_pruned SET sessions = sessions + 1, events = events + ?1 WHERE id = 1",
                [events],
            )?;
            for (table, column) in SESSION_TABLES {
                conn.execute(&format!("DELETE FROM {table} WHERE {column} = ?1"), [id])?;
            }
            for ns in session_note_namespaces(id) {
                conn.execute("DELETE FROM notes WHERE namespace = ?1", [ns])?;
            }
        }
        deleted.extend(ids);
    }
    Ok(deleted)
}
