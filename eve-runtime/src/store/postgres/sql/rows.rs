//! The PostgreSQL driver's side of the shared row mapping (`store/rows/`): a `tokio-postgres`
//! row read through [`StoredRow`], a [`Cell`] bound as a parameter of the column's type, and
//! rows decoded with a record type's decoder.

use bytes::BytesMut;
use tokio_postgres::Row;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::g;
use crate::store::StoreResult;
use crate::store::rows::{Cell, Decode, StoredRow};

impl StoredRow for Row {
    fn int(&self, i: usize) -> StoreResult<i64> {
        g(self, i)
    }
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>> {
        g(self, i)
    }
    fn real(&self, i: usize) -> StoreResult<f64> {
        g(self, i)
    }
    fn text(&self, i: usize) -> StoreResult<String> {
        g(self, i)
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        g(self, i)
    }
    fn flag(&self, i: usize) -> StoreResult<bool> {
        g(self, i)
    }
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>> {
        g(self, i)
    }
}

/// A cell is sent as its own Rust type, checked against the parameter's type (an integer for
/// a `BIGINT`, a flag for a `BOOLEAN`, …), as a parameter of that type would be.
impl ToSql for Cell {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Cell::Null => Ok(IsNull::Yes),
            Cell::Int(v) => v.to_sql_checked(ty, out),
            Cell::Real(v) => v.to_sql_checked(ty, out),
            Cell::Text(v) => v.to_sql_checked(ty, out),
            Cell::Flag(v) => v.to_sql_checked(ty, out),
            Cell::Bytes(v) => v.to_sql_checked(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// `values` as the parameters of one statement.
pub(in crate::store::postgres) fn bind(values: &[Cell]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

/// Every row, decoded.
pub(in crate::store::postgres) fn all<T>(rows: &[Row], decode: Decode<T>) -> StoreResult<Vec<T>> {
    rows.iter().map(|r| decode(r)).collect()
}

/// The row, if any, decoded.
pub(in crate::store::postgres) fn opt<T>(
    row: Option<Row>,
    decode: Decode<T>,
) -> StoreResult<Option<T>> {
    row.as_ref().map(|r| decode(r)).transpose()
}
