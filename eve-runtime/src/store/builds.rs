//! Builds kept in the store, so every node of a fleet can run a session pinned to a build it
//! never built itself.
//!
//! A build is content-addressed by its hash (`eve build` computes it from the manifest and the
//! runtime files), so the store keeps one row per hash and writing the same build twice is a
//! no-op. The row holds exactly what `.eve/builds/<hash>/` holds on disk: the manifest, the
//! diagnostics and the pack of runtime files. `eve build --publish` and `eve serve` (at start)
//! write it; a node that lacks a build on disk fetches it from here (`builds/mod.rs`).

/// One build as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBuild {
    /// Content hash (the folder name under `.eve/builds/`).
    pub hash: String,
    /// `manifest.json`, as written by `eve build`.
    pub manifest: String,
    /// `diagnostics.json`.
    pub diagnostics: String,
    /// `files.pack` (empty when the build carries no runtime files).
    pub pack: Vec<u8>,
    /// When it was first published, ms since the epoch.
    pub created_at: i64,
}

/// A stored build without its contents, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// Content hash.
    pub hash: String,
    /// Bytes of manifest, diagnostics and pack together.
    pub(crate) bytes: u64,
    /// When it was first published, ms since the epoch.
    pub created_at: i64,
}

/// Why a build offered to the store is refused: a different build is already stored under its
/// hash (one of them is damaged, since the hash is computed from the contents).
pub(crate) fn conflict(hash: &str) -> super::StoreError {
    super::StoreError::Integrity(format!(
        "the store already holds a different build under the hash {hash}; one of them is \
         damaged: remove `.eve/builds/{hash}` and run `eve build --publish` again"
    ))
}
