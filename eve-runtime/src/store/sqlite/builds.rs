//! Builds and session workspaces in SQLite (see `store/builds.rs` and `store/workspaces.rs`):
//! the `builds`, `workspace_blobs` and `workspace_checkpoints` tables.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{all, one, write};
use crate::store::builds::conflict;
use crate::store::rows::{
    self, BUILD_COLS, BUILD_INFO_COLS, WORKSPACE_COLS, to_i64 as i, to_u64 as u,
};
use crate::store::workspaces::{referenced_blobs, tree_json};
use crate::store::{
    BlobsCollected, BuildInfo, StoreError, StoreResult, StoredBuild, WorkspaceCheckpoint,
    WorkspacePut,
};

/// Inserts a build unless its hash is stored; a different build under the hash is refused.
pub(super) fn put_build(conn: &Connection, build: &StoredBuild) -> StoreResult<bool> {
    let existing: Option<(String, Vec<u8>)> = conn
        .prepare_cached("SELECT manifest, pack FROM builds WHERE hash=?1")?
        .query_row([&build.hash], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((manifest, pack)) = existing {
        if manifest != build.manifest || pack != build.pack {
            return Err(conflict(&build.hash));
        }
        return Ok(false);
    }
    write(
        conn,
        &format!("INSERT INTO builds ({BUILD_COLS}) VALUES (?1,?2,?3,?4,?5,?6)"),
        &rows::build_values(build),
    )?;
    Ok(true)
}

pub(super) fn build(conn: &Connection, hash: &str) -> StoreResult<Option<StoredBuild>> {
    one(
        conn,
        &format!("SELECT {BUILD_COLS} FROM builds WHERE hash=?1"),
        [hash],
        rows::build,
    )
}

pub(super) fn builds(conn: &Connection) -> StoreResult<Vec<BuildInfo>> {
    all(
        conn,
        &format!("SELECT {BUILD_INFO_COLS} FROM builds ORDER BY created_at DESC, hash DESC"),
        [],
        rows::build_info,
    )
}

fn has_blob(conn: &Connection, hash: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM workspace_blobs WHERE hash=?1")?
        .query_row([hash], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Writes the blobs the store lacks and the checkpoint; returns its version.
pub(super) fn put_workspace(conn: &Connection, put: &WorkspacePut, now: i64) -> StoreResult<u64> {
    if let Some(token) = put.fence {
        super::leases::check_fences(
            conn,
            &[crate::store::Fence {
                session_id: put.session_id.clone(),
                token,
            }],
        )?;
    }
    for (hash, data) in &put.blobs {
        conn.prepare_cached(
            "INSERT INTO workspace_blobs (hash, data, size, created_at) VALUES (?1,?2,?3,?4) \
             ON CONFLICT (hash) DO NOTHING",
        )?
        .execute(params![hash, data, i(data.len() as u64), now])?;
    }
    for entry in &put.entries {
        if !put.blobs.iter().any(|(h, _)| *h == entry.hash) && !has_blob(conn, &entry.hash)? {
            return Err(StoreError::NotFound(format!(
                "blob {} of `{}` in the workspace of session {}",
                entry.hash, entry.path, put.session_id
            )));
        }
    }
    let previous: Option<i64> = conn
        .prepare_cached("SELECT version FROM workspace_checkpoints WHERE session_id=?1")?
        .query_row([&put.session_id], |r| r.get(0))
        .optional()?;
    let version = previous.map_or(1, |v| u(v) + 1);
    conn.prepare_cached(
        "INSERT INTO workspace_checkpoints (session_id, version, tree, bytes, updated_at) \
         VALUES (?1,?2,?3,?4,?5) ON CONFLICT (session_id) DO UPDATE SET \
         version=excluded.version, tree=excluded.tree, bytes=excluded.bytes, \
         updated_at=excluded.updated_at",
    )?
    .execute(params![
        put.session_id,
        i(version),
        tree_json(&put.entries, &put.dirs)?,
        i(put.bytes()),
        now
    ])?;
    Ok(version)
}

pub(super) fn workspace(
    conn: &Connection,
    session: &str,
) -> StoreResult<Option<WorkspaceCheckpoint>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {WORKSPACE_COLS} FROM workspace_checkpoints WHERE session_id=?1"
    ))?;
    stmt.query_row([session], |row| Ok(rows::workspace(row, session)))
        .optional()?
        .transpose()
}

pub(super) fn missing_blobs(conn: &Connection, hashes: &[String]) -> StoreResult<Vec<String>> {
    let mut missing = Vec::new();
    for hash in hashes {
        if !has_blob(conn, hash)? && !missing.contains(hash) {
            missing.push(hash.clone());
        }
    }
    Ok(missing)
}

pub(super) fn blob(conn: &Connection, hash: &str) -> StoreResult<Option<Vec<u8>>> {
    Ok(conn
        .prepare_cached("SELECT data FROM workspace_blobs WHERE hash=?1")?
        .query_row([hash], |r| r.get(0))
        .optional()?)
}

/// Deletes the blobs no checkpoint references (inside the writer, so no put runs meanwhile).
pub(super) fn collect_blobs(conn: &Connection) -> StoreResult<BlobsCollected> {
    let trees: Vec<String> = conn
        .prepare("SELECT tree FROM workspace_checkpoints")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let keep = referenced_blobs(trees.iter().map(String::as_str))?;
    let stored: Vec<(String, i64)> = conn
        .prepare("SELECT hash, size FROM workspace_blobs")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut collected = BlobsCollected::default();
    let mut delete = conn.prepare_cached("DELETE FROM workspace_blobs WHERE hash=?1")?;
    for (hash, size) in stored {
        if keep.contains(&hash) {
            continue;
        }
        delete.execute([&hash])?;
        collected.blobs += 1;
        collected.bytes += u(size);
    }
    Ok(collected)
}
