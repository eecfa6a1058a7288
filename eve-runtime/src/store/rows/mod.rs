//! One row mapping per record type, shared by the two SQL backends.
//!
//! Each table's columns are named once here (`SESSION_COLS`, `TURN_COLS`, …), next to the
//! decoder that turns a row read in that order into its record ([`session`], [`turn`], …) and
//! the encoder that turns a record into the values of its write ([`session_insert`],
//! [`turn_values`], …). A backend keeps only its dialect (the statements around these column
//! lists) and its driver glue: it reads a row through [`StoredRow`] and binds a [`Cell`].
//! Both schemas store the same types: integers (counters and times, `u64` saturating at
//! `i64::MAX` on the way in and negative values read as 0), floats, text (JSON as text), flags
//! (SQLite's 0/1, PostgreSQL's `BOOLEAN`) and bytes.

use serde::de::DeserializeOwned;

use super::{StoreError, StoreResult};

/// The values of one write, in the order of its placeholders.
macro_rules! cells {
    ($($v:expr),* $(,)?) => {
        vec![$($crate::store::rows::Cell::from($v)),*]
    };
}
pub(crate) use cells;

mod features;
mod sessions;

pub(crate) use features::*;
pub(crate) use sessions::*;

/// A stored count as a column value (saturating).
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A column value as a count (a negative one reads as 0).
pub(crate) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// One value to bind, as both schemas store it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    /// SQL `NULL`.
    Null,
    /// An integer (`INTEGER` / `BIGINT`).
    Int(i64),
    /// A float (`REAL` / `DOUBLE PRECISION`).
    Real(f64),
    /// Text, JSON included.
    Text(String),
    /// A flag (SQLite's 0 or 1, PostgreSQL's `BOOLEAN`).
    Flag(bool),
    /// Bytes (`BLOB` / `BYTEA`).
    Bytes(Vec<u8>),
}

impl Cell {
    /// A value as its JSON text.
    pub(crate) fn json(value: &impl serde::Serialize) -> StoreResult<Self> {
        Ok(Self::Text(serde_json::to_string(value)?))
    }

    /// An optional value as its JSON text, or `NULL`.
    pub(crate) fn opt_json(value: Option<&impl serde::Serialize>) -> StoreResult<Self> {
        value.map_or(Ok(Self::Null), Self::json)
    }
}

impl From<String> for Cell {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<&String> for Cell {
    fn from(v: &String) -> Self {
        Self::Text(v.clone())
    }
}

impl From<&str> for Cell {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}

impl From<i64> for Cell {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<u64> for Cell {
    fn from(v: u64) -> Self {
        Self::Int(to_i64(v))
    }
}

impl From<u32> for Cell {
    fn from(v: u32) -> Self {
        Self::Int(i64::from(v))
    }
}

impl From<f64> for Cell {
    fn from(v: f64) -> Self {
        Self::Real(v)
    }
}

impl From<bool> for Cell {
    fn from(v: bool) -> Self {
        Self::Flag(v)
    }
}

impl From<&Vec<u8>> for Cell {
    fn from(v: &Vec<u8>) -> Self {
        Self::Bytes(v.clone())
    }
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::Null, Into::into)
    }
}

/// A row as a backend's driver returns it: typed reads by column index. Each backend maps its
/// driver's errors (a NULL or a value not of the column's type) as it always does.
pub(crate) trait StoredRow {
    /// An integer column.
    fn int(&self, i: usize) -> StoreResult<i64>;
    /// A nullable integer column.
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>>;
    /// A float column.
    fn real(&self, i: usize) -> StoreResult<f64>;
    /// A text column.
    fn text(&self, i: usize) -> StoreResult<String>;
    /// A nullable text column.
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>>;
    /// A flag column.
    fn flag(&self, i: usize) -> StoreResult<bool>;
    /// A bytes column.
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>>;
}

impl dyn StoredRow + '_ {
    /// A count.
    pub(crate) fn count(&self, i: usize) -> StoreResult<u64> {
        Ok(to_u64(self.int(i)?))
    }

    /// A nullable count.
    pub(crate) fn opt_count(&self, i: usize) -> StoreResult<Option<u64>> {
        Ok(self.opt_int(i)?.map(to_u64))
    }

    /// A small count (a pid, attempts, failures): 0 when it does not fit.
    pub(crate) fn small(&self, i: usize) -> StoreResult<u32> {
        Ok(u32::try_from(self.int(i)?).unwrap_or(0))
    }

    /// A JSON text column, decoded.
    pub(crate) fn json<T: DeserializeOwned>(&self, i: usize) -> StoreResult<T> {
        Ok(serde_json::from_str(&self.text(i)?)?)
    }

    /// A nullable JSON text column, decoded.
    pub(crate) fn opt_json<T: DeserializeOwned>(&self, i: usize) -> StoreResult<Option<T>> {
        self.opt_text(i)?
            .map(|t| Ok(serde_json::from_str(&t)?))
            .transpose()
    }

    /// A state column (a stored enum spelling).
    pub(crate) fn state<T>(&self, i: usize, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
        let text = self.text(i)?;
        parse(&text).ok_or_else(|| StoreError::Corrupt(format!("unknown state `{text}`")))
    }
}

/// A decoder of one record type.
pub(crate) type Decode<T> = fn(&dyn StoredRow) -> StoreResult<T>;
