//! The SQLite driver's side of the shared row mapping (`store/rows/`): a `rusqlite` row read
//! through [`StoredRow`], a [`Cell`] bound as a parameter, and statements run with a record
//! type's decoder or values.

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, OptionalExtension};

use crate::store::StoreResult;
use crate::store::rows::{Cell, Decode, StoredRow};

impl StoredRow for rusqlite::Row<'_> {
    fn int(&self, i: usize) -> StoreResult<i64> {
        Ok(self.get(i)?)
    }
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>> {
        Ok(self.get(i)?)
    }
    fn real(&self, i: usize) -> StoreResult<f64> {
        Ok(self.get(i)?)
    }
    fn text(&self, i: usize) -> StoreResult<String> {
        Ok(self.get(i)?)
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        Ok(self.get(i)?)
    }
    /// SQLite keeps a flag as an integer: anything but 0 is set.
    fn flag(&self, i: usize) -> StoreResult<bool> {
        Ok(self.get::<_, i64>(i)? != 0)
    }
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>> {
        Ok(self.get(i)?)
    }
}

impl rusqlite::ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Cell::Null => ToSqlOutput::Owned(Value::Null),
            Cell::Int(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            Cell::Real(v) => ToSqlOutput::Owned(Value::Real(*v)),
            Cell::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Cell::Flag(v) => ToSqlOutput::Owned(Value::Integer(i64::from(*v))),
            Cell::Bytes(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
        })
    }
}

/// Runs `sql` (prepared once per connection) with `values`; returns the rows it changed.
pub(super) fn write(conn: &Connection, sql: &str, values: &[Cell]) -> StoreResult<usize> {
    Ok(conn
        .prepare_cached(sql)?
        .execute(rusqlite::params_from_iter(values))?)
}

/// The rows of `sql` (prepared once per connection), each decoded by `decode`.
pub(super) fn all<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: Decode<T>,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, |row| Ok(decode(row)))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

/// The first row of `sql` (prepared once per connection), decoded by `decode`, if any.
pub(super) fn one<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: Decode<T>,
) -> StoreResult<Option<T>> {
    conn.prepare_cached(sql)?
        .query_row(params, |row| Ok(decode(row)))
        .optional()?
        .transpose()
}
