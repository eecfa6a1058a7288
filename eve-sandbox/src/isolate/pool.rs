//! Warm boxes: sandboxes started before their call, so a call pays only for what is its own.
//!
//! Most of an isolated spawn does not depend on the call: two execs of the helper, creating the
//! user, mount, PID, network, IPC, UTS and cgroup namespaces, writing the uid maps, bringing `lo`
//! up, compiling the seccomp filters. A [`Pool`] keeps a few boxes that have done exactly that
//! and wait, and a refill thread replaces each one taken: at once when the pool ran dry, else
//! once the taken box's call is over, so on a small machine starting its replacement does not
//! compete with the call for the CPU while another box is ready anyway. What the guarantees rest on stays per
//! call and is done only when the call's spec arrives ([`Warm::start`]): the filesystem view
//! (workspace, build files, private `/tmp` and `HOME`, masks, `/dev`, `/proc`), the limits, the
//! uid, capabilities, `no_new_privs`, Landlock, the seccomp filters' installation and the
//! command's environment. A box serves one call and then ends with its namespaces, so nothing
//! of one call (files in its `/tmp`, processes it left, its environment) exists in the next.
//!
//! Lifetime. Each box is started by the pool's own thread with a parent-death signal, so idle
//! boxes die with the pool (and with the process) and never outlive it; a box dropped unused is
//! killed. Idle boxes hold no uid of the sandbox and are in their own process groups, so they
//! never count as a call's processes. A box that died while idle is skipped; when none is ready
//! and none is on its way, [`Pool::take`] returns `None` and the caller uses the cold path
//! ([`super::command`]), which is also what reports a kernel's refusal.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::cgroup::{BoxCgroup, Cgroups};
use super::helper::WARM1;
use super::wire::{self, Call};
use super::{Error, Policy};

/// How long a box may take to get ready before the pool gives up on it.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Pool::take`] waits for a box that is on its way. Waiting never costs more than the
/// cold path would: the box started earlier and has less left to do.
const TAKE_WAIT: Duration = Duration::from_secs(2);
/// Consecutive failures to start a box after which the pool stops trying (calls go cold, where
/// the failure is reported).
const MAX_FAILURES: u32 = 3;

/// A few sandboxes kept ready ahead of their calls. Dropping it kills the idle boxes.
#[derive(Debug)]
pub struct Pool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    helper: PathBuf,
    size: usize,
    /// Where each box's cgroup is made, before its call; `None`: boxes have none.
    cgroups: Option<&'static Cgroups>,
    handle: tokio::runtime::Handle,
    state: Mutex<State>,
    /// Wakes the refill thread.
    wake: Condvar,
    /// Wakes callers waiting for a box on its way.
    ready: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    idle: VecDeque<Warm>,
    filling: bool,
    stop: bool,
    failures: u32,
    last_error: Option<String>,
    /// Boxes taken whose replacement waits until their call is over (see [`Refill`]).
    owed: usize,
}

/// The replacement a taken box owes the pool, started when this is dropped: when the box's call
/// is over ([`WarmProcess::wait`]) or the box is let go.
#[derive(Debug)]
struct Refill(Arc<Shared>);

impl Drop for Refill {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.owed = state.owed.saturating_sub(1);
        drop(state);
        self.0.wake.notify_one();
    }
}

/// One ready box, taken from a [`Pool`]: give it its call with [`Warm::start`]. Dropped unused,
/// it is killed.
#[derive(Debug)]
pub struct Warm {
    child: tokio::process::Child,
    control: UnixStream,
    /// The box's own cgroup, which its stage 1 joined as it started; limits come with the call.
    cgroup: Option<BoxCgroup>,
    /// Its replacement, when that waits for the end of its call.
    refill: Option<Refill>,
}

impl Pool {
    /// A pool that keeps `size` boxes of `helper` (a binary whose `main` starts with
    /// [`super::helper_main`]) ready, filled in the background from now on. Call it inside a tokio
    /// runtime: the boxes are that runtime's child processes. `size` 0 gives a pool that never
    /// has a box.
    ///
    /// Each box gets a cgroup of its own ([`Cgroups::shared`]) when the machine offers one; see
    /// [`Pool::with_cgroups`].
    pub fn start(helper: PathBuf, size: usize) -> io::Result<Pool> {
        let cgroups = Cgroups::shared();
        Pool::with_cgroups(helper, size, cgroups.available().then_some(cgroups))
    }

    /// A pool as [`Pool::start`] makes, whose boxes each get a cgroup of `cgroups`, made before
    /// the call and limited by the call's policy (`None`: no cgroup, only the policy's
    /// `setrlimit` limits).
    pub fn with_cgroups(
        helper: PathBuf,
        size: usize,
        cgroups: Option<&'static Cgroups>,
    ) -> io::Result<Pool> {
        let handle = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let shared = Arc::new(Shared {
            helper,
            size,
            cgroups,
            handle,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            ready: tokio::sync::Notify::new(),
        });
        if size > 0 {
            let refill = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("eve-sandbox-pool".into())
                .spawn(move || refill.run())?;
        }
        Ok(Pool { shared })
    }

    /// How many boxes the pool keeps ready.
    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// How many boxes are ready now.
    pub fn idle(&self) -> usize {
        self.shared.lock().idle.len()
    }

    /// Why the last box could not be started, if one could not.
    pub fn last_error(&self) -> Option<String> {
        self.shared.lock().last_error.clone()
    }

    /// A ready box, waiting (briefly) for one on its way when none is idle; `None` when the pool
    /// has none to give: use the cold path.
    pub async fn take(&self) -> Option<Warm> {
        let deadline = tokio::time::Instant::now() + TAKE_WAIT;
        loop {
            let notified = self.shared.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.shared.lock();
                while let Some(mut warm) = state.idle.pop_front() {
                    if !matches!(warm.child.try_wait(), Ok(None)) {
                        // Died while idle: replaced now, dropped, try the next.
                        self.shared.wake.notify_one();
                        continue;
                    }
                    if state.idle.is_empty() {
                        // The pool ran dry: the next call must not wait for this one to end.
                        self.shared.wake.notify_one();
                    } else {
                        state.owed += 1;
                        warm.refill = Some(Refill(Arc::clone(&self.shared)));
                    }
                    return Some(warm);
                }
                // A box is on its way when one is being started or the refill thread is about to.
                let coming = state.filling
                    || (state.idle.len() + state.owed < self.shared.size
                        && state.failures < MAX_FAILURES);
                if !coming || state.stop {
                    return None;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Stops refilling, kills the idle boxes and waits until they are gone.
    pub async fn shutdown(self) {
        let idle: Vec<Warm> = {
            let mut state = self.shared.lock();
            state.stop = true;
            state.idle.drain(..).collect()
        };
        self.shared.wake.notify_all();
        for mut warm in idle {
            let _ = warm.child.start_kill();
            let _ = warm.child.wait().await;
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let idle: Vec<Warm> = {
            let mut state = self.shared.lock();
            state.stop = true;
            state.idle.drain(..).collect()
        };
        self.shared.wake.notify_all();
        // Killed on drop.
        drop(idle);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The refill thread: keeps `size` boxes idle (counting those owed after their call), one
    /// start at a time (so refilling takes at most one core from the calls), until the pool
    /// stops.
    fn run(&self) {
        loop {
            {
                let mut state = self.lock();
                while !state.stop
                    && (state.idle.len() + state.owed >= self.size
                        || state.failures >= MAX_FAILURES)
                {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if state.stop {
                    return;
                }
                state.filling = true;
            }
            let started = self.start_box();
            {
                let mut state = self.lock();
                state.filling = false;
                match started {
                    Ok(warm) if !state.stop => {
                        state.idle.push_back(warm);
                        state.failures = 0;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        state.failures += 1;
                        state.last_error = Some(e);
                    }
                }
            }
            self.ready.notify_waiters();
        }
    }

    /// Starts one box and waits until it is ready.
    fn start_box(&self) -> Result<Warm, String> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| format!("cannot create a warm box's socket: {e}"))?;
        let cgroup = match self.cgroups {
            Some(c) => c
                .create()
                .map_err(|e| format!("cannot create a warm box's cgroup: {e}"))?,
            None => None,
        };
        let mut command = tokio::process::Command::new(&self.helper);
        command.arg(WARM1).arg(std::process::id().to_string());
        if let Some(cg) = &cgroup {
            let spec = serde_json::to_string(&cg.spec()).map_err(|e| e.to_string())?;
            command.arg(spec);
        }
        command
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env_clear()
            .current_dir("/")
            .process_group(0)
            .kill_on_drop(true);
        let child = {
            let _entered = self.handle.enter();
            command.spawn().map_err(|e| {
                format!(
                    "cannot start the sandbox helper {}: {e}",
                    self.helper.display()
                )
            })?
        };
        let _ = ours.set_read_timeout(Some(READY_TIMEOUT));
        match wire::hear(&ours) {
            Ok(Some(line)) if line == "ready" => Ok(Warm {
                child,
                control: ours,
                cgroup,
                refill: None,
            }),
            Ok(Some(line)) => Err(line.strip_prefix("error: ").unwrap_or(&line).to_owned()),
            Ok(None) => Err("a warm box ended before it was ready".to_owned()),
            Err(e) => Err(format!("a warm box did not get ready: {e}")),
        }
    }
}

impl Warm {
    /// The pid of the box's stage 1 (the process the caller waits for, leader of its own process
    /// group: killing that group kills the box and everything in it).
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Hands the box its call: run `program args…` isolated by `policy`, with exactly the
    /// environment `env`, in `cwd`, with `stdio` (stdin, stdout, stderr) as its standard streams.
    /// Returns the box's process, whose status is the command's exactly as the cold path's is.
    /// The caller may close its copies of `stdio` once this returns. Call it inside the pool's
    /// tokio runtime.
    pub fn start(
        self,
        policy: &Policy,
        program: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: &Path,
        stdio: [BorrowedFd<'_>; 3],
    ) -> Result<WarmProcess, Error> {
        super::check_paths(policy)?;
        let mut policy = policy.clone();
        if let Some(cg) = &self.cgroup {
            cg.limit(policy.limits.processes, policy.limits.memory)
                .map_err(Error::Warm)?;
            policy.cgroup = Some(cg.spec());
        }
        let call = Call {
            policy,
            program: program.to_owned(),
            args: args.to_vec(),
            env: env.to_vec(),
            cwd: cwd.to_path_buf(),
        };
        let bytes = serde_json::to_vec(&call).map_err(|e| Error::Warm(io::Error::other(e)))?;
        let mut warm = self;
        if !matches!(warm.child.try_wait(), Ok(None)) {
            return Err(Error::Warm(io::Error::other("the warm box has ended")));
        }
        wire::send(&warm.control, &bytes, &stdio).map_err(Error::Warm)?;
        let control = warm
            .control
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(warm.control))
            .map_err(Error::Warm)?;
        Ok(WarmProcess {
            child: warm.child,
            control: Some(control),
            cgroup: warm.cgroup,
            held: Vec::new(),
            refill: warm.refill,
        })
    }
}

/// A warm box running its call (from [`Warm::start`]).
#[derive(Debug)]
pub struct WarmProcess {
    child: tokio::process::Child,
    /// Where stage 1 reports the command's status, before it tears the box's namespaces down.
    control: Option<tokio::net::UnixStream>,
    /// Removed (after killing what is left in it) when this is dropped.
    cgroup: Option<BoxCgroup>,
    held: Vec<Box<dyn std::fmt::Debug + Send + Sync>>,
    /// The pool's replacement for this box, started once the call is over.
    refill: Option<Refill>,
}

impl WarmProcess {
    /// The pid of the box's stage 1, leader of its own process group: killing that group kills
    /// the box and everything in it. `None` once it has been waited for.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until the call is over: every process of the box has ended. Returns the command's
    /// status (its exit code, 128+N for signal N, or the sandbox's own failure code), as soon as
    /// stage 1 reports it, without waiting for the kernel to tear the box's namespaces down.
    pub async fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        let status = self.wait_call().await;
        // The call is over: the pool may start this box's replacement.
        self.refill = None;
        status
    }

    async fn wait_call(&mut self) -> io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        use tokio::io::AsyncReadExt;
        if let Some(mut control) = self.control.take() {
            let mut line = Vec::new();
            let reported = async {
                // The status line is the last thing stage 1 writes.
                let mut buf = [0u8; 64];
                while !line.contains(&b'\n') && line.len() < 64 {
                    let n = control.read(&mut buf).await.ok()?;
                    if n == 0 {
                        break;
                    }
                    line.extend_from_slice(&buf[..n]);
                }
                let end = line.iter().position(|b| *b == b'\n')?;
                line.truncate(end);
                std::str::from_utf8(&line)
                    .ok()?
                    .strip_prefix("exit ")?
                    .parse::<i32>()
                    .ok()
            };
            tokio::select! {
                code = reported => {
                    if let Some(code) = code {
                        return Ok(std::process::ExitStatus::from_raw((code & 0xff) << 8));
                    }
                }
                status = self.child.wait() => return status,
            }
        }
        self.child.wait().await
    }

    /// Sends the box's stage 1 `SIGKILL` (its init and everything in the box die with it).
    pub fn start_kill(&mut self) -> io::Result<()> {
        self.child.start_kill()
    }

    /// The box's cgroup, when it has one.
    pub fn cgroup(&self) -> Option<&BoxCgroup> {
        self.cgroup.as_ref()
    }

    /// Keeps `thing` (the box's uid lease) until the box's cgroup has been emptied and removed,
    /// or until this is dropped when the box has no cgroup.
    pub fn hold_until_removed(&mut self, thing: Box<dyn std::fmt::Debug + Send + Sync>) {
        match &mut self.cgroup {
            Some(cg) => cg.hold_until_removed(thing),
            None => self.held.push(thing),
        }
    }
}
