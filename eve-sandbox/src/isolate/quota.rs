//! The workspace quota, enforced while the call runs; what exceeds it does not stay.
//!
//! A size checked after the call lets a command fill the host's disk first (and leave it full).
//! So stage 1, outside the box's PID namespace and out of the command's reach, watches the
//! quota's folder during the call: it sums the folder's size (every file, folder and link, each
//! the larger of its length and the blocks it holds, so neither sparse nor preallocated files
//! hide) on a short interval that grows with what one look costs (25 ms, or ten times a look,
//! at most 1 s: the watch takes at most about a tenth of a core), and the moment
//! the sum passes the quota it kills the box's init, which ends every process of the call; one
//! more look once the call has ended catches writes made after the last one. A single file
//! cannot outrun the watch: the init caps each file at the quota (`RLIMIT_FSIZE`).
//!
//! Then it undoes what the call added. The first look, started as the box starts, notes every
//! entry not changed since that moment (by inode, with each file's length); changes made before
//! the call always read as earlier, the kernel's change time being something no process can
//! set. After the kill, every file noted then is cut back to its length then, and every entry
//! not noted then is removed (files and links the call created; folders, once empty). What the
//! call overwrote inside a file's old length stays overwritten: the quota bounds size, it is not
//! a checkpoint. The command's stderr gets one `eve sandbox: …` line saying so, and the call
//! exits [`super::SANDBOX_FAILURE`]. Anything else that wrote to the folder while the call ran
//! (a parallel call of the same session) is undone alike.
//!
//! The folder is opened once, before the box's init exists, and every look and every change
//! resolves beneath that handle without following a symbolic link (`openat` with `O_NOFOLLOW`),
//! so neither the box's change of root nor what a process plants can make the watch read or
//! change anything outside it. A tree deeper than [`MAX_DEPTH`] folders counts as over the quota.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{
    AtFlags, Dir, FileType, Mode, OFlags, fstat, ftruncate, openat, statat, unlinkat,
};
use serde::{Deserialize, Serialize};

/// Deepest folder nesting the watch descends into; deeper counts as over the quota.
pub const MAX_DEPTH: usize = 1024;
/// Shortest pause between two looks.
const MIN_INTERVAL: Duration = Duration::from_millis(25);
/// Longest pause between two looks.
const MAX_INTERVAL: Duration = Duration::from_secs(1);
/// Entries one slice of a look reads before it yields.
const SLICE: usize = 256;

/// A folder whose size a call may not grow past `max_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// The folder (one of the policy's writable paths, usually the session workspace).
    pub path: std::path::PathBuf,
    /// Largest size, in bytes, of everything in it.
    pub max_bytes: u64,
    /// What the user can change to raise it (named in the message of a call that passed it).
    #[serde(default)]
    pub setting: Option<String>,
}

/// The watch of one call. Stage 1 has unshared its PID namespace, where the kernel refuses new
/// threads, so the watch is a future on stage 1's one-thread event loop: each look walks in
/// slices, yielding between them, so the egress relays keep moving.
pub(crate) struct Watch {
    quota: Quota,
    root: OwnedFd,
    init: Option<nix::unistd::Pid>,
    start: (i64, u64),
    baseline: Baseline,
    /// The size found past the quota; 0 while under it.
    over: u64,
}

/// What the first look found unchanged since the box started: regular files by inode, with
/// their length; everything else by inode.
#[derive(Debug, Default)]
struct Baseline {
    files: HashMap<u64, u64>,
    others: HashSet<u64>,
}

impl Watch {
    /// Opens the quota's folder and takes the time: call it before the box's init exists.
    pub(crate) fn new(quota: &Quota) -> Result<Watch, String> {
        let path = CString::new(quota.path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("the quota's folder {} holds a NUL", quota.path.display()))?;
        let root = open_dir(rustix::fs::CWD, &path);
        Watch::watching(quota, root)
    }

    /// A watch of `quota`'s folder, resolved beneath `host_root` (a handle on the host's `/`, kept
    /// by a process whose own root has since moved) as if that were `/`.
    pub(crate) fn new_beneath(quota: &Quota, host_root: &OwnedFd) -> Result<Watch, String> {
        let relative = quota
            .path
            .strip_prefix("/")
            .unwrap_or(&quota.path)
            .as_os_str()
            .as_encoded_bytes();
        let path = CString::new(if relative.is_empty() { b"." } else { relative })
            .map_err(|_| format!("the quota's folder {} holds a NUL", quota.path.display()))?;
        let root = rustix::fs::openat2(
            host_root,
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            rustix::fs::ResolveFlags::IN_ROOT | rustix::fs::ResolveFlags::NO_MAGICLINKS,
        );
        let root = match root {
            Ok(fd) => Some(fd),
            // A kernel without `openat2`: relative to the handle, an absolute link then fails.
            Err(rustix::io::Errno::NOSYS) => open_dir(host_root, &path),
            Err(_) => None,
        };
        Watch::watching(quota, root)
    }

    fn watching(quota: &Quota, root: Option<OwnedFd>) -> Result<Watch, String> {
        let root = root.ok_or_else(|| {
            format!(
                "cannot open the quota's folder {}: it must be an existing folder, not a link",
                quota.path.display()
            )
        })?;
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        Ok(Watch {
            quota: quota.clone(),
            root,
            init: None,
            start: (t.tv_sec, t.tv_nsec as u64),
            baseline: Baseline::default(),
            over: 0,
        })
    }

    /// The process to kill when the quota is passed: the box's init.
    pub(crate) fn set_init(&mut self, init: nix::unistd::Pid) {
        self.init = Some(init);
    }

    /// Looks until the folder passes the quota, then kills the init and returns; while it stays
    /// under, never returns (run it beside the wait for the init).
    pub(crate) async fn run(&mut self) {
        let mut first = true;
        loop {
            let began = Instant::now();
            let mut walk = Walk::new(&self.root, self.quota.max_bytes, first);
            while !walk.step(self.start, SLICE, &mut self.baseline) {
                tokio::task::yield_now().await;
            }
            first = false;
            if walk.total > self.quota.max_bytes {
                self.over = walk.total;
                if let Some(init) = self.init {
                    let _ = nix::sys::signal::kill(init, nix::sys::signal::Signal::SIGKILL);
                }
                return;
            }
            // A look costs at most about a tenth of a core, however large the folder.
            let pause = (began.elapsed() * 10).clamp(MIN_INTERVAL, MAX_INTERVAL);
            tokio::time::sleep(pause).await;
        }
    }

    /// Once the init has exited: when the quota was passed (during the call, or by its last
    /// writes, which one more look sees), undoes what the call added and returns the line to
    /// report.
    pub(crate) fn finish(mut self) -> Option<String> {
        if self.over == 0 {
            let last = measure(&self.root, self.quota.max_bytes);
            if last <= self.quota.max_bytes {
                return None;
            }
            self.over = last;
        }
        undo(&self.root, &self.baseline);
        let left = measure(&self.root, u64::MAX);
        let raise = self
            .quota
            .setting
            .as_deref()
            .map(|s| format!(", or raise {s}"))
            .unwrap_or_default();
        Some(format!(
            "the call was stopped: {} grew to {} bytes, past its quota of {} bytes; what the call \
             added was removed (files it created deleted, files it grew cut back to their length \
             before the call), leaving {left} bytes. Delete files the session no longer needs{raise}",
            self.quota.path.display(),
            self.over,
            self.quota.max_bytes,
        ))
    }
}

#[allow(clippy::unnecessary_cast)]
fn changed_since(st: &rustix::fs::Stat, start: (i64, u64)) -> bool {
    (st.st_ctime as i64, st.st_ctime_nsec as u64) >= start
}

/// What an entry costs: the larger of its length and the blocks it holds.
#[allow(clippy::unnecessary_cast)]
fn cost(st: &rustix::fs::Stat) -> u64 {
    let blocks = u64::try_from(st.st_blocks as i64).unwrap_or(0);
    length(st).max(blocks.saturating_mul(512))
}

#[allow(clippy::unnecessary_cast)]
fn length(st: &rustix::fs::Stat) -> u64 {
    u64::try_from(st.st_size as i64).unwrap_or(0)
}

/// A handle on this process's `/`, for [`Watch::new_beneath`] once the root has moved.
pub(crate) fn open_root() -> rustix::io::Result<OwnedFd> {
    openat(
        rustix::fs::CWD,
        c"/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn open_dir(parent: impl AsFd, name: &std::ffi::CStr) -> Option<OwnedFd> {
    try_open_dir(parent, name).ok()
}

fn try_open_dir(parent: impl AsFd, name: &std::ffi::CStr) -> rustix::io::Result<OwnedFd> {
    openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// One look at a folder's size, in slices: beneath its handle, never following a link; stops
/// early once past `max` (unless it notes the baseline, which needs every entry). A folder is
/// opened only when its turn comes (its parent's handle kept meanwhile), so the handles open at
/// once are bounded by the depth, not by how many folders there are; a folder that cannot be
/// opened for want of descriptors counts as over the quota rather than as empty.
struct Walk {
    /// Folders still to read: their parent's handle, their name, their depth.
    stack: Vec<(Arc<OwnedFd>, CString, usize)>,
    current: Option<(Dir, Arc<OwnedFd>, usize)>,
    total: u64,
    max: u64,
    note: bool,
}

impl Walk {
    fn new(root: &OwnedFd, max: u64, note: bool) -> Walk {
        let root = open_dir(root, c".").map(Arc::new);
        Walk {
            stack: root.into_iter().map(|r| (r, c".".to_owned(), 0)).collect(),
            current: None,
            total: 0,
            max,
            note,
        }
    }

    /// Reads up to `budget` entries; `true` when the look is complete.
    #[allow(clippy::unnecessary_cast)]
    fn step(&mut self, start: (i64, u64), budget: usize, baseline: &mut Baseline) -> bool {
        let mut left = budget;
        loop {
            if !self.note && self.total > self.max {
                return true;
            }
            if self.current.is_none() {
                let Some((parent, name, depth)) = self.stack.pop() else {
                    return true;
                };
                if depth > MAX_DEPTH {
                    self.total = u64::MAX;
                    return true;
                }
                let fd = match try_open_dir(&*parent, &name) {
                    Ok(fd) => Arc::new(fd),
                    Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) => {
                        self.total = u64::MAX;
                        return true;
                    }
                    Err(_) => continue,
                };
                match Dir::read_from(&*fd).ok() {
                    Some(dir) => self.current = Some((dir, fd, depth)),
                    None => continue,
                }
            }
            let Some((dir, fd, depth)) = self.current.as_mut() else {
                continue;
            };
            let Some(Ok(entry)) = dir.read() else {
                self.current = None;
                continue;
            };
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let Ok(st) = statat(&**fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            self.total = self.total.saturating_add(cost(&st));
            let kind = FileType::from_raw_mode(st.st_mode);
            if self.note && !changed_since(&st, start) {
                if kind == FileType::RegularFile {
                    baseline.files.insert(st.st_ino as u64, length(&st));
                } else {
                    baseline.others.insert(st.st_ino as u64);
                }
            }
            if kind == FileType::Directory {
                let depth = *depth + 1;
                self.stack.push((Arc::clone(fd), name.to_owned(), depth));
            }
            left = left.saturating_sub(1);
            if left == 0 {
                return false;
            }
        }
    }
}

/// The folder's size in one go, stopping early once past `max`.
fn measure(root: &OwnedFd, max: u64) -> u64 {
    let mut walk = Walk::new(root, max, false);
    let mut unused = Baseline::default();
    while !walk.step((0, 0), usize::MAX, &mut unused) {}
    walk.total
}

/// Puts back every entry beneath `root` (see the module's header). A folder created during the
/// call deeper than [`UNDO_DEPTH`] is first moved up to `root` (under a name of its own), so no
/// depth of nesting keeps what it holds on disk, and the handles open at once stay bounded.
fn undo(root: &OwnedFd, baseline: &Baseline) {
    let mut moved: Vec<CString> = Vec::new();
    let mut next = 0u64;
    undo_in(root, root, baseline, 0, &mut moved, &mut next);
    while let Some(name) = moved.pop() {
        if let Some(sub) = open_dir(root, &name) {
            undo_in(root, &sub, baseline, 1, &mut moved, &mut next);
        }
        let _ = unlinkat(root, &name, AtFlags::REMOVEDIR);
    }
}

/// Nesting below which [`undo`] works in place.
const UNDO_DEPTH: usize = 64;

#[allow(clippy::unnecessary_cast)]
fn undo_in(
    root: &OwnedFd,
    dir: &OwnedFd,
    baseline: &Baseline,
    depth: usize,
    moved: &mut Vec<CString>,
    next: &mut u64,
) {
    let mut names: Vec<CString> = Vec::new();
    if let Ok(mut entries) = Dir::read_from(dir) {
        while let Some(Ok(entry)) = entries.read() {
            let name = entry.file_name();
            if name != c"." && name != c".." {
                names.push(name.to_owned());
            }
        }
    }
    for name in names {
        let Ok(st) = statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let ino = st.st_ino as u64;
        let known = baseline.others.contains(&ino);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory if !known && depth >= UNDO_DEPTH => {
                if let Some(up) = move_up(root, dir, &name, next) {
                    moved.push(up);
                }
            }
            FileType::Directory => {
                if let Some(sub) = open_dir(dir, &name) {
                    undo_in(root, &sub, baseline, depth + 1, moved, next);
                }
                if !known {
                    // Fails while it still holds something that was there before: kept then.
                    let _ = unlinkat(dir, &name, AtFlags::REMOVEDIR);
                }
            }
            FileType::RegularFile => match baseline.files.get(&ino) {
                Some(&len) if cost(&st) > len.max(cost_of_length(len)) || length(&st) > len => {
                    cut_back(dir, &name, ino, len)
                }
                Some(_) => {}
                None => {
                    let _ = unlinkat(dir, &name, AtFlags::empty());
                }
            },
            _ if !known => {
                let _ = unlinkat(dir, &name, AtFlags::empty());
            }
            _ => {}
        }
    }
}

/// Moves the folder `name` of `dir` to `root` under a new name; returns that name.
fn move_up(
    root: &OwnedFd,
    dir: &OwnedFd,
    name: &std::ffi::CStr,
    next: &mut u64,
) -> Option<CString> {
    for _ in 0..16 {
        *next += 1;
        let up = CString::new(format!(".eve-quota-undo-{}-{next}", std::process::id())).ok()?;
        if rustix::fs::renameat_with(dir, name, root, &up, rustix::fs::RenameFlags::NOREPLACE)
            .is_ok()
        {
            return Some(up);
        }
    }
    None
}

/// The blocks a file of `len` bytes may hold without having grown (rounded up to 4 KiB).
fn cost_of_length(len: u64) -> u64 {
    len.div_ceil(4096).saturating_mul(4096)
}

/// Truncates the regular file `name` (still inode `ino`) to `len`.
#[allow(clippy::unnecessary_cast)]
fn cut_back(dir: &OwnedFd, name: &std::ffi::CStr, ino: u64, len: u64) {
    let Ok(fd) = openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(st) = fstat(&fd) else { return };
    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && st.st_ino as u64 == ino {
        let _ = ftruncate(&fd, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_removes_new_entries_and_cuts_grown_files_back() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("old.txt"), b"0123456789").unwrap();
        std::fs::create_dir(ws.join("keep")).unwrap();
        std::fs::write(ws.join("keep/old2.txt"), b"abc").unwrap();
        let quota = Quota {
            path: ws.to_path_buf(),
            max_bytes: 1 << 20,
            setting: None,
        };
        let mut watch = Watch::new(&quota).unwrap();
        let mut walk = Walk::new(&watch.root, quota.max_bytes, true);
        while !walk.step(watch.start, 1, &mut watch.baseline) {}
        assert_eq!(watch.baseline.files.len(), 2);
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.join("old.txt"))
            .unwrap();
        f.write_all(&[b'x'; 5000]).unwrap();
        std::fs::create_dir_all(ws.join("new/deep")).unwrap();
        std::fs::write(ws.join("new/deep/junk"), vec![0u8; 3 << 20]).unwrap();
        std::fs::write(ws.join("keep/junk"), b"junk").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", ws.join("link")).unwrap();
        assert!(measure(&watch.root, quota.max_bytes) > quota.max_bytes);
        let line = watch.finish().expect("over the quota");
        assert!(line.contains("past its quota"), "{line}");
        assert_eq!(std::fs::read(ws.join("old.txt")).unwrap(), b"0123456789");
        assert_eq!(std::fs::read(ws.join("keep/old2.txt")).unwrap(), b"abc");
        assert!(!ws.join("new").exists());
        assert!(!ws.join("keep/junk").exists());
        assert!(std::fs::symlink_metadata(ws.join("link")).is_err());
        assert!(std::path::Path::new("/etc/passwd").exists());
    }

    #[test]
    fn a_deep_tree_the_call_made_is_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kept.txt"), b"kept").unwrap();
        let quota = Quota {
            path: dir.path().to_path_buf(),
            max_bytes: 1 << 20,
            setting: None,
        };
        let mut watch = Watch::new(&quota).unwrap();
        let mut walk = Walk::new(&watch.root, quota.max_bytes, true);
        while !walk.step(watch.start, usize::MAX, &mut watch.baseline) {}
        // 300 levels (more than the undo works in place), a large file at the bottom.
        let mut deep = dir.path().to_path_buf();
        for _ in 0..300 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("junk"), vec![0u8; 2 << 20]).unwrap();
        assert!(measure(&watch.root, quota.max_bytes) > quota.max_bytes);
        assert!(watch.finish().is_some());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("kept.txt")]);
    }

    #[test]
    fn a_tree_deeper_than_the_walk_counts_as_over() {
        let dir = tempfile::tempdir().unwrap();
        // Deeper than one path can name: made a level at a time.
        let mut fd = open_dir(
            rustix::fs::CWD,
            &CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap(),
        )
        .unwrap();
        for _ in 0..(MAX_DEPTH + 2) {
            rustix::fs::mkdirat(&fd, c"d", Mode::from_raw_mode(0o755)).unwrap();
            fd = open_dir(&fd, c"d").unwrap();
        }
        let root = open_dir(
            rustix::fs::CWD,
            &CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(measure(&root, 1 << 30), u64::MAX);
    }

    #[test]
    fn a_call_under_the_quota_leaves_everything() {
        let dir = tempfile::tempdir().unwrap();
        let quota = Quota {
            path: dir.path().to_path_buf(),
            max_bytes: 1 << 20,
            setting: None,
        };
        let watch = Watch::new(&quota).unwrap();
        std::fs::write(dir.path().join("new.txt"), b"small").unwrap();
        assert_eq!(watch.finish(), None);
        assert!(dir.path().join("new.txt").exists());
    }
}
