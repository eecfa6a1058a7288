//! The `isolated` sandbox: run one command, and every process it starts, confined.
//!
//! eve runs model-written commands, script tools and hooks on behalf of an agent that may be
//! prompt-injected, so each one runs in a box built from kernel primitives by the eve binary
//! itself (nothing to install): its own mount, PID, network, IPC, UTS and cgroup namespaces (plus a
//! user namespace when eve is not root), a filesystem view holding only the system paths, the
//! policy's read-only and writable paths, a private `/tmp` and `HOME`; an unprivileged uid when eve
//! runs as root; no capabilities; `no_new_privs`; Landlock; a seccomp filter; resource limits; a
//! session of its own with no terminal at all (see `helper.rs`).
//!
//! How it runs. The binary re-executes itself in a hidden helper mode, so [`helper_main`] must be
//! the first call of `main()` (before any thread exists: a multithreaded process cannot create a
//! user namespace). The caller spawns the [`command`] it is given; then:
//! - **stage 1** (the caller's child, in the caller's process group) creates the namespaces,
//!   brings up `lo` (and the proxy forwarder, see [`Network::Proxy`]) and spawns stage 2,
//!   forwarding its exit status;
//! - **stage 2** is PID 1 of the new PID namespace: it builds the filesystem view and pivots into
//!   it, then applies limits, drops every capability, sets `no_new_privs`, Landlock and seccomp
//!   on itself, spawns the command (which inherits all of that, and gets the unprivileged uid
//!   from that spawn) and reaps every orphan until the command ends; it then exits, the PID namespace dies and the kernel kills every
//!   descendant, `setsid` daemons included.
//!
//! Exit status: the command's own, or 128+N when a signal N killed it. A failure of the sandbox
//! itself (a mount refused, a bad policy) prints one line `eve sandbox: …` on stderr and exits
//! [`SANDBOX_FAILURE`] (125, as `env` does), so it never looks like a tool's own error; a program
//! that cannot be found exits 127, one that cannot be executed 126.
//!
//! The environment of the command is the caller's `Command` environment, passed through untouched
//! (secrets travel in env, never in argv); the policy travels in argv as JSON and holds no secret.
//!
//! The warm path. A [`Pool`] keeps boxes whose namespaces and helper processes exist before their
//! call; [`Warm::start`] hands one the call (policy, argv, environment, working folder and stdio,
//! over a private socket), and from there it runs the same stage code as the cold path: see
//! `pool.rs` for what is prepared ahead and what stays per call.

mod cgroup;
mod confine;
mod helper;
mod net;
mod paths;
mod pool;
mod quota;
mod uids;
mod view;
mod wire;

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

pub use cgroup::{BOX_OVERHEAD_TASKS, BoxCgroup, Cgroups, Enforcement, Mechanism};
pub use helper::helper_main;
pub use paths::{CREDENTIALS, LeftOut, PathView, Protected, path_view, prepare_writable};
pub use pool::{Pool, Warm, WarmProcess};
pub use quota::{MAX_DEPTH as QUOTA_MAX_DEPTH, Quota};
pub use uids::{DEFAULT_UIDS, UidLease, UidRange, Uids, lock_dir as uid_lock_dir};

/// Exit code of the helper when the sandbox itself failed (as opposed to the command).
pub const SANDBOX_FAILURE: i32 = 125;

/// The uid (and gid) the command runs as when eve runs as root and the policy names none.
pub const DEFAULT_UID: u32 = 65534;

/// Where the proxy's Unix socket appears inside the sandbox when the network is [`Network::Proxy`].
pub const PROXY_SOCKET_IN_SANDBOX: &str = "/run/eve/egress.sock";

/// What one isolated command may see and do. Serialised as JSON into the helper's argv; it holds
/// no secrets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Extra read-only paths (executable too), bound at the same absolute path: the build's files,
    /// the folders `PATH` adds (see [`path_view`]), `sandbox.yaml` `read:`. Paths
    /// that do not exist are skipped. The system paths (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`
    /// without its secrets, `/opt`) are always there and need not be listed.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Writable paths, bound at the same absolute path: the session workspace, `sandbox.yaml`
    /// `write:`. Each must exist. A path listed in both lists is writable. No policy path (nor
    /// `home`) may lie inside a writable path: the command could have replaced it with a symlink
    /// (the helper refuses such a policy). When eve runs as root the tree must be writable by the
    /// sandbox uid: see [`prepare_writable`].
    #[serde(default)]
    pub read_write: Vec<PathBuf>,
    /// The network the command gets. Its own `lo` is always up; the host's is never reachable.
    #[serde(default)]
    pub network: Network,
    /// Resource limits of the command (each process of it: these are `setrlimit` limits).
    #[serde(default = "Limits::defaults")]
    pub limits: Limits,
    /// The uid (and gid) to run as when eve runs as root; [`DEFAULT_UID`] when absent. Ignored
    /// when eve is not root: the command then keeps eve's uid (it shows as 0 inside its user
    /// namespace, with no capability at all).
    #[serde(default)]
    pub uid: Option<u32>,
    /// The `HOME` to recreate as a private, writable, empty tmpfs (owned by the sandbox uid), with
    /// only the read-only paths under it bound into it: `~/.cache` writes work and go nowhere,
    /// `~/.ssh` and `~/.aws` are absent. Without it, nothing of `HOME` exists but what the lists
    /// name.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// The box's own cgroup ([`Cgroups::create`], its limits set with [`BoxCgroup::limit`]): on
    /// the cold path stage 1 joins it before anything of the box runs. A warm box joined its own
    /// before its call ([`Warm::start`] fills this in).
    #[serde(default)]
    pub cgroup: Option<CgroupSpec>,
    /// A writable folder whose size the call may not grow past a bound, enforced while it runs
    /// (see [`Quota`]).
    #[serde(default)]
    pub quota: Option<Quota>,
}

/// The cgroup a box runs in (from [`BoxCgroup::spec`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupSpec {
    /// Its folder in each hierarchy.
    pub dirs: Vec<PathBuf>,
    /// Whether it bounds the box's processes (`pids.max`). Then, when eve is root,
    /// `RLIMIT_NPROC` (a count per uid over the whole host, which boxes sharing a uid would
    /// share) is lifted: the cgroup counts the box's processes, and only the box's.
    #[serde(default)]
    pub processes: bool,
}

/// Network access of an isolated command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Network {
    /// No way out: a fresh network namespace holding only its own loopback.
    #[default]
    None,
    /// The only way out is eve's egress proxy: inside, `127.0.0.1:port` is forwarded (by the
    /// sandbox's stage 1, outside its PID namespace and the command's reach) to the proxy's Unix `socket` on the host; the
    /// socket itself also appears at [`PROXY_SOCKET_IN_SANDBOX`]. The caller sets `HTTP_PROXY` and
    /// friends in the command's environment to `http://127.0.0.1:port`.
    Proxy {
        /// The proxy's Unix socket on the host.
        socket: PathBuf,
        /// The loopback port the command connects to inside the sandbox.
        port: u16,
    },
}

/// `setrlimit` limits applied to every process of the command. `None` leaves the limit as
/// inherited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Bytes of data memory per process (`RLIMIT_DATA`: heap and private writable mappings; unlike
    /// `RLIMIT_AS` it leaves the large address-space reservations of V8, Go or the JVM alone).
    /// With a [`CgroupSpec`], the caller also bounds the whole box by it ([`BoxCgroup::limit`]).
    #[serde(default)]
    pub memory: Option<u64>,
    /// Processes (threads included) of the command's user (`RLIMIT_NPROC`). When eve runs as root
    /// the count is that of the box's uid on the whole host (boxes sharing a uid share it);
    /// otherwise it is counted in the sandbox's own user namespace. With a [`CgroupSpec`] that
    /// bounds processes, the cgroup counts them instead (see [`CgroupSpec::processes`]).
    #[serde(default)]
    pub processes: Option<u64>,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`; a bigger write fails `EFBIG`).
    #[serde(default)]
    pub file_size: Option<u64>,
    /// CPU seconds per process (`RLIMIT_CPU`: the process gets `SIGXCPU`, and `SIGKILL` a CPU
    /// second later).
    #[serde(default)]
    pub cpu_seconds: Option<u64>,
    /// Bytes of each private tmpfs (`/tmp`, `HOME`, `/dev/shm`): they live in memory, so without
    /// a cap a command could fill the host's RAM through them.
    #[serde(default)]
    pub tmpfs_size: Option<u64>,
}

impl Limits {
    /// Limits that let ordinary work run (`pip install` of large wheels, `git clone`, a Python
    /// script, a parallel build) while stopping runaway processes: 4 GiB of data memory per
    /// process, 1024 processes, 8 GiB files, 600 CPU seconds per process, 2 GiB per tmpfs.
    pub fn defaults() -> Self {
        Limits {
            memory: Some(4 << 30),
            processes: Some(1024),
            file_size: Some(8 << 30),
            cpu_seconds: Some(600),
            tmpfs_size: Some(2 << 30),
        }
    }

    /// No limit at all beyond what eve itself runs with.
    pub fn none() -> Self {
        Limits {
            memory: None,
            processes: None,
            file_size: None,
            cpu_seconds: None,
            tmpfs_size: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::defaults()
    }
}

/// File name of the small helper binary installed next to `eve` (`cargo install` puts both in
/// the same folder): the sandbox's stages re-execute it instead of the large `eve` binary, whose
/// start-up (mapping and relocating tens of megabytes, twice per isolated call) costs several
/// milliseconds more.
pub const HELPER_NAME: &str = "eve-sandbox-helper";

/// The helper the runtime should pass to [`command`] and [`probe`]: [`HELPER_NAME`] next to the
/// running executable when it is there and speaks this build's stage protocol, else the running
/// executable itself (whose `main` must then start with [`helper_main`], as `eve`'s does).
///
/// Decided once per process (one run of the helper asking its protocol, about a millisecond), so
/// a stale or foreign file of that name is never used.
pub fn default_helper() -> PathBuf {
    static CHOSEN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("eve"));
            match exe.parent().map(|dir| dir.join(HELPER_NAME)) {
                Some(helper) if helper != exe && speaks_protocol(&helper) => helper,
                _ => exe,
            }
        })
        .clone()
}

/// Whether `helper` answers [`helper::PROTOCOL_ARG`] with this build's [`helper::PROTOCOL`].
pub fn speaks_protocol(helper: &Path) -> bool {
    if !helper.is_file() {
        return false;
    }
    Command::new(helper)
        .arg(helper::PROTOCOL_ARG)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .env_clear()
        .output()
        .is_ok_and(|out| {
            out.status.success() && out.stdout.trim_ascii() == helper::PROTOCOL.as_bytes()
        })
}

/// Why a [`command`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A policy path is not valid UTF-8, so it cannot travel as JSON.
    #[error(
        "sandbox policy path {0:?} is not valid UTF-8: rename it or leave it out of the policy"
    )]
    NonUtf8Path(PathBuf),
    /// A policy path is relative.
    #[error("sandbox policy path {0:?} is relative: give an absolute path")]
    RelativePath(PathBuf),
    /// The quota's folder is not one of the policy's writable paths.
    #[error(
        "the sandbox quota's folder {0:?} is not one of the writable paths: quota a folder the \
         command may write"
    )]
    QuotaPath(PathBuf),
    /// A warm box could not take its call (it ended, or its socket failed): use the cold path.
    #[error("the warm sandbox could not take the call: {0}")]
    Warm(#[source] io::Error),
}

/// The `std::process::Command` that runs `program args…` isolated by `policy`, through
/// `helper_exe` (a binary whose `main` starts with [`helper_main`], usually the current
/// executable).
///
/// The caller adds its environment (passed to the command untouched), the working directory (it
/// must be inside the view: a read-write or read-only path), stdio and process group, and may
/// wrap it in `tokio::process::Command::from`. Killing the process group on timeout kills
/// everything the command started. `program` is looked up on the command's `PATH` inside the
/// view.
pub fn command<S: AsRef<OsStr>>(
    helper_exe: &Path,
    policy: &Policy,
    program: impl AsRef<OsStr>,
    args: impl IntoIterator<Item = S>,
) -> Result<Command, Error> {
    check_paths(policy)?;
    let json = serde_json::to_string(policy).map_err(|_| {
        // Serialisation of this plain struct fails only on a non-UTF-8 path.
        let bad = policy
            .read_only
            .iter()
            .chain(&policy.read_write)
            .chain(policy.home.iter())
            .chain(match &policy.network {
                Network::Proxy { socket, .. } => Some(socket),
                Network::None => None,
            })
            .find(|p| p.to_str().is_none())
            .cloned()
            .unwrap_or_default();
        Error::NonUtf8Path(bad)
    })?;
    let mut cmd = Command::new(helper_exe);
    cmd.arg(helper::STAGE1).arg(json).arg(program).args(args);
    Ok(cmd)
}

fn check_paths(policy: &Policy) -> Result<(), Error> {
    let socket = match &policy.network {
        Network::Proxy { socket, .. } => Some(socket),
        Network::None => None,
    };
    let cgroups = policy.cgroup.iter().flat_map(|c| &c.dirs);
    let quota = policy.quota.iter().map(|q| &q.path);
    for p in policy
        .read_only
        .iter()
        .chain(&policy.read_write)
        .chain(policy.home.iter())
        .chain(socket)
        .chain(cgroups)
        .chain(quota)
    {
        if p.is_relative() {
            return Err(Error::RelativePath(p.clone()));
        }
        if p.to_str().is_none() {
            return Err(Error::NonUtf8Path(p.clone()));
        }
    }
    if let Some(q) = &policy.quota
        && !policy.read_write.contains(&q.path)
    {
        return Err(Error::QuotaPath(q.path.clone()));
    }
    Ok(())
}

/// What [`probe`] found working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// Whether a user namespace is used (eve is not root).
    pub user_namespace: bool,
    /// The uid the command runs as, seen from inside.
    pub uid: u32,
    /// Landlock's state for the command: `fully enforced`, `partially enforced` (an older kernel:
    /// the mount namespace still confines the view) or `not enforced` (Landlock is off in this
    /// kernel; the view, uid, seccomp and limits still apply).
    pub landlock: String,
}

/// Isolation cannot run on this machine; the message names what the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unsupported {
    /// What is missing, e.g. "user namespaces are disabled (kernel.unprivileged_userns_clone=0)".
    pub message: String,
}

/// Runs a trivial isolated command once with a default policy and reports what works, or exactly
/// what the kernel refused. Call it at start-up: tools that need isolation must not run when it
/// fails.
pub fn probe(helper_exe: &Path) -> Result<Support, Unsupported> {
    let policy = Policy {
        limits: Limits::defaults(),
        ..Policy::default()
    };
    let mut cmd = command(
        helper_exe,
        &policy,
        helper::PROBE,
        std::iter::empty::<&str>(),
    )
    .map_err(|e| Unsupported {
        message: e.to_string(),
    })?;
    cmd.current_dir("/")
        .stdin(std::process::Stdio::null())
        .env_clear();
    let out = cmd.output().map_err(|e| Unsupported {
        message: format!(
            "cannot start the sandbox helper {}: {e}",
            helper_exe.display()
        ),
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let line = stderr
            .lines()
            .find_map(|l| l.strip_prefix("eve sandbox: "))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!(
                    "the sandbox helper failed ({}): {}",
                    out.status,
                    stderr.trim()
                )
            });
        return Err(Unsupported { message: line });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| Unsupported {
        message: format!("the sandbox helper answered the probe with something unexpected: {e}"),
    })
}

/// Runs the whole isolation setup without a command to exec, for [`probe`].
pub(crate) fn probe_report(user_namespace: bool, landlock: &str) -> io::Result<String> {
    let report = Support {
        user_namespace,
        uid: nix::unistd::getuid().as_raw(),
        landlock: landlock.to_owned(),
    };
    serde_json::to_string(&report).map_err(io::Error::other)
}
