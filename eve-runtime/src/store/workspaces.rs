//! Session workspaces kept in the store, so a session continued on another node finds the
//! files its earlier steps wrote.
//!
//! A workspace is checkpointed as a tree of entries (path, mode, size, content hash) whose
//! contents are blobs keyed by their SHA-256: a file that did not change between steps, or that
//! two sessions share, is stored once. Each session keeps its latest checkpoint only, with a
//! version that grows by one per checkpoint, so a node can tell whether its local copy is older
//! than the store's. Checkpoints are fenced like commits: a node that lost the session's lease
//! cannot overwrite the new holder's workspace.
//!
//! Blobs no checkpoint references (a pruned session's, a file overwritten since) are deleted by
//! [`super::Store::collect_workspace_blobs`] (`eve sessions prune` runs it). A put checks,
//! inside its transaction, that every blob it references is stored, and a collection never runs
//! in the middle of a put (SQLite's single writer; a PostgreSQL advisory lock every put shares
//! and a collection takes alone), so a checkpoint never references a collected blob.

use serde::{Deserialize, Serialize};

/// One file of a checkpointed workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceEntry {
    /// Path relative to the workspace, `/`-separated.
    pub path: String,
    /// SHA-256 of the contents, hex.
    pub hash: String,
    /// Size in bytes.
    pub size: u64,
    /// Unix permission bits.
    pub mode: u32,
}

/// The latest checkpoint of one session's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceCheckpoint {
    /// Session.
    pub(crate) session_id: String,
    /// Grows by one with every checkpoint of the session (the first is 1).
    pub version: u64,
    /// Every file, sorted by path.
    pub entries: Vec<WorkspaceEntry>,
    /// Empty folders, sorted (folders holding files are implied by their paths).
    pub dirs: Vec<String>,
    /// Total size of the files.
    pub bytes: u64,
    /// When it was written, ms since the epoch.
    pub(crate) updated_at: i64,
}

/// A checkpoint to write: the tree, the blobs the store may not have yet, and the fencing token
/// of the writer's lease (when it holds one).
#[derive(Debug, Clone)]
pub struct WorkspacePut {
    /// Session.
    pub session_id: String,
    /// Every file, sorted by path.
    pub entries: Vec<WorkspaceEntry>,
    /// Empty folders.
    pub dirs: Vec<String>,
    /// `(hash, contents)` of files the store may lack; blobs it already has are skipped.
    pub blobs: Vec<(String, Vec<u8>)>,
    /// The writer's fencing token: the put is refused ([`super::StoreError::Fenced`]) when the
    /// session's lease has a newer holder.
    pub fence: Option<u64>,
}

impl WorkspacePut {
    /// Total size of the files.
    pub(crate) fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }
}

/// What a collection of workspace blobs deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobsCollected {
    /// Blobs deleted.
    pub blobs: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// The blob hashes referenced by the checkpoint trees in `trees`.
pub(crate) fn referenced_blobs<'a>(
    trees: impl IntoIterator<Item = &'a str>,
) -> super::StoreResult<std::collections::HashSet<String>> {
    let mut hashes = std::collections::HashSet::new();
    for tree in trees {
        let (entries, _) = tree_from_json(tree)?;
        hashes.extend(entries.into_iter().map(|e| e.hash));
    }
    Ok(hashes)
}

/// Encodes a checkpoint's tree for its row.
pub(crate) fn tree_json(entries: &[WorkspaceEntry], dirs: &[String]) -> super::StoreResult<String> {
    Ok(serde_json::to_string(&serde_json::json!({
        "entries": entries,
        "dirs": dirs,
    }))?)
}

/// Decodes a checkpoint's tree from its row.
pub(crate) fn tree_from_json(text: &str) -> super::StoreResult<(Vec<WorkspaceEntry>, Vec<String>)> {
    #[derive(Deserialize)]
    struct Tree {
        entries: Vec<WorkspaceEntry>,
        #[serde(default)]
        dirs: Vec<String>,
    }
    let tree: Tree = serde_json::from_str(text)?;
    Ok((tree.entries, tree.dirs))
}
