//! Checks at start that the store file is the one this project wrote, whole and undamaged.
//!
//! SQLite opens a 0-byte or missing file as a new, empty database, and a `-wal` file left
//! without its database (or an older `-wal` put back) silently loses commits: the server would
//! then serve every session as unknown, or re-drive turns and mint new events at indexes whose
//! ids clients already have. So before serving, the store is held to a **mark** kept beside it
//! (`eve.db.mark`: the store's identity and its high-water mark, the session and event counts),
//! refreshed by the writer every few seconds after commits from counts that triggers keep in
//! `store_counts` (one row read; counting the events table would scan it under the writer):
//! - a missing database with its `-wal` still there, or a missing or 0-byte database while the
//!   mark shows history (sessions, events or releases), is refused;
//! - so is a missing or 0-byte database with no mark while the folder beside it shows that a
//!   store was there: session workspaces under `sandboxes/`, or workspace checkpoint indexes
//!   under `workspaces/` (`rm .eve/eve.db*` deletes the database and its mark, not those). Builds
//!   are no such sign: every command writes the build it runs before it opens the store, so a
//!   first run has builds and no store. Starting an empty store there anyway is asked for
//!   explicitly ([`SqliteStore::open_new_ok`](super::SqliteStore::open_new_ok), `EVE_NEW_STORE=1`);
//! - a database with another identity, or with fewer sessions or events than the mark recorded
//!   (a truncated file, a rolled-back WAL), is refused: published event ids never change;
//! - `PRAGMA quick_check` runs (interrupted after [`QUICK_CHECK_LIMIT`], then skipped with a
//!   warning) and a damaged page is refused.
//!
//! Each refusal names the file, says what is wrong, and how to restore (or, after restoring an
//! older backup on purpose, to delete the mark).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::store::{StoreError, StoreResult};

/// Longest `PRAGMA quick_check` at start.
pub(super) const QUICK_CHECK_LIMIT: Duration = Duration::from_secs(10);

/// What the mark file records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    /// The store's identity, also kept inside the database.
    pub(super) identity: String,
    /// Sessions stored when the mark was written.
    pub(super) sessions: i64,
    /// Events stored (events are never deleted, so this only grows).
    pub(super) events: i64,
    /// Releases stored (absent from marks written before releases were counted).
    #[serde(default)]
    pub(super) releases: i64,
}

impl Mark {
    pub(super) fn shows_history(&self) -> bool {
        self.sessions > 0 || self.events > 0 || self.releases > 0
    }
}

/// The mark file of the database at `db`.
pub(super) fn mark_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".mark");
    db.with_file_name(name)
}

pub(super) fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    db.with_file_name(name)
}

pub(super) fn read_mark(db: &Path) -> Option<Mark> {
    let text = std::fs::read_to_string(mark_path(db)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the mark atomically (a temp file renamed over it). The temp file's name is this
/// writer's own: a store closing and another opening on the same file at once (a restart) each
/// rename their own, never the other's half-written one.
pub(super) fn write_mark(db: &Path, mark: &Mark) -> std::io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = mark_path(db);
    let tmp = sidecar(db, &format!(".mark.{}.{n}.tmp", std::process::id()));
    let text = serde_json::to_string(mark).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// Removes the temp mark files of writers that died between writing and renaming them
/// (`eve.db.mark.<pid>.<n>.tmp` whose process is gone). A live process's file is left alone: it
/// may be about to rename it.
fn sweep_stale_marks(db: &Path) {
    let (Some(dir), Some(name)) = (db.parent(), db.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = format!("{name}.mark.");
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|f| f.strip_suffix(".tmp"))
        else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !crate::store::liveness::pid_alive(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Entries of the folder `name` beside the store that `keep` accepts.
fn entries_beside(db: &Path, name: &str, keep: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(db.with_file_name(name)).map_or(0, |dir| {
        dir.flatten()
            .filter(|e| e.file_name().to_str().is_some_and(&keep))
            .count()
    })
}

/// What beside the store shows that a store with history was there, in words (empty: nothing).
pub(super) fn history_beside(db: &Path) -> Vec<String> {
    let shown = |name: &str| !name.starts_with('.');
    let workspaces = entries_beside(db, "sandboxes", shown);
    let indexes = entries_beside(db, "workspaces", |n| shown(n) && n.ends_with(".json"));
    let mut found = Vec::new();
    if workspaces > 0 {
        found.push(format!(
            "{workspaces} session workspace{} under {}",
            if workspaces == 1 { "" } else { "s" },
            db.with_file_name("sandboxes").display()
        ));
    }
    if indexes > 0 {
        found.push(format!(
            "{indexes} workspace checkpoint index{} under {}",
            if indexes == 1 { "" } else { "es" },
            db.with_file_name("workspaces").display()
        ));
    }
    found
}

fn refuse(db: &Path, what: String) -> StoreError {
    let mark = mark_path(db);
    StoreError::Integrity(format!(
        "{}: {what}. Stop eve and restore the store from your backup (`eve.db`, without stale \
         `-wal`/`-shm` files; see docs/operations.md); if you restored an older backup on \
         purpose, delete {} and start again",
        db.display(),
        mark.display()
    ))
}

/// `opened`, the outcome of opening and migrating the database, with a damaged page said as
/// the damage `quick_check` reports is (naming the file and how to restore it): SQLite reads
/// the schema's pages, and a migration the pages it changes, before the check can run.
pub(super) fn damage_refused<T>(db: &Path, opened: StoreResult<T>) -> StoreResult<T> {
    match opened {
        Err(StoreError::Damaged(message)) => {
            Err(refuse(db, format!("the database is damaged ({message})")))
        }
        other => other,
    }
}

/// Checks the files before SQLite opens (and would create) the database. `new_ok`: a missing
/// or 0-byte database beside signs of an earlier store (but no mark) is started empty, on purpose.
pub(super) fn check_files(db: &Path, new_ok: bool) -> StoreResult<()> {
    let wal = sidecar(db, "-wal");
    let size = std::fs::metadata(db).map(|m| m.len()).ok();
    let wal_size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    if size.is_none() && wal_size > 0 {
        return Err(refuse(
            db,
            format!(
                "the database is missing but its write-ahead log {} is there: the store was \
                 deleted or moved",
                wal.display()
            ),
        ));
    }
    if size.unwrap_or(0) == 0 {
        let state = if size.is_some() {
            "empty (0 bytes)"
        } else {
            "missing"
        };
        if let Some(mark) = read_mark(db).filter(Mark::shows_history) {
            let releases = if mark.releases > 0 {
                format!(" and {} releases", mark.releases)
            } else {
                String::new()
            };
            return Err(refuse(
                db,
                format!(
                    "the database is {state} but held {} sessions and {} events{releases}",
                    mark.sessions, mark.events
                ),
            ));
        }
        let found = history_beside(db);
        if !found.is_empty() && !new_ok {
            return Err(StoreError::Integrity(format!(
                "{}: the store is {state} and has no mark ({}), but a store was here: {}. \
                 Starting an empty store would serve those sessions as unknown. Stop eve and \
                 restore the store from your backup (`eve.db`, without stale `-wal`/`-shm` \
                 files; see docs/operations.md), then run `eve store check`; if this project's \
                 store is elsewhere, name it with --store ({}); to start an empty store here on \
                 purpose, run once with {}=1 (the workspaces stay on disk)",
                db.display(),
                mark_path(db).display(),
                found.join(" and "),
                crate::env_vars::EVE_STORE,
                crate::env_vars::EVE_NEW_STORE,
            )));
        }
        if !found.is_empty() {
            tracing::warn!(
                store = %db.display(),
                "starting an empty store beside {} ({}=1)",
                found.join(" and "),
                crate::env_vars::EVE_NEW_STORE
            );
        }
    }
    Ok(())
}

/// Sessions and events ever stored: those in the tables plus those pruned since.
pub(super) fn counts(conn: &Connection) -> StoreResult<(i64, i64)> {
    let sessions: i64 = conn.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))?;
    let events: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    let pruned: (i64, i64) = conn
        .query_row(
            "SELECT sessions, events FROM store_pruned WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or((0, 0));
    Ok((sessions + pruned.0, events + pruned.1))
}

/// The same counts as [`counts`], kept up to date by triggers (`store_counts`): one row read
/// instead of a scan of every event, so refreshing the mark costs the writer nothing that grows
/// with the store.
fn kept_counts(conn: &Connection) -> StoreResult<(i64, i64)> {
    Ok(conn.query_row(
        "SELECT sessions, events FROM store_counts WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// Releases stored (a small table: one row per build handed to the runtime).
fn releases(conn: &Connection) -> StoreResult<i64> {
    Ok(conn.query_row("SELECT count(*) FROM releases", [], |r| r.get(0))?)
}

/// The current mark of an open store.
pub(super) fn current_mark(conn: &Connection, identity: &str) -> StoreResult<Mark> {
    let (sessions, events) = kept_counts(conn)?;
    Ok(Mark {
        identity: identity.to_owned(),
        sessions,
        events,
        releases: releases(conn)?,
    })
}

/// Checks the opened (and migrated) database; returns its identity, minting one for a store
/// that has none yet, and writes a fresh mark.
pub(super) fn check_open(conn: &Connection, db: &Path) -> StoreResult<String> {
    quick_check(conn, db)?;
    sweep_stale_marks(db);
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS store_identity (id INTEGER PRIMARY KEY CHECK (id = 1), \
         identity TEXT NOT NULL)",
    )?;
    let stored: Option<String> = conn
        .query_row(
            "SELECT identity FROM store_identity WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .ok();
    let (sessions, events) = counts(conn)?;
    if let Some(mark) = read_mark(db) {
        match &stored {
            Some(identity) if *identity != mark.identity => {
                return Err(refuse(
                    db,
                    format!(
                        "this database (identity {identity}) is not the store this project \
                         used (identity {})",
                        mark.identity
                    ),
                ));
            }
            None if mark.shows_history() => {
                return Err(refuse(
                    db,
                    format!(
                        "this database has no identity and {sessions} sessions, but the store \
                         held {} sessions and {} events",
                        mark.sessions, mark.events
                    ),
                ));
            }
            _ => {}
        }
        if sessions < mark.sessions || events < mark.events {
            return Err(refuse(
                db,
                format!(
                    "the database holds {sessions} sessions and {events} events, fewer than the \
                     {} sessions and {} events already published (a truncated file or a \
                     rolled-back write-ahead log); serving it would give published event \
                     indexes new ids",
                    mark.sessions, mark.events
                ),
            ));
        }
    }
    let identity = match stored {
        Some(identity) => identity,
        None => {
            let identity = ulid::Ulid::new().to_string();
            conn.execute(
                "INSERT INTO store_identity (id, identity) VALUES (1, ?1)",
                [&identity],
            )?;
            identity
        }
    };
    // The kept counts start from the counted ones (a copy edited by hand, or rows written
    // before the triggers existed, would otherwise put a wrong number in every later mark).
    if kept_counts(conn).ok() != Some((sessions, events)) {
        conn.execute(
            "INSERT INTO store_counts (id, sessions, events) VALUES (1, ?1, ?2) \
             ON CONFLICT (id) DO UPDATE SET sessions = excluded.sessions, events = excluded.events",
            [sessions, events],
        )?;
    }
    let mark = Mark {
        identity: identity.clone(),
        sessions,
        events,
        releases: releases(conn)?,
    };
    write_mark(db, &mark)?;
    Ok(identity)
}

/// The memory map `quick_check` reads through (bytes; SQLite maps at most the file's size).
const CHECK_MMAP: i64 = 1 << 30;
/// The page cache `quick_check` runs with (negative: KiB).
const CHECK_CACHE_KIB: i64 = -16_384;

/// `PRAGMA quick_check`, interrupted after [`QUICK_CHECK_LIMIT`].
fn quick_check(conn: &Connection, db: &Path) -> StoreResult<()> {
    let handle = conn.get_interrupt_handle();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let timer = std::thread::spawn(move || {
        if wait.recv_timeout(QUICK_CHECK_LIMIT).is_err() {
            handle.interrupt();
        }
    });
    // The check reads every page once: through a memory map and a page cache that holds the
    // pages it revisits, it takes about a third less than through the default 2 MiB cache
    // (measured on a store of 10,000 events). Both go back to what they were afterwards.
    let pragma = |name: &str| conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0));
    let before = (pragma("mmap_size"), pragma("cache_size"));
    let _ = conn.pragma_update(None, "mmap_size", CHECK_MMAP);
    let _ = conn.pragma_update(None, "cache_size", CHECK_CACHE_KIB);
    let result: Result<Vec<String>, rusqlite::Error> =
        conn.prepare("PRAGMA quick_check(5)").and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        });
    if let (Ok(mmap), Ok(cache)) = before {
        let _ = conn.pragma_update(None, "mmap_size", mmap);
        let _ = conn.pragma_update(None, "cache_size", cache);
    }
    let _ = done.send(());
    let _ = timer.join();
    match result {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => Ok(()),
        Ok(lines) => Err(refuse(
            db,
            format!(
                "the database is damaged (quick_check: {})",
                lines.join("; ")
            ),
        )),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            tracing::warn!(
                store = %db.display(),
                "the store's quick_check took longer than {}s; it was skipped",
                QUICK_CHECK_LIMIT.as_secs()
            );
            Ok(())
        }
        Err(e) => Err(refuse(db, format!("the database cannot be read ({e})"))),
    }
}
