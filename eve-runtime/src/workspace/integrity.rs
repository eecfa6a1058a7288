//! The runtime's check that a build file is the one `eve build` recorded, made before it runs.
//!
//! Builds are immutable, but their unpacked `files/` sit on disk where a tool running under
//! `sandbox: host` (or anything else with the server's uid) can append to a script so that every
//! later call, in every session, runs the altered code. The isolated sandbox mounts the build's
//! files read-only; this check is the second line of defence, and the only one under `host`.
//! Before a script tool, a `run:` tool whose argv names a file of the build, a hook or a
//! dynamic-tool provider runs (the engine runs them all through `Runtime::run_tool`), every
//! build file it will execute ([`executed_files`]) is compared with the manifest's SHA-256
//! ([`check`]). A mismatch comes back by value ([`Altered`]): the engine fails the call with an
//! error the model sees, records a `build.tampered` event in the session, puts a fresh copy of
//! `files/` in place from the pack ([`Altered::restore`]), and never runs the altered file.
//!
//! Hashing on every call would cost a read of every script per call, so a verified file is
//! remembered by its stat stamp: device, inode, size, mode, mtime and **ctime**. The attacker
//! controls contents, size and mtime (`touch -d` sets it back), and can swap the inode by
//! renaming a copy into place, but cannot set ctime: any write, chmod, rename or `utimes` moves it
//! to "now". Timestamps are coarse (a kernel tick), so a write in the same tick as the last change
//! leaves ctime unchanged: like git's "racily clean" index entries, a file whose ctime is within
//! [`RACY`] of the moment it was checked is not remembered, and is hashed again next time.
//!
//! What is remembered (the verified stamps, the manifests read from disk, the builds whose whole
//! `files/` was verified) lives in one [`FileChecks`], which a build store creates with itself:
//! nothing is shared between two runtimes of one process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use eve_compile::{FileDigest, Runner, Tool};
use serde_json::{Value, json};

use crate::tools::ToolContext;

/// A build file was found altered before it ran (`path`, `tool`, `reason`, `buildHash`).
pub(crate) const BUILD_TAMPERED: &str = "build.tampered";

/// How recent a file's ctime may be for its verification not to be remembered.
pub(crate) const RACY: Duration = Duration::from_secs(2);

/// The `build.tampered` event's data.
pub(crate) fn build_tampered(build_hash: &str, tool: &str, path: &str, reason: &str) -> Value {
    json!({"buildHash": build_hash, "tool": tool, "path": path, "reason": reason})
}

/// Why a build file may not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the build file {path} was altered after `eve build` ({reason}): refusing to run it; run `eve build` again"
)]
pub(crate) struct Tampered {
    /// Path relative to the agent folder (as in the manifest).
    pub(crate) path: String,
    /// What is wrong with it, in words.
    pub(crate) reason: &'static str,
}

/// What identifies one state of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mode: meta.mode(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the file changed so recently that a later change could keep the same stamp.
    fn racy(&self, now: SystemTime, margin: Duration) -> bool {
        let (secs, nanos) = self.ctime;
        let Ok(secs) = u64::try_from(secs) else {
            return true;
        };
        let ctime = SystemTime::UNIX_EPOCH
            + Duration::from_secs(secs)
            + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
        now.duration_since(ctime).map_or(true, |age| age < margin)
    }
}

/// Files verified against a digest, remembered by stamp so an unchanged file is not hashed again.
#[derive(Debug)]
pub(crate) struct DigestCache {
    verified: Mutex<HashMap<PathBuf, (Stamp, String)>>,
    racy: Duration,
    hashed: std::sync::atomic::AtomicU64,
}

impl DigestCache {
    /// A cache that does not remember files whose ctime is within `racy` of the check.
    pub(crate) fn new(racy: Duration) -> Self {
        Self {
            verified: Mutex::new(HashMap::new()),
            racy,
            hashed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    #[cfg(test)]
    /// How many times a file was read and hashed (for tests and benchmarks).
    pub(crate) fn hashed(&self) -> u64 {
        self.hashed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Checks the file at `path` (a symlink is never followed: it is an error) against `want`.
    pub(crate) fn check(&self, path: &Path, rel: &str, want: &FileDigest) -> Result<(), Tampered> {
        let tampered = |reason| Tampered {
            path: rel.to_owned(),
            reason,
        };
        let meta = std::fs::symlink_metadata(path)
            .map_err(|_| tampered("it is missing from the build's files"))?;
        if !meta.is_file() {
            return Err(tampered("it is no longer a regular file"));
        }
        if eve_compile::pack::mode_of(&meta) != want.mode {
            return Err(tampered("its permissions are not the manifest's"));
        }
        let stamp = Stamp::of(&meta);
        {
            let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((known, sha)) = verified.get(path)
                && *known == stamp
                && *sha == want.sha256
            {
                return Ok(());
            }
        }
        self.hashed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sha =
            eve_compile::pack::file_sha256(path).map_err(|_| tampered("it cannot be read"))?;
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if sha != want.sha256 {
            verified.remove(path);
            return Err(tampered("its SHA-256 is not the manifest's"));
        }
        // The stamp after hashing must be the one before: a change during the read is not trusted.
        let after = std::fs::symlink_metadata(path).map(|m| Stamp::of(&m));
        if after.as_ref().is_ok_and(|a| *a == stamp) && !stamp.racy(SystemTime::now(), self.racy) {
            verified.insert(path.to_path_buf(), (stamp, sha));
        } else {
            verified.remove(path);
        }
        Ok(())
    }
}

/// A build's file digests, by path relative to the agent folder (as in the manifest).
pub(crate) type Digests = Arc<BTreeMap<String, FileDigest>>;

/// What one build store knows of its builds' files: the files verified against a digest (by
/// stamp), the manifests read from disk, and the builds whose whole `files/` was verified.
/// Created with the build store (so with the runtime): two runtimes never share one.
#[derive(Debug)]
pub(crate) struct FileChecks {
    digests: DigestCache,
    /// The digests of builds read from their `manifest.json`, by build folder.
    read: Mutex<HashMap<PathBuf, Digests>>,
    /// Builds whose `files/` was verified whole (or unpacked from the pack), by build folder.
    verified: Mutex<HashSet<PathBuf>>,
}

impl Default for FileChecks {
    fn default() -> Self {
        Self::new()
    }
}

impl FileChecks {
    /// Nothing known yet; a file whose ctime is within [`RACY`] of its check is not remembered.
    pub(crate) fn new() -> Self {
        Self {
            digests: DigestCache::new(RACY),
            read: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// The digests of the build in `build_dir`, from its `manifest.json` (read once).
    pub(crate) fn digests_on_disk(&self, build_dir: &Path) -> Option<Digests> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = read.get(build_dir) {
            return Some(d.clone());
        }
        let text = std::fs::read_to_string(build_dir.join("manifest.json")).ok()?;
        let manifest: eve_compile::Manifest = serde_json::from_str(&text).ok()?;
        let digests = Arc::new(manifest.files);
        read.insert(build_dir.to_path_buf(), digests.clone());
        Some(digests)
    }

    /// Verifies a build's whole `files/` once (restoring it from the pack when it no longer
    /// matches), then answers from memory while the folder is there.
    pub(crate) fn files_verified(
        &self,
        build_dir: &Path,
        digests: &BTreeMap<String, FileDigest>,
    ) -> Result<PathBuf, eve_compile::pack::PackError> {
        let files = build_dir.join(eve_compile::pack::FILES);
        if self
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(build_dir)
            && files.is_dir()
        {
            return Ok(files);
        }
        let files = eve_compile::pack::unpack_verified(build_dir, digests)?;
        self.verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(build_dir.to_path_buf());
        Ok(files)
    }

    /// Every file of `rels` under `agent_dir` checked against `digests`; a file the manifest
    /// does not list is refused when it exists (nothing of the build put it there).
    fn check_all(
        &self,
        agent_dir: &Path,
        rels: &[String],
        digests: &BTreeMap<String, FileDigest>,
    ) -> Result<(), Tampered> {
        for rel in rels {
            let path = agent_dir.join(rel);
            match digests.get(rel) {
                Some(want) => self.digests.check(&path, rel, want)?,
                None => {
                    if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
                        return Err(Tampered {
                            path: rel.clone(),
                            reason: "it is not a file of the build",
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The build whose `files/` `agent_dir` is: its folder and its hash (the folder's name).
pub(crate) fn build_of(agent_dir: &Path) -> Option<(PathBuf, String)> {
    let build_dir = agent_dir.parent()?.to_path_buf();
    let hash = build_dir.file_name()?.to_string_lossy().into_owned();
    Some((build_dir, hash))
}

/// The build files `tool` will execute, relative to the agent folder: a script's path, and every
/// argument of a `run:` command (or of a script's interpreter) that names a path in `files/`
/// (whole, or after `=` in `--flag=path`). Relative arguments resolve in the workspace, not here.
pub(crate) fn executed_files(tool: &Tool, ctx: &ToolContext) -> Vec<String> {
    let lookup = |name: &str| ctx.lookup(name);
    let mut args: Vec<String> = Vec::new();
    let mut files = Vec::new();
    match &tool.runner {
        Runner::Script { path, interpreter } => {
            files.push(path.clone());
            args.extend(interpreter.iter().cloned());
        }
        Runner::Command { argv } => args.extend(argv.iter().cloned()),
        Runner::Http(_) | Runner::OpenApi(_) => {}
    }
    let roots = [ctx.agent_dir.clone(), absolute(&ctx.agent_dir)];
    for arg in args {
        let Ok(arg) = crate::tools::template::expand_vars(&arg, &lookup) else {
            continue;
        };
        let candidates = std::iter::once(arg.as_str()).chain(arg.split_once('=').map(|(_, v)| v));
        for candidate in candidates {
            let path = Path::new(candidate);
            if let Some(rel) = roots.iter().find_map(|root| path.strip_prefix(root).ok())
                && let Some(rel) = relative_key(rel)
            {
                files.push(rel);
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

/// `a/b/c` for a path of normal components only (`.` skipped); `None` when it climbs with `..`.
fn relative_key(rel: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// A build file a call would have executed, found altered: what the engine reports (the
/// `build.tampered` event, the failed call) and then puts right ([`Altered::restore`]).
#[derive(Debug)]
pub(crate) struct Altered {
    /// The build's hash.
    pub(crate) hash: String,
    /// Which file, and how it differs.
    pub(crate) tampered: Tampered,
    build_dir: PathBuf,
    digests: Digests,
}

impl Altered {
    /// The `build.tampered` event's data for a call of `tool`.
    pub(crate) fn event(&self, tool: &str) -> Value {
        build_tampered(&self.hash, tool, &self.tampered.path, self.tampered.reason)
    }

    /// Puts the build's own files back from its pack, so later calls run what was built.
    pub(crate) async fn restore(self) {
        let Self {
            hash,
            build_dir,
            digests,
            ..
        } = self;
        let restored =
            tokio::task::spawn_blocking(move || eve_compile::pack::restore(&build_dir, &digests))
                .await;
        if let Ok(Err(e)) = restored {
            tracing::warn!(build = %hash, error = %e, "cannot restore the build's files");
        }
    }
}

/// Why a call may not run, found before it runs.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A build file it would execute was altered.
    Altered(Altered),
    /// The check itself could not finish.
    Unchecked(String),
}

/// Checks `rels` (the build files a call of a tool will execute, [`executed_files`]) under
/// `agent_dir`, the `files/` of the build `build_dir` with `hash`, against `digests` (its
/// manifest's), remembering verified files in `checks`. `Ok`: run it.
pub(crate) async fn check(
    checks: Arc<FileChecks>,
    agent_dir: PathBuf,
    (build_dir, hash): (PathBuf, String),
    rels: Vec<String>,
    digests: Digests,
) -> Result<(), Refusal> {
    let checked = {
        let digests = digests.clone();
        tokio::task::spawn_blocking(move || checks.check_all(&agent_dir, &rels, &digests)).await
    };
    match checked {
        Ok(Ok(())) => Ok(()),
        Ok(Err(tampered)) => Err(Refusal::Altered(Altered {
            hash,
            tampered,
            build_dir,
            digests,
        })),
        Err(e) => Err(Refusal::Unchecked(format!(
            "could not check the build's files: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(bytes: &[u8], mode: u32) -> FileDigest {
        use sha2::Digest;
        FileDigest {
            sha256: hex::encode(sha2::Sha256::digest(bytes)),
            mode,
        }
    }

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn set_mtime(path: &Path, mtime: SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }

    #[test]
    fn same_size_and_mtime_other_contents_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tool.sh");
        std::fs::write(&path, b"echo good\n").unwrap();
        set_mode(&path, 0o755);
        let want = digest_of(b"echo good\n", 0o755);
        // No racy margin: a verified file is remembered at once.
        let cache = DigestCache::new(Duration::ZERO);
        cache.check(&path, "tool.sh", &want).unwrap();
        cache.check(&path, "tool.sh", &want).unwrap();
        assert_eq!(cache.hashed(), 1, "an unchanged file is hashed once");

        let before = std::fs::symlink_metadata(&path).unwrap();
        let mtime = before.modified().unwrap();
        // Same size, same inode, mtime set back: only ctime tells. Rewrite until the kernel's
        // clock has ticked past the first write, so ctime differs as it does for any later attack.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            std::fs::write(&path, b"echo evil\n").unwrap();
            set_mtime(&path, mtime);
            let now = std::fs::symlink_metadata(&path).unwrap();
            if Stamp::of(&now).ctime != Stamp::of(&before).ctime {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "ctime never moved");
            std::thread::yield_now();
        }
        let after = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(after.len(), before.len());
        assert_eq!(after.modified().unwrap(), mtime);
        {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(after.ino(), before.ino());
        }
        let err = cache.check(&path, "tool.sh", &want).unwrap_err();
        assert_eq!(err.reason, "its SHA-256 is not the manifest's");
        assert!(
            err.to_string().contains(
                "the build file tool.sh was altered after `eve build` (its SHA-256 is not the manifest's): refusing to run it; run `eve build` again"
            ),
            "{err}"
        );
        assert_eq!(cache.hashed(), 2);
        // And it stays caught.
        assert!(cache.check(&path, "tool.sh", &want).is_err());
    }

    #[test]
    fn recently_changed_files_are_hashed_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.py");
        std::fs::write(&path, b"print(1)\n").unwrap();
        set_mode(&path, 0o644);
        let want = digest_of(b"print(1)\n", 0o644);
        let cache = DigestCache::new(Duration::from_secs(3600));
        cache.check(&path, "a.py", &want).unwrap();
        cache.check(&path, "a.py", &want).unwrap();
        assert_eq!(cache.hashed(), 2, "a racily fresh file is not remembered");
    }

    #[test]
    fn symlinks_modes_and_missing_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.sh");
        std::fs::write(&real, b"x").unwrap();
        set_mode(&real, 0o644);
        let want = digest_of(b"x", 0o644);
        let link = dir.path().join("link.sh");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let cache = DigestCache::new(Duration::ZERO);
        assert_eq!(
            cache.check(&link, "link.sh", &want).unwrap_err().reason,
            "it is no longer a regular file"
        );
        assert!(
            cache
                .check(&dir.path().join("gone"), "gone", &want)
                .is_err()
        );
        cache.check(&real, "real.sh", &want).unwrap();
        set_mode(&real, 0o755);
        assert_eq!(
            cache.check(&real, "real.sh", &want).unwrap_err().reason,
            "its permissions are not the manifest's"
        );
    }

    #[test]
    fn relative_keys() {
        assert_eq!(
            relative_key(Path::new("_bin/x.sh")).as_deref(),
            Some("_bin/x.sh")
        );
        assert_eq!(relative_key(Path::new("./a/./b")).as_deref(), Some("a/b"));
        assert_eq!(relative_key(Path::new("a/../b")), None);
        assert_eq!(relative_key(Path::new("")), None);
    }
}
