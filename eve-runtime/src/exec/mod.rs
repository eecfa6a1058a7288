//! The execution seam: every process eve starts on an agent's behalf is started through here.
//!
//! Script and `run:` tools, the built-in `bash`, hooks, dynamic-tool resolvers and MCP stdio
//! servers all describe what they want to run as a [`Launch`] (program, arguments, environment,
//! working folder, and the [`Confinement`] their effective sandbox asks for) and get back a
//! [`Prepared`] command to spawn. The [`Executor`] owned by each runtime picks the [`Sandbox`]
//! implementation: [`HostSandbox`] is the unconfined behaviour (`sandbox: host`), and
//! [`IsolatedSandbox`] confines the process and all its descendants with `eve_sandbox::isolate`
//! (namespaces, Landlock, seccomp, limits) and, when the network is not `none`, gives it a
//! private egress proxy (`eve_sandbox::egress`) as its only way out.
//!
//! Isolated processes started with [`Prepared::spawn_piped`] (tools, hooks, dynamic-tool
//! resolvers) come from the runtime's pool of warm boxes when one is ready (`isolated.rs`:
//! `EVE_SANDBOX_POOL` boxes, 2 by default, 0 turns it off), else from the cold path; a caller
//! that spawns [`Prepared::command`] itself (MCP servers, eval scorers) always takes the cold
//! path. Both confine alike.
//!
//! The seam keeps the rest of the runtime free of sandbox details: the tool protocol (stdin,
//! output caps, timeouts, process groups) stays in `tools/process.rs`, and what a tool may reach
//! is decided once, by the build (`eve_compile::Agent::effective_sandbox`) and
//! [`Executor::confinement`].

mod deadline;
mod fate;
mod host;
mod isolated;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use eve_compile::{EffectiveSandbox, Network, Provider, Sandbox as SandboxSettings, SandboxLimits};
use eve_sandbox::egress::{EgressHandle, Refusal};

pub use deadline::{DeadlineExceeded, with_deadline};
pub use fate::{Enforced, enforced};
pub(crate) use host::HostSandbox;
pub(crate) use isolated::IsolatedSandbox;

/// How one process is confined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// Unconfined: the server's own authority (`sandbox: host`).
    Host,
    /// Confined by the `isolated` sandbox.
    Isolated(Box<IsolatedSpec>),
}

/// What an isolated process may see and reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolatedSpec {
    /// Read-only paths besides the system ones: the build's files, `sandbox.yaml` `read:`.
    pub(crate) read_only: Vec<PathBuf>,
    /// Writable paths: the session workspace, `sandbox.yaml` `write:`.
    pub(crate) read_write: Vec<PathBuf>,
    /// `none`, `all` or an allowlist, enforced by the egress proxy.
    pub(crate) network: Network,
    /// Resource limits.
    pub(crate) limits: SandboxLimits,
    /// The session workspace (one of `read_write`), whose size each call may not grow past the
    /// runtime's quota.
    pub(crate) workspace: Option<PathBuf>,
}

/// One process to start.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Program (looked up on the `PATH` of `env` when it has no `/`).
    pub program: &'a str,
    /// Arguments.
    pub args: &'a [String],
    /// The complete environment of the process.
    pub env: &'a [(String, String)],
    /// Working folder.
    pub cwd: &'a Path,
    /// How it is confined.
    pub confinement: &'a Confinement,
}

/// A command ready to spawn, and what must live as long as its process.
#[derive(Debug)]
pub struct Prepared {
    /// The command (for an isolated launch, the cold path); the caller adds stdio (each stream
    /// is `/dev/null` until it does: never eve's own terminal), the process group (unless
    /// [`Prepared::starts_own_session`]) and `kill_on_drop`. [`Prepared::spawn_piped`] does that
    /// itself and may use a warm box instead.
    pub command: tokio::process::Command,
    /// Keeps the process's egress proxy running; drop it once the process is gone.
    pub guard: Guard,
    /// The same isolated launch for a warm box of the runtime's pool, when there is a pool.
    warm: Option<isolated::WarmCall>,
    /// The command makes itself the leader of a new session (and so of a new process group)
    /// before `exec`: a host process, which must not share eve's terminal.
    own_session: bool,
    /// Where [`Prepared::spawn_piped`] records how long the spawn took, and the sandbox's name.
    timed: Option<(crate::metrics::SpawnTimes, &'static str)>,
}

impl Prepared {
    /// Whether the command starts a session of its own, which makes it the leader of a new
    /// process group too: a caller must then not ask for a process group itself (`setsid` fails
    /// in a group's leader), and kills the group by the process's pid as usual. True of host
    /// processes; an isolated box starts its session inside, so its outer process is still put
    /// in a group of its own by the caller.
    pub fn starts_own_session(&self) -> bool {
        self.own_session
    }

    /// Starts the process with stdout and stderr piped, stdin piped (`stdin`) or `/dev/null`,
    /// as the leader of its own process group (a host process: of its own session; killing the
    /// group kills it and everything it started), killed when the [`Process`] is dropped. An
    /// isolated launch takes a warm box of the pool when one is ready, else the cold path; both
    /// confine exactly alike.
    pub(crate) async fn spawn_piped(&mut self, stdin: bool) -> std::io::Result<Process> {
        if !self.own_session {
            self.command.process_group(0);
        }
        let started = std::time::Instant::now();
        let timed = self.timed.take();
        let record = |path: &'static str| {
            if let Some((times, sandbox)) = &timed {
                times
                    .get_or_create(&crate::metrics::SpawnLabels { sandbox, path })
                    .observe(started.elapsed().as_secs_f64());
            }
        };
        if let Some(call) = self.warm.take()
            && let Some(warm) = call.pool.take().await
        {
            match call.start(warm, stdin) {
                Ok(process) => {
                    record("warm");
                    return Ok(process);
                }
                Err(e) => tracing::debug!(error = %e, "a warm sandbox failed; using the cold path"),
            }
        }
        self.command
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = self.command.spawn()?;
        record("cold");
        Ok(Process {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child: Child::Cold(child),
        })
    }
}

/// A process started by [`Prepared::spawn_piped`]: its pipes, and the process the caller waits
/// for (the command itself, or the sandbox's outermost stage, which exits with the command's
/// status).
#[derive(Debug)]
pub(crate) struct Process {
    /// The write end of its stdin, when piped.
    pub(crate) stdin: Option<tokio::process::ChildStdin>,
    /// The read end of its stdout.
    pub(crate) stdout: Option<tokio::process::ChildStdout>,
    /// The read end of its stderr.
    pub(crate) stderr: Option<tokio::process::ChildStderr>,
    child: Child,
}

#[derive(Debug)]
enum Child {
    Cold(tokio::process::Child),
    Warm(eve_sandbox::isolate::WarmProcess),
}

impl Process {
    /// Its pid (also its process group id), until it has been waited for.
    pub(crate) fn id(&self) -> Option<u32> {
        match &self.child {
            Child::Cold(c) => c.id(),
            Child::Warm(w) => w.id(),
        }
    }

    /// Waits until it has exited (for a warm sandbox: until every process of the call has).
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match &mut self.child {
            Child::Cold(c) => c.wait().await,
            Child::Warm(w) => w.wait().await,
        }
    }

    /// Sends it `SIGKILL`.
    pub(crate) fn start_kill(&mut self) -> std::io::Result<()> {
        match &mut self.child {
            Child::Cold(c) => c.start_kill(),
            Child::Warm(w) => w.start_kill(),
        }
    }
}

/// Three pipes for a warm box: the child's ends to hand over, the parent's ends as tokio types.
struct Pipes {
    child: [OwnedFd; 3],
    process: (
        Option<tokio::process::ChildStdin>,
        tokio::process::ChildStdout,
        tokio::process::ChildStderr,
    ),
}

impl Pipes {
    fn new(stdin: bool) -> std::io::Result<Self> {
        let (child_in, parent_in) = if stdin {
            let (r, w) = std::io::pipe()?;
            let w = std::process::ChildStdin::from(OwnedFd::from(w));
            (
                OwnedFd::from(r),
                Some(tokio::process::ChildStdin::from_std(w)?),
            )
        } else {
            (OwnedFd::from(std::fs::File::open("/dev/null")?), None)
        };
        let (out_r, out_w) = std::io::pipe()?;
        let (err_r, err_w) = std::io::pipe()?;
        let out = tokio::process::ChildStdout::from_std(std::process::ChildStdout::from(
            OwnedFd::from(out_r),
        ))?;
        let err = tokio::process::ChildStderr::from_std(std::process::ChildStderr::from(
            OwnedFd::from(err_r),
        ))?;
        Ok(Pipes {
            child: [child_in, OwnedFd::from(out_w), OwnedFd::from(err_w)],
            process: (parent_in, out, err),
        })
    }

    fn child_fds(&self) -> [std::os::fd::BorrowedFd<'_>; 3] {
        let [a, b, c] = &self.child;
        [a.as_fd(), b.as_fd(), c.as_fd()]
    }
}

/// Lives as long as a prepared process: its egress proxy and the destinations it refused, its
/// uid lease and its cgroup (removed, after what is left in it is killed, when this is dropped).
#[derive(Debug, Default)]
pub struct Guard {
    #[expect(
        dead_code,
        reason = "held for its drop: the proxy lives as long as the process"
    )]
    egress: Option<EgressHandle>,
    refusals: Arc<Mutex<Vec<Refusal>>>,
    #[expect(dead_code, reason = "held for its drop: the uid lease and cgroup")]
    fate: fate::BoxFate,
}

impl Guard {
    /// Destinations the egress proxy refused so far, in order.
    pub(crate) fn refusals(&self) -> Vec<Refusal> {
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Why a process could not be prepared.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExecError {
    /// Isolation cannot run on this machine, and the process needs it.
    #[error(
        "this needs the isolated sandbox, which cannot run on this machine: {0}. eve never runs \
         it unconfined silently: fix the kernel setting named, or set `sandbox: host` for this \
         tool (or `provider: host` in sandbox/sandbox.yaml) to run it with the server's authority"
    )]
    Unsupported(String),
    /// The sandbox policy could not be built (a path that cannot be used, a bad network entry).
    #[error("cannot build the sandbox for this process: {0}")]
    Policy(String),
    /// The egress proxy could not be started.
    #[error("cannot start the egress proxy for this process: {0}")]
    Egress(String),
}

/// A way of running processes: [`HostSandbox`] or [`IsolatedSandbox`].
#[async_trait::async_trait]
pub(crate) trait Sandbox: Send + Sync + std::fmt::Debug {
    /// The command that runs `launch` under this sandbox.
    async fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, ExecError>;
}

/// How many warm boxes an executor keeps ready: `EVE_SANDBOX_POOL` (0 turns the pool off), else
/// [`DEFAULT_POOL`]. Read once, when the executor is made.
pub fn pool_size_from_env() -> usize {
    std::env::var(crate::env_vars::EVE_SANDBOX_POOL)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_POOL)
}

/// Warm boxes kept ready by default: two, so the parallel calls of one turn both find one.
pub(crate) const DEFAULT_POOL: usize = 2;

/// How a runtime's [`Executor`] is set up.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// The binary that runs the sandbox stages: one whose `main` starts with
    /// `eve_sandbox::isolate::helper_main()` (the `eve` binary itself).
    pub(crate) helper: PathBuf,
    /// Private folder for the egress proxies' sockets (`.eve/run`).
    pub(crate) run_dir: PathBuf,
    /// The project's state folder (`.eve`): no `PATH` entry brings it, or the project holding it,
    /// into a box's view (see `eve_sandbox::isolate::path_view`).
    pub(crate) state_dir: Option<PathBuf>,
    /// Largest size of a session workspace, enforced while each isolated call runs
    /// (`EVE_WORKSPACE_MAX_BYTES`); `None`: no quota.
    pub(crate) workspace_quota: Option<u64>,
    /// The uids boxes run as when eve is root, one per box (`EVE_SANDBOX_UIDS`), or why the
    /// setting cannot be used (then every box runs as 65534, and [`Executor::enforced`] says so).
    pub(crate) uids: Result<eve_sandbox::isolate::UidRange, String>,
    /// Where the time each spawn took is recorded (the runtime's metrics), if anywhere.
    pub(crate) spawn_times: Option<crate::metrics::SpawnTimes>,
}

impl ExecConfig {
    /// A configuration with `EVE_WORKSPACE_MAX_BYTES` and `EVE_SANDBOX_UIDS` read through `env`.
    pub fn from_env(
        helper: PathBuf,
        run_dir: PathBuf,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        use crate::env_vars::{EVE_SANDBOX_UIDS, EVE_WORKSPACE_MAX_BYTES};
        let workspace_quota = Some(
            env(EVE_WORKSPACE_MAX_BYTES)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(crate::engine::DEFAULT_WORKSPACE_MAX_BYTES),
        );
        let uids = match env(EVE_SANDBOX_UIDS) {
            Some(v) if !v.trim().is_empty() => eve_sandbox::isolate::UidRange::parse(&v)
                .map_err(|e| format!("{EVE_SANDBOX_UIDS}: {e}")),
            _ => Ok(eve_sandbox::isolate::DEFAULT_UIDS),
        };
        ExecConfig {
            helper,
            run_dir,
            state_dir: None,
            workspace_quota,
            uids,
            spawn_times: None,
        }
    }
}

/// Starts every process of one runtime, under the sandbox each asks for.
#[derive(Debug)]
pub struct Executor {
    host: HostSandbox,
    isolated: IsolatedSandbox,
    spawn_times: Option<crate::metrics::SpawnTimes>,
}

impl Executor {
    /// An executor; isolation is probed on first need (or by [`Executor::isolation`]).
    pub fn new(mut config: ExecConfig) -> Self {
        let spawn_times = config.spawn_times.take();
        Self {
            host: HostSandbox,
            isolated: IsolatedSandbox::new(config, pool_size_from_env()),
            spawn_times,
        }
    }

    /// The command that runs `launch` under its confinement.
    pub async fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, ExecError> {
        let (mut prepared, sandbox) = match launch.confinement {
            Confinement::Host => (self.host.prepare(launch).await?, "host"),
            Confinement::Isolated(_) => (self.isolated.prepare(launch).await?, "isolated"),
        };
        prepared.timed = self.spawn_times.clone().map(|times| (times, sandbox));
        Ok(prepared)
    }

    /// Starts filling the pool of warm boxes now, rather than at the first isolated call (a
    /// no-op without a pool, or when it has started already).
    pub async fn start_pool(&self) {
        self.isolated.start_pool().await;
    }

    /// Whether isolation works here: `Ok` with what the kernel enforces, or what it refused.
    /// Probed once per runtime (a trivial isolated command), then remembered.
    pub(crate) async fn isolation(&self) -> Result<eve_sandbox::isolate::Support, String> {
        self.isolated.support().await
    }

    /// The `PATH` entries an isolated process would be given by `path_var` and `home` that are
    /// left out of its view, and why (each is then said once: the log does not repeat it).
    pub(crate) fn view_left_out(
        &self,
        path_var: &str,
        home: Option<&Path>,
    ) -> Vec<eve_sandbox::isolate::LeftOut> {
        self.isolated.view_left_out(path_var, home)
    }

    /// What this executor enforces for isolated calls with `limits` (uids, cgroups, quota,
    /// socket families), in words for the start-up line and `eve info`.
    pub fn enforced(&self, limits: &SandboxLimits) -> Enforced {
        self.isolated.enforced(limits)
    }

    /// Tests only: runs every box on one uid, without cgroup or workspace quota (the behaviour
    /// before boxes were kept apart), so an escape test can show the attack its protection
    /// stops. Call it before the first isolated launch (the warm pool starts with it).
    #[doc(hidden)]
    pub fn set_shared_fate(&self, shared: bool) {
        self.isolated.set_shared_fate(shared);
    }

    /// eve's own listening addresses: the egress proxies never connect to them, whatever a
    /// tool's allowlist says (a tool must not reach the API that answers its own approvals).
    pub fn set_own_listeners(&self, addrs: Vec<SocketAddr>) {
        self.isolated.set_own_listeners(addrs);
    }

    /// eve's own listening addresses, as last set (the runtime's own requests for a tool refuse
    /// them too).
    pub(crate) fn own_listeners(&self) -> Vec<SocketAddr> {
        self.isolated.own_listeners()
    }

    /// Turns an effective sandbox into the confinement of one process running in `workspace`,
    /// with the build's files at `files` (read-only inside).
    pub fn confinement(
        effective: Option<&EffectiveSandbox>,
        settings: &SandboxSettings,
        workspace: Option<&Path>,
        files: Option<&Path>,
        home: Option<&Path>,
    ) -> Confinement {
        let Some(effective) = effective else {
            return Confinement::Host;
        };
        if effective.provider == Provider::Host {
            return Confinement::Host;
        }
        let expand = |p: &String| -> Option<PathBuf> {
            match p.strip_prefix("~/") {
                Some(rest) => home.map(|h| h.join(rest)),
                None => Some(PathBuf::from(p)),
            }
        };
        let mut read_only: Vec<PathBuf> = files.map(Path::to_path_buf).into_iter().collect();
        read_only.extend(settings.read.iter().filter_map(expand));
        let mut read_write: Vec<PathBuf> = workspace.map(Path::to_path_buf).into_iter().collect();
        read_write.extend(settings.write.iter().filter_map(expand));
        Confinement::Isolated(Box::new(IsolatedSpec {
            read_only,
            read_write,
            network: effective.network.clone(),
            limits: settings.limits,
            workspace: workspace.map(Path::to_path_buf),
        }))
    }
}

impl Default for Executor {
    /// An executor whose sandbox helper is `eve_sandbox::isolate::default_helper()` (the small
    /// helper next to the running binary, else the binary itself) and whose egress sockets live in a
    /// private folder under the system's temporary folder.
    fn default() -> Self {
        Self::new(ExecConfig::from_env(
            eve_sandbox::isolate::default_helper(),
            std::env::temp_dir().join(format!("eve-run-{}", nix::unistd::geteuid())),
            &|name| std::env::var(name).ok(),
        ))
    }
}
