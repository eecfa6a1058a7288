//! `eve store migrate`: copies a SQLite store into PostgreSQL, verifiably and idempotently.
//!
//! Every table the two schemas share is copied (sessions, inbox, messages, turns, steps, tool
//! calls, input requests, events, breakers, schedules and their fires, composition rows,
//! channel deliveries and replies, notes, builds, workspace checkpoints and blobs, and any
//! table a later migration adds to both), except `leases`: a lease names a process of the
//! SQLite host, so a fleet node claims the session afresh (its fencing token comes from the
//! server's sequence). Rows are read from one SQLite read transaction (a consistent snapshot)
//! in insertion order, so PostgreSQL's `ord` columns keep their order, and written in one
//! PostgreSQL transaction under an advisory lock: either the whole store moves, or nothing.
//!
//! Each table is read in pages by key (after the last row read: `rowid`, or the primary key of
//! a table without one), so a page costs the same at the end of a large table as at its start.
//!
//! A row whose key the target already holds is compared with it: the same row is skipped (so a
//! second run copies nothing), a different one refuses the migration, naming the table and the
//! key. Afterwards the row counts of every table are compared, and a few rows of each table
//! (first, middle, last) are read back by key and compared value by value.

use std::path::Path;

use rusqlite::types::Value as Lite;
use tokio_postgres::NoTls;
use tokio_postgres::types::{ToSql, Type};

use super::PgStore;
use crate::store::{SqliteStore, StoreError, StoreResult, redact_url};

/// Tables never copied, with why.
const NOT_COPIED: &[(&str, &str)] = &[
    (
        "leases",
        "a lease names a process of the SQLite host; fleet nodes claim sessions afresh",
    ),
    ("eve_schema", "PostgreSQL's own migration record"),
];

/// Rows read from SQLite per round.
const CHUNK: usize = 500;

/// What one table's migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableImport {
    /// Table.
    pub table: String,
    /// Rows in the SQLite store.
    pub source_rows: u64,
    /// Rows the target held before.
    pub target_before: u64,
    /// Rows copied now.
    pub copied: u64,
    /// Rows the target holds after.
    pub target_after: u64,
}

/// One row read back from the target and compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpotCheck {
    /// Table.
    pub table: String,
    /// The row's key, as `column=value` pairs.
    pub key: String,
}

/// What a migration did and what it verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// Per table, in copy order.
    pub tables: Vec<TableImport>,
    /// Tables left out, with why.
    pub skipped: Vec<(String, String)>,
    /// Rows compared value by value after the copy.
    pub spot_checks: Vec<SpotCheck>,
}

impl ImportReport {
    /// Rows copied in all.
    pub fn copied(&self) -> u64 {
        self.tables.iter().map(|t| t.copied).sum()
    }
}

/// A value of either side, normalised for comparison.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Cell {
    fn from_lite(v: Lite) -> Self {
        match v {
            Lite::Null => Cell::Null,
            Lite::Integer(i) => Cell::Int(i),
            Lite::Real(f) => Cell::Real(f),
            Lite::Text(t) => Cell::Text(t),
            Lite::Blob(b) => Cell::Blob(b),
        }
    }

    fn shown(&self) -> String {
        match self {
            Cell::Null => "NULL".to_owned(),
            Cell::Int(i) => i.to_string(),
            Cell::Real(f) => f.to_string(),
            Cell::Text(t) if t.chars().count() > 40 => {
                format!("{}…", t.chars().take(40).collect::<String>())
            }
            Cell::Text(t) => t.clone(),
            Cell::Blob(b) => format!("<{} bytes>", b.len()),
        }
    }
}

/// A target column: its name and PostgreSQL type.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: Type,
}

fn bad(table: &str, column: &str, what: &str) -> StoreError {
    StoreError::Corrupt(format!("{table}.{column}: {what}"))
}

/// The SQLite value as a parameter of the target column's type.
fn param(table: &str, col: &Column, cell: &Cell) -> StoreResult<Box<dyn ToSql + Sync + Send>> {
    let ty = &col.ty;
    let wrong = || bad(table, &col.name, &format!("cannot store {cell:?} as {ty}"));
    Ok(match (cell, ty) {
        (Cell::Null, t) if *t == Type::TEXT => Box::new(None::<String>),
        (Cell::Null, t) if *t == Type::INT8 => Box::new(None::<i64>),
        (Cell::Null, t) if *t == Type::INT4 => Box::new(None::<i32>),
        (Cell::Null, t) if *t == Type::BOOL => Box::new(None::<bool>),
        (Cell::Null, t) if *t == Type::FLOAT8 => Box::new(None::<f64>),
        (Cell::Null, t) if *t == Type::BYTEA => Box::new(None::<Vec<u8>>),
        (Cell::Text(s), t) if *t == Type::TEXT => Box::new(s.clone()),
        (Cell::Int(i), t) if *t == Type::INT8 => Box::new(*i),
        (Cell::Int(i), t) if *t == Type::INT4 => Box::new(i32::try_from(*i).map_err(|_| wrong())?),
        (Cell::Int(i), t) if *t == Type::BOOL => Box::new(*i != 0),
        (Cell::Int(i), t) if *t == Type::FLOAT8 => Box::new(*i as f64),
        (Cell::Real(f), t) if *t == Type::FLOAT8 => Box::new(*f),
        (Cell::Blob(b), t) if *t == Type::BYTEA => Box::new(b.clone()),
        (Cell::Text(s), t) if *t == Type::BYTEA => Box::new(s.as_bytes().to_vec()),
        _ => return Err(wrong()),
    })
}

/// A target value, normalised like SQLite's.
fn cell_of(row: &tokio_postgres::Row, i: usize, col: &Column) -> StoreResult<Cell> {
    let ty = &col.ty;
    Ok(if *ty == Type::TEXT {
        row.try_get::<_, Option<String>>(i)?
            .map_or(Cell::Null, Cell::Text)
    } else if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?
            .map_or(Cell::Null, Cell::Int)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?
            .map_or(Cell::Null, |v| Cell::Int(i64::from(v)))
    } else if *ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)?
            .map_or(Cell::Null, |v| Cell::Int(i64::from(v)))
    } else if *ty == Type::FLOAT8 {
        row.try_get::<_, Option<f64>>(i)?
            .map_or(Cell::Null, Cell::Real)
    } else if *ty == Type::BYTEA {
        row.try_get::<_, Option<Vec<u8>>>(i)?
            .map_or(Cell::Null, Cell::Blob)
    } else {
        return Err(bad("?", &col.name, &format!("unsupported type {ty}")));
    })
}

/// Whether a SQLite cell and a target cell hold the same value (booleans and whole floats
/// compare as their integers; text compares with a blob of its bytes).
fn same(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Int(x), Cell::Real(y)) | (Cell::Real(y), Cell::Int(x)) => (*x as f64) == *y,
        (Cell::Text(t), Cell::Blob(b)) | (Cell::Blob(b), Cell::Text(t)) => t.as_bytes() == b,
        _ => a == b,
    }
}

fn key_text(names: &[String], values: &[Cell]) -> String {
    names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}={}", v.shown()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One table as both sides see it.
struct Plan {
    table: String,
    /// Columns both sides have, in the target's order.
    columns: Vec<Column>,
    /// Indexes (into `columns`) of the primary key.
    key: Vec<usize>,
    /// The SQLite read's order and page key: `rowid` (insertion order) where there is one,
    /// else the primary key's columns, quoted.
    order: Vec<String>,
}

fn sqlite_tables(conn: &rusqlite::Connection) -> StoreResult<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY rowid",
    )?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn sqlite_columns(conn: &rusqlite::Connection, table: &str) -> StoreResult<Vec<(String, i64)>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info(\"{table}\")"))?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(1)?, r.get::<_, i64>(5)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

async fn target_columns(
    client: &tokio_postgres::Transaction<'_>,
    table: &str,
) -> StoreResult<Vec<Column>> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid FROM pg_attribute a \
             WHERE a.attrelid = to_regclass(quote_ident($1)) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[&table],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let oid: u32 = r.try_get(1)?;
            let name: String = r.try_get(0)?;
            let ty = Type::from_oid(oid).ok_or_else(|| bad(table, &name, "unknown type"))?;
            Ok(Column { name, ty })
        })
        .collect()
}

async fn target_key(
    client: &tokio_postgres::Transaction<'_>,
    table: &str,
) -> StoreResult<Vec<String>> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = to_regclass(quote_ident($1)) AND i.indisprimary ORDER BY k.n",
            &[&table],
        )
        .await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

async fn count(client: &tokio_postgres::Transaction<'_>, table: &str) -> StoreResult<u64> {
    let row = client
        .query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])
        .await?;
    Ok(u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0))
}

/// A page of rows, with the page key of its last row (`None` when empty).
type Page = (Vec<Vec<Cell>>, Option<Vec<Lite>>);

/// The page of at most [`CHUNK`] rows after the page key `after` (from the start when `None`).
fn read_chunk(
    conn: &rusqlite::Connection,
    plan: &Plan,
    after: Option<&[Lite]>,
) -> StoreResult<Page> {
    let order = plan.order.join(", ");
    let filter = match after {
        None => String::new(),
        Some(key) => {
            let marks = (1..=key.len())
                .map(|i| format!("?{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("WHERE ({order}) > ({marks})")
        }
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {order}, {} FROM \"{}\" {filter} ORDER BY {order} LIMIT {CHUNK}",
        names(plan),
        plan.table
    ))?;
    let (k, n) = (plan.order.len(), plan.columns.len());
    let params = rusqlite::params_from_iter(after.unwrap_or_default());
    let rows = stmt.query_map(params, |r| {
        let key = (0..k)
            .map(|i| r.get::<_, Lite>(i))
            .collect::<Result<Vec<_>, _>>()?;
        let cells = (k..k + n)
            .map(|i| r.get::<_, Lite>(i).map(Cell::from_lite))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((key, cells))
    })?;
    let mut page = Vec::new();
    let mut last = None;
    for row in rows {
        let (key, cells) = row?;
        page.push(cells);
        last = Some(key);
    }
    Ok((page, last))
}

/// The row at `offset` in the read order (spot checks read three per table).
fn read_at(
    conn: &rusqlite::Connection,
    plan: &Plan,
    offset: usize,
) -> StoreResult<Option<Vec<Cell>>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM \"{}\" ORDER BY {} LIMIT 1 OFFSET {offset}",
        names(plan),
        plan.table,
        plan.order.join(", ")
    ))?;
    let n = plan.columns.len();
    let mut rows = stmt.query_map([], |r| {
        (0..n)
            .map(|i| r.get::<_, Lite>(i).map(Cell::from_lite))
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(rows.next().transpose()?)
}

/// Copies the SQLite store at `from` into the PostgreSQL store at `to` (migrating both to
/// this eve's schema first) and verifies the copy. Nothing is written when it fails.
pub async fn import_sqlite(from: &Path, to: &str) -> StoreResult<ImportReport> {
    SqliteStore::create_if_recorded(from)?;
    if !from.is_file() {
        return Err(StoreError::NotFound(format!(
            "the SQLite store {} (give the project's .eve/eve.db)",
            from.display()
        )));
    }
    // Both schemas up to date (SQLite's integrity checks run here too).
    SqliteStore::open(from)?.close();
    drop(PgStore::connect(to).await?);
    let lite = rusqlite::Connection::open_with_flags(
        from,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    lite.busy_timeout(std::time::Duration::from_secs(10))?;
    lite.execute_batch("BEGIN")?;
    let (mut client, connection) =
        tokio_postgres::connect(to, NoTls)
            .await
            .map_err(|e| StoreError::Unreachable {
                url: redact_url(to),
                cause: e.to_string(),
            })?;
    let driver = tokio::spawn(connection);
    let result = copy_all(&lite, &mut client).await;
    let _ = lite.execute_batch("COMMIT");
    drop(client);
    let _ = driver.await;
    result
}

async fn copy_all(
    lite: &rusqlite::Connection,
    client: &mut tokio_postgres::Client,
) -> StoreResult<ImportReport> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('eve-import:' || current_schema()))",
        &[],
    )
    .await?;
    let mut report = ImportReport {
        tables: Vec::new(),
        skipped: Vec::new(),
        spot_checks: Vec::new(),
    };
    let mut plans = Vec::new();
    for table in sqlite_tables(lite)? {
        if let Some((_, why)) = NOT_COPIED.iter().find(|(t, _)| *t == table) {
            report.skipped.push((table, (*why).to_owned()));
            continue;
        }
        let target = target_columns(&tx, &table).await?;
        if target.is_empty() {
            report.skipped.push((
                table,
                "SQLite-only bookkeeping (PostgreSQL has no such table)".to_owned(),
            ));
            continue;
        }
        let source = sqlite_columns(lite, &table)?;
        let columns: Vec<Column> = target
            .into_iter()
            .filter(|c| source.iter().any(|(n, _)| *n == c.name))
            .collect();
        let key_names = target_key(&tx, &table).await?;
        let key: Vec<usize> = key_names
            .iter()
            .filter_map(|k| columns.iter().position(|c| c.name == *k))
            .collect();
        if key.is_empty() || key.len() != key_names.len() {
            return Err(StoreError::Corrupt(format!(
                "{table}: the two stores do not share its key columns; upgrade eve on both sides"
            )));
        }
        let has_rowid = lite
            .prepare(&format!("SELECT rowid FROM \"{table}\" LIMIT 0"))
            .is_ok();
        let order = if has_rowid {
            vec!["rowid".to_owned()]
        } else {
            let mut pk: Vec<(String, i64)> = source.into_iter().filter(|(_, p)| *p > 0).collect();
            pk.sort_by_key(|(_, p)| *p);
            pk.into_iter().map(|(n, _)| format!("\"{n}\"")).collect()
        };
        if order.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "{table}: the SQLite table has neither a rowid nor a primary key to read it by"
            )));
        }
        plans.push(Plan {
            table,
            columns,
            key,
            order,
        });
    }
    for plan in &plans {
        report.tables.push(copy_table(lite, &tx, plan).await?);
    }
    for plan in &plans {
        report
            .spot_checks
            .extend(spot_check(lite, &tx, plan).await?);
    }
    for t in &report.tables {
        if t.target_after < t.source_rows {
            return Err(StoreError::Integrity(format!(
                "{}: the target holds {} rows after the copy, fewer than the {} of the SQLite \
                 store; nothing was written",
                t.table, t.target_after, t.source_rows
            )));
        }
    }
    tx.commit().await?;
    Ok(report)
}

fn names(plan: &Plan) -> String {
    plan.columns
        .iter()
        .map(|c| format!("\"{}\"", c.name))
        .collect::<Vec<_>>()
        .join(", ")
}

fn key_where(plan: &Plan, first: usize) -> String {
    plan.key
        .iter()
        .enumerate()
        .map(|(n, &i)| format!("\"{}\" = ${}", plan.columns[i].name, first + n))
        .collect::<Vec<_>>()
        .join(" AND ")
}

async fn copy_table(
    lite: &rusqlite::Connection,
    tx: &tokio_postgres::Transaction<'_>,
    plan: &Plan,
) -> StoreResult<TableImport> {
    let table = &plan.table;
    let target_before = count(tx, table).await?;
    let source_rows: i64 =
        lite.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
            r.get(0)
        })?;
    let placeholders = (1..=plan.columns.len())
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let key_cols = plan
        .key
        .iter()
        .map(|&i| format!("\"{}\"", plan.columns[i].name))
        .collect::<Vec<_>>()
        .join(", ");
    let insert = tx
        .prepare(&format!(
            "INSERT INTO \"{table}\" ({}) VALUES ({placeholders}) ON CONFLICT ({key_cols}) DO NOTHING",
            names(plan)
        ))
        .await?;
    let existing = tx
        .prepare(&format!(
            "SELECT {} FROM \"{table}\" WHERE {}",
            names(plan),
            key_where(plan, 1)
        ))
        .await?;
    let key_names: Vec<String> = plan
        .key
        .iter()
        .map(|&i| plan.columns[i].name.clone())
        .collect();
    let mut copied = 0u64;
    let mut after: Option<Vec<Lite>> = None;
    loop {
        let (rows, last) = read_chunk(lite, plan, after.as_deref())?;
        if rows.is_empty() {
            break;
        }
        after = last;
        for row in rows {
            let params = row
                .iter()
                .zip(&plan.columns)
                .map(|(cell, col)| param(table, col, cell))
                .collect::<StoreResult<Vec<_>>>()?;
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            if tx.execute(&insert, &refs).await? == 1 {
                copied += 1;
                continue;
            }
            // The key is there already: the same row (a re-run), or different data.
            let key_refs: Vec<&(dyn ToSql + Sync)> = plan.key.iter().map(|&i| refs[i]).collect();
            let theirs = tx.query_one(&existing, &key_refs).await?;
            for (i, col) in plan.columns.iter().enumerate() {
                let other = cell_of(&theirs, i, col)?;
                if !same(&row[i], &other) {
                    let key: Vec<Cell> = plan.key.iter().map(|&k| row[k].clone()).collect();
                    return Err(StoreError::Integrity(format!(
                        "the target already holds a different {table} row for {}: column \
                         {} is {} there and {} in the SQLite store. Nothing was written. \
                         The target holds other data under the same ids (or this SQLite store \
                         was used after an earlier migration, and the two diverged): migrate \
                         into an empty database, or schema (add options=-csearch_path%3DNAME \
                         to the URL)",
                        key_text(&key_names, &key),
                        col.name,
                        other.shown(),
                        row[i].shown()
                    )));
                }
            }
        }
    }
    let target_after = count(tx, table).await?;
    Ok(TableImport {
        table: table.clone(),
        source_rows: u64::try_from(source_rows).unwrap_or(0),
        target_before,
        copied,
        target_after,
    })
}

/// Reads the first, middle and last rows of a table back from the target, by key, and
/// compares every value.
async fn spot_check(
    lite: &rusqlite::Connection,
    tx: &tokio_postgres::Transaction<'_>,
    plan: &Plan,
) -> StoreResult<Vec<SpotCheck>> {
    let table = &plan.table;
    let total: i64 = lite.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
        r.get(0)
    })?;
    let total = usize::try_from(total).unwrap_or(0);
    let mut offsets = vec![0, total / 2, total.saturating_sub(1)];
    offsets.dedup();
    let select = tx
        .prepare(&format!(
            "SELECT {} FROM \"{table}\" WHERE {}",
            names(plan),
            key_where(plan, 1)
        ))
        .await?;
    let key_names: Vec<String> = plan
        .key
        .iter()
        .map(|&i| plan.columns[i].name.clone())
        .collect();
    let mut checked = Vec::new();
    for offset in offsets.into_iter().filter(|o| *o < total) {
        let Some(row) = read_at(lite, plan, offset)? else {
            continue;
        };
        let key: Vec<Cell> = plan.key.iter().map(|&k| row[k].clone()).collect();
        let params = plan
            .key
            .iter()
            .map(|&k| param(table, &plan.columns[k], &row[k]))
            .collect::<StoreResult<Vec<_>>>()?;
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let shown = key_text(&key_names, &key);
        let theirs = tx.query_opt(&select, &refs).await?.ok_or_else(|| {
            StoreError::Integrity(format!(
                "{table}: the row {shown} is missing after the copy"
            ))
        })?;
        for (i, col) in plan.columns.iter().enumerate() {
            if !same(&row[i], &cell_of(&theirs, i, col)?) {
                return Err(StoreError::Integrity(format!(
                    "{table}: column {} of the row {shown} differs after the copy",
                    col.name
                )));
            }
        }
        checked.push(SpotCheck {
            table: table.clone(),
            key: shown,
        });
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_compare_across_the_two_type_systems() {
        assert!(same(&Cell::Int(1), &Cell::Int(1)));
        assert!(same(&Cell::Int(3), &Cell::Real(3.0)));
        assert!(!same(&Cell::Int(3), &Cell::Real(3.5)));
        assert!(same(&Cell::Text("ab".into()), &Cell::Blob(b"ab".to_vec())));
        assert!(!same(&Cell::Null, &Cell::Int(0)));
        let long = Cell::Text("x".repeat(100));
        assert_eq!(long.shown().chars().count(), 41);
    }

    /// Every row of `plan`'s table, read page by page as the copy reads them.
    fn all_pages(conn: &rusqlite::Connection, plan: &Plan) -> (Vec<Vec<Cell>>, usize) {
        let (mut rows, mut pages, mut after) = (Vec::new(), 0, None::<Vec<Lite>>);
        loop {
            let (page, last) = read_chunk(conn, plan, after.as_deref()).unwrap();
            if page.is_empty() {
                return (rows, pages);
            }
            assert!(page.len() <= CHUNK);
            pages += 1;
            rows.extend(page);
            after = last;
        }
    }

    fn column(name: &str, ty: Type) -> Column {
        Column {
            name: name.to_owned(),
            ty,
        }
    }

    #[test]
    fn tables_are_read_in_pages_by_key_every_row_once_in_order() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE log (id TEXT PRIMARY KEY, n INTEGER NOT NULL);
             CREATE TABLE pairs (a TEXT NOT NULL, b INTEGER NOT NULL, v TEXT,
                                 PRIMARY KEY (a, b)) WITHOUT ROWID;",
        )
        .unwrap();
        let total = CHUNK * 2 + 7;
        for i in 0..total {
            // Insertion order differs from id order: rowid pages keep insertion order.
            conn.execute(
                "INSERT INTO log VALUES (?1, ?2)",
                rusqlite::params![format!("k{:05}", total - i), i64::try_from(i).unwrap()],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO pairs VALUES (?1, ?2, 'x')",
                rusqlite::params![format!("g{}", i % 3), i64::try_from(i).unwrap()],
            )
            .unwrap();
        }
        let log = Plan {
            table: "log".into(),
            columns: vec![column("id", Type::TEXT), column("n", Type::INT8)],
            key: vec![0],
            order: vec!["rowid".into()],
        };
        let (rows, pages) = all_pages(&conn, &log);
        assert_eq!(pages, 3);
        let ns: Vec<Cell> = rows.iter().map(|r| r[1].clone()).collect();
        let want: Vec<Cell> = (0..total)
            .map(|i| Cell::Int(i64::try_from(i).unwrap()))
            .collect();
        assert_eq!(ns, want, "insertion order, every row once");

        let pairs = Plan {
            table: "pairs".into(),
            columns: vec![
                column("a", Type::TEXT),
                column("b", Type::INT8),
                column("v", Type::TEXT),
            ],
            key: vec![0, 1],
            order: vec!["\"a\"".into(), "\"b\"".into()],
        };
        let (rows, _) = all_pages(&conn, &pairs);
        assert_eq!(rows.len(), total);
        let keys: Vec<(Cell, Cell)> = rows.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        let mut sorted = keys.clone();
        sorted.sort_by(|x, y| {
            let t = |c: &Cell| match c {
                Cell::Text(t) => t.clone(),
                _ => String::new(),
            };
            let n = |c: &Cell| match c {
                Cell::Int(i) => *i,
                _ => 0,
            };
            (t(&x.0), n(&x.1)).cmp(&(t(&y.0), n(&y.1)))
        });
        sorted.dedup();
        assert_eq!(keys, sorted, "composite key order, no row twice");
        assert_eq!(
            read_at(&conn, &log, total - 1).unwrap().unwrap()[1],
            Cell::Int(i64::try_from(total - 1).unwrap())
        );
        assert!(read_at(&conn, &log, total).unwrap().is_none());
    }
}
