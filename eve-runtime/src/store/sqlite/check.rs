//! `eve store check` on a SQLite store: the files, `PRAGMA integrity_check`, every stored text,
//! the mark, then eve's consistency checks (`store/check.rs`) through the runtime's own reads.
//!
//! The store is opened without being created, migrated or marked, read-only in effect
//! (`query_only`, and no checkpoint of the write-ahead log when the connection closes), so a
//! damaged store can be checked (the start-up check would refuse it) and the check changes
//! nothing, also while a server runs on the same file.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::config::DbConfig;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use super::{builds, integrity, notes, reads, releases, schema};
use crate::store::check::{CheckItem, CheckReads, Problems, StoreCheck, consistency};
use crate::store::{
    InputRequestRecord, MessageRecord, NoteRecord, ReleaseRecord, SessionFilter, SessionRecord,
    StepRecord, StoreError, StoreResult, StoredEvent, ToolCallRecord, TurnRecord,
    WorkspaceCheckpoint,
};

/// A connection that reads and never writes.
fn open_for_check(db: &Path) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.busy_timeout(schema::BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", "ON")?;
    Ok(conn)
}

/// Checks the SQLite store at `db` (see the module's header).
pub(super) async fn check_file(db: &Path) -> StoreCheck {
    let mut report = StoreCheck::new(db.display().to_string(), "sqlite");
    if !files(db, &mut report) {
        return report;
    }
    let conn = match open_for_check(db) {
        Ok(conn) => conn,
        Err(e) => {
            let mut problems = Problems::default();
            problems.push(format!("the database cannot be opened: {e}"));
            report
                .checks
                .push(CheckItem::ran("open", db.display().to_string(), problems));
            return report;
        }
    };
    report.checks.push(integrity_check(&conn));
    let current = schema_check(&conn, &mut report);
    report.checks.push(texts(&conn));
    report.checks.push(mark(&conn, db));
    if !current {
        report.checks.push(CheckItem::skipped(
            "consistency",
            "the schema is not this eve's: eve's consistency checks read it as this eve does",
        ));
        return report;
    }
    let reads = ReadOnly(Mutex::new(conn));
    consistency(&reads, &mut report).await;
    report
}

/// The files before anything opens them; `false` when there is no database to open.
fn files(db: &Path, report: &mut StoreCheck) -> bool {
    let mut problems = Problems::default();
    let size = std::fs::metadata(db).map(|m| m.len()).ok();
    let wal = integrity::sidecar(db, "-wal");
    let wal_size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let state = match size {
        None => Some("missing"),
        Some(0) => Some("empty (0 bytes)"),
        Some(_) => None,
    };
    if let Some(state) = state {
        problems.push(format!("the database {} is {state}", db.display()));
        if wal_size > 0 {
            problems.push(format!(
                "its write-ahead log {} is there ({wal_size} bytes): the database was deleted \
                 or moved",
                wal.display()
            ));
        }
        if let Some(mark) = integrity::read_mark(db) {
            problems.push(format!(
                "its mark {} records {} sessions, {} events and {} releases",
                integrity::mark_path(db).display(),
                mark.sessions,
                mark.events,
                mark.releases
            ));
        }
        for found in integrity::history_beside(db) {
            problems.push(format!("beside it: {found}"));
        }
        problems.push(
            "restore the store from a backup (docs/operations.md); a project that never had one \
             has nothing to check",
        );
    }
    let ok = state.is_none();
    report
        .checks
        .push(CheckItem::ran("files", db.display().to_string(), problems));
    ok
}

/// `PRAGMA integrity_check`, in full: every page, every index against its table.
fn integrity_check(conn: &Connection) -> CheckItem {
    let mut problems = Problems::default();
    let lines: StoreResult<Vec<String>> = conn
        .prepare("PRAGMA integrity_check(100)")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(StoreError::from);
    match lines {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => {}
        Ok(lines) => lines.into_iter().for_each(|l| problems.push(l)),
        Err(e) => problems.push(format!("the check stopped: {e}")),
    }
    CheckItem::ran(
        "integrity_check",
        "SQLite's PRAGMA integrity_check: every page, every index against its table",
        problems,
    )
}

/// The schema version against this eve's; `true` when they are the same.
fn schema_check(conn: &Connection, report: &mut StoreCheck) -> bool {
    let supported = i64::try_from(schema::MIGRATIONS.len()).unwrap_or(i64::MAX);
    let mut problems = Problems::default();
    let version = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
    let (current, detail) = match version {
        Ok(v) if v == supported => (true, format!("version {v}")),
        Ok(v) if v > supported => {
            problems.push(format!(
                "the schema version {v} is newer than this eve supports ({supported}): check it \
                 with the eve that wrote it"
            ));
            (false, format!("version {v}"))
        }
        Ok(v) => (
            false,
            format!(
                "version {v}, older than this eve's {supported}: eve migrates it at its next start"
            ),
        ),
        Err(e) => {
            problems.push(format!("the schema version cannot be read: {e}"));
            (false, String::new())
        }
    };
    let item = CheckItem::ran("schema", detail, problems);
    let ok = current && item.problems.is_empty();
    report.checks.push(item);
    ok
}

/// Every text stored in every table is UTF-8 (SQLite checks structure, not contents: a byte
/// changed inside a row is seen here, or by the reads after).
fn texts(conn: &Connection) -> CheckItem {
    let mut problems = Problems::default();
    let tables: StoreResult<Vec<String>> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             ORDER BY name",
        )
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(StoreError::from);
    let tables = match tables {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("the tables cannot be listed: {e}"));
            return CheckItem::ran("texts", "every stored text", problems);
        }
    };
    for table in &tables {
        if let Err(e) = table_texts(conn, table, &mut problems) {
            problems.push(format!("table {table} cannot be read to its end: {e}"));
        }
    }
    CheckItem::ran(
        "texts",
        format!("every text in {} tables is UTF-8", tables.len()),
        problems,
    )
}

fn table_texts(conn: &Connection, table: &str, problems: &mut Problems) -> StoreResult<()> {
    let mut stmt = conn.prepare(&format!("SELECT * FROM \"{}\"", table.replace('"', "\"\"")))?;
    let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        for (i, name) in names.iter().enumerate() {
            if let ValueRef::Text(bytes) = row.get_ref(i)?
                && std::str::from_utf8(bytes).is_err()
            {
                // The row by its first two columns (a session's rows by session and index).
                let mut key = Vec::new();
                for (k, column) in names.iter().enumerate().take(2.min(names.len())) {
                    let shown = match row.get_ref(k)? {
                        ValueRef::Text(v) => format!("{:?}", String::from_utf8_lossy(v)),
                        ValueRef::Integer(v) => v.to_string(),
                        _ => continue,
                    };
                    key.push(format!("{column}={shown}"));
                }
                problems.push(format!(
                    "table {table}, row {}: column {name} is not UTF-8 (bytes changed under \
                     SQLite)",
                    key.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// The database against its mark: same identity, at least the counts it recorded.
fn mark(conn: &Connection, db: &Path) -> CheckItem {
    let mut problems = Problems::default();
    let Some(mark) = integrity::read_mark(db) else {
        return CheckItem::skipped(
            "mark",
            format!(
                "no mark at {} (eve writes one when it opens the store)",
                integrity::mark_path(db).display()
            ),
        );
    };
    let identity: Option<String> = conn
        .query_row(
            "SELECT identity FROM store_identity WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .ok();
    match identity {
        Some(id) if id != mark.identity => problems.push(format!(
            "the database's identity {id} is not the mark's {}: another store, or another \
             project's",
            mark.identity
        )),
        None if mark.shows_history() => problems.push(format!(
            "the database has no identity, but the mark records {} sessions and {} events",
            mark.sessions, mark.events
        )),
        _ => {}
    }
    match integrity::counts(conn) {
        Ok((sessions, events)) if sessions < mark.sessions || events < mark.events => {
            problems.push(format!(
                "the database holds {sessions} sessions and {events} events (pruned ones \
                 included), fewer than the {} and {} the mark recorded: a truncated file or a \
                 rolled-back write-ahead log",
                mark.sessions, mark.events
            ));
        }
        Ok(_) => {}
        Err(e) => problems.push(format!("the counts cannot be read: {e}")),
    }
    CheckItem::ran(
        "mark",
        format!(
            "{} (identity {}, {} sessions, {} events)",
            integrity::mark_path(db).display(),
            mark.identity,
            mark.sessions,
            mark.events
        ),
        problems,
    )
}

/// The runtime's reads on the checked connection.
struct ReadOnly(Mutex<Connection>);

impl ReadOnly {
    fn with<T>(&self, read: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let conn = self
            .0
            .lock()
            .map_err(|_| StoreError::Corrupt("the checked connection was poisoned".to_owned()))?;
        read(&conn)
    }
}

#[async_trait::async_trait]
impl CheckReads for ReadOnly {
    async fn sessions(&self) -> StoreResult<Vec<SessionRecord>> {
        self.with(|c| reads::sessions(c, &SessionFilter::default()))
    }
    async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<StoredEvent>> {
        self.with(|c| reads::events(c, session, from, limit))
    }
    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>> {
        self.with(|c| reads::messages(c, session, from, limit))
    }
    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
        self.with(|c| reads::turn(c, session, seq))
    }
    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
        self.with(|c| reads::steps(c, session, turn))
    }
    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>> {
        self.with(|c| reads::tool_calls(c, session, turn))
    }
    async fn input_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>> {
        self.with(|c| reads::input_requests(c, session, false))
    }
    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>> {
        self.with(|c| builds::workspace(c, session))
    }
    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        self.with(|c| builds::blob(c, hash))
    }
    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>> {
        self.with(releases::releases)
    }
    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        self.with(|c| releases::events(c, from, limit))
    }
    async fn notes(&self) -> StoreResult<Vec<NoteRecord>> {
        self.with(|c| notes::notes_under(c, ""))
    }
}
