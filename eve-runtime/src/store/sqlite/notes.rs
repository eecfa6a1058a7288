//! Notes ([`crate::store::NoteRecord`]) in SQLite: one `notes` table keyed by namespace and key.

use rusqlite::{Connection, params};

use crate::store::{NoteOp, NoteRecord, StoreResult};

pub(super) fn apply(conn: &Connection, op: NoteOp) -> StoreResult<()> {
    match op {
        NoteOp::Put(n) => {
            conn.prepare_cached(
                "INSERT INTO notes (namespace, key, text, created_at, updated_at) \
                 VALUES (?1,?2,?3,?4,?5) ON CONFLICT (namespace, key) \
                 DO UPDATE SET text=excluded.text, updated_at=excluded.updated_at",
            )?
            .execute(params![
                n.namespace,
                n.key,
                n.text,
                n.created_at,
                n.updated_at
            ])?;
        }
        NoteOp::Delete { namespace, key } => {
            conn.prepare_cached("DELETE FROM notes WHERE namespace=?1 AND key=?2")?
                .execute(params![namespace, key])?;
        }
        NoteOp::Clear { namespace } => {
            conn.prepare_cached("DELETE FROM notes WHERE namespace=?1")?
                .execute(params![namespace])?;
        }
    }
    Ok(())
}

const COLS: &str = "namespace, key, text, created_at, updated_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<NoteRecord> {
    Ok(NoteRecord {
        namespace: r.get(0)?,
        key: r.get(1)?,
        text: r.get(2)?,
        created_at: r.get(3)?,
        updated_at: r.get(4)?,
    })
}

/// One note.
pub(super) fn note(
    conn: &Connection,
    namespace: &str,
    key: &str,
) -> StoreResult<Option<NoteRecord>> {
    use rusqlite::OptionalExtension;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM notes WHERE namespace=?1 AND key=?2"
    ))?;
    Ok(stmt.query_row(params![namespace, key], row).optional()?)
}

/// The notes of `namespace`, oldest first.
pub(super) fn notes(conn: &Connection, namespace: &str) -> StoreResult<Vec<NoteRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM notes WHERE namespace=?1 ORDER BY created_at, key"
    ))?;
    let rows = stmt.query_map([namespace], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The notes of every namespace starting with `prefix`, by namespace, oldest first.
pub(super) fn notes_under(conn: &Connection, prefix: &str) -> StoreResult<Vec<NoteRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM notes WHERE substr(namespace, 1, length(?1)) = ?1 \
         ORDER BY namespace, created_at, key"
    ))?;
    let rows = stmt.query_map([prefix], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}
