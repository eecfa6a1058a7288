//! The workspace quota, enforced while the call runs; what exceeds it does not stay.
//!
//! A size checked after the call lets a command fill the host's disk first (and leave it full).
//! So stage 1, outside the box's PID namespace and out of the command's reach, watches the
//! quota's folder during the call: it sums the folder's size (every file, folder and link, each
//! the larger of its length and the blocks it holds, so neither sparse nor preallocated files
//! hide) on a short interval that grows with what one look costs (from 25 ms), and the moment
//! the sum passes the quota it kills the box's init, which ends every process of the call. A
//! single file cannot outrun the watch: the init caps each file at the quota (`RLIMIT_FSIZE`).
//!
//! Then it undoes what the call added. As the call starts, the watch notes every file not
//! changed since the call began (its inode and size; the kernel's change time, which no process
//! can set, tells). After the kill, every entry changed during the call is put back: a file
//! noted at the start is cut back to its size then; anything else changed during the call (files
//! and links it created, or changed before the first look reached them) is removed, and so is
//! every folder created during the call once empty. What the call overwrote inside a file's old
//! size stays overwritten: the quota bounds size, it is not a checkpoint. The command's stderr
//! gets one `eve sandbox: …` line saying so, and the call exits [`super::SANDBOX_FAILURE`].
//!
//! Every step resolves beneath a handle of the quota's folder without following a symbolic link
//! (`openat` with `O_NOFOLLOW`), so what another process running at the same time plants cannot
//! make the watch read or change anything outside it. A tree deeper than [`MAX_DEPTH`] folders
//! counts as over the quota.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
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
    init: nix::unistd::Pid,
    start: (i64, u64),
    baseline: Baseline,
    /// The size found past the quota; 0 while under it.
    over: u64,
}

/// What the first look found unchanged since the call began: regular files by inode, with their
/// length and cost; folders by inode.
#[derive(Debug, Default)]
struct Baseline {
    files: HashMap<u64, (u64, u64)>,
    dirs: HashSet<u64>,
}

/// Entries one slice of a look reads before it yields.
const SLICE: usize = 256;

impl Watch {
    /// A watch of `quota` for the call whose init is `init`, from now on.
    pub(crate) fn new(quota: &Quota, init: nix::unistd::Pid) -> Watch {
        Watch {
            quota: quota.clone(),
            init,
            start: now(),
            baseline: Baseline::default(),
            over: 0,
        }
    }

    /// Looks until the folder passes the quota, then kills the init and returns; while it stays
    /// under, never returns (run it beside the wait for the init).
    pub(crate) async fn run(&mut self) {
        let mut first = true;
        loop {
            let began = Instant::now();
            let mut walk = Walk::new(&self.quota.path, self.quota.max_bytes, first);
            while !walk.step(self.start, SLICE, &mut self.baseline) {
                tokio::task::yield_now().await;
            }
            first = false;
            if walk.total > self.quota.max_bytes {
                self.over = walk.total;
                let _ = nix::sys::signal::kill(self.init, nix::sys::signal::Signal::SIGKILL);
                return;
            }
            let pause = (began.elapsed() * 4).clamp(MIN_INTERVAL, MAX_INTERVAL);
            tokio::time::sleep(pause).await;
        }
    }

    /// Once the init has exited: when the quota was passed, undoes what the call added and
    /// returns the line to report.
    pub(crate) fn finish(self) -> Option<String> {
        if self.over == 0 {
            return None;
        }
        let left = undo(&self.quota, self.start, &self.baseline);
        let raise = self
            .quota
            .setting
            .as_deref()
            .map(|s| format!(", or raise {s}"))
            .unwrap_or_default();
        Some(format!(
            "the call was stopped: {} grew to {} bytes, past its quota of {} bytes; what the call \
             added was removed (files it created deleted, files it grew cut back to their size \
             before the call), leaving {left} bytes. Delete files the session no longer needs{raise}",
            self.quota.path.display(),
            self.over,
            self.quota.max_bytes,
        ))
    }
}

/// One look at a folder's size, in slices: beneath a handle of the folder, never following a
/// link; stops early once past `max` (unless it notes the baseline, which needs every entry).
struct Walk {
    stack: Vec<(OwnedFd, usize)>,
    current: Option<(Dir, OwnedFd, usize)>,
    total: u64,
    max: u64,
    note: bool,
}

impl Walk {
    fn new(path: &std::path::Path, max: u64, note: bool) -> Walk {
        let root = CString::new(path.as_os_str().as_encoded_bytes())
            .ok()
            .and_then(|p| open_dir(rustix::fs::CWD, &p));
        Walk {
            stack: root.into_iter().map(|r| (r, 0)).collect(),
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
                let Some((fd, depth)) = self.stack.pop() else {
                    return true;
                };
                if depth > MAX_DEPTH {
                    self.total = u64::MAX;
                    return true;
                }
                match Dir::read_from(&fd).ok() {
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
            let Ok(st) = statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            self.total = self.total.saturating_add(cost(&st));
            let kind = FileType::from_raw_mode(st.st_mode);
            if self.note && !changed_since(&st, start) {
                match kind {
                    FileType::RegularFile => {
                        baseline
                            .files
                            .insert(st.st_ino as u64, (length(&st), cost(&st)));
                    }
                    FileType::Directory => {
                        baseline.dirs.insert(st.st_ino as u64);
                    }
                    _ => {}
                }
            }
            if kind == FileType::Directory
                && let Some(sub) = open_dir(&*fd, name)
            {
                let depth = *depth + 1;
                self.stack.push((sub, depth));
            }
            left = left.saturating_sub(1);
            if left == 0 {
                return false;
            }
        }
    }
}

/// The folder's size in one go (no baseline).
fn measure(quota: &Quota) -> u64 {
    let mut walk = Walk::new(&quota.path, quota.max_bytes, false);
    let mut unused = Baseline::default();
    while !walk.step((0, 0), usize::MAX, &mut unused) {}
    walk.total
}

/// The coarse real-time clock, as file times are stamped: a change after this reads as later.
fn now() -> (i64, u64) {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (t.tv_sec, t.tv_nsec as u64)
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

fn open_dir(parent: impl AsFd, name: &std::ffi::CStr) -> Option<OwnedFd> {
    openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// Puts back every entry changed since `start` (see the module's header); returns the folder's
/// size afterwards.
fn undo(quota: &Quota, start: (i64, u64), baseline: &Baseline) -> u64 {
    let Ok(path) = CString::new(quota.path.as_os_str().as_encoded_bytes()) else {
        return 0;
    };
    if let Some(root) = open_dir(rustix::fs::CWD, &path) {
        undo_in(&root, start, baseline, 0);
    }
    let everything = Quota {
        max_bytes: u64::MAX,
        ..quota.clone()
    };
    measure(&everything)
}

#[allow(clippy::unnecessary_cast)]
fn undo_in(dir: &OwnedFd, start: (i64, u64), baseline: &Baseline, depth: usize) {
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
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                if depth >= MAX_DEPTH {
                    let _ = unlinkat(dir, &name, AtFlags::REMOVEDIR);
                    continue;
                }
                if let Some(sub) = open_dir(dir, &name) {
                    undo_in(&sub, start, baseline, depth + 1);
                }
                if !baseline.dirs.contains(&ino) && changed_since(&st, start) {
                    // Fails while it still holds something that was there before: kept then.
                    let _ = unlinkat(dir, &name, AtFlags::REMOVEDIR);
                }
            }
            FileType::RegularFile if changed_since(&st, start) => match baseline.files.get(&ino) {
                Some(&(len, before)) if length(&st) > len || cost(&st) > before => {
                    cut_back(dir, &name, ino, len)
                }
                Some(_) => {}
                None => {
                    let _ = unlinkat(dir, &name, AtFlags::empty());
                }
            },
            _ if changed_since(&st, start) && !baseline.files.contains_key(&ino) => {
                let _ = unlinkat(dir, &name, AtFlags::empty());
            }
            _ => {}
        }
    }
}

/// Truncates the regular file `name` (still inode `ino`) to `size`.
#[allow(clippy::unnecessary_cast)]
fn cut_back(dir: &OwnedFd, name: &std::ffi::CStr, ino: u64, size: u64) {
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
        let _ = ftruncate(&fd, size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_removes_new_files_and_cuts_grown_ones_back() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("old.txt"), b"0123456789").unwrap();
        std::fs::create_dir(ws.join("keep")).unwrap();
        std::fs::write(ws.join("keep/old2.txt"), b"abc").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let quota = Quota {
            path: ws.to_path_buf(),
            max_bytes: 1 << 20,
            setting: None,
        };
        let start = now();
        let mut baseline = Baseline::default();
        let mut walk = Walk::new(ws, quota.max_bytes, true);
        while !walk.step(start, 1, &mut baseline) {}
        assert_eq!(baseline.files.len(), 2);
        std::thread::sleep(Duration::from_millis(30));
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
        assert!(measure(&quota) > quota.max_bytes);
        undo(&quota, start, &baseline);
        assert_eq!(std::fs::read(ws.join("old.txt")).unwrap(), b"0123456789");
        assert_eq!(std::fs::read(ws.join("keep/old2.txt")).unwrap(), b"abc");
        assert!(!ws.join("new").exists());
        assert!(!ws.join("keep/junk").exists());
        assert!(std::fs::symlink_metadata(ws.join("link")).is_err());
        assert!(std::path::Path::new("/etc/passwd").exists());
    }
}
