//! A uid per box, when eve runs as root: what the kernel counts per user stays per box.
//!
//! The kernel keeps several counts per uid on the whole host: processes (`RLIMIT_NPROC`), inotify
//! instances and watches, queued signals, POSIX message queues. With every box on one uid, one
//! box holding its share makes every other box fail ("Resource temporarily unavailable"). So each
//! box runs as a uid of its own, leased from a range ([`UidRange`], `EVE_SANDBOX_UIDS` in the
//! runtime) for as long as the box lives.
//!
//! Several eve processes on one host share the range: a lease is an exclusive `flock` on the file
//! `<dir>/<uid>` ([`lock_dir`]), held open by the process for the lease's life, so two processes
//! never hand out the same uid, and a process that dies releases its leases with its descriptors.
//!
//! Writable paths outlive their boxes, and a box can change only what its uid owns: the caller
//! hands the tree to the box's uid when it is not already its (see `prepare_writable`). To make
//! that rare, a lease prefers the uid that already owns the first writable path (a session's
//! workspace keeps its uid from call to call while no other box holds it), and boxes that run at
//! the same time over a common writable path (parallel calls of one session, or `write:` paths
//! every session shares) share one lease, so no box takes files away from another that is
//! running. Boxes with no writable path in common never share a uid while both live.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{FlockOperation, flock};

/// The default range: 65,536 uids from `0x70000000`, a region no distribution, systemd or
/// container tool allocates (systemd's container ranges end below it, its "foreign" range lies
/// above it).
pub const DEFAULT_UIDS: UidRange = UidRange {
    first: 0x7000_0000,
    last: 0x7000_FFFF,
};

/// A range of uids (and gids of the same numbers), both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// First uid.
    pub first: u32,
    /// Last uid.
    pub last: u32,
}

impl UidRange {
    /// Parses `FIRST-LAST` (both included), e.g. `100000-165535`.
    pub fn parse(text: &str) -> Result<UidRange, String> {
        let bad = |why: &str| {
            format!(
                "`{text}` is not a uid range: {why}; write FIRST-LAST, e.g. 100000-165535 \
                 (unprivileged uids no account on this host uses)"
            )
        };
        let (a, b) = text
            .trim()
            .split_once('-')
            .ok_or_else(|| bad("there is no `-`"))?;
        let first: u32 = a.trim().parse().map_err(|_| bad("FIRST is not a number"))?;
        let last: u32 = b.trim().parse().map_err(|_| bad("LAST is not a number"))?;
        if first > last {
            return Err(bad("FIRST is larger than LAST"));
        }
        if first < 1000 {
            return Err(bad("it starts below 1000, among system accounts"));
        }
        if last == u32::MAX {
            return Err(bad("4294967295 is not a valid uid"));
        }
        if (first..=last).contains(&65534) {
            return Err(bad("it holds 65534 (nobody), which other programs run as"));
        }
        Ok(UidRange { first, last })
    }

    /// How many uids it holds.
    pub fn len(&self) -> u64 {
        u64::from(self.last - self.first) + 1
    }

    /// Always false: a range holds at least one uid.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `uid` is in it.
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// `Err` naming the problem when this process cannot switch to every uid and gid of the
    /// range (a user namespace, as in rootless containers, maps only some).
    pub fn check_mapped(&self) -> Result<(), String> {
        for (file, what) in [("/proc/self/uid_map", "uid"), ("/proc/self/gid_map", "gid")] {
            let map = fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
            let covered = map.lines().any(|line| {
                let n: Vec<u64> = line
                    .split_whitespace()
                    .filter_map(|f| f.parse().ok())
                    .collect();
                n.len() == 3
                    && n[0] <= u64::from(self.first)
                    && u64::from(self.last) < n[0].saturating_add(n[2])
            });
            if !covered {
                return Err(format!(
                    "the {what}s {self} are not mapped in eve's user namespace ({file}): set the \
                     range to {what}s it maps"
                ));
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Where leases are locked: one folder for every eve process of the host (`/run/eve/sandbox-uids`,
/// else under the system's temporary folder when `/run` is missing).
pub fn lock_dir() -> PathBuf {
    if Path::new("/run").is_dir() {
        PathBuf::from("/run/eve/sandbox-uids")
    } else {
        std::env::temp_dir().join("eve-sandbox-uids")
    }
}

/// The leases of this process over one [`UidRange`].
#[derive(Debug)]
pub struct Uids {
    range: UidRange,
    dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    live: Vec<Live>,
    /// Where the next search starts: spread between processes, then advancing.
    cursor: u64,
}

#[derive(Debug)]
struct Live {
    uid: u32,
    paths: Vec<PathBuf>,
    refs: usize,
    /// Holds the `flock`.
    _lock: File,
}

/// One box's uid, until dropped (clones share it; the last drop releases it).
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    owner: Arc<Uids>,
}

impl Uids {
    /// Leases over `range`, locked in `dir` (created owner-only when missing; refused when it
    /// belongs to another user or is not a folder).
    pub fn new(range: UidRange, dir: PathBuf) -> io::Result<Arc<Uids>> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if !dir.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)?;
        }
        let meta = fs::symlink_metadata(&dir)?;
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::other(format!(
                "{} is not a folder owned by eve's user",
                dir.display()
            )));
        }
        if meta.permissions().mode() & 0o022 != 0 {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        }
        let spread = u64::from(std::process::id()).wrapping_mul(7919) % range.len();
        Ok(Arc::new(Uids {
            range,
            dir,
            state: Mutex::new(State {
                live: Vec::new(),
                cursor: spread,
            }),
        }))
    }

    /// The range.
    pub fn range(&self) -> UidRange {
        self.range
    }

    /// How many uids this process holds now.
    pub fn held(&self) -> usize {
        self.lock().live.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A uid for a box whose writable paths are `writable` (the first one, when any, is the one
    /// whose owner is preferred). Shares the lease of a running box with a writable path in
    /// common; otherwise a uid no running box of any eve process holds.
    pub fn lease(self: &Arc<Self>, writable: &[PathBuf]) -> io::Result<UidLease> {
        let mut state = self.lock();
        if let Some(live) = state
            .live
            .iter_mut()
            .find(|l| l.paths.iter().any(|p| writable.contains(p)))
        {
            live.refs += 1;
            for p in writable {
                if !live.paths.contains(p) {
                    live.paths.push(p.clone());
                }
            }
            return Ok(UidLease {
                uid: live.uid,
                owner: Arc::clone(self),
            });
        }
        let taken = |state: &State, uid: u32| state.live.iter().any(|l| l.uid == uid);
        let preferred = writable
            .first()
            .and_then(|p| fs::symlink_metadata(p).ok())
            .map(|m| m.uid())
            .filter(|uid| self.range.contains(*uid) && !taken(&state, *uid));
        let mut chosen = None;
        if let Some(uid) = preferred {
            chosen = self.try_lock(uid)?.map(|f| (uid, f));
        }
        if chosen.is_none() {
            let len = self.range.len();
            for i in 0..len {
                let offset = (state.cursor + i) % len;
                let uid = self.range.first + offset as u32;
                if taken(&state, uid) {
                    continue;
                }
                if let Some(f) = self.try_lock(uid)? {
                    state.cursor = (offset + 1) % len;
                    chosen = Some((uid, f));
                    break;
                }
            }
        }
        let Some((uid, lock)) = chosen else {
            return Err(io::Error::other(format!(
                "every uid of the sandbox range {} is held by a running box: widen the range",
                self.range
            )));
        };
        state.live.push(Live {
            uid,
            paths: writable.to_vec(),
            refs: 1,
            _lock: lock,
        });
        Ok(UidLease {
            uid,
            owner: Arc::clone(self),
        })
    }

    /// The lock of `uid`, or `None` when another process (or another lease here) holds it.
    fn try_lock(&self, uid: u32) -> io::Result<Option<File>> {
        let path = self.dir.join(uid.to_string());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot lock {}: {e}", path.display()),
            )),
        }
    }

    fn release(&self, uid: u32) {
        let mut state = self.lock();
        if let Some(i) = state.live.iter().position(|l| l.uid == uid) {
            state.live[i].refs -= 1;
            if state.live[i].refs == 0 {
                state.live.swap_remove(i);
            }
        }
    }
}

impl UidLease {
    /// The uid (and gid) the box runs as.
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

impl Clone for UidLease {
    fn clone(&self) -> Self {
        let mut state = self.owner.lock();
        if let Some(live) = state.live.iter_mut().find(|l| l.uid == self.uid) {
            live.refs += 1;
        }
        UidLease {
            uid: self.uid,
            owner: Arc::clone(&self.owner),
        }
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        self.owner.release(self.uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_refuse_what_is_unsafe() {
        assert_eq!(
            UidRange::parse("100000-165535").unwrap(),
            UidRange {
                first: 100_000,
                last: 165_535
            }
        );
        assert_eq!(UidRange::parse("100000-165535").unwrap().len(), 65_536);
        for bad in [
            "",
            "100000",
            "5-9",
            "200-100",
            "60000-70000",
            "x-y",
            "1000-4294967295",
        ] {
            assert!(UidRange::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn leases_are_exclusive_between_processes_and_shared_over_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let range = UidRange {
            first: 200_000,
            last: 200_002,
        };
        // Two managers stand for two processes: flock conflicts between open files alike.
        let a = Uids::new(range, dir.path().to_path_buf()).unwrap();
        let b = Uids::new(range, dir.path().to_path_buf()).unwrap();
        let ws1 = vec![PathBuf::from("/nonexistent/ws1")];
        let ws2 = vec![PathBuf::from("/nonexistent/ws2")];
        let l1 = a.lease(&ws1).unwrap();
        let l1b = a.lease(&ws1).unwrap();
        assert_eq!(l1.uid(), l1b.uid(), "one path, one uid");
        let l2 = a.lease(&ws2).unwrap();
        assert_ne!(l1.uid(), l2.uid());
        let l3 = b.lease(&ws1).unwrap();
        assert!(![l1.uid(), l2.uid()].contains(&l3.uid()), "another process");
        assert!(
            b.lease(&[PathBuf::from("/y")]).is_err(),
            "three uids, three live boxes"
        );
        drop(l1);
        assert!(
            b.lease(&[PathBuf::from("/y")]).is_err(),
            "a clone still holds it"
        );
        drop(l1b);
        assert!(b.lease(&[PathBuf::from("/y")]).is_ok(), "released");
    }
}
