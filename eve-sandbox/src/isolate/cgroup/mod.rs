//! A cgroup per box: the call's processes and memory bounded in total, whatever uid they run as.
//!
//! `setrlimit` limits are per process (`RLIMIT_DATA`) or per uid on the whole host
//! (`RLIMIT_NPROC`), so on their own three processes of 900 MiB pass a 1 GiB limit and one call
//! holding its process limit makes every other box of the same uid fail to fork. A cgroup counts
//! what the whole box holds, and only the box: each box gets one (`pids.max` = the call's
//! processes plus the box's own few helpers, the memory limit = the call's memory with swap
//! included), its stage 1 joins it before anything of the box runs (so every process and thread
//! of the box, and nothing else, is in it), and it is removed when the box ends, after whatever
//! is left in it has been killed.
//!
//! Both hierarchies are supported, per controller: cgroup v1 (`pids` and `memory` each mounted
//! on their own, as on older hosts and many CI machines) and cgroup v2 (one unified tree). Boxes
//! live under this process's own cgroup of each hierarchy (read from `/proc/self/cgroup`), in a
//! folder `eve-<pid>-<start time>` made once per process; folders of processes that are gone are
//! swept when the next eve process starts. Under v2 the controllers must be delegated: when this
//! process's cgroup does not enable `pids` and `memory` for its children and holds only this
//! process, eve moves itself into a leaf below it and enables them (what a systemd unit with
//! `Delegate=yes` expects); otherwise v2 is not used and [`Cgroups::enforcement`] says why.
//!
//! Creating a box's cgroup is one `mkdir` per hierarchy, so the warm pool makes it ahead of the
//! call; the limits are a few small writes done when the call's policy is known. Removal runs on
//! a background thread, so a call's result never waits for it.

mod detect;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Tasks (processes and threads) of a box that are not the command's: stage 1 and the init (one
/// thread each: stage 1 unshared its PID namespace, which forbids it threads). Added to the
/// call's `processes` in `pids.max`, so the command gets exactly its own.
pub const BOX_OVERHEAD_TASKS: u64 = 2;

/// How long removal keeps trying a box's cgroup before leaving it to the next start's sweep.
const REMOVE_FOR: Duration = Duration::from_secs(30);

/// What a controller is enforced through on this machine, or why it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// cgroup v1, the hierarchy mounted for that controller.
    V1,
    /// cgroup v2, the unified hierarchy.
    V2,
}

/// Which per-box limits the cgroups of this machine enforce, in words for `eve info` and the
/// start-up line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    /// `Ok(mechanism)` when `pids.max` bounds each box's processes, else why not.
    pub processes: Result<Mechanism, String>,
    /// `Ok(mechanism)` when each box's memory (swap included when `swap` says so) is bounded in
    /// total, else why not.
    pub memory: Result<Mechanism, String>,
    /// Whether swap is counted in the memory limit (v1 `memsw`, v2 `memory.swap.max`).
    pub swap: bool,
}

/// One hierarchy this process creates box cgroups in.
#[derive(Debug, Clone)]
struct Hierarchy {
    /// `<this process's cgroup>/eve-<pid>-<start>`: the parent of every box of this process.
    dir: PathBuf,
    v2: bool,
    pids: bool,
    memory: bool,
    /// `memory.memsw.limit_in_bytes` (v1) or `memory.swap.max` (v2) exists.
    swap: bool,
}

/// This process's box cgroups: detected once ([`Cgroups::shared`]), then one per box
/// ([`Cgroups::create`]).
#[derive(Debug)]
pub struct Cgroups {
    hierarchies: Vec<Hierarchy>,
    enforcement: Enforcement,
    next: AtomicU64,
    reaper: Mutex<Option<mpsc::Sender<Removal>>>,
}

/// The cgroup(s) of one box: one folder per hierarchy. Dropping it kills what is left in it and
/// removes it in the background; what [`BoxCgroup::hold_until_removed`] was given is released
/// only then.
#[derive(Debug)]
pub struct BoxCgroup {
    dirs: Vec<Hierarchy>,
    held: Vec<Box<dyn std::fmt::Debug + Send + Sync>>,
    reaper: Option<mpsc::Sender<Removal>>,
}

#[derive(Debug)]
struct Removal {
    dirs: Vec<Hierarchy>,
    held: Vec<Box<dyn std::fmt::Debug + Send + Sync>>,
    since: Instant,
}

impl Cgroups {
    /// The cgroups of this process, detected on first use.
    pub fn shared() -> &'static Cgroups {
        static SHARED: OnceLock<Cgroups> = OnceLock::new();
        SHARED.get_or_init(detect::detect)
    }

    /// What the cgroups of this machine enforce per box.
    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    /// Whether any limit is enforced through cgroups here.
    pub fn available(&self) -> bool {
        !self.hierarchies.is_empty()
    }

    /// A new, empty cgroup for one box (`Ok(None)` when none is available here). Its limits are
    /// unbounded until [`BoxCgroup::limit`].
    pub fn create(&self) -> io::Result<Option<BoxCgroup>> {
        if self.hierarchies.is_empty() {
            return Ok(None);
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut made = BoxCgroup {
            dirs: Vec::new(),
            held: Vec::new(),
            reaper: self.reaper(),
        };
        for h in &self.hierarchies {
            let dir = h.dir.join(format!("box-{n}"));
            fs::create_dir(&dir).map_err(|e| named(&dir, e))?;
            made.dirs.push(Hierarchy { dir, ..h.clone() });
        }
        Ok(Some(made))
    }

    fn reaper(&self) -> Option<mpsc::Sender<Removal>> {
        let mut slot = self.reaper.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            let (tx, rx) = mpsc::channel::<Removal>();
            let spawned = std::thread::Builder::new()
                .name("eve-sandbox-cgroups".into())
                .spawn(move || reap(rx));
            if spawned.is_ok() {
                *slot = Some(tx);
            }
        }
        slot.clone()
    }
}

impl BoxCgroup {
    /// The folders (one per hierarchy) whose `cgroup.procs` the box's stage 1 joins.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.dir.clone()).collect()
    }

    /// What the box's policy says of it ([`super::Policy::cgroup`]).
    pub fn spec(&self) -> super::CgroupSpec {
        super::CgroupSpec {
            dirs: self.paths(),
            processes: self.limits_processes(),
        }
    }

    /// Whether this cgroup bounds the box's processes (`pids.max`).
    pub fn limits_processes(&self) -> bool {
        self.dirs.iter().any(|d| d.pids)
    }

    /// Sets the box's limits: `processes` (the command's; [`BOX_OVERHEAD_TASKS`] is added for the
    /// box's own) and `memory` (bytes, swap included where the host counts swap). `None` leaves a
    /// limit unbounded.
    pub fn limit(&self, processes: Option<u64>, memory: Option<u64>) -> io::Result<()> {
        for d in &self.dirs {
            if d.pids
                && let Some(n) = processes
            {
                write(
                    &d.dir.join("pids.max"),
                    &n.saturating_add(BOX_OVERHEAD_TASKS).to_string(),
                )?;
            }
            if d.memory
                && let Some(bytes) = memory
            {
                let bytes = bytes.to_string();
                if d.v2 {
                    write(&d.dir.join("memory.max"), &bytes)?;
                    if d.swap {
                        write(&d.dir.join("memory.swap.max"), "0")?;
                    }
                } else {
                    // memsw may never be below the plain limit: the plain one first.
                    write(&d.dir.join("memory.limit_in_bytes"), &bytes)?;
                    if d.swap {
                        write(&d.dir.join("memory.memsw.limit_in_bytes"), &bytes)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Keeps `thing` (a uid lease) until the cgroup has been emptied and removed.
    pub fn hold_until_removed(&mut self, thing: Box<dyn std::fmt::Debug + Send + Sync>) {
        self.held.push(thing);
    }

    /// Processes (and threads) in the box now, per its first hierarchy with `pids`, else any.
    pub fn tasks(&self) -> u64 {
        self.dirs
            .iter()
            .find(|d| d.pids)
            .or(self.dirs.first())
            .and_then(|d| {
                if d.pids {
                    fs::read_to_string(d.dir.join("pids.current")).ok()
                } else {
                    fs::read_to_string(d.dir.join("cgroup.procs"))
                        .ok()
                        .map(|s| s.lines().count().to_string())
                }
            })
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Processes of the box the kernel killed for want of memory within its limit (v1
    /// `memory.oom_control`, v2 `memory.events`: `oom_kill`).
    pub fn oom_kills(&self) -> u64 {
        let Some(d) = self.dirs.iter().find(|d| d.memory) else {
            return 0;
        };
        let file = if d.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        fs::read_to_string(d.dir.join(file))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ").map(|v| v.trim().parse().ok()))
                    .flatten()
            })
            .unwrap_or(0)
    }
}

impl Drop for BoxCgroup {
    fn drop(&mut self) {
        let removal = Removal {
            dirs: std::mem::take(&mut self.dirs),
            held: std::mem::take(&mut self.held),
            since: Instant::now(),
        };
        match &self.reaper {
            Some(tx) => {
                if let Err(mpsc::SendError(removal)) = tx.send(removal) {
                    let _ = remove_now(&removal.dirs);
                }
            }
            None => {
                let _ = remove_now(&removal.dirs);
            }
        }
    }
}

/// Makes the calling process, which must have one thread only, a member of every cgroup in
/// `dirs`: what stage 1 does first, so every process of the box is created inside.
///
/// Under v1 it moves its own thread (`0` written to `tasks`): the kernel then skips the global
/// lock that moving a whole process takes, whose release waits for an RCU grace period and
/// stalls every fork on the host meanwhile (milliseconds under load, per box). v2 has no such
/// per-thread move between resource domains: there it is `cgroup.procs`.
pub(crate) fn join_self(dirs: &[PathBuf]) -> io::Result<()> {
    for dir in dirs {
        let tasks = dir.join("tasks");
        if tasks.exists() {
            write(&tasks, "0")?;
        } else {
            write(&dir.join("cgroup.procs"), &std::process::id().to_string())?;
        }
    }
    Ok(())
}

/// The removal thread: kills what is left in each box's cgroup and removes it, retrying while
/// the kernel still tears the processes down.
fn reap(rx: mpsc::Receiver<Removal>) {
    let mut pending: Vec<Removal> = Vec::new();
    loop {
        let next = if pending.is_empty() {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(r) => Some(r),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            }
        };
        if let Some(r) = next {
            pending.push(r);
        } else if pending.is_empty() {
            return;
        }
        pending.retain_mut(|r| {
            let done = remove_now(&r.dirs).is_ok() || r.since.elapsed() > REMOVE_FOR;
            if done {
                r.held.clear();
            }
            !done
        });
    }
}

/// Kills every process in `dirs` and removes them; `Err` while one is still busy.
fn remove_now(dirs: &[Hierarchy]) -> io::Result<()> {
    let mut busy = None;
    for d in dirs {
        if !d.dir.exists() {
            continue;
        }
        kill_all(&d.dir, d.v2);
        if let Err(e) = fs::remove_dir(&d.dir) {
            if e.kind() == io::ErrorKind::NotFound {
                continue;
            }
            busy = Some(e);
        }
    }
    busy.map_or(Ok(()), Err)
}

fn kill_all(dir: &Path, v2: bool) {
    if v2 && write(&dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| named(path, e))
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}
