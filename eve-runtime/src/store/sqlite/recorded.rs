//! A release recorded beside a SQLite store that does not exist yet, taken in by its next open.
//!
//! A project's first `eve build` finds no store. Creating one (the schema, its identity and
//! mark, a durable commit, the checkpoint and the removal of the write-ahead log when it closes)
//! costs several times the build itself, for a store nothing reads until the next command. So
//! when the database, its write-ahead log and its mark are all missing, and nothing beside them
//! shows that a store was there, the release's operations are written to `eve.db.release` beside
//! where the database will be ([`SqliteStore::record_release`]): as JSON, written whole to a file
//! of its own and put in place with `link`, which fails when a recorded release is there already
//! (a second build then opens the store, which takes the first in, and records its own the
//! ordinary way, judged against it). It is not synced to disk: nothing depends on it until a
//! command opens the store, and a power loss before the file system commits it leaves the build
//! and `.eve/current` at worst (the build's own folder is not synced either), which the store's
//! first open records as the first release. A file a power loss left empty or cut short is moved
//! aside (`eve.db.release.unreadable`, with a warning) for the same outcome, never refused: the
//! syncs would have cost a clean build more than the rest of its release.
//!
//! Every open of the store takes in a file it finds there ([`take_in`]), in one durable
//! transaction under the write lock, then removes it. A release whose id is stored already is not
//! applied again, so a crash between that commit and the removal, or two processes opening the
//! store at once, records nothing twice. The events are stored with the time the release was
//! recorded. A store created by another process while the file was being put in place would not
//! have seen it: after placing it, the recorder looks for the database again and, if it is there
//! now, opens the store itself (which takes the file in), so a server that created the store
//! meanwhile sees the release as another process's commit. `eve store check` and `eve store
//! migrate`, which read the file without opening the store, create it first
//! ([`SqliteStore::create_if_recorded`]). `rm .eve/eve.db*` removes the file with the store.

use std::io::Write;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::SqliteStore;
use super::integrity::{history_beside, mark_path, sidecar};
use crate::store::{Committed, ReleaseOp, StoreResult};

/// What `eve.db.release` holds.
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    /// The release the operations record (stored already: nothing to apply).
    release: String,
    /// When they were recorded: the time of their events.
    at: i64,
    /// In order, as one batch would apply them.
    ops: Vec<ReleaseOp>,
}

/// The recorded release of the database at `db`.
pub(super) fn recorded_path(db: &Path) -> PathBuf {
    sidecar(db, ".release")
}

/// Whether no store has been at `db` yet: no database, write-ahead log, mark or recorded
/// release, and nothing beside it that a store leaves (workspaces, checkpoint indexes).
fn no_store_yet(db: &Path) -> bool {
    let missing = |p: &Path| matches!(p.symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    missing(db)
        && missing(&sidecar(db, "-wal"))
        && missing(&mark_path(db))
        && missing(&recorded_path(db))
        && history_beside(db).is_empty()
}

impl SqliteStore {
    /// Records the operations of release `release` (at `at`) beside the store at `db` when no
    /// store has been there yet, without creating it: its next open applies them (see the module
    /// header). `false`, with nothing written: a store (or a recorded release) is there, so open
    /// it and commit them the ordinary way.
    pub(crate) fn record_release(
        db: &Path,
        release: &str,
        at: i64,
        ops: Vec<ReleaseOp>,
    ) -> StoreResult<bool> {
        if !no_store_yet(db) {
            return Ok(false);
        }
        let dir = match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir)?;
        let text = serde_json::to_vec(&Recorded {
            release: release.to_owned(),
            at,
            ops,
        })?;
        let tmp = sidecar(
            db,
            &format!(".release.{}.{release}.tmp", std::process::id()),
        );
        let placed = (|| {
            std::fs::File::create(&tmp)?.write_all(&text)?;
            std::fs::hard_link(&tmp, recorded_path(db))
        })();
        let _ = std::fs::remove_file(&tmp);
        match placed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        if db.symlink_metadata().is_ok() {
            // Created meanwhile: take the release in now, as a commit its other users see.
            Self::open(db)?.close_and_wait();
        }
        Ok(true)
    }
}

impl SqliteStore {
    /// Creates the store at `db` (taking its recorded release in) when it does not exist yet
    /// but a release is recorded beside it: what `eve store check` and `eve store migrate`
    /// read is then what the next command sees, not a missing file.
    pub(crate) fn create_if_recorded(db: &Path) -> StoreResult<()> {
        if db.symlink_metadata().is_err() && recorded_path(db).symlink_metadata().is_ok() {
            Self::open(db)?.close_and_wait();
        }
        Ok(())
    }
}

/// Applies the release recorded beside `db`, if any, in one durable transaction, and removes the
/// file. Returns whether it applied one (a release stored already is not applied again).
pub(super) fn take_in(conn: &mut Connection, db: &Path) -> StoreResult<bool> {
    let path = recorded_path(db);
    if path.symlink_metadata().is_err() {
        return Ok(false);
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    let applied = apply_file(conn, &path);
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let applied = applied?;
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    Ok(applied)
}

fn apply_file(conn: &mut Connection, path: &Path) -> StoreResult<bool> {
    // Read under the write lock: another process taking the same file in waits, then finds
    // the release stored.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let recorded: Recorded = match serde_json::from_slice(&text) {
        Ok(recorded) => recorded,
        Err(e) => {
            // Cut short by a power loss (it is not synced): the build `.eve/current` names
            // becomes the first release instead (`baseline`), as if it had never been written.
            let aside = sidecar(path, ".unreadable");
            tracing::warn!(
                file = %path.display(), aside = %aside.display(), error = %e,
                "the release recorded before the store existed cannot be read; moved aside"
            );
            std::fs::rename(path, &aside)?;
            return Ok(false);
        }
    };
    let stored: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM releases WHERE id = ?1)",
        [&recorded.release],
        |r| r.get(0),
    )?;
    if !stored {
        let mut committed = Committed::default();
        for op in recorded.ops {
            super::releases::apply(&tx, op, recorded.at, &mut committed)?;
        }
    }
    tx.commit()?;
    Ok(!stored)
}
