//! The restrictions the sandbox's init (stage 2) puts on itself once the view is built, right
//! before it spawns the command, which inherits every one of them.
//!
//! Order matters: limits first (lowering them needs nothing, but raising is impossible later);
//! the capability bounding set is emptied while we still hold `CAP_SETPCAP`; then the uid drop
//! (root only), every remaining capability set cleared, `no_new_privs`, Landlock, and last the seccomp filter. The command has no capability and can never regain one: the bounding set is
//! empty and `no_new_privs` ignores setuid bits and file capabilities.

use std::collections::BTreeMap;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};
use nix::sys::resource::{Resource, setrlimit};
use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use super::helper::{Failure, Mode, Result};
use super::{DEFAULT_UID, Policy, view};

/// Applies every restriction to the current process, `filters` (from [`seccomp_programs`]) last;
/// returns Landlock's state in words.
pub(crate) fn apply(policy: &Policy, mode: Mode, filters: &[BpfProgram]) -> Result<String> {
    limits(policy, mode)?;
    caps::clear(None, caps::CapSet::Bounding)
        .map_err(|e| Failure::new(format!("cannot empty the capability bounding set: {e}")))?;
    let keep = caps::CapsHashSet::new();
    if mode == Mode::Root {
        let id = sandbox_uid(policy)?;
        give_stdio_pipes(id)?;
        setgroups(&[]).map_err(|e| Failure::new(format!("setgroups([]): {e}")))?;
        setgid(Gid::from_raw(id)).map_err(|e| Failure::new(format!("setgid({id}): {e}")))?;
        setuid(Uid::from_raw(id)).map_err(|e| Failure::new(format!("setuid({id}): {e}")))?;
        // The uid change cleared both: the init must still die with stage 1, and the
        // command (now of the same uid) must not read the init's memory or environment.
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
            .map_err(|e| Failure::new(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
        nix::sys::prctl::set_dumpable(false)
            .map_err(|e| Failure::new(format!("prctl(PR_SET_DUMPABLE): {e}")))?;
    }
    clear_capability_sets(&keep)?;
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| Failure::new(format!("prctl(PR_SET_NO_NEW_PRIVS): {e}")))?;
    let landlock = landlock(policy)?;
    for prog in filters {
        seccompiler::apply_filter(prog)
            .map_err(|e| Failure::new(format!("cannot install the seccomp filter: {e}")))?;
    }
    Ok(landlock)
}

/// The uid (and gid) the command runs as when eve runs as root.
pub(crate) fn sandbox_uid(policy: &Policy) -> Result<u32> {
    let id = policy.uid.unwrap_or(DEFAULT_UID);
    if id == 0 {
        return Err(Failure::new(
            "the sandbox uid cannot be 0: choose an unprivileged uid in the policy",
        ));
    }
    Ok(id)
}

/// Empties every capability set of the calling thread, the bounding set included.
pub(crate) fn drop_all_capabilities() -> Result<()> {
    caps::clear(None, caps::CapSet::Bounding)
        .map_err(|e| Failure::new(format!("cannot empty the capability bounding set: {e}")))?;
    clear_capability_sets(&caps::CapsHashSet::new())
}

/// What stage 1 keeps while it relays and watches a quota: reading and changing the files of
/// the quota's folder whatever their owner and mode (the command could otherwise hide what it
/// wrote in a folder it made unreadable), and killing the box's init, which runs as another
/// uid. The bounding set is emptied all the same.
pub(crate) fn drop_capabilities_but_watch() -> Result<()> {
    caps::clear(None, caps::CapSet::Bounding)
        .map_err(|e| Failure::new(format!("cannot empty the capability bounding set: {e}")))?;
    let keep: caps::CapsHashSet = [
        caps::Capability::CAP_DAC_OVERRIDE,
        caps::Capability::CAP_DAC_READ_SEARCH,
        caps::Capability::CAP_FOWNER,
        caps::Capability::CAP_KILL,
    ]
    .into_iter()
    .collect();
    clear_capability_sets(&keep)
}

/// Leaves only `keep` in the effective and permitted sets; empties the others.
fn clear_capability_sets(keep: &caps::CapsHashSet) -> Result<()> {
    for set in [caps::CapSet::Ambient, caps::CapSet::Inheritable] {
        caps::clear(None, set)
            .map_err(|e| Failure::new(format!("cannot clear the {set:?} capabilities: {e}")))?;
    }
    // Effective first: it must stay a subset of permitted.
    for set in [caps::CapSet::Effective, caps::CapSet::Permitted] {
        caps::set(None, set, keep)
            .map_err(|e| Failure::new(format!("cannot clear the {set:?} capabilities: {e}")))?;
    }
    Ok(())
}

/// Hands the stdio pipes (eve's, owned by root with mode 0600) to the sandbox uid, so that
/// `echo > /dev/stderr`, which reopens them through `/proc/self/fd`, works as it does unconfined.
/// Only pipes and sockets: a terminal or file given as stdio keeps its owner.
fn give_stdio_pipes(id: u32) -> Result<()> {
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    for fd in [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()] {
        let Ok(st) = nix::sys::stat::fstat(fd) else {
            continue; // closed
        };
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFIFO || kind == libc::S_IFSOCK {
            nix::unistd::fchown(fd, Some(Uid::from_raw(id)), Some(Gid::from_raw(id))).map_err(
                |e| Failure::new(format!("cannot hand the stdio pipes to uid {id}: {e}")),
            )?;
        }
    }
    Ok(())
}

fn limits(policy: &Policy, mode: Mode) -> Result<()> {
    let l = &policy.limits;
    let set = |res: Resource, name: &str, v: Option<u64>| -> Result<()> {
        // The CPU hard limit is a second later, so the process first gets a catchable SIGXCPU.
        let hard = |v: u64| match res {
            Resource::RLIMIT_CPU => v.saturating_add(1),
            _ => v,
        };
        match v {
            Some(v) => setrlimit(res, v, hard(v))
                .map_err(|e| Failure::new(format!("cannot set the {name} limit to {v}: {e}"))),
            None => Ok(()),
        }
    };
    set(Resource::RLIMIT_DATA, "memory", l.memory)?;
    let counted_by_cgroup = policy.cgroup.as_ref().is_some_and(|c| c.processes);
    if counted_by_cgroup && mode == Mode::Root {
        // Counted per uid over the whole host: boxes sharing a uid would share it. The box's
        // cgroup counts its processes, and only its; the per-uid count is raised as far as
        // this process may (its hard limit without `CAP_SYS_RESOURCE`).
        let (_, hard) = nix::sys::resource::getrlimit(Resource::RLIMIT_NPROC)
            .map_err(|e| Failure::new(format!("cannot read the processes limit: {e}")))?;
        setrlimit(Resource::RLIMIT_NPROC, hard, hard)
            .map_err(|e| Failure::new(format!("cannot lift the per-uid processes limit: {e}")))?;
    } else {
        set(Resource::RLIMIT_NPROC, "processes", l.processes)?;
    }
    // No single file may outgrow the quota between two looks of its watch.
    let file_size = match (&policy.quota, l.file_size) {
        (Some(q), Some(f)) => Some(f.min(q.max_bytes)),
        (Some(q), None) => Some(q.max_bytes),
        (None, f) => f,
    };
    set(Resource::RLIMIT_FSIZE, "file_size", file_size)?;
    set(Resource::RLIMIT_CPU, "cpu_seconds", l.cpu_seconds)?;
    // A crashing tool must not dump its memory (which may hold what it read) into the workspace.
    set(Resource::RLIMIT_CORE, "core", Some(0))
}

/// Landlock: read (and execute) on the read-only set, everything on the writable set, nothing
/// elsewhere. Best effort: an older kernel enforces what it knows; the mount namespace remains the
/// first wall.
fn landlock(policy: &Policy) -> Result<String> {
    let abi = ABI::V5;
    let access = view::access(policy);
    let fail = |e: landlock::RulesetError| Failure::new(format!("Landlock: {e}"));
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(["/"], AccessFs::ReadDir))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&access.read_only, read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(
            &access.devices,
            read | AccessFs::WriteFile | AccessFs::IoctlDev,
        ))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&access.read_write, all))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    }
    .to_owned())
}

/// Syscalls the command never needs and that serve only to escape or attack the kernel.
const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_quotactl,
];

/// `clone` flags that create namespaces: denied (a nested user namespace would hand back
/// capabilities).
const NAMESPACE_FLAGS: &[i32] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// The seccomp filters of every sandbox, compiled to BPF. They depend on nothing of the call, so
/// a warm box compiles them before its call arrives.
pub(crate) fn seccomp_programs() -> Result<Vec<BpfProgram>> {
    let fail = |e: seccompiler::BackendError| Failure::new(format!("seccomp filter: {e}"));
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|_| {
        Failure::new(format!(
            "seccomp filters are not supported on {} by this build",
            std::env::consts::ARCH
        ))
    })?;
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|n| (*n, Vec::new())).collect();
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let flag = *flag as u64;
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(fail)?;
        clone_rules.push(SeccompRule::new(vec![cond]).map_err(fail)?);
    }
    denied.insert(libc::SYS_clone, clone_rules);
    let mut ioctl_rules = Vec::new();
    for req in [libc::TIOCSTI, libc::TIOCLINUX] {
        // The request type is `c_ulong` on glibc and `c_int` on musl: the cast is for the latter.
        #[allow(clippy::unnecessary_cast)]
        let req = req as u64;
        let cond = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, req)
            .map_err(fail)?;
        ioctl_rules.push(SeccompRule::new(vec![cond]).map_err(fail)?);
    }
    denied.insert(libc::SYS_ioctl, ioctl_rules);
    let eperm = SeccompFilter::new(
        denied,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(fail)?;
    // clone3 passes its flags in memory, out of the filter's sight: ENOSYS makes libc fall back
    // to clone, whose flags the filter above checks.
    let families = socket_families(arch)?;
    let enosys = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(fail)?;
    let mut programs = Vec::new();
    for filter in [eperm, families, enosys] {
        programs.push(BpfProgram::try_from(filter).map_err(fail)?);
    }
    if arch == TargetArch::x86_64 {
        programs.push(deny_x32());
    }
    Ok(programs)
}

/// Socket families a command may open: local, IPv4, IPv6, and netlink for the routing table
/// (`ip`, `getaddrinfo`) and socket listings (`ss`). Everything else (`AF_VSOCK`, which reaches
/// the host's hypervisor sockets; `AF_PACKET`; `AF_BLUETOOTH`; `AF_ALG`; `AF_KEY`; `AF_XDP`;
/// netlink's audit, uevent, netfilter and generic families…) is refused with `EAFNOSUPPORT`, as if
/// the kernel lacked it. An allowlist, so a family a later kernel adds is refused too.
pub(crate) const SOCKET_FAMILIES: &[i32] = &[
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];
/// Netlink protocols a command may open (see [`SOCKET_FAMILIES`]).
pub(crate) const NETLINK_PROTOCOLS: &[i32] = &[libc::NETLINK_ROUTE, libc::NETLINK_SOCK_DIAG];

fn socket_families(arch: TargetArch) -> Result<SeccompFilter> {
    let fail = |e: seccompiler::BackendError| Failure::new(format!("seccomp filter: {e}"));
    let cond = |arg: u8, op: SeccompCmpOp, v: i32| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v as u32 as u64).map_err(fail)
    };
    // A rule's conditions all hold together: "the family is none of the allowed".
    let other_family: Vec<SeccompCondition> = SOCKET_FAMILIES
        .iter()
        .map(|f| cond(0, SeccompCmpOp::Ne, *f))
        .collect::<Result<_>>()?;
    let mut other_netlink = vec![cond(0, SeccompCmpOp::Eq, libc::AF_NETLINK)?];
    for p in NETLINK_PROTOCOLS {
        other_netlink.push(cond(2, SeccompCmpOp::Ne, *p)?);
    }
    let rules = |conds: Vec<Vec<SeccompCondition>>| -> Result<Vec<SeccompRule>> {
        conds
            .into_iter()
            .map(|c| SeccompRule::new(c).map_err(fail))
            .collect()
    };
    SeccompFilter::new(
        BTreeMap::from([
            (
                libc::SYS_socket,
                rules(vec![other_family.clone(), other_netlink])?,
            ),
            (libc::SYS_socketpair, rules(vec![other_family])?),
        ]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        arch,
    )
    .map_err(fail)
}

/// On x86_64 the x32 ABI reaches every syscall again under number `0x40000000 + n`, which the
/// filters above (matching exact numbers) would let through on kernels built with x32: refuse
/// the whole x32 range.
fn deny_x32() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        op(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, RET_ALLOW),
    ]
}
