//! A build's runtime files in one file: `files.pack`, unpacked into `files/` on first use.
//!
//! A large agent carries hundreds of scripts and skill files. Writing them one by one made most of
//! a first build's time (the kernel creating inodes, slow and erratic on a busy disk), and most
//! builds are never run: `eve build` in CI, `eve dev` rebuilding on every save. So a build writes
//! one pack, and the runtime unpacks it the first time it needs a file: the scripts of a tool or
//! hook, an MCP server's folder, the workspace seeds. Unpacking is atomic (a staging folder,
//! renamed) and safe to race between processes, and files unchanged since the build unpacked last
//! are hard-linked from it, so a rebuild after one edit writes one file.
//!
//! Format (little-endian): `EVEPACK1`, a `u32` entry count, per entry a `u32` path length, the
//! UTF-8 path (relative, `/`-separated), a `u32` mode and a `u64` size; then every entry's bytes
//! in the same order. Nothing in it is trusted when read back: paths that leave the folder, sizes
//! past the end, or a truncated file are errors. [`unpack_verified`] also checks every file against
//! the SHA-256 the manifest records, before writing and after, and replaces a `files/` whose
//! contents no longer match with a fresh copy.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use crate::manifest::FileDigest;

/// File name of the pack inside a build folder.
pub const PACK: &str = "files.pack";
/// Folder the pack is unpacked into, inside a build folder.
pub const FILES: &str = "files";

const MAGIC: &[u8; 8] = b"EVEPACK1";

/// One file of a pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the agent folder, `/`-separated.
    pub path: String,
    /// Permission bits.
    pub mode: u32,
    /// Contents.
    pub bytes: Vec<u8>,
}

/// Why a pack could not be read or unpacked.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// Reading, writing or renaming failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The pack is not one eve wrote, or it was damaged.
    #[error("{path} is damaged: {why} (run `eve build` again)")]
    Damaged {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// Serialises `entries` (paths, modes, contents) into the pack format.
pub fn encode<'a>(entries: impl IntoIterator<Item = (&'a str, u32, &'a [u8])> + Clone) -> Vec<u8> {
    let mut header = Vec::new();
    let mut total = 0usize;
    let mut count = 0u32;
    for (path, mode, bytes) in entries.clone() {
        header.extend_from_slice(&u32::try_from(path.len()).unwrap_or(u32::MAX).to_le_bytes());
        header.extend_from_slice(path.as_bytes());
        header.extend_from_slice(&mode.to_le_bytes());
        header.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        total += bytes.len();
        count += 1;
    }
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + total);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&header);
    for (_, _, bytes) in entries {
        out.extend_from_slice(bytes);
    }
    out
}

/// Parses a pack; `path` names it in errors.
pub fn decode(data: &[u8], path: &Path) -> Result<Vec<Entry>, PackError> {
    let damaged = |why: &str| PackError::Damaged {
        path: path.to_path_buf(),
        why: why.to_owned(),
    };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], PackError> {
        let end = at
            .checked_add(n)
            .filter(|end| *end <= data.len())
            .ok_or_else(|| damaged("it ends early"))?;
        let slice = &data[at..end];
        at = end;
        Ok(slice)
    };
    if take(MAGIC.len())? != MAGIC {
        return Err(damaged("it does not start with EVEPACK1"));
    }
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
    let count = u32_of(take(4)?);
    let mut heads = Vec::new();
    for _ in 0..count {
        let len = u32_of(take(4)?) as usize;
        let name = std::str::from_utf8(take(len)?)
            .map_err(|_| damaged("a path is not UTF-8"))?
            .to_owned();
        if !safe_relative(&name) {
            return Err(damaged(&format!(
                "the path `{name}` leaves the build folder"
            )));
        }
        let mode = u32_of(take(4)?);
        let size = u64::from_le_bytes(take(8)?.try_into().unwrap_or([0; 8]));
        let size = usize::try_from(size).map_err(|_| damaged("a size is too large"))?;
        heads.push((name, mode, size));
    }
    let mut entries = Vec::with_capacity(heads.len());
    for (name, mode, size) in heads {
        entries.push(Entry {
            path: name,
            mode: mode & 0o7777,
            bytes: take(size)?.to_vec(),
        });
    }
    if at != data.len() {
        return Err(damaged("bytes follow the last file"));
    }
    Ok(entries)
}

/// A relative path of normal components only.
fn safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// The unpacked runtime files of the build in `build_dir`: its `files/` folder, unpacked from
/// `files.pack` first when it is not there yet. Builds without a pack (no runtime files, or
/// written before packs existed) get their `files/` as it is, created empty when missing.
pub fn unpack(build_dir: &Path) -> Result<PathBuf, PackError> {
    let files = build_dir.join(FILES);
    if files.is_dir() {
        return Ok(files);
    }
    // One unpacking at a time in this process; other processes may race, and lose harmlessly.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if files.is_dir() {
        return Ok(files);
    }
    let pack = build_dir.join(PACK);
    let entries = read_entries(&pack)?;
    let staging = build_dir.join(format!(
        ".files-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let donor = donor(build_dir);
    let written =
        write_entries(&staging, &entries, donor.as_deref()).and_then(|()| rename(&staging, &files));
    match written {
        Ok(()) => Ok(files),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            // Another process unpacked it first: theirs is the same.
            if files.is_dir() { Ok(files) } else { Err(e) }
        }
    }
}

/// The unpacked runtime files of the build in `build_dir`, checked against `expected` (the
/// manifest's [`FileDigest`]s): a `files/` whose contents no longer match (a file altered, replaced,
/// removed or made a symlink after the build) is replaced by a fresh copy from the pack, and a pack
/// that does not match is an error, never unpacked. Builds whose manifest records no digests
/// (written before they existed) are unpacked as [`unpack`] does.
pub fn unpack_verified(
    build_dir: &Path,
    expected: &BTreeMap<String, FileDigest>,
) -> Result<PathBuf, PackError> {
    if expected.is_empty() {
        return unpack(build_dir);
    }
    let files = build_dir.join(FILES);
    if files.is_dir() && altered(&files, expected).is_empty() {
        return Ok(files);
    }
    restore(build_dir, expected)
}

/// The paths of `expected` whose file under `files` is missing, is not a regular file (a symlink
/// counts as altered), or differs in contents or permission bits.
pub fn altered(files: &Path, expected: &BTreeMap<String, FileDigest>) -> Vec<String> {
    expected
        .iter()
        .filter(|(rel, want)| !matches_digest(&files.join(rel), want))
        .map(|(rel, _)| rel.clone())
        .collect()
}

/// Whether the file at `path` (not followed if a symlink) has the contents and mode of `want`.
pub fn matches_digest(path: &Path, want: &FileDigest) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    meta.is_file()
        && mode_of(&meta) == want.mode
        && file_sha256(path).is_ok_and(|sha| sha == want.sha256)
}

/// SHA-256 (lowercase hex) of a file's contents, read in chunks.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Unpacks the pack afresh (checking every entry against `expected` before writing it, and every
/// written file after) and puts it in place of `files/`, whatever that holds now. The swap is two
/// renames: a reader in between finds no `files/` and unpacks it itself.
pub fn restore(
    build_dir: &Path,
    expected: &BTreeMap<String, FileDigest>,
) -> Result<PathBuf, PackError> {
    use sha2::Digest;
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let files = build_dir.join(FILES);
    // Another caller may have restored it while this one waited.
    if files.is_dir() && altered(&files, expected).is_empty() {
        return Ok(files);
    }
    let pack = build_dir.join(PACK);
    let entries = read_entries(&pack)?;
    let damaged = |why: String| PackError::Damaged {
        path: pack.clone(),
        why,
    };
    for e in &entries {
        match expected.get(&e.path) {
            Some(want)
                if want.mode == e.mode
                    && hex::encode(sha2::Sha256::digest(&e.bytes)) == want.sha256 => {}
            Some(_) => {
                return Err(damaged(format!(
                    "its copy of `{}` is not the one the manifest records",
                    e.path
                )));
            }
            None => {
                return Err(damaged(format!(
                    "it holds `{}`, which the manifest does not list",
                    e.path
                )));
            }
        }
    }
    if let Some(missing) = expected
        .keys()
        .find(|rel| !entries.iter().any(|e| &e.path == *rel))
    {
        return Err(damaged(format!(
            "`{missing}`, listed in the manifest, is not in it"
        )));
    }
    let stamp = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let staging = build_dir.join(format!(".files-{stamp}"));
    let donor = donor(build_dir);
    let written =
        write_entries(&staging, &entries, donor.as_deref()).and_then(|()| {
            match altered(&staging, expected).first() {
                None => Ok(()),
                Some(rel) => Err(PackError::Damaged {
                    path: staging.join(rel),
                    why: "it changed while being unpacked".to_owned(),
                }),
            }
        });
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    let stale = build_dir.join(format!(".files-stale-{stamp}"));
    let moved_aside = files.exists() && std::fs::rename(&files, &stale).is_ok();
    let placed = rename(&staging, &files);
    if moved_aside {
        let _ = std::fs::remove_dir_all(&stale);
    }
    match placed {
        Ok(()) => Ok(files),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            // Another process put a fresh copy in place first.
            if files.is_dir() && altered(&files, expected).is_empty() {
                Ok(files)
            } else {
                Err(e)
            }
        }
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), PackError> {
    std::fs::rename(from, to).map_err(|source| PackError::Io {
        what: "cannot move into place",
        path: to.to_path_buf(),
        source,
    })
}

/// The most recently unpacked sibling build, to hard-link unchanged files from.
fn donor(build_dir: &Path) -> Option<PathBuf> {
    let builds = build_dir.parent()?;
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(builds).ok()?.flatten() {
        let files = entry.path().join(FILES);
        if entry.path() == build_dir || entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(modified) = std::fs::metadata(&files).and_then(|m| m.modified()) else {
            continue;
        };
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, files));
        }
    }
    best.map(|(_, p)| p)
}

/// Writes `entries` under a fresh `dest`: folders first, then files (hard-linked from `donor`
/// when it holds the same bytes with the same mode), on a few threads.
pub(crate) fn write_entries(
    dest: &Path,
    entries: &[Entry],
    donor: Option<&Path>,
) -> Result<(), PackError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| PackError::Io { what, path, source }
    };
    std::fs::create_dir(dest).map_err(io("cannot create", dest))?;
    let mut dirs = std::collections::BTreeSet::new();
    for e in entries {
        if let Some(parent) = Path::new(&e.path).parent()
            && !parent.as_os_str().is_empty()
        {
            dirs.insert(parent);
        }
    }
    for d in dirs {
        let path = dest.join(d);
        std::fs::create_dir_all(&path).map_err(io("cannot create", &path))?;
    }
    let write_one = |e: &Entry| -> Result<(), PackError> {
        let path = dest.join(&e.path);
        if let Some(old) = donor.map(|p| p.join(&e.path))
            && same_file(&old, e)
            && std::fs::hard_link(&old, &path).is_ok()
        {
            return Ok(());
        }
        let mut out = std::fs::File::create(&path).map_err(io("cannot create", &path))?;
        out.write_all(&e.bytes).map_err(io("cannot write", &path))?;
        set_mode(&out, e.mode).map_err(io("cannot set permissions of", &path))
    };
    let threads = eve_discover::threads_for(entries.len(), 64, 4);
    if threads == 1 {
        return entries.iter().try_for_each(write_one);
    }
    let chunk = entries.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = entries
            .chunks(chunk)
            .map(|part| s.spawn(|| part.iter().try_for_each(write_one)))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

/// Whether `old` (a file another build unpacked) has exactly the bytes and mode of `e`.
fn same_file(old: &Path, e: &Entry) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(old) else {
        return false;
    };
    meta.is_file()
        && meta.len() == e.bytes.len() as u64
        && mode_of(&meta) == e.mode
        && std::fs::read(old).is_ok_and(|bytes| bytes == e.bytes)
}

/// Permission bits of a file.
#[cfg(unix)]
pub fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
pub fn mode_of(_: &std::fs::Metadata) -> u32 {
    0o644
}

#[cfg(unix)]
fn set_mode(file: &std::fs::File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_: &std::fs::File, _: u32) -> std::io::Result<()> {
    Ok(())
}

/// The entries of the pack at `pack`; none when the build has no pack (it carried no files).
fn read_entries(pack: &Path) -> Result<Vec<Entry>, PackError> {
    match std::fs::read(pack) {
        Ok(data) => decode(&data, pack),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(PackError::Io {
            what: "cannot read",
            path: pack.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let entries = [
            ("tools/a.sh", 0o755, b"#!/bin/sh\necho hi\n".as_slice()),
            ("skills/x/ref.md", 0o644, b"".as_slice()),
        ];
        let data = encode(entries.iter().copied());
        let back = decode(&data, Path::new("p")).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].path, "tools/a.sh");
        assert_eq!(back[0].mode, 0o755);
        assert_eq!(back[0].bytes, b"#!/bin/sh\necho hi\n");
        assert_eq!(back[1].bytes, b"");
    }

    #[test]
    fn altered_files_are_restored_and_altered_packs_refused() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        let build = dir.path().join("builds").join("h1");
        std::fs::create_dir_all(&build).unwrap();
        let body = b"#!/bin/sh\necho hi\n".as_slice();
        std::fs::write(build.join(PACK), encode([("tools/a.sh", 0o755, body)])).unwrap();
        let expected: BTreeMap<String, FileDigest> = [(
            "tools/a.sh".to_owned(),
            FileDigest {
                sha256: hex::encode(sha2::Sha256::digest(body)),
                mode: 0o755,
            },
        )]
        .into();
        let files = unpack_verified(&build, &expected).unwrap();
        let script = files.join("tools/a.sh");
        assert_eq!(std::fs::read(&script).unwrap(), body);
        assert!(altered(&files, &expected).is_empty());

        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&script)
            .unwrap();
        f.write_all(b"touch /tmp/owned\n").unwrap();
        drop(f);
        assert_eq!(altered(&files, &expected), ["tools/a.sh"]);
        let files = unpack_verified(&build, &expected).unwrap();
        assert_eq!(std::fs::read(files.join("tools/a.sh")).unwrap(), body);

        // A pack whose copy differs from the manifest is never unpacked.
        std::fs::write(
            build.join(PACK),
            encode([("tools/a.sh", 0o755, b"echo evil\n".as_slice())]),
        )
        .unwrap();
        std::fs::remove_dir_all(&files).unwrap();
        let err = unpack_verified(&build, &expected).unwrap_err().to_string();
        assert!(err.contains("is not the one the manifest records"), "{err}");
        assert!(!build.join(FILES).exists());
    }

    #[test]
    fn damaged_packs_are_errors() {
        let good = encode([("a", 0o644, b"abc".as_slice())]);
        for cut in 0..good.len() {
            assert!(
                decode(&good[..cut], Path::new("p")).is_err(),
                "cut at {cut}"
            );
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(decode(&extra, Path::new("p")).is_err());
        for bad in ["../x", "/etc/passwd", "a/../../b", ""] {
            let data = encode([(bad, 0o644, b"x".as_slice())]);
            assert!(decode(&data, Path::new("p")).is_err(), "{bad}");
        }
        let mut huge = encode([("a", 0o644, b"x".as_slice())]);
        // The size field of the only entry: past the end of the pack.
        let at = 8 + 4 + 4 + 1 + 4;
        huge[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge, Path::new("p")).is_err());
    }
}
