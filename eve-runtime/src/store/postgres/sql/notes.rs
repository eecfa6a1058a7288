//! Notes ([`crate::store::NoteRecord`]) in PostgreSQL: one `notes` table keyed by namespace and
//! key, written inside a batch's transaction and read back by namespace or prefix.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{execute, g, query, query_opt};
use crate::store::{NoteOp, NoteRecord, StoreResult};

/// Applies one note write.
pub(super) async fn apply<C: GenericClient>(c: &C, op: NoteOp) -> StoreResult<()> {
    match op {
        NoteOp::Put(n) => {
            execute(
                c,
                "INSERT INTO notes (namespace, key, text, created_at, updated_at) \
                 VALUES ($1,$2,$3,$4,$5) ON CONFLICT (namespace, key) \
                 DO UPDATE SET text=excluded.text, updated_at=excluded.updated_at",
                &[&n.namespace, &n.key, &n.text, &n.created_at, &n.updated_at],
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

fn note_row(row: &Row) -> StoreResult<NoteRecord> {
    Ok(NoteRecord {
        namespace: g(row, 0)?,
        key: g(row, 1)?,
        text: g(row, 2)?,
        created_at: g(row, 3)?,
        updated_at: g(row, 4)?,
    })
}

pub(in crate::store::postgres) async fn note<C: GenericClient>(
    c: &C,
    namespace: &str,
    key: &str,
) -> StoreResult<Option<NoteRecord>> {
    query_opt(
        c,
        "SELECT namespace, key, text, created_at, updated_at FROM notes \
         WHERE namespace=$1 AND key=$2",
        &[&namespace, &key],
    )
    .await?
    .as_ref()
    .map(note_row)
    .transpose()
}

pub(in crate::store::postgres) async fn notes<C: GenericClient>(
    c: &C,
    namespace: &str,
) -> StoreResult<Vec<NoteRecord>> {
    let rows = query(
        c,
        "SELECT namespace, key, text, created_at, updated_at FROM notes WHERE namespace=$1 \
         ORDER BY created_at, key",
        &[&namespace],
    )
    .await?;
    rows.iter().map(note_row).collect()
}

pub(in crate::store::postgres) async fn notes_under<C: GenericClient>(
    c: &C,
    prefix: &str,
) -> StoreResult<Vec<NoteRecord>> {
    let rows = query(
        c,
        "SELECT namespace, key, text, created_at, updated_at FROM notes \
         WHERE left(namespace, length($1)) = $1 ORDER BY namespace, created_at, key",
        &[&prefix],
    )
    .await?;
    rows.iter().map(note_row).collect()
}
