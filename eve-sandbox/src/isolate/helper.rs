//! The helper stages: the binary re-executed in a hidden mode, one stage per exec.
//!
//! Two stages because each step needs a different process: namespaces are entered by `unshare`
//! (stage 1), and PID 1 of a new PID namespace must be a child of that (stage 2). `unsafe` being
//! forbidden rules out `fork`/`pre_exec`, so each stage is a plain `std::process::Command` spawn
//! of the same binary; every exec costs the dynamic loader's start-up again (about a millisecond),
//! so there is no third one: stage 2 builds the view, then puts every restriction the command
//! must have (limits, uid, capabilities, `no_new_privs`, Landlock, seccomp) on itself and spawns
//! the command directly, which inherits them. Before any of that, stage 2 leaves the caller's
//! terminal behind: a session of its own, `/dev/null` for a standard stream that is a terminal,
//! every other inherited descriptor closed (see `detach_from_terminal`). That is safe because the reaper needs nothing the
//! restrictions take away: it only calls `waitpid`. A change of uid clears the parent-death
//! signal and the non-dumpable flag: both are set again right after it (see [`confine::apply`]).
//! What needs more stays in stage 1, outside the sandbox's PID namespace where the command cannot
//! see or signal it: bringing `lo` up and the egress forwarder (its listener and its relays).
//!
//! Stage 1 also sits in the new mount namespace, so stage 2's `pivot_root` moves its root too:
//! the forwarder reaches the proxy through the socket's path inside the view.
//!
//! A **warm box** ([`super::pool`]) runs the same two stages split at the call: warm stage 1
//! ([`WARM1`]) enters the namespaces, brings `lo` up and spawns warm stage 2 ([`WARM2`]), which
//! compiles the seccomp filters, builds the part of the view no policy changes
//! ([`view::prepare`]) and reports ready; both then wait. When the call's spec arrives (over
//! stage 1's stdin, a Unix socket: see [`super::wire`]) stage 1 takes the call's stdio, binds the
//! forwarder's listener if the call has a network, hands the spec on to its init, and from there
//! both run exactly what the cold stages run: the view is finished, the init confines itself and
//! spawns the command, and the box ends with it. A box serves one call. Once its init has
//! prepared the view, warm stage 1's root is the scratch root too (see [`view`]): it opens the
//! call's quota folder beneath the handle on the host's root it took before.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, getgid, getppid, getuid};
use seccompiler::BpfProgram;

use super::wire::{self, Call};
use super::{Policy, SANDBOX_FAILURE, cgroup, confine, net, quota, view};

/// argv[1] of stage 1, which [`super::command`] builds.
pub(crate) const STAGE1: &str = "--eve-sandbox-stage1";
const STAGE2: &str = "--eve-sandbox-stage2";
/// argv[1] of a warm box's stage 1, which [`super::pool`] starts; argv[2] is the pid of the
/// process that started it.
pub(crate) const WARM1: &str = "--eve-sandbox-warm";
/// argv[1] of a warm box's init.
const WARM2: &str = "--eve-sandbox-warm-init";
/// argv[1] that makes a helper print [`PROTOCOL`] and exit: how [`super::default_helper`] tells
/// a helper of this build from a stale or foreign binary.
pub(crate) const PROTOCOL_ARG: &str = "--eve-sandbox-protocol";
/// What a helper of this build answers to [`PROTOCOL_ARG`]. The number changes whenever the
/// stages' argv, the policy's meaning or what the stages guarantee does (4: the box leaves the
/// caller's terminal and inherited descriptors behind; 5: the warm stage's cgroup argument, the
/// policy's `cgroup` and `quota`), so a helper left from an older build is never used.
pub(crate) const PROTOCOL: &str = concat!("eve-sandbox ", env!("CARGO_PKG_VERSION"), " stages/5");
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
    } else if stage == WARM1 {
        warm_stage1(rest)
    } else if stage == WARM2 {
        warm_stage2(rest)
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
    // Before anything else of the box exists: every process of it is created inside.
    join_cgroup(policy.cgroup.as_ref())?;
    let mode = enter_namespaces()?;
    net::loopback_up()?;
    let listener = match &policy.network {
        super::Network::Proxy { port, .. } => Some(net::listen(*port)?),
        super::Network::None => None,
    };
    let mut init = Command::new(SELF_EXE);
    init.arg(STAGE2).arg(mode.as_str()).args(&rest);
    if let Some(quota) = &policy.quota {
        return supervise(init, listener, quota);
    }
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

/// Joins the box's cgroup (see [`super::cgroup`]).
fn join_cgroup(spec: Option<&super::CgroupSpec>) -> Result<()> {
    let Some(spec) = spec else { return Ok(()) };
    cgroup::join_self(&spec.dirs)
        .map_err(|e| Failure::new(format!("cannot join the box's cgroup: {e}")))
}

/// Cold stage 1 with a quota: runs `init` (relaying `listener` when there is one) while the
/// quota's watch looks on; reports and undoes a passed quota (see [`super::quota`]).
fn supervise(
    init: Command,
    listener: Option<std::net::TcpListener>,
    quota: &super::Quota,
) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Failure::new(format!("cannot start the sandbox's event loop: {e}")))?;
    // Before the init exists: the watch's start is earlier than anything the call changes.
    let watch = quota::Watch::new(quota).map_err(Failure::new)?;
    let mut child = {
        let _entered = rt.enter();
        tokio::process::Command::from(init)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start the sandbox's init process: {e}")))?
    };
    // Only the watch's file access stays: the relays need nothing.
    confine::drop_capabilities_but_watch()?;
    watch_until(&rt, &mut child, listener, watch)
}

/// Waits for the init (relaying `listener` meanwhile) under the quota's watch; the code to
/// report: the command's, or [`SANDBOX_FAILURE`] with a line on stderr when the quota was passed.
fn watch_until(
    rt: &tokio::runtime::Runtime,
    child: &mut tokio::process::Child,
    listener: Option<std::net::TcpListener>,
    mut watch: quota::Watch,
) -> Result<i32> {
    let pid = child
        .id()
        .map(|p| Pid::from_raw(p as i32))
        .ok_or_else(|| Failure::new("the sandbox's init ended at once"))?;
    watch.set_init(pid);
    let status = rt.block_on(async {
        let waited = async {
            match listener {
                Some(listener) => {
                    let listener = net::register(listener)?;
                    net::relay_until(listener, super::PROXY_SOCKET_IN_SANDBOX.into(), child).await
                }
                None => child.wait().await.map_err(|e| {
                    Failure::new(format!("waiting for the sandbox's init process: {e}"))
                }),
            }
        };
        tokio::select! {
            status = waited => status,
            () = watch.run() => child.wait().await.map_err(|e| {
                Failure::new(format!("waiting for the sandbox's init process: {e}"))
            }),
        }
    })?;
    match watch.finish() {
        Some(line) => {
            eprintln!("eve sandbox: {line}");
            Ok(SANDBOX_FAILURE)
        }
        None => Ok(code_of(status)),
    }
}

/// Unshares every namespace of the sandbox (a user namespace too unless root) and writes the uid
/// and gid maps; returns which mode that was.
fn enter_namespaces() -> Result<Mode> {
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
    Ok(mode)
}

/// The Unix socket a warm stage was given as its stdin.
fn stdin_socket() -> Result<UnixStream> {
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Failure::new(format!("internal: the warm box has no control socket: {e}")))?;
    Ok(UnixStream::from(fd))
}

/// Makes the call's three descriptors this process's stdin, stdout and stderr.
fn take_stdio(fds: Vec<OwnedFd>) -> Result<()> {
    let [stdin, stdout, stderr] = <[OwnedFd; 3]>::try_from(fds)
        .map_err(|_| Failure::new("internal: a warm box's call must carry three descriptors"))?;
    let fail = |e: Errno| Failure::new(format!("cannot take the call's stdio: {e}"));
    nix::unistd::dup2_stderr(&stderr).map_err(fail)?;
    nix::unistd::dup2_stdin(&stdin).map_err(fail)?;
    nix::unistd::dup2_stdout(&stdout).map_err(fail)?;
    Ok(())
}

fn parse_call(bytes: &[u8]) -> Result<Call> {
    serde_json::from_slice(bytes).map_err(|e| Failure::new(format!("bad sandbox call: {e}")))
}

/// Warm stage 1: everything of stage 1 that does not depend on the call, then one call.
fn warm_stage1(rest: Vec<OsString>) -> Result<i32> {
    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| Failure::new(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
    let control = stdin_socket()?;
    // The starter may have died before the signal was armed: then nobody will ever call.
    let starter = rest.first().and_then(|p| p.to_str()?.parse::<i32>().ok());
    if starter != Some(getppid().as_raw()) {
        return Ok(SANDBOX_FAILURE);
    }
    let joined = match rest.get(1).and_then(|j| j.to_str()) {
        Some(json) => serde_json::from_str::<super::CgroupSpec>(json)
            .map_err(|e| Failure::new(format!("internal: bad cgroup argument: {e}")))
            .and_then(|spec| join_cgroup(Some(&spec))),
        None => Ok(()),
    };
    match joined.and_then(|()| warm_stage1_serve(&control)) {
        Ok(code) => Ok(code),
        Err(f) => {
            let _ = wire::say(&control, &format!("error: {}", f.message));
            Err(f)
        }
    }
}

fn warm_stage1_serve(control: &UnixStream) -> Result<i32> {
    let mode = enter_namespaces()?;
    // The init moves this process's root too when it prepares the view: the host's tree stays
    // reachable through this handle, for the call's quota folder.
    let host_root = quota::open_root()
        .map_err(|e| Failure::new(format!("cannot open the host's root: {e}")))?;
    net::loopback_up()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Failure::new(format!("cannot start the warm box's event loop: {e}")))?;
    let (ours, theirs) = UnixStream::pair()
        .map_err(|e| Failure::new(format!("cannot create the warm box's socket: {e}")))?;
    let mut init = Command::new(SELF_EXE);
    init.arg(WARM2)
        .arg(mode.as_str())
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = {
        let _entered = rt.enter();
        tokio::process::Command::from(init)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start the sandbox's init process: {e}")))?
    };
    match wire::hear(&ours) {
        Ok(Some(line)) if line == "ready" => {}
        Ok(Some(line)) => return Err(Failure::new(line)),
        Ok(None) | Err(_) => {
            return Err(Failure::new(
                "the warm box's init ended before it was ready",
            ));
        }
    }
    wire::say(control, "ready")
        .map_err(|e| Failure::new(format!("cannot report the warm box ready: {e}")))?;
    let Some((bytes, fds)) =
        wire::recv(control).map_err(|e| Failure::new(format!("cannot receive the call: {e}")))?
    else {
        // Let go unused (the pool is shutting down): the init dies with us.
        return Ok(0);
    };
    let call = parse_call(&bytes)?;
    // From here on failures are the call's and go to its stderr, as on the cold path.
    let borrowed: Vec<_> = fds
        .iter()
        .map(|f| f.try_clone())
        .collect::<std::io::Result<_>>()
        .map_err(|e| Failure::new(format!("cannot take the call's stdio: {e}")))?;
    take_stdio(borrowed)?;
    let listener = match &call.policy.network {
        super::Network::Proxy { port, .. } => Some(net::listen(*port)?),
        super::Network::None => None,
    };
    // Before the init has the call: the watch's start is earlier than anything it changes.
    let watch = match &call.policy.quota {
        Some(quota) => Some(quota::Watch::new_beneath(quota, &host_root).map_err(Failure::new)?),
        None => None,
    };
    let refs: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    wire::send(&ours, &bytes, &refs)
        .map_err(|e| Failure::new(format!("cannot hand the call to the sandbox's init: {e}")))?;
    drop(fds);
    drop(ours);
    let code = match watch {
        Some(watch) => {
            // Only the watch's file access stays: the relays need nothing.
            confine::drop_capabilities_but_watch()?;
            watch_until(&rt, &mut child, listener, watch)?
        }
        None => code_of(match listener {
            // The relays need no privilege: once init has the call, none is left to them.
            Some(listener) => rt.block_on(async {
                confine::drop_all_capabilities()?;
                let listener = net::register(listener)?;
                net::relay_until(listener, super::PROXY_SOCKET_IN_SANDBOX.into(), &mut child).await
            })?,
            None => rt.block_on(child.wait()).map_err(|e| {
                Failure::new(format!("waiting for the sandbox's init process: {e}"))
            })?,
        }),
    };
    // The init's exit killed everything in its PID namespace: the call is over. Let go of its
    // stdio (so its readers see the end now) and report the status before this process's exit
    // tears the namespaces down, which the caller need not wait for.
    if let Ok(null) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
    let _ = wire::say(control, &format!("exit {code}"));
    Ok(code)
}

/// Warm stage 2: the init of a warm box. Compiles the seccomp filters, reports ready, waits for
/// the call, then runs it as [`stage2`] does.
fn warm_stage2(rest: Vec<OsString>) -> Result<i32> {
    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| Failure::new(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
    prctl::set_dumpable(false).map_err(|e| Failure::new(format!("prctl(PR_SET_DUMPABLE): {e}")))?;
    let socket = stdin_socket()?;
    let prepared = Mode::parse(
        rest.first()
            .ok_or_else(|| Failure::new("internal: missing stage mode"))?,
    )
    .and_then(|mode| Ok((mode, confine::seccomp_programs()?, view::prepare()?)));
    let (mode, filters, base) = match prepared {
        Ok(p) => p,
        Err(f) => {
            let _ = wire::say(&socket, &format!("error: {}", f.message));
            return Err(f);
        }
    };
    wire::say(&socket, "ready")
        .map_err(|e| Failure::new(format!("cannot report the warm box ready: {e}")))?;
    let Some((bytes, fds)) =
        wire::recv(&socket).map_err(|e| Failure::new(format!("cannot receive the call: {e}")))?
    else {
        return Ok(0);
    };
    take_stdio(fds)?;
    drop(socket);
    let call = parse_call(&bytes)?;
    let args: Vec<OsString> = call.args.iter().map(OsString::from).collect();
    run_init(
        mode,
        &call.policy,
        &call.cwd,
        OsStr::new(&call.program),
        &args,
        Some(&call.env),
        &filters,
        Some(base),
    )
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
    let filters = confine::seccomp_programs()?;
    run_init(
        mode,
        &policy,
        &cwd,
        program,
        &rest[3..],
        None,
        &filters,
        None,
    )
}

/// The init's work once it knows the call: build the view (or finish `base`, prepared before the
/// call), enter `cwd`, confine itself, spawn `program args…` (with `env` when given, else the
/// inherited environment), reap until it ends.
#[allow(clippy::too_many_arguments)]
fn run_init(
    mode: Mode,
    policy: &Policy,
    cwd: &Path,
    program: &OsStr,
    args: &[OsString],
    env: Option<&[(String, String)]>,
    filters: &[BpfProgram],
    base: Option<view::Base>,
) -> Result<i32> {
    let built = match base {
        Some(base) => {
            // Between the phases `/dev` and `/proc` are the prepared view's.
            detach_from_terminal(Path::new(view::NEW))?;
            view::finish(base, policy, mode)?
        }
        None => {
            detach_from_terminal(Path::new("/"))?;
            view::build(policy, mode)?
        }
    };
    let _ = nix::unistd::sethostname("eve-sandbox");
    if !built.contains(cwd) {
        return Err(Failure::new(format!(
            "the working directory {} is not in the sandbox's view: add it to the policy's \
             read_write (or read_only) paths",
            cwd.display()
        )));
    }
    std::env::set_current_dir(cwd).map_err(|e| {
        Failure::new(format!(
            "cannot enter the working directory {} in the sandbox: {e}",
            cwd.display()
        ))
    })?;
    if program == OsStr::new(PROBE) {
        let landlock = confine::apply(policy, mode, filters)?;
        let report = super::probe_report(mode == Mode::User, &landlock)
            .map_err(|e| Failure::new(format!("probe report: {e}")))?;
        println!("{report}");
        return Ok(0);
    }
    // From here on this init holds exactly what the command will hold, and needs no more: it
    // only waits for its children.
    confine::apply(policy, mode, filters)?;
    let mut command = Command::new(program);
    command.args(args);
    if let Some(env) = env {
        command
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    let child = command.spawn().map_err(|err| {
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

/// Leaves the caller's terminal behind, before anything of the call runs: a session of our own
/// (so the box has no controlling terminal: `/dev/tty` cannot be opened, `tcsetpgrp` and
/// `TIOCSCTTY` have nothing to act on, and the terminal's signals never reach the box), `/dev/null`
/// in place of any of the three standard streams that is a terminal, and every other descriptor
/// this process inherited closed (eve's own are close-on-exec, but eve may have inherited open
/// ones, a terminal among them, from whatever started it).
///
/// The init is never a process group leader (stage 1 spawns it in its own group), so `setsid`
/// cannot fail for that reason; if it fails anyway, the call fails rather than run attached.
/// `root` is where `/dev/null` and this process's `/proc` are now.
fn detach_from_terminal(root: &Path) -> Result<()> {
    nix::unistd::setsid().map_err(|e| {
        Failure::new(format!(
            "cannot start a session of the sandbox's own (setsid: {e}): the command would share \
             the caller's terminal"
        ))
    })?;
    use std::io::IsTerminal;
    let terminal = [
        std::io::stdin().is_terminal(),
        std::io::stdout().is_terminal(),
        std::io::stderr().is_terminal(),
    ];
    if terminal.contains(&true) {
        let null = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(root.join("dev/null"))
            .map_err(|e| Failure::new(format!("cannot open /dev/null: {e}")))?;
        let fail =
            |e: Errno| Failure::new(format!("cannot put /dev/null in place of a terminal: {e}"));
        if terminal[1] || terminal[2] {
            eprintln!(
                "eve sandbox: note: the command's {} a terminal, which a box never holds: it gets \
                 /dev/null instead (give it a pipe to keep its output)",
                match terminal {
                    [_, true, true] => "stdout and stderr are",
                    [_, true, false] => "stdout is",
                    _ => "stderr is",
                }
            );
        }
        if terminal[0] {
            nix::unistd::dup2_stdin(&null).map_err(fail)?;
        }
        if terminal[1] {
            nix::unistd::dup2_stdout(&null).map_err(fail)?;
        }
        if terminal[2] {
            nix::unistd::dup2_stderr(&null).map_err(fail)?;
        }
    }
    close_inherited_descriptors(root)
}

/// Closes every descriptor above the standard three. Called while this process owns none of them
/// itself (the warm path's socket and the call's descriptors are gone by then).
fn close_inherited_descriptors(root: &Path) -> Result<()> {
    let fds: Vec<i32> = fs::read_dir(root.join("proc/self/fd"))
        .map_err(|e| Failure::new(format!("cannot list the inherited descriptors: {e}")))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // The listing's own descriptor is among them, already closed: EBADF is expected.
        match nix::unistd::close(fd) {
            Ok(()) | Err(Errno::EBADF) => {}
            Err(e) => {
                return Err(Failure::new(format!(
                    "cannot close the inherited descriptor {fd}: {e}"
                )));
            }
        }
    }
    Ok(())
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
