//! Helpers for the caller that builds a [`Policy`]: the read-only defaults found on `PATH`, and
//! handing the writable tree to the sandbox uid.

use std::io;
use std::os::unix::fs::lchown;
use std::path::{Component, Path, PathBuf};

use super::{DEFAULT_UID, Policy};

/// Top-level folders already in every view: `PATH` entries under them need no rule.
const SYSTEM_ROOTS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
];

/// Read-only paths that keep `PATH`'s programs working inside the sandbox.
///
/// A `PATH` entry under `home` stands for its version manager's root: `~/.pyenv/shims` gives
/// `~/.pyenv`, `~/.nvm/versions/node/v22/bin` gives `~/.nvm`, `~/bin` gives `~/bin`. Two
/// exceptions keep secrets out: `~/.local/bin` gives `~/.local/bin` and `~/.local/lib` (where
/// `pip --user` puts the modules its scripts import), not all of `~/.local`; `~/.cargo/bin` gives
/// `~/.cargo/bin` and `~/.rustup` (the toolchains its proxies run), not `~/.cargo` with its
/// registry credentials. `HOME` itself is never given. Entries outside `home` and outside the
/// system folders are given as they are. Only existing folders are returned, without duplicates.
pub fn default_read_only(path_var: &str, home: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut push = |p: PathBuf| {
        if p.is_dir() && !out.contains(&p) {
            out.push(p);
        }
    };
    for entry in path_var.split(':') {
        let entry = Path::new(entry);
        if entry.is_relative() || entry.components().any(|c| c == Component::ParentDir) {
            continue;
        }
        let Ok(rest) = entry.strip_prefix(home) else {
            if !SYSTEM_ROOTS.iter().any(|r| entry.starts_with(r)) && entry != Path::new("/") {
                push(entry.to_path_buf());
            }
            continue;
        };
        let Some(Component::Normal(top)) = rest.components().next() else {
            continue; // HOME itself
        };
        let top_dir = home.join(top);
        match top.to_str() {
            Some(".local") => {
                push(entry.to_path_buf());
                push(top_dir.join("lib"));
            }
            Some(".cargo") => {
                push(entry.to_path_buf());
                push(home.join(".rustup"));
            }
            _ => push(top_dir),
        }
    }
    out
}

/// Makes `path` (recursively, without following symlinks) owned by the sandbox uid when eve runs
/// as root, so an isolated command can write in it; does nothing otherwise.
///
/// Call it on the workspace (and every other `read_write` path) before each isolated call that
/// follows writes made by eve itself: files eve creates are root's, and the command, running as
/// the sandbox uid, could not change them.
pub fn prepare_writable(path: &Path, policy: &Policy) -> io::Result<()> {
    if !nix::unistd::getuid().is_root() {
        return Ok(());
    }
    let id = policy.uid.unwrap_or(DEFAULT_UID);
    chown_tree(path, id)
}

fn chown_tree(path: &Path, id: u32) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    lchown(path, Some(id), Some(id))?;
    // Below the top, every step is taken from a folder handle already open, by one name, never
    // through a symlink: another box of the same session may be swapping a folder of this tree
    // for a symlink to `/` while it is walked, and a path walked by name would then hand files
    // outside the tree to the sandbox uid.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(dir) => chown_below(&dir, id),
        // A file, or a symlink (changed as a link by `lchown`, never followed).
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Hands every entry below the open folder `dir` to `id`, one name at a time.
fn chown_below(dir: &std::os::fd::OwnedFd, id: u32) -> io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Uid};
    use rustix::io::Errno;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let owner = (Some(Uid::from_raw(id)), Some(Gid::from_raw(id)));
        match rustix::fs::chownat(dir, name, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(()) => {}
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        }
        if matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(sub) => chown_below(&sub, id)?,
                // Not a folder (any more): nothing below it.
                Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
