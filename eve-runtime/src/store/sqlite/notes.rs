//! Notes ([`crate::store::NoteRecord`]) in SQLite: one `notes` table keyed by namespace and key.

use rusqlite::{Connection, params};

use super::rows::{all, one, write};
use crate::store::rows::{self, NOTE_COLS};
use crate::store::{NoteOp, NoteRecord, StoreResult};

pub(super) fn apply(conn: &Connection, op: NoteOp) -> StoreResult<()> {
    match op {
        NoteOp::Put(n) => {
            write(
                conn,
                &format!(
                    "INSERT INTO notes ({NOTE_COLS}) VALUES (?1,?2,?3,?4,?5) \
                     ON CONFLICT (namespace, key) \
                     DO UPDATE SET text=excluded.text, updated_at=excluded.updated_at"
                ),
                &rows::note_values(&n),
            )?;
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

/// One note.
pub(super) fn note(
    conn: &Connection,
    namespace: &str,
    key: &str,
) -> StoreResult<Option<NoteRecord>> {
    one(
        conn,
        &format!("SELECT {NOTE_COLS} FROM notes WHERE namespace=?1 AND key=?2"),
        params![namespace, key],
        rows::note,
    )
}

/// The notes of `namespace`, oldest first.
pub(super) fn notes(conn: &Connection, namespace: &str) -> StoreResult<Vec<NoteRecord>> {
    all(
        conn,
        &format!("SELECT {NOTE_COLS} FROM notes WHERE namespace=?1 ORDER BY created_at, key"),
        [namespace],
        rows::note,
    )
}

/// The notes of every namespace starting with `prefix`, by namespace, oldest first.
pub(super) fn notes_under(conn: &Connection, prefix: &str) -> StoreResult<Vec<NoteRecord>> {
    all(
        conn,
        &format!(
            "SELECT {NOTE_COLS} FROM notes WHERE substr(namespace, 1, length(?1)) = ?1 \
             ORDER BY namespace, created_at, key"
        ),
        [prefix],
        rows::note,
    )
}
