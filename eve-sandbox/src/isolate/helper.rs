//! The helper stages: the binary re-executed in a hidden mode, one stage per exec.
//!
//! Two stages because each step needs a different process: namespaces are entered by `unshare`
//! (stage 1), and PID 1 of a new PID namespace must be a child of that (stage 2). `unsafe` being
//! forbidden rules out `fork`/`pre_exec`, so each stage is a plain `std::process::Command` spawn
//! of the same binary; every exec costs the dynamic loader's start-up again (about a millisecond),
//! so there is no third one: stage 2 builds the view, then puts every restriction the command
//! must have (limits, uid, capabilities, `no_new_privs`, Landlock, seccomp) on itself and spawns
//! the command directly, which inherits them. That is safe because the reaper needs nothing the
//! restrictions take away: it only calls `waitpid`. A change of uid clears the parent-death
//! signal and the non-dumpable flag: both are set again right after it (see [`confine::apply`]).
//! What needs more stays in stage 1, outside the sandbox's PID namespace where the command cannot
//! see or signal it: bringing `lo` up and the egress forwarder (its listener and its relays).
//!
//! Stage 1 also sits in the new mount namespace, so stage 2's `pivot_root` moves its root too:
//! the forwarder reaches the proxy through the socket's path inside the view.

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, getgid, getuid};

use super::{Policy, SANDBOX_FAILURE, confine, net, view};

/// argv[1] of stage 1, which [`super::command`] builds.
pub(crate) const STAGE1: &str = "--eve-sandbox-stage1";
const STAGE2: &str = "--eve-sandbox-stage2";
/// argv[1] that makes a helper print [`PROTOCOL`] and exit: how [`super::default_helper`] tells
/// a helper of this build from a stale or foreign binary.
pub(crate) const PROTOCOL_ARG: &str = "--eve-sandbox-protocol";
/// What a helper of this build answers to [`PROTOCOL_ARG`]. The number changes whenever the
/// stages' argv or the policy's meaning does.
pub(crate) const PROTOCOL: &str = concat!("eve-sandbox ", env!("CARGO_PKG_VERSION"), " stages/2");
/// The program name that makes stage 2 report instead of spawning a command (see
/// [`super::probe`]).
pub(crate) const PROBE: &str = "--eve-sandbox-probe";

/// `/proc/self/exe` names this very binary in every stage, even after `pivot_root` hid its path.
const SELF_EXE: &str = "/proc/self/exe";

/// A sandbox failure: reported as one `eve sandbox: …` line, with an exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) code: i32,
}

impl Failure {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: SANDBOX_FAILURE,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// Whether stage 1 ran as root (no user namespace) or not (a user namespace where the process is
/// root with capabilities over its own namespaces only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Root,
    User,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Root => "root",
            Mode::User => "user",
        }
    }
    fn parse(s: &OsString) -> Result<Self> {
        match s.to_str() {
            Some("root") => Ok(Mode::Root),
            Some("user") => Ok(Mode::User),
            _ => Err(Failure::new("internal: bad stage mode argument")),
        }
    }
}

/// Runs the sandbox helper stage named by argv, and exits; returns at once when argv names none.
///
/// Call it first in `main()`, before any thread or async runtime exists.
pub fn helper_main() {
    let mut args = std::env::args_os();
    let _exe = args.next();
    let Some(stage) = args.next() else {
        return;
    };
    if stage == PROTOCOL_ARG {
        println!("{PROTOCOL}");
        std::process::exit(0);
    }
    let rest: Vec<OsString> = args.collect();
    let result = if stage == STAGE1 {
        stage1(rest)
    } else if stage == STAGE2 {
        stage2(rest)
    } else {
        return;
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            eprintln!("eve sandbox: {}", f.message);
            std::process::exit(f.code)
        }
    }
}

fn parse_policy(json: Option<&OsString>) -> Result<Policy> {
    let json = json
        .and_then(|j| j.to_str())
        .ok_or_else(|| Failure::new("missing sandbox policy argument"))?;
    serde_json::from_str(json).map_err(|e| Failure::new(format!("bad sandbox policy: {e}")))
}

/// Stage 1: enter the namespaces, bring up `lo` (and the egress forwarder's listener), spawn PID
/// 1 of the new PID namespace, relay proxy connections while it runs, forward its status.
fn stage1(rest: Vec<OsString>) -> Result<i32> {
    // Dies with its parent (the runtime); stage 2 dies with it in turn.
    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| Failure::new(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
    let policy = parse_policy(rest.first())?;
    let uid = getuid();
    let gid = getgid();
    let mode = if uid.is_root() {
        Mode::Root
    } else {
        Mode::User
    };
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if mode == Mode::User {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    unshare(flags).map_err(|e| Failure::new(explain_unshare(e, mode)))?;
    if mode == Mode::User {
        // Root inside, mapped to our own uid outside: stage 2 keeps its capabilities (over these
        // namespaces only) across exec.
        write_proc("/proc/self/setgroups", "deny")?;
        write_proc("/proc/self/uid_map", &format!("0 {} 1", uid.as_raw()))?;
        write_proc("/proc/self/gid_map", &format!("0 {} 1", gid.as_raw()))?;
    }
    net::loopback_up()?;
    let listener = match &policy.network {
        super::Network::Proxy { port, .. } => Some(net::listen(*port)?),
        super::Network::None => None,
    };
    let mut init = Command::new(SELF_EXE);
    init.arg(STAGE2).arg(mode.as_str()).args(&rest);
    let status = match listener {
        // The relays need no privilege: once init runs, none is left to them.
        Some(listener) => net::forward_while(
            listener,
            super::PROXY_SOCKET_IN_SANDBOX,
            init,
            confine::drop_all_capabilities,
        )?,
        None => init
            .status()
            .map_err(|e| Failure::new(format!("cannot start the sandbox's init process: {e}")))?,
    };
    Ok(code_of(status))
}

fn write_proc(path: &str, value: &str) -> Result<()> {
    fs::write(path, value).map_err(|e| {
        Failure::new(format!(
            "cannot write {path} (user namespace id mapping): {e}"
        ))
    })
}

/// The exit code that reports `status` to our own parent: the code, or 128+N for signal N.
fn code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => SANDBOX_FAILURE,
    }
}

/// Says what the kernel refused when `unshare` fails, naming the setting to change.
fn explain_unshare(e: Errno, mode: Mode) -> String {
    let read = |p: &str| fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if mode == Mode::User {
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return "user namespaces are disabled (kernel.unprivileged_userns_clone=0): \
                    set it to 1, or run eve as root"
                .into();
        }
        if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
            return "user namespaces are disabled (user.max_user_namespaces=0): raise it, \
                    or run eve as root"
                .into();
        }
        if e == Errno::EPERM
            && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref()
                == Some("1")
        {
            return "AppArmor forbids unprivileged user namespaces \
                    (kernel.apparmor_restrict_unprivileged_userns=1): set it to 0 or give the eve \
                    binary an AppArmor profile with `userns`"
                .into();
        }
    }
    match e {
        Errno::EINVAL => "unshare(2) refused the namespaces (EINVAL): the process was \
                          multithreaded (isolate::helper_main must run first in main) or the \
                          kernel lacks a namespace type (CONFIG_USER_NS, CONFIG_PID_NS, \
                          CONFIG_NET_NS…)"
            .into(),
        Errno::ENOSPC => {
            "the limit of namespaces is reached (/proc/sys/user/max_*_namespaces)".into()
        }
        Errno::EPERM => format!(
            "creating namespaces was refused (EPERM) for uid {}: a seccomp profile or security \
             module (container runtime, AppArmor, SELinux) forbids unshare(2)",
            getuid()
        ),
        other => format!("unshare(2) of the sandbox namespaces failed: {other}"),
    }
}

/// Stage 2: PID 1 of the new PID namespace. Builds the view, confines itself, spawns the command,
/// reaps, exits with the command's status (which ends the namespace and every process left in
/// it).
fn stage2(rest: Vec<OsString>) -> Result<i32> {
    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| Failure::new(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
    // The command must not ptrace or read the memory of its init.
    prctl::set_dumpable(false).map_err(|e| Failure::new(format!("prctl(PR_SET_DUMPABLE): {e}")))?;
    let mode = Mode::parse(
        rest.first()
            .ok_or_else(|| Failure::new("internal: missing stage mode"))?,
    )?;
    let policy = parse_policy(rest.get(1))?;
    let program = rest
        .get(2)
        .ok_or_else(|| Failure::new("no command to run"))?;
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::new(format!("cannot read the working directory: {e}")))?;
    let built = view::build(&policy, mode)?;
    let _ = nix::unistd::sethostname("eve-sandbox");
    if !built.contains(&cwd) {
        return Err(Failure::new(format!(
            "the working directory {} is not in the sandbox's view: add it to the policy's \
             read_write (or read_only) paths",
            cwd.display()
        )));
    }
    std::env::set_current_dir(&cwd).map_err(|e| {
        Failure::new(format!(
            "cannot enter the working directory {} in the sandbox: {e}",
            cwd.display()
        ))
    })?;
    if program == PROBE {
        let landlock = confine::apply(&policy, mode)?;
        let report = super::probe_report(mode == Mode::User, &landlock)
            .map_err(|e| Failure::new(format!("probe report: {e}")))?;
        println!("{report}");
        return Ok(0);
    }
    // From here on this init holds exactly what the command will hold, and needs no more: it
    // only waits for its children.
    confine::apply(&policy, mode)?;
    let child = Command::new(program)
        .args(&rest[3..])
        .spawn()
        .map_err(|err| {
            let code = if err.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            Failure {
                message: format!("cannot run `{}`: {err}", program.to_string_lossy()),
                code,
            }
        })?;
    reap_until(Pid::from_raw(child.id() as i32))
}

/// Reaps every child (orphans of the namespace are re-parented to us) until `command` ends.
fn reap_until(command: Pid) -> Result<i32> {
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => return Ok(code),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == command => return Ok(128 + sig as i32),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(Failure::new(format!("waiting for the command: {e}"))),
        }
    }
}
