//! Files of a workspace, opened by the kernel beneath a handle of it.
//!
//! The runtime reads and writes workspace files for the agent in its own process (`read_file`,
//! `write_file`, workspace checkpoints and restores, seeding, an eval's scorer files), as root
//! when eve runs as root, while the agent's own processes may be changing the same folder: a path
//! checked and then opened by name can have one of its folders swapped for a symlink to `/` in
//! between. So nothing here checks a path and then opens it. A [`Beneath`] holds an open handle
//! of a folder, and every path is resolved from that handle by the kernel, in one step:
//!
//! - Paths a model gives ([`Beneath::open_read`], [`Beneath::write`], [`Beneath::create_dirs`])
//!   go through `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: a relative symlink that
//!   stays inside is followed; `..` above the handle, an absolute symlink, a symlink leading out
//!   and `/proc` magic links fail (`EXDEV`, `ELOOP`) whatever happens to the folder meanwhile.
//!   Missing folders are made one `mkdirat` at a time, each relative to a handle opened beneath.
//! - Walks ([`Beneath::entries`], [`Beneath::child`], [`Beneath::open_plain`],
//!   [`Beneath::create_plain`]) take one name at a time from a handle they hold, with
//!   `O_NOFOLLOW`: they never follow a symlink at all (checkpoints do not carry symlinks, builds
//!   hold none), and need no `openat2`.
//!
//! `openat2` is Linux 5.6 or later. [`refusal`] probes it once; without it the file tools refuse
//! to run rather than walk a path in a way a tool could race, and `eve serve` says so at start.
//!
//! A hardlink is a file: reading one reads the file it shares. A box cannot make a hardlink to a
//! file outside its workspace (`link` across mounts fails with `EXDEV`, and the workspace is its
//! own mount in the box), so what a hardlink in a workspace reaches is already the workspace's.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::env_vars::EVE_TEST_NO_OPENAT2;

/// How a directory handle is opened: to read its entries, never through a symlink.
const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
/// How a folder on a model's path is opened: a symlink to it is followed, beneath the handle.
const DIR_BENEATH: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);
/// How a file is opened for reading: a FIFO must not block the open, nor a device become eve's
/// terminal.
const READ: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);
/// How a file is opened for writing (`ENXIO` for a FIFO nobody reads, rather than a hang).
const WRITE: OFlags = OFlags::WRONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);
/// How every path a model gives is resolved.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// `openat2` answers `EAGAIN` when a rename elsewhere raced a `..` it resolved; it is asked again
/// this many times.
const RETRIES: usize = 64;

/// Whether `e` is the kernel refusing a path that leaves the handle: `EXDEV` (`..` above it, an
/// absolute symlink, a symlink leading out) or `ELOOP` (a `/proc` magic link, a symlink loop, a
/// symlink where a walk follows none).
pub(crate) fn is_escape(e: &io::Error) -> bool {
    e.raw_os_error()
        .is_some_and(|n| n == Errno::XDEV.raw_os_error() || n == Errno::LOOP.raw_os_error())
}

/// Why the file tools cannot run here (`openat2` missing or refused), or `None` when they can.
///
/// The kernel is probed once per process. `lookup` reads the runtime's environment:
/// `EVE_TEST_NO_OPENAT2=1` acts as a kernel without `openat2` (for tests).
pub(crate) fn refusal(lookup: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if lookup(EVE_TEST_NO_OPENAT2).is_some_and(|v| v.trim() == "1") {
        return Some(format!(
            "the kernel lacks `openat2` (as {EVE_TEST_NO_OPENAT2}=1 asks); eve needs it (Linux \
             5.6 or later) to open workspace paths without following symlinks a tool may plant"
        ));
    }
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE.get_or_init(probe).clone()
}

fn probe() -> Option<String> {
    let root = match rustix::fs::open("/", DIR, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => return Some(format!("cannot open `/` to probe `openat2`: {e}")),
    };
    match rustix::fs::openat2(&root, ".", DIR_BENEATH, Mode::empty(), RESOLVE) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "the kernel refuses `openat2` ({e}); eve needs it (Linux 5.6 or later) to open \
             workspace paths without following symlinks a tool may plant"
        )),
    }
}

/// What a name found in a folder is, not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link (never followed by a walk).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// The metadata of one entry, as `lstat` gives it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    /// What it is.
    pub(crate) kind: Kind,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Modification time, in nanoseconds since the epoch.
    pub(crate) mtime_ns: i128,
    /// Status change time, in nanoseconds since the epoch.
    pub(crate) ctime_ns: i128,
    /// Inode number.
    pub(crate) inode: u64,
    /// Permission bits (with set-id and sticky bits).
    pub(crate) mode: u32,
}

impl Meta {
    fn of(st: &rustix::fs::Stat) -> Self {
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        };
        #[allow(clippy::unnecessary_cast)] // the field types differ between architectures
        Self {
            kind,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
            ctime_ns: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
            inode: st.st_ino as u64,
            mode: st.st_mode & 0o7777,
        }
    }
}

/// An open handle of a folder; everything under it is reached through it (see the module).
#[derive(Debug)]
pub struct Beneath {
    fd: OwnedFd,
    path: PathBuf,
    /// Owner of the folder, given to what [`Beneath::write`] and [`Beneath::create_dirs`] create
    /// when eve runs as root (for a handle made by [`Beneath::open`]).
    owner: Option<(u32, u32)>,
}

impl Beneath {
    /// Opens the folder at `path` (not through a symlink: a runtime path, never a model's).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(path, DIR, Mode::empty())?;
        let owner = if nix::unistd::geteuid().is_root() {
            rustix::fs::fstat(&fd)
                .ok()
                .filter(|st| st.st_uid != 0)
                .map(|st| (st.st_uid, st.st_gid))
        } else {
            None
        };
        Ok(Self {
            fd,
            path: path.to_path_buf(),
            owner,
        })
    }

    /// Creates the folder at `path` with its parents when missing, then opens it.
    pub fn create(path: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(path)?;
        Self::open(path)
    }

    /// Resolves `rel` beneath the handle in one `openat2`.
    fn beneath(&self, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        for _ in 0..RETRIES {
            match rustix::fs::openat2(&self.fd, rel, flags | OFlags::CLOEXEC, mode, RESOLVE) {
                Err(Errno::AGAIN) => continue,
                other => return other.map_err(io::Error::from),
            }
        }
        Err(Errno::AGAIN.into())
    }

    /// Hands what a write just created to the folder's owner (eve as root writing into a folder
    /// the sandbox user owns), so the agent's own processes can change it.
    fn give(&self, fd: impl AsFd) {
        if let Some((uid, gid)) = self.owner {
            let _ = rustix::fs::fchown(
                fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            );
        }
    }

    /// Opens the file at `rel` (relative, lexically inside) for reading, resolved beneath the
    /// handle. It may be any kind of file: check with `metadata()` on what is returned.
    pub(crate) fn open_read(&self, rel: &Path) -> io::Result<File> {
        self.beneath(rel, READ, Mode::empty()).map(File::from)
    }

    /// Creates the folder `rel` and its missing parents beneath the handle (`mkdir -p`); returns
    /// a handle of it.
    pub(crate) fn create_dirs(&self, rel: &Path) -> io::Result<OwnedFd> {
        let mut held: Option<OwnedFd> = None;
        let mut prefix = PathBuf::new();
        for part in names(rel)? {
            prefix.push(part);
            let next = match self.beneath(&prefix, DIR_BENEATH, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let parent = held.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
                    let made = match rustix::fs::mkdirat(parent, part, Mode::from_raw_mode(0o777)) {
                        Ok(()) => true,
                        Err(Errno::EXIST) => false,
                        Err(e) => return Err(e.into()),
                    };
                    let fd = self.beneath(&prefix, DIR_BENEATH, Mode::empty())?;
                    if made {
                        self.give(&fd);
                    }
                    fd
                }
                Err(e) => return Err(e),
            };
            held = Some(next);
        }
        match held {
            Some(fd) => Ok(fd),
            None => Ok(self.fd.try_clone()?),
        }
    }

    /// Writes `data` as the whole content of the file at `rel`, creating it and its folders
    /// beneath the handle when missing. A path that is a folder is `IsADirectory`; one that is a
    /// FIFO, socket or device is `InvalidInput`.
    pub fn write(&self, rel: &Path, data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        if let Some(parent) = rel.parent()
            && !parent.as_os_str().is_empty()
        {
            self.create_dirs(parent)?;
        }
        let create = WRITE | OFlags::CREATE | OFlags::EXCL;
        let mut file = match self.beneath(rel, create, Mode::from_raw_mode(0o666)) {
            Ok(fd) => {
                self.give(&fd);
                File::from(fd)
            }
            // It exists (or is a symlink, which `O_EXCL` never follows): opened again, following
            // a symlink that stays beneath.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => File::from(self.beneath(
                rel,
                WRITE | OFlags::CREATE | OFlags::TRUNC,
                Mode::from_raw_mode(0o666),
            )?),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.is_file() {
            return Err(special());
        }
        file.write_all(data)
    }

    /// The entries of this folder (`.` and `..` aside), each with its `lstat` metadata. An entry
    /// removed while it is listed is left out.
    pub(crate) fn entries(&self) -> io::Result<Vec<(OsString, Meta)>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => out.push((OsStr::from_bytes(name.to_bytes()).to_owned(), Meta::of(&st))),
                Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// The folder `name` in this one, not through a symlink (`ELOOP` or `ENOTDIR` otherwise).
    pub(crate) fn child(&self, name: &OsStr) -> io::Result<Beneath> {
        let fd = rustix::fs::openat(&self.fd, one_name(name)?, DIR, Mode::empty())?;
        // Walks create nothing they would hand over: no owner to look up.
        Ok(Self {
            fd,
            path: self.path.join(name),
            owner: None,
        })
    }

    /// Opens the regular file at `parts` (names, one per level) for reading, following no
    /// symlink on the way or at the end. Anything but a regular file is `InvalidInput`.
    pub(crate) fn open_plain<S: AsRef<OsStr>>(&self, parts: &[S]) -> io::Result<File> {
        let (last, dirs) = parts
            .split_last()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an empty path"))?;
        let mut dir: Option<Beneath> = None;
        for part in dirs {
            let next = dir.as_ref().unwrap_or(self).child(part.as_ref())?;
            dir = Some(next);
        }
        let at = dir.as_ref().unwrap_or(self);
        let fd = rustix::fs::openat(
            &at.fd,
            one_name(last.as_ref())?,
            READ | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(special());
        }
        Ok(file)
    }

    /// Creates the folders `parts` (names, one per level) as needed, following no symlink.
    /// Returns the innermost.
    pub(crate) fn mkdirs_plain<S: AsRef<OsStr>>(&self, parts: &[S]) -> io::Result<Option<Beneath>> {
        let mut dir: Option<Beneath> = None;
        for part in parts {
            let name = one_name(part.as_ref())?;
            let at = dir.as_ref().unwrap_or(self);
            match rustix::fs::mkdirat(&at.fd, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            let next = at.child(name)?;
            dir = Some(next);
        }
        Ok(dir)
    }

    /// Creates the new file at `parts` (names, one per level) with permission bits `mode`,
    /// making its folders as needed and following no symlink; an existing name is an error.
    pub(crate) fn create_plain<S: AsRef<OsStr>>(&self, parts: &[S], mode: u32) -> io::Result<File> {
        let (last, dirs) = parts
            .split_last()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an empty path"))?;
        let dir = self.mkdirs_plain(dirs)?;
        let at = dir.as_ref().unwrap_or(self);
        let flags = WRITE | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = rustix::fs::openat(
            &at.fd,
            one_name(last.as_ref())?,
            flags,
            Mode::from_raw_mode(mode),
        )?;
        // The umask may have taken bits away.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    }

    /// Removes the entry `name` of this folder (a file or a symlink itself, never what a symlink
    /// points to).
    pub(crate) fn remove_plain(&self, name: &str) -> io::Result<()> {
        let name = one_name(OsStr::new(name))?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?;
        Ok(())
    }
}

fn special() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "it is a special file (a FIFO, socket or device), not a regular file",
    )
}

/// The names of a relative path (`.` dropped); `..` or a root is an error.
fn names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(part) => Ok(part),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not a plain relative path", rel.display()),
            )),
        })
        .collect()
}

/// `name` when it is one entry's name (not empty, `.`, `..`, nor holding a `/`).
fn one_name(name: &OsStr) -> io::Result<&OsStr> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` is not the name of one entry", name.to_string_lossy()),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn this_kernel_has_openat2() {
        assert_eq!(refusal(&|_| None), None);
        assert!(refusal(&|_| Some("1".to_owned())).is_some());
    }

    #[test]
    fn names_are_single_entries() {
        for bad in ["", ".", "..", "a/b"] {
            assert!(one_name(OsStr::new(bad)).is_err(), "{bad}");
        }
        assert!(one_name(OsStr::new("a.txt")).is_ok());
        assert!(names(Path::new("a/../b")).is_err());
        assert!(names(Path::new("/a")).is_err());
    }

    #[test]
    fn a_walk_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("rel")).unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/f"), "f").unwrap();
        let ws = Beneath::open(dir.path()).unwrap();
        assert!(ws.open_plain(&["link", "secret"]).is_err());
        assert!(ws.open_plain(&["rel", "f"]).is_err());
        assert!(ws.open_plain(&["real", "f"]).is_ok());
        assert!(ws.create_plain(&["link", "new"], 0o644).is_err());
        assert!(!outside.path().join("new").exists());
        // The model's paths follow the relative link that stays inside, not the other.
        assert!(ws.open_read(Path::new("rel/f")).is_ok());
        let e = ws.open_read(Path::new("link/secret")).unwrap_err();
        assert!(is_escape(&e), "{e}");
        let e = ws.write(Path::new("link/new"), b"x").unwrap_err();
        assert!(is_escape(&e), "{e}");
        assert!(!outside.path().join("new").exists());
        ws.write(Path::new("rel/g"), b"g").unwrap();
        assert!(dir.path().join("real/g").exists());
        ws.write(Path::new("a/b/c.txt"), b"abc").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "abc"
        );
        let mut kinds: Vec<_> = ws
            .entries()
            .unwrap()
            .into_iter()
            .map(|(n, m)| (n.to_string_lossy().into_owned(), m.kind))
            .collect();
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            kinds,
            [
                ("a".to_owned(), Kind::Dir),
                ("link".to_owned(), Kind::Symlink),
                ("real".to_owned(), Kind::Dir),
                ("rel".to_owned(), Kind::Symlink)
            ]
        );
    }
}
