//! The file work on a folder (`agent/` or its staged copy): writing checked changes,
//! fingerprinting, and copying `agent/` into the staging folder (what a reviewer reads of the
//! difference is `review`'s).

use std::io::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{FileChange, MAX_COPY_BYTES, check_on_disk};

/// Writes (or deletes) the checked `changes` under `root`, checking each on disk first. Every
/// check runs before anything is written, so a refused change leaves `root` untouched.
pub(crate) fn apply(root: &Path, changes: &[FileChange]) -> Result<(), String> {
    let problems: Vec<String> = changes
        .iter()
        .filter_map(|c| check_on_disk(root, c).err())
        .collect();
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    for change in changes {
        let target = root.join(change.path());
        match change {
            FileChange::Delete { .. } => std::fs::remove_file(&target)
                .map_err(|e| format!("cannot delete `{}`: {e}", change.path()))?,
            FileChange::Write { content, .. } => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        format!("cannot create the folder of `{}`: {e}", change.path())
                    })?;
                }
                let mode = std::fs::metadata(&target).ok().map(|m| m.permissions());
                let tmp = target.with_file_name(format!(
                    ".eve-change-{}",
                    target
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ));
                let written = (|| -> std::io::Result<()> {
                    // A new file, never one that is there (a link planted at the temporary name
                    // would be followed): a stale one from a crash is removed first.
                    let _ = std::fs::remove_file(&tmp);
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&tmp)?;
                    f.write_all(content.as_bytes())?;
                    f.sync_all()?;
                    if let Some(perms) = mode {
                        std::fs::set_permissions(&tmp, perms)?;
                    }
                    std::fs::rename(&tmp, &target)
                })();
                if let Err(e) = written {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(format!("cannot write `{}`: {e}", change.path()));
                }
            }
        }
    }
    Ok(())
}

/// A fingerprint of a folder: every entry's path, kind, execute bit and content (a link's
/// target), dot-entries left out (they are not part of the agent). Two folders with the same
/// fingerprint build alike.
pub(crate) fn fingerprint(root: &Path) -> Result<String, String> {
    let mut h = Sha256::new();
    let mut entries = Vec::new();
    walk(root, "", 0, &mut entries).map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    entries.sort();
    for (rel, kind, mode) in entries {
        h.update(rel.as_bytes());
        h.update([0, kind]);
        let path = root.join(&rel);
        match kind {
            b'l' => {
                let target = std::fs::read_link(&path).map_err(|e| format!("{rel}: {e}"))?;
                h.update(target.to_string_lossy().as_bytes());
            }
            b'f' => {
                h.update([u8::from(mode & 0o111 != 0)]);
                let bytes = std::fs::read(&path).map_err(|e| format!("{rel}: {e}"))?;
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(&bytes);
            }
            _ => {}
        }
        h.update([0xff]);
    }
    Ok(hex::encode(h.finalize()))
}

pub(super) fn walk(
    dir: &Path,
    rel: &str,
    depth: usize,
    out: &mut Vec<(String, u8, u32)>,
) -> std::io::Result<()> {
    if depth > 64 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let meta = std::fs::symlink_metadata(entry.path())?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            out.push((path, b'l', 0));
        } else if kind.is_dir() {
            out.push((path.clone(), b'd', 0));
            walk(&entry.path(), &path, depth + 1, out)?;
        } else if kind.is_file() {
            out.push((path, b'f', mode_of(&meta)));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&meta.permissions())
}

#[cfg(not(unix))]
fn mode_of(_meta: &std::fs::Metadata) -> u32 {
    0o644
}

/// Copies `from` into `to` (created), dot-entries left out, links recreated as links.
pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let mut entries = Vec::new();
    walk(from, "", 0, &mut entries).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    let mut total = 0u64;
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    entries.sort();
    for (rel, kind, _) in entries {
        let (src, dst) = (from.join(&rel), to.join(&rel));
        let done = match kind {
            b'd' => std::fs::create_dir_all(&dst),
            b'l' => std::fs::read_link(&src).and_then(|t| symlink(&t, &dst)),
            _ => std::fs::copy(&src, &dst).map(|n| {
                total = total.saturating_add(n);
            }),
        };
        done.map_err(|e| format!("cannot copy {rel}: {e}"))?;
        if total > MAX_COPY_BYTES {
            return Err(format!(
                "the agent folder holds more than {} MiB; it is too large to stage a copy of",
                MAX_COPY_BYTES / 1024 / 1024
            ));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(_target: &Path, _link: &Path) -> std::io::Result<()> {
    Ok(())
}
