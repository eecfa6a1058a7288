//! Builds travel through the store: a node publishes the builds it has on disk, and one asked to
//! run a session pinned to a build it lacks fetches it.
//!
//! A fleet shares one store but not one disk, so `.eve/builds/<hash>/` of the node that ran
//! `eve build` is not where the others look. [`publish_build`] copies a build folder's three
//! files (manifest, diagnostics, pack) into the store under its hash (`eve build --publish`,
//! and `eve serve` at start for the current build); [`fetch_build`] writes them back into
//! another node's `.eve/builds/<hash>/`, atomically (a folder is renamed into place, so a
//! reader never sees half a build). The pack's files are checked against the manifest's
//! digests when they are unpacked, as for a local build.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{RuntimeError, RuntimeResult};
use crate::store::{Store, StoredBuild, now_ms};

const MANIFEST: &str = "manifest.json";
const DIAGNOSTICS: &str = "diagnostics.json";

/// How long a synchronous fetch of a build (from [`crate::engine::BuildStore::get`]) waits
/// for the store.
const FETCH_DEADLINE: Duration = Duration::from_secs(60);

fn build_error(hash: &str, message: String) -> RuntimeError {
    RuntimeError::Build {
        what: hash.to_owned(),
        message,
    }
}

/// Reads `<state_dir>/builds/<hash>/` into the form the store keeps.
pub(crate) fn read_build_dir(state_dir: &Path, hash: &str) -> RuntimeResult<StoredBuild> {
    let dir = state_dir.join("builds").join(hash);
    let read = |name: &str| -> RuntimeResult<Vec<u8>> {
        let path = dir.join(name);
        std::fs::read(&path)
            .map_err(|e| build_error(hash, format!("cannot read {}: {e}", path.display())))
    };
    let text = |name: &str| -> RuntimeResult<String> {
        String::from_utf8(read(name)?).map_err(|_| {
            build_error(
                hash,
                format!("{} is not UTF-8 text", dir.join(name).display()),
            )
        })
    };
    let manifest = text(MANIFEST)?;
    let diagnostics = if dir.join(DIAGNOSTICS).is_file() {
        text(DIAGNOSTICS)?
    } else {
        "[]".to_owned()
    };
    let pack = if dir.join(eve_compile::pack::PACK).is_file() {
        read(eve_compile::pack::PACK)?
    } else {
        Vec::new()
    };
    Ok(StoredBuild {
        hash: hash.to_owned(),
        manifest,
        diagnostics,
        pack,
        created_at: now_ms(),
    })
}

/// Writes build `hash` of `state_dir` into the store; `true` when the store did not have it.
pub async fn publish_build(store: &dyn Store, state_dir: &Path, hash: &str) -> RuntimeResult<bool> {
    let build = read_build_dir(state_dir, hash)?;
    Ok(store.put_build(build).await?)
}

/// Writes a build read from the store into `<state_dir>/builds/<hash>/` (unless it is there
/// already) and returns the folder.
pub fn write_build_dir(state_dir: &Path, build: &StoredBuild) -> RuntimeResult<PathBuf> {
    let hash = &build.hash;
    let builds = state_dir.join("builds");
    let dir = builds.join(hash);
    if dir.join(MANIFEST).is_file() {
        return Ok(dir);
    }
    let io = |what: &Path, e: std::io::Error| build_error(hash, format!("{}: {e}", what.display()));
    std::fs::create_dir_all(&builds).map_err(|e| io(&builds, e))?;
    let tmp = builds.join(format!(".fetch-{hash}-{}", ulid::Ulid::new()));
    std::fs::create_dir(&tmp).map_err(|e| io(&tmp, e))?;
    let written = (|| -> std::io::Result<()> {
        if !build.pack.is_empty() {
            std::fs::write(tmp.join(eve_compile::pack::PACK), &build.pack)?;
        }
        std::fs::write(tmp.join(DIAGNOSTICS), &build.diagnostics)?;
        std::fs::write(tmp.join(MANIFEST), &build.manifest)?;
        std::fs::rename(&tmp, &dir)
    })();
    match written {
        Ok(()) => Ok(dir),
        // Another process of this node fetched it first: the same contents.
        Err(_) if dir.join(MANIFEST).is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(io(&dir, e))
        }
    }
}

/// Fetches build `hash` from the store into `state_dir`; `Ok(None)` when the store does not
/// hold it either.
pub(crate) async fn fetch_build(
    store: &dyn Store,
    state_dir: &Path,
    hash: &str,
) -> RuntimeResult<Option<PathBuf>> {
    match store.build(hash).await? {
        Some(build) => write_build_dir(state_dir, &build).map(Some),
        None => Ok(None),
    }
}

/// [`fetch_build`] from synchronous code running on (or off) the tokio runtime, which
/// [`crate::engine::BuildStore::get`] is: on a multi-threaded runtime the worker steps aside
/// while the store answers; elsewhere a helper thread waits for it, up to a deadline.
pub(crate) fn fetch_build_blocking(
    store: &Arc<dyn Store>,
    state_dir: &Path,
    hash: &str,
) -> RuntimeResult<Option<PathBuf>> {
    let handle = tokio::runtime::Handle::try_current().ok();
    let store = store.clone();
    let state_dir = state_dir.to_path_buf();
    let hash_owned = hash.to_owned();
    let fetch = async move { fetch_build(store.as_ref(), &state_dir, &hash_owned).await };
    match handle {
        Some(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| h.block_on(fetch))
        }
        Some(h) => {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("eve-build-fetch".to_owned())
                .spawn(move || {
                    let _ = tx.send(h.block_on(fetch));
                })
                .map_err(|e| build_error(hash, format!("cannot start the fetch: {e}")))?;
            rx.recv_timeout(FETCH_DEADLINE).map_err(|_| {
                build_error(
                    hash,
                    format!(
                        "the store did not answer within {} s",
                        FETCH_DEADLINE.as_secs()
                    ),
                )
            })?
        }
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| build_error(hash, format!("cannot start the fetch: {e}")))?
            .block_on(fetch),
    }
}
