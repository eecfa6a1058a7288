//! Session workspaces follow their sessions between nodes: checkpointed into the store after
//! each step that ran tools, restored where the session continues.
//!
//! A workspace (`.eve/sandboxes/<session>/`) is local to the node that drives the session; on
//! a fleet, the next turn may run elsewhere. After a step's tool calls settle,
//! [`Workspaces::checkpoint`] records the workspace in the store: a tree of (path, mode, size,
//! SHA-256) whose contents are content-addressed blobs, so an unchanged file is never sent twice
//! and sessions share identical files. It is cheap when nothing changed: the files' metadata is
//! compared with the node's index of the last checkpoint (`.eve/workspaces/<session>.json`) and
//! nothing is read, hashed or written. Before a step runs tools,
//! [`Workspaces::restore_if_behind`] compares the index's version with the store's, once per
//! lease this node takes, and rebuilds the folder from the store when the local copy is missing
//! or older (into a staging folder renamed into place). Checkpoints carry the session's fencing
//! token, so a node that lost the lease cannot overwrite the new holder's files. Symbolic links
//! are not carried.
//!
//! The agent's processes may change the folder while it is read (a task still running): the
//! walk and the reads (`walk.rs`) take one name at a time from folder handles they hold and never
//! follow a symlink, so a folder swapped for a symlink to `/` mid-walk is skipped, not read. A
//! restore writes only into its own fresh staging folder, the same way ([`Beneath`]), and never
//! restores set-id or sticky bits.
//!
//! A checkpoint sends only the blobs the store lacks when it looks; if the store collects one
//! of the others before the checkpoint commits (`eve sessions prune`), the put is refused and
//! the checkpoint is taken again from scratch, reading every file. When sessions are deleted,
//! [`Workspaces::remove_local`] (`Runtime::remove_local_workspaces`) removes their folders and
//! index files on this node.
//!
//! What this node knows (the indexes read or written, the lease under which each session was
//! last compared with the store) is held by the runtime's [`Workspaces`], created with it.
//!
//! A file's contents become a blob with every secret redacted (`checkpoint_blobs.rs`); its
//! hash is the blob's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::walk::{Found, gone, read_plain, scan};
use crate::engine::{RuntimeError, RuntimeResult};
use crate::redact::Secrets;
use crate::store::{Store, StoreError, WorkspaceEntry, WorkspacePut};
use crate::tools::{Beneath, EnvLookup};

/// The default of [`crate::env_vars::EVE_WORKSPACE_MAX_BYTES`]: 256 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// What this node knows of a file as of the last checkpoint or restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Known {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    inode: u64,
    mode: u32,
    hash: String,
    /// Modified so shortly before it was looked at that a later write in the same clock tick
    /// could leave the same metadata: its contents are read again next time.
    #[serde(default)]
    racy: bool,
}

/// How recent a modification makes a file's metadata untrustworthy (file system timestamps
/// are coarser than the time between two writes).
const RACY_NS: i128 = 1_000_000_000;

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// This node's index of a session's workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Index {
    /// The store's version this folder matches (0: never checkpointed or restored).
    version: u64,
    files: BTreeMap<String, Known>,
    dirs: Vec<String>,
    /// The hashes are of the contents as stored, secrets redacted (`checkpoint_blobs.rs`). An
    /// index written before that is not trusted: every file is read again, so no checkpoint
    /// keeps a blob that holds a secret in clear.
    #[serde(default)]
    redacted: bool,
}

/// Indexes kept in memory at most (beyond, the cache starts again from the files).
const INDEXES_KEPT: usize = 4096;

fn other(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Other(format!("{what}: {e}"))
}

/// The session workspaces of one runtime: where they are, the store they are checkpointed
/// into, and what this node knows of them. Created with the runtime; two runtimes never share
/// one, so neither decides by what the other read, wrote or compared.
pub(crate) struct Workspaces {
    state_dir: PathBuf,
    store: Arc<dyn Store>,
    env: EnvLookup,
    secrets: Arc<Secrets>,
    /// Tests only: checkpoints store files unredacted (see
    /// `Runtime::set_checkpoint_secrets_in_clear_for_tests`).
    pub(super) in_clear: std::sync::atomic::AtomicBool,
    /// Indexes read or written by this runtime, by index file.
    indexes: Mutex<HashMap<PathBuf, Index>>,
    /// The fencing token under which each session's workspace was last compared with the store.
    checked: Mutex<HashMap<String, u64>>,
}

impl Workspaces {
    /// The workspaces under `state_dir` (`sandboxes/`, with their indexes in `workspaces/`),
    /// checkpointed into `store` with `secrets` redacted; settings read through `env`.
    pub(crate) fn new(
        state_dir: PathBuf,
        store: Arc<dyn Store>,
        env: EnvLookup,
        secrets: Arc<Secrets>,
    ) -> Self {
        Self {
            state_dir,
            store,
            env,
            secrets,
            in_clear: std::sync::atomic::AtomicBool::new(false),
            indexes: Mutex::new(HashMap::new()),
            checked: Mutex::new(HashMap::new()),
        }
    }

    /// Removes this node's copies of the workspaces of `sessions` (deleted from the store): the
    /// folder `.eve/sandboxes/<session>/` and the index `.eve/workspaces/<session>.json`.
    /// Returns what could not be removed, with why.
    pub(crate) fn remove_local(&self, sessions: &[String]) -> Vec<(PathBuf, std::io::Error)> {
        let mut failed = Vec::new();
        for session in sessions.iter().filter(|s| safe_id(s)) {
            let dir = self.workspace_dir(session);
            if dir.is_dir()
                && let Err(e) = std::fs::remove_dir_all(&dir)
            {
                failed.push((dir, e));
            }
            let index = self.index_path(session);
            self.indexes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&index);
            match std::fs::remove_file(&index) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => failed.push((index, e)),
                _ => {}
            }
        }
        failed
    }

    fn index_path(&self, session: &str) -> PathBuf {
        self.state_dir
            .join("workspaces")
            .join(format!("{session}.json"))
    }

    fn workspace_dir(&self, session: &str) -> PathBuf {
        self.state_dir.join("sandboxes").join(session)
    }

    fn load_index(&self, path: &Path) -> Index {
        let mut cache = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = cache.get(path) {
            return index.clone();
        }
        let index: Index = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        cache.insert(path.to_path_buf(), index.clone());
        index
    }

    fn save_index(&self, path: &Path, index: Index) -> RuntimeResult<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| other(&parent.display().to_string(), e))?;
        }
        let tmp = path.with_extension(format!("json.{}", ulid::Ulid::new()));
        let text = serde_json::to_vec(&index)?;
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                other(&path.display().to_string(), e)
            })?;
        let mut cache = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= INDEXES_KEPT {
            cache.clear();
        }
        cache.insert(path.to_path_buf(), index);
        Ok(())
    }

    /// Whether `EVE_WORKSPACE_CHECKPOINTS=off` turned checkpoints off.
    fn disabled(&self) -> bool {
        (self.env)(crate::env_vars::EVE_WORKSPACE_CHECKPOINTS)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("off"))
    }

    fn max_bytes(&self) -> u64 {
        (self.env)(crate::env_vars::EVE_WORKSPACE_MAX_BYTES)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MAX_BYTES)
    }
}

fn safe_id(session: &str) -> bool {
    !session.is_empty()
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.'))
        && !session.starts_with('.')
}

impl Found {
    fn same_as(&self, known: &Known) -> bool {
        !known.racy
            && self.size == known.size
            && self.mtime_ns == known.mtime_ns
            && self.ctime_ns == known.ctime_ns
            && self.inode == known.inode
            && self.mode == known.mode
    }
}

fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

impl Workspaces {
    /// Checkpoints the workspace of `session` into the store when it changed since the last
    /// checkpoint, under `fence` (the session's fencing token, when this node holds its lease).
    /// `Ok(Err(message))` when it is larger than the cap: nothing is stored, and the message
    /// names the size, the cap and the setting that raises it.
    pub(crate) async fn checkpoint(
        &self,
        session: &str,
        fence: Option<u64>,
    ) -> RuntimeResult<Result<(), String>> {
        match self.checkpoint_once(session, fence, false).await {
            // A blob the store held when looked at was collected before the put: again, sending
            // every file.
            Err(RuntimeError::Store(StoreError::NotFound(why))) => {
                tracing::debug!(session, %why, "a workspace blob was collected; checkpointing again");
                self.checkpoint_once(session, fence, true).await
            }
            other => other,
        }
    }

    async fn checkpoint_once(
        &self,
        session: &str,
        fence: Option<u64>,
        from_scratch: bool,
    ) -> RuntimeResult<Result<(), String>> {
        let dir = self.workspace_dir(session);
        if !safe_id(session) || self.disabled() || !dir.is_dir() {
            return Ok(Ok(()));
        }
        let index_file = self.index_path(session);
        let index = match self.load_index(&index_file) {
            known if known.redacted && !from_scratch => known,
            known => Index {
                version: known.version,
                ..Index::default()
            },
        };
        let cap = self.max_bytes();
        let secrets = super::checkpoint_blobs::redactor(
            self.in_clear.load(std::sync::atomic::Ordering::Relaxed),
            &self.secrets,
        );
        let scanned = {
            let dir = dir.clone();
            let index = index.clone();
            tokio::task::spawn_blocking(move || prepare(&dir, &index, cap, secrets.as_deref()))
                .await
                .map_err(|e| other("the workspace checkpoint stopped", e))??
        };
        let prepared = match scanned {
            Prepared::Unchanged => return Ok(Ok(())),
            Prepared::Refreshed(next) => {
                self.save_index(&index_file, next)?;
                return Ok(Ok(()));
            }
            Prepared::TooLarge(bytes) => {
                return Ok(Err(format!(
                    "the workspace of session {session} ({}) is larger than the {} a step may \
                 checkpoint into the store ({}={cap}); delete files the session no longer \
                 needs from {}, or raise {}",
                    size(bytes),
                    size(cap),
                    crate::env_vars::EVE_WORKSPACE_MAX_BYTES,
                    dir.display(),
                    crate::env_vars::EVE_WORKSPACE_MAX_BYTES,
                )));
            }
            Prepared::Changed(p) => p,
        };
        let Changed {
            mut next,
            entries,
            dirs,
            mut read,
        } = prepared;
        let fresh: Vec<String> = read.keys().cloned().collect();
        let missing: HashSet<String> = self
            .store
            .missing_blobs(&fresh)
            .await?
            .into_iter()
            .collect();
        read.retain(|hash, _| missing.contains(hash));
        let put = WorkspacePut {
            session_id: session.to_owned(),
            entries,
            dirs,
            blobs: read.into_iter().collect(),
            fence,
        };
        next.version = self.store.put_workspace(put).await?;
        self.save_index(&index_file, next)?;
        Ok(Ok(()))
    }
}

struct Changed {
    next: Index,
    entries: Vec<WorkspaceEntry>,
    dirs: Vec<String>,
    /// Contents read this time (changed files), by hash.
    read: BTreeMap<String, Vec<u8>>,
}

enum Prepared {
    Unchanged,
    /// Same contents as the last checkpoint; only the index's metadata is new.
    Refreshed(Index),
    TooLarge(u64),
    Changed(Changed),
}

fn prepare(
    dir: &Path,
    index: &Index,
    cap: u64,
    secrets: Option<&crate::redact::Secrets>,
) -> RuntimeResult<Prepared> {
    let ws = Beneath::open(dir).map_err(|e| other(&dir.display().to_string(), e))?;
    let (found, dirs) = scan(&ws).map_err(|e| other(&dir.display().to_string(), e))?;
    // Never checkpointed and still empty: an empty folder is what a session without a checkpoint
    // restores to, so there is nothing to store (most sessions' tools write no file).
    if index.version == 0 && found.is_empty() && dirs.is_empty() {
        return Ok(Prepared::Unchanged);
    }
    let unchanged = index.version > 0
        && found.len() == index.files.len()
        && dirs == index.dirs
        && found
            .iter()
            .all(|f| index.files.get(&f.rel).is_some_and(|k| f.same_as(k)));
    if unchanged {
        return Ok(Prepared::Unchanged);
    }
    let bytes: u64 = found.iter().map(|f| f.size).sum();
    if bytes > cap {
        return Ok(Prepared::TooLarge(bytes));
    }
    let scanned_ns = now_ns();
    let mut next = Index {
        version: index.version,
        files: BTreeMap::new(),
        dirs: dirs.clone(),
        redacted: true,
    };
    let mut entries = Vec::with_capacity(found.len());
    let mut read = BTreeMap::new();
    for f in found {
        let hash = match index.files.get(&f.rel).filter(|k| f.same_as(k)) {
            Some(known) => known.hash.clone(),
            None => {
                let data = match read_plain(&ws, &f.parts) {
                    Ok(data) => data,
                    // Removed or replaced since the walk saw it: not in this checkpoint.
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(other(&dir.join(&f.rel).display().to_string(), e)),
                };
                let data = super::checkpoint_blobs::blob(secrets, data);
                let hash = hex::encode(Sha256::digest(&data));
                if index.files.get(&f.rel).is_none_or(|k| k.hash != hash) {
                    read.insert(hash.clone(), data);
                }
                hash
            }
        };
        entries.push(WorkspaceEntry {
            path: f.rel.clone(),
            hash: hash.clone(),
            size: f.size,
            mode: f.mode,
        });
        next.files.insert(
            f.rel,
            Known {
                size: f.size,
                mtime_ns: f.mtime_ns,
                ctime_ns: f.ctime_ns,
                inode: f.inode,
                mode: f.mode,
                hash,
                racy: scanned_ns - f.mtime_ns < RACY_NS,
            },
        );
    }
    let same = index.version > 0
        && next.dirs == index.dirs
        && next.files.len() == index.files.len()
        && next.files.iter().all(|(rel, k)| {
            index
                .files
                .get(rel)
                .is_some_and(|old| old.hash == k.hash && old.mode == k.mode)
        });
    if same {
        return Ok(Prepared::Refreshed(next));
    }
    Ok(Prepared::Changed(Changed {
        next,
        entries,
        dirs,
        read,
    }))
}

impl Workspaces {
    /// Rebuilds the workspace of `session` from the store when the store's checkpoint is newer
    /// than the local copy (or the local copy is missing). Compared once per lease this node
    /// holds (`fence`, the session's fencing token); returns whether it restored.
    pub(crate) async fn restore_if_behind(
        &self,
        session: &str,
        fence: Option<u64>,
    ) -> RuntimeResult<bool> {
        if !safe_id(session) || self.disabled() {
            return Ok(false);
        }
        let token = fence.unwrap_or(0);
        if self
            .checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session)
            == Some(&token)
        {
            return Ok(false);
        }
        let restored = self.restore(session).await?;
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        if checked.len() >= INDEXES_KEPT {
            checked.clear();
        }
        checked.insert(session.to_owned(), token);
        Ok(restored)
    }

    async fn restore(&self, session: &str) -> RuntimeResult<bool> {
        let Some(checkpoint) = self.store.workspace(session).await? else {
            return Ok(false);
        };
        let dir = self.workspace_dir(session);
        let index_file = self.index_path(session);
        let index = self.load_index(&index_file);
        if dir.is_dir() && index.version >= checkpoint.version {
            return Ok(false);
        }
        let mut blobs: HashMap<String, Vec<u8>> = HashMap::new();
        for entry in &checkpoint.entries {
            if blobs.contains_key(&entry.hash) {
                continue;
            }
            let data = self.store.blob(&entry.hash).await?.ok_or_else(|| {
                RuntimeError::Other(format!(
                    "the store's checkpoint of the workspace of session {session} names blob {} \
                     (for `{}`), which the store does not hold",
                    entry.hash, entry.path
                ))
            })?;
            blobs.insert(entry.hash.clone(), data);
        }
        let dir_owned = dir.clone();
        let next =
            tokio::task::spawn_blocking(move || materialize(&dir_owned, &checkpoint, &blobs))
                .await
                .map_err(|e| other("the workspace restore stopped", e))??;
        self.save_index(&index_file, next)?;
        tracing::info!(session, "restored the session workspace from the store");
        Ok(true)
    }
}

/// Writes the checkpoint into a staging folder beside `dir`, then renames it into place.
fn materialize(
    dir: &Path,
    checkpoint: &crate::store::WorkspaceCheckpoint,
    blobs: &HashMap<String, Vec<u8>>,
) -> RuntimeResult<Index> {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let parent = dir.parent().unwrap_or_else(|| Path::new("."));
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::create_dir_all(parent).map_err(|e| other(&parent.display().to_string(), e))?;
    let staging = parent.join(format!(".{name}.restoring-{}", ulid::Ulid::new()));
    let fail = |e: std::io::Error, what: &Path| {
        let _ = std::fs::remove_dir_all(&staging);
        other(&format!("cannot restore {}", what.display()), e)
    };
    std::fs::create_dir(&staging).map_err(|e| fail(e, &staging))?;
    // Everything below is written beneath this handle, one name at a time, never through a
    // symlink.
    let into = Beneath::open(&staging).map_err(|e| fail(e, &staging))?;
    let mut next = Index {
        version: checkpoint.version,
        files: BTreeMap::new(),
        dirs: checkpoint.dirs.clone(),
        redacted: true,
    };
    for rel in &checkpoint.dirs {
        let Some(parts) = inside(rel) else {
            continue;
        };
        into.mkdirs_plain(&parts)
            .map_err(|e| fail(e, &staging.join(rel)))?;
    }
    for entry in &checkpoint.entries {
        let Some(parts) = inside(&entry.path) else {
            continue;
        };
        let path = staging.join(&entry.path);
        let data = blobs.get(&entry.hash).map_or(&[][..], Vec::as_slice);
        // Never a set-id or sticky bit: the restored file is eve's until a box takes it.
        let written = into
            .create_plain(&parts, entry.mode & 0o777)
            .and_then(|mut file| {
                file.write_all(data)?;
                file.metadata()
            });
        let meta = match written {
            Ok(meta) => meta,
            // The same path twice: the first stays.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(e, &path)),
        };
        next.files.insert(
            entry.path.clone(),
            Known {
                size: meta.len(),
                mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
                ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
                inode: meta.ino(),
                mode: meta.mode() & 0o7777,
                hash: entry.hash.clone(),
                racy: true,
            },
        );
    }
    let old = parent.join(format!(".{name}.replaced-{}", ulid::Ulid::new()));
    let had = dir.exists();
    if had {
        std::fs::rename(dir, &old).map_err(|e| fail(e, dir))?;
    }
    if let Err(e) = std::fs::rename(&staging, dir) {
        if had {
            let _ = std::fs::rename(&old, dir);
        }
        return Err(fail(e, dir));
    }
    if had {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(next)
}

/// The names of `rel` (`/`, `.` and empty parts dropped), or `None` when it would leave its
/// root (`..`) or names nothing.
fn inside(rel: &str) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_from_the_store_stay_inside_the_workspace() {
        assert_eq!(inside("a/b.txt"), Some(vec!["a", "b.txt"]));
        assert_eq!(inside("/etc/passwd"), Some(vec!["etc", "passwd"]));
        assert_eq!(inside("a/../../x"), None);
        assert_eq!(inside(""), None);
    }

    #[test]
    fn a_scan_sees_files_and_empty_folders_and_skips_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deep")).unwrap();
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        std::fs::write(dir.path().join("sub/deep/f.txt"), "x").unwrap();
        std::fs::write(dir.path().join("top.txt"), "yz").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let (files, empty) = scan(&Beneath::open(dir.path()).unwrap()).unwrap();
        let names: Vec<_> = files.iter().map(|f| (f.rel.as_str(), f.size)).collect();
        assert_eq!(names, vec![("sub/deep/f.txt", 1), ("top.txt", 2)]);
        assert_eq!(empty, vec!["empty".to_owned()]);
        assert!(matches!(
            prepare(dir.path(), &Index::default(), 2, None).unwrap(),
            Prepared::TooLarge(3)
        ));
    }

    #[test]
    fn an_empty_workspace_never_checkpointed_stores_nothing_and_one_with_a_folder_does() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            matches!(
                prepare(dir.path(), &Index::default(), 100, None).unwrap(),
                Prepared::Unchanged
            ),
            "nothing in it and nothing stored: no checkpoint"
        );
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let Prepared::Changed(first) = prepare(dir.path(), &Index::default(), 100, None).unwrap()
        else {
            panic!("an empty folder is kept: a checkpoint");
        };
        assert_eq!(first.dirs, vec!["out".to_owned()]);
        // Emptied after a checkpoint: the empty state is stored (the files are gone there too).
        std::fs::remove_dir(dir.path().join("out")).unwrap();
        let mut index = first.next;
        index.version = 1;
        assert!(matches!(
            prepare(dir.path(), &index, 100, None).unwrap(),
            Prepared::Changed(_)
        ));
    }

    fn age(path: &Path) {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }

    #[test]
    fn only_what_changed_is_read_and_a_just_written_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&b, "two").unwrap();
        age(&a);
        let Prepared::Changed(first) = prepare(dir.path(), &Index::default(), 100, None).unwrap()
        else {
            panic!("a first scan is a change");
        };
        assert_eq!(first.read.len(), 2);
        let mut index = first.next;
        index.version = 1;
        assert!(!index.files["a.txt"].racy);
        assert!(index.files["b.txt"].racy, "b.txt was written a moment ago");
        // b.txt is read again (its metadata cannot be trusted yet) and found the same.
        let Prepared::Refreshed(index) = prepare(dir.path(), &index, 100, None).unwrap() else {
            panic!("same contents: only the index is refreshed");
        };
        std::fs::write(&b, "2wo").unwrap();
        let Prepared::Changed(second) = prepare(dir.path(), &index, 100, None).unwrap() else {
            panic!("a same-size rewrite in the same clock tick is still seen");
        };
        assert_eq!(
            second.read.len(),
            1,
            "only the changed file's contents are sent"
        );
        age(&b);
        let mut index = second.next;
        let Prepared::Refreshed(refreshed) = prepare(dir.path(), &index, 100, None).unwrap() else {
            panic!("aged, b.txt is read once more and found the same");
        };
        index = refreshed;
        assert!(
            matches!(
                prepare(dir.path(), &index, 100, None).unwrap(),
                Prepared::Unchanged
            ),
            "nothing changed: nothing is read"
        );
    }
}
