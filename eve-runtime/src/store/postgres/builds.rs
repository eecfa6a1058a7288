//! Builds and session workspaces in PostgreSQL (see `store/builds.rs` and
//! `store/workspaces.rs`): the `builds`, `workspace_blobs` and `workspace_checkpoints` tables.
//!
//! A build insert races safely between nodes (`ON CONFLICT DO NOTHING`, then a comparison with
//! what won). A workspace checkpoint locks its session's checkpoint row while it computes the
//! next version, and checks the writer's fencing token in the same transaction. Every put holds
//! the schema's workspace advisory lock shared, and a collection of unreferenced blobs holds it
//! alone: a collection never deletes a blob between a put's check that it is stored and the
//! put's commit.

use deadpool_postgres::GenericClient;

use super::sql::{all, bind, opt};
use crate::store::builds::conflict;
use crate::store::rows::{
    self, BUILD_COLS, BUILD_INFO_COLS, WORKSPACE_COLS, to_i64 as i, to_u64 as u,
};
use crate::store::workspaces::{referenced_blobs, tree_json};
use crate::store::{
    BlobsCollected, BuildInfo, Fence, StoreError, StoreResult, StoredBuild, WorkspaceCheckpoint,
    WorkspacePut,
};

/// The key of the workspace advisory lock of the store's schema.
const BLOBS_LOCK: &str = "hashtext('eve-workspace-blobs:' || current_schema())";

pub(super) async fn put_build<C: GenericClient>(c: &C, build: &StoredBuild) -> StoreResult<bool> {
    let stmt = c
        .prepare_cached(&format!(
            "INSERT INTO builds ({BUILD_COLS}) VALUES ($1,$2,$3,$4,$5,$6) \
             ON CONFLICT (hash) DO NOTHING"
        ))
        .await?;
    let inserted = c.execute(&stmt, &bind(&rows::build_values(build))).await?;
    if inserted == 1 {
        return Ok(true);
    }
    let stmt = c
        .prepare_cached("SELECT manifest, pack FROM builds WHERE hash=$1")
        .await?;
    let row = c.query_one(&stmt, &[&build.hash]).await?;
    let manifest: String = row.try_get(0)?;
    let pack: Vec<u8> = row.try_get(1)?;
    if manifest != build.manifest || pack != build.pack {
        return Err(conflict(&build.hash));
    }
    Ok(false)
}

pub(super) async fn build<C: GenericClient>(c: &C, hash: &str) -> StoreResult<Option<StoredBuild>> {
    let stmt = c
        .prepare_cached(&format!("SELECT {BUILD_COLS} FROM builds WHERE hash=$1"))
        .await?;
    opt(c.query_opt(&stmt, &[&hash]).await?, rows::build)
}

pub(super) async fn builds<C: GenericClient>(c: &C) -> StoreResult<Vec<BuildInfo>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {BUILD_INFO_COLS} FROM builds ORDER BY created_at DESC, hash DESC"
        ))
        .await?;
    all(&c.query(&stmt, &[]).await?, rows::build_info)
}

pub(super) async fn put_workspace<C: GenericClient>(
    c: &C,
    put: &WorkspacePut,
    now: i64,
) -> StoreResult<u64> {
    c.execute(
        &format!("SELECT pg_advisory_xact_lock_shared({BLOBS_LOCK})"),
        &[],
    )
    .await?;
    if let Some(token) = put.fence {
        super::sql::check_fences(
            c,
            &[Fence {
                session_id: put.session_id.clone(),
                token,
            }],
        )
        .await?;
    }
    let insert = c
        .prepare_cached(
            "INSERT INTO workspace_blobs (hash, data, size, created_at) VALUES ($1,$2,$3,$4) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .await?;
    for (hash, data) in &put.blobs {
        c.execute(&insert, &[hash, data, &i(data.len() as u64), &now])
            .await?;
    }
    let wanted: Vec<String> = put
        .entries
        .iter()
        .filter(|e| !put.blobs.iter().any(|(h, _)| *h == e.hash))
        .map(|e| e.hash.clone())
        .collect();
    let absent = missing_blobs(c, &wanted).await?;
    if let Some(hash) = absent.first()
        && let Some(entry) = put.entries.iter().find(|e| e.hash == *hash)
    {
        return Err(StoreError::NotFound(format!(
            "blob {} of `{}` in the workspace of session {}",
            entry.hash, entry.path, put.session_id
        )));
    }
    let stmt = c
        .prepare_cached(
            "INSERT INTO workspace_checkpoints (session_id, version, tree, bytes, updated_at) \
             VALUES ($1, 1, $2, $3, $4) ON CONFLICT (session_id) DO UPDATE SET \
             version = workspace_checkpoints.version + 1, tree = excluded.tree, \
             bytes = excluded.bytes, updated_at = excluded.updated_at RETURNING version",
        )
        .await?;
    let row = c
        .query_one(
            &stmt,
            &[
                &put.session_id,
                &tree_json(&put.entries, &put.dirs)?,
                &i(put.bytes()),
                &now,
            ],
        )
        .await?;
    Ok(u(row.try_get(0)?))
}

pub(super) async fn workspace<C: GenericClient>(
    c: &C,
    session: &str,
) -> StoreResult<Option<WorkspaceCheckpoint>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {WORKSPACE_COLS} FROM workspace_checkpoints WHERE session_id=$1"
        ))
        .await?;
    c.query_opt(&stmt, &[&session])
        .await?
        .map(|row| rows::workspace(&row, session))
        .transpose()
}

pub(super) async fn missing_blobs<C: GenericClient>(
    c: &C,
    hashes: &[String],
) -> StoreResult<Vec<String>> {
    if hashes.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = c
        .prepare_cached(
            "SELECT h FROM unnest($1::text[]) AS h \
             WHERE NOT EXISTS (SELECT 1 FROM workspace_blobs b WHERE b.hash = h)",
        )
        .await?;
    let mut missing: Vec<String> = Vec::new();
    for row in c.query(&stmt, &[&hashes]).await? {
        let hash: String = row.try_get(0)?;
        if !missing.contains(&hash) {
            missing.push(hash);
        }
    }
    Ok(missing)
}

pub(super) async fn blob<C: GenericClient>(c: &C, hash: &str) -> StoreResult<Option<Vec<u8>>> {
    let stmt = c
        .prepare_cached("SELECT data FROM workspace_blobs WHERE hash=$1")
        .await?;
    Ok(c.query_opt(&stmt, &[&hash])
        .await?
        .map(|r| r.try_get(0))
        .transpose()?)
}

/// Deletes the blobs no checkpoint references, inside the caller's transaction, holding the
/// workspace lock alone (puts in progress finish first; new ones wait).
pub(super) async fn collect_blobs<C: GenericClient>(c: &C) -> StoreResult<BlobsCollected> {
    c.execute(&format!("SELECT pg_advisory_xact_lock({BLOBS_LOCK})"), &[])
        .await?;
    let trees = c
        .query("SELECT tree FROM workspace_checkpoints", &[])
        .await?;
    let trees: Vec<String> = trees
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let keep: Vec<String> = referenced_blobs(trees.iter().map(String::as_str))?
        .into_iter()
        .collect();
    let row = c
        .query_one(
            "WITH gone AS (DELETE FROM workspace_blobs WHERE hash <> ALL($1) RETURNING size) \
             SELECT count(*), COALESCE(sum(size), 0)::BIGINT FROM gone",
            &[&keep],
        )
        .await?;
    Ok(BlobsCollected {
        blobs: u(row.try_get(0)?),
        bytes: u(row.try_get(1)?),
    })
}
