//! Notes ([`crate::store::NoteRecord`]) in PostgreSQL: one `notes` table keyed by namespace and
//! key, written inside a batch's transaction and read back by namespace or prefix.

use deadpool_postgres::GenericClient;

use super::rows::{all, opt};
use super::{execute, query, query_opt, write};
use crate::store::rows::{self, NOTE_COLS};
use crate::store::{NoteOp, NoteRecord, StoreResult};

/// Applies one note write.
pub(super) async fn apply<C: GenericClient>(c: &C, op: NoteOp) -> StoreResult<()> {
    match op {
        NoteOp::Put(n) => {
            write(
                c,
                &format!(
                    "INSERT INTO notes ({NOTE_COLS}) VALUES ($1,$2,$3,$4,$5) \
                     ON CONFLICT (namespace, key) \
                     DO UPDATE SET text=excluded.text, updated_at=excluded.updated_at"
                ),
                &rows::note_values(&n),
            )
            .await?;
        }
        NoteOp::Delete { namespace, key } => {
            execute(
                c,
                "DELETE FROM notes WHERE namespace=$1 AND key=$2",
                &[&namespace, &key],
            )
            .await?;
        }
        NoteOp::Clear { namespace } => {
            execute(c, "DELETE FROM notes WHERE namespace=$1", &[&namespace]).await?;
        }
    }
    Ok(())
}

pub(in crate::store::postgres) async fn note<C: GenericClient>(
    c: &C,
    namespace: &str,
    key: &str,
) -> StoreResult<Option<NoteRecord>> {
    let row = query_opt(
        c,
        &format!("SELECT {NOTE_COLS} FROM notes WHERE namespace=$1 AND key=$2"),
        &[&namespace, &key],
    )
    .await?;
    opt(row, rows::note)
}

pub(in crate::store::postgres) async fn notes<C: GenericClient>(
    c: &C,
    namespace: &str,
) -> StoreResult<Vec<NoteRecord>> {
    let rows = query(
        c,
        &format!("SELECT {NOTE_COLS} FROM notes WHERE namespace=$1 ORDER BY created_at, key"),
        &[&namespace],
    )
    .await?;
    all(&rows, rows::note)
}

pub(in crate::store::postgres) async fn notes_under<C: GenericClient>(
    c: &C,
    prefix: &str,
) -> StoreResult<Vec<NoteRecord>> {
    let rows = query(
        c,
        &format!(
            "SELECT {NOTE_COLS} FROM notes WHERE left(namespace, length($1)) = $1 \
             ORDER BY namespace, created_at, key"
        ),
        &[&prefix],
    )
    .await?;
    all(&rows, rows::note)
}
