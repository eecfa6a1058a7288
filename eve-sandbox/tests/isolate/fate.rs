//! Boxes do not share one fate: one box holding its processes, memory or disk at the limit makes
//! no other box fail; what a box writes past its quota does not stay; `AF_VSOCK` and the other
//! families a command has no use for are refused. Each attack has its twin with the protection
//! off (the boxes on one uid without cgroups, no quota watch, or the command unconfined), where
//! it succeeds.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_sandbox::isolate::{self, BoxCgroup, Cgroups, Limits, Policy, Quota, UidRange, Uids};

use super::{Fixture, LIMIT, eventually, is_root, run};

/// The uid both boxes of a twin run as: the old shared fate, on a uid of the tests' own (not
/// 65534, which other programs of this host may run as).
const SHARED_UID: u32 = 0x6FFF_FF00;

/// Uids leased by these tests: a range of their own.
fn uids() -> Arc<Uids> {
    static UIDS: std::sync::OnceLock<Arc<Uids>> = std::sync::OnceLock::new();
    UIDS.get_or_init(|| {
        let range = UidRange::parse("1879310336-1879310591").unwrap();
        Uids::new(range, isolate::uid_lock_dir()).unwrap()
    })
    .clone()
}

/// Cgroups here, or `None` (with a note) when these tests cannot run: they need root, and CI and
/// the development machines are root with cgroups, where their absence is a failure.
fn cgroups() -> Option<&'static Cgroups> {
    if !is_root() {
        eprintln!("SKIPPED: per-box uids and cgroups need eve to run as root");
        return None;
    }
    let c = Cgroups::shared();
    assert!(
        c.available(),
        "no cgroup for the boxes on this root host: {:?}",
        c.enforcement()
    );
    Some(c)
}

/// A protected box: its own uid and cgroup, limited to `processes` and `memory`.
struct Protected {
    policy: Policy,
    cgroup: BoxCgroup,
    _lease: isolate::UidLease,
}

fn protected(f: &Fixture, cgroups: &Cgroups, processes: u64, memory: u64) -> Protected {
    let lease = uids().lease(std::slice::from_ref(&f.ws)).unwrap();
    let cgroup = cgroups.create().unwrap().expect("a cgroup");
    cgroup.limit(Some(processes), Some(memory)).unwrap();
    let mut policy = f.policy();
    policy.uid = Some(lease.uid());
    policy.limits = Limits {
        processes: Some(processes),
        memory: Some(memory),
        ..Limits::defaults()
    };
    policy.cgroup = Some(cgroup.spec());
    Protected {
        policy,
        cgroup,
        _lease: lease,
    }
}

/// The twin: the old behaviour, both boxes on [`SHARED_UID`], no cgroup, `setrlimit` only.
fn shared(f: &Fixture, processes: u64, memory: u64) -> Policy {
    let mut policy = f.policy();
    policy.uid = Some(SHARED_UID);
    policy.limits = Limits {
        processes: Some(processes),
        memory: Some(memory),
        ..Limits::defaults()
    };
    policy
}

/// Forks until refused, then holds every process: prints `holding N` once it cannot fork more.
const HOLD_PROCESSES: &str = r#"python3 -c '
import os, time
n = 0
while n < 4096:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    n += 1
print("holding", n, flush=True)
time.sleep(120)
'"#;

/// Starts `cmd` in its own process group; returns once it printed a line starting with `ready`.
fn start_holding(mut cmd: std::process::Command, ready: &str) -> (Child, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let started = Instant::now();
    while !line.starts_with(ready) {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        assert!(started.elapsed() < LIMIT, "the holder never got ready");
    }
    (child, line)
}

fn stop(mut child: Child) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();
}

/// What another session's ordinary call does: fork a few processes, wait for them.
const ORDINARY: &str = "for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait; echo fine";

#[test]
fn a_box_holding_its_processes_does_not_stop_another_box() {
    let Some(cgroups) = cgroups() else { return };
    let (a, b) = (Fixture::new(), Fixture::new());
    // Protected: each box its own uid and pids cgroup.
    let pa = protected(&a, cgroups, 64, 512 << 20);
    let pb = protected(&b, cgroups, 64, 512 << 20);
    assert_ne!(pa.policy.uid, pb.policy.uid, "one uid per box");
    let (holder, line) = start_holding(a.isolated(&pa.policy, HOLD_PROCESSES), "holding");
    eprintln!("protected: box A is {}", line.trim());
    let held: u64 = line.trim()["holding ".len()..].parse().unwrap();
    // sh, python and its children: the command's 64 processes, no more.
    assert_eq!(held + 2, 64, "box A's processes");
    assert_eq!(pa.cgroup.tasks(), 64 + isolate::BOX_OVERHEAD_TASKS);
    let other = run(b.isolated(&pb.policy, ORDINARY), LIMIT);
    stop(holder);
    assert!(other.stdout.contains("fine"), "protected: {other:?}");
    // Twin: one uid, no cgroup; the holder's processes are the other box's too.
    let (holder, line) = start_holding(
        a.isolated(&shared(&a, 64, 512 << 20), HOLD_PROCESSES),
        "holding",
    );
    eprintln!("shared uid: box A is {}", line.trim());
    let other = run(b.isolated(&shared(&b, 64, 512 << 20), ORDINARY), LIMIT);
    stop(holder);
    assert!(!other.stdout.contains("fine"), "shared uid: {other:?}");
    assert!(
        other.stderr.contains("fork") || other.stderr.contains("temporarily unavailable"),
        "shared uid: {other:?}"
    );
}

#[test]
fn a_boxs_memory_is_bounded_in_total() {
    let Some(cgroups) = cgroups() else { return };
    let f = Fixture::new();
    let limit: u64 = 64 << 20;
    // Three processes of 40% of the limit each: every one passes a per-process limit.
    let each = limit * 4 / 10;
    let script = format!(
        "for i in 1 2 3; do python3 -c 'import time; b = b\"x\" * {each}; time.sleep(1.5); \
         print(\"held\", flush=True)' & done; wait"
    );
    let p = protected(&f, cgroups, 64, limit);
    let iso = run(f.isolated(&p.policy, &script), LIMIT);
    let held = iso.stdout.matches("held").count();
    eprintln!(
        "protected: {held} of 3 held {each} bytes each; {} killed within the box's limit",
        p.cgroup.oom_kills()
    );
    assert!(held < 3, "protected: {iso:?}");
    assert!(p.cgroup.oom_kills() > 0, "protected: {iso:?}");
    // Twin: the per-process limit alone lets all three through.
    let twin = run(f.isolated(&shared(&f, 64, limit), &script), LIMIT);
    assert_eq!(
        twin.stdout.matches("held").count(),
        3,
        "per process only: {twin:?}"
    );
}

/// Writes 1 MiB files into `fill/`, 48 of them, one after the other.
const FILL: &str = r#"mkdir -p fill && i=0; while [ $i -lt 48 ]; do head -c 1048576 /dev/zero > fill/f$i || exit 9; i=$((i+1)); done; echo wrote all"#;
/// Writes 1 MiB files into `fill/` until stopped: without a watch, until the disk is full.
const ENDLESS: &str =
    r#"mkdir -p fill && i=0; while :; do head -c 1048576 /dev/zero > fill/f$i; i=$((i+1)); done"#;

fn quota_policy(f: &Fixture, max: u64) -> Policy {
    let mut p = f.policy();
    p.quota = Some(Quota {
        path: f.ws.clone(),
        max_bytes: max,
        setting: Some("THE_SETTING".to_owned()),
    });
    p
}

fn size_of(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        total += m.len();
        if m.is_dir() {
            total += size_of(&e.path());
        }
    }
    total
}

#[test]
fn a_write_past_the_quota_is_stopped_during_the_call_and_does_not_stay() {
    let f = Fixture::new();
    std::fs::write(f.ws.join("before.txt"), "kept\n").unwrap();
    let cap: u64 = 8 << 20;
    let started = Instant::now();
    let iso = run(f.isolated(&quota_policy(&f, cap), ENDLESS), LIMIT);
    eprintln!("stopped after {:?}: {iso:?}", started.elapsed());
    assert_eq!(iso.code(), isolate::SANDBOX_FAILURE, "{iso:?}");
    assert!(iso.stderr.contains("past its quota"), "{iso:?}");
    assert!(iso.stderr.contains("THE_SETTING"), "{iso:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("before.txt")).unwrap(),
        "kept\n"
    );
    let left = size_of(&f.ws);
    assert!(left <= cap, "{left} bytes stayed past the quota of {cap}");
    assert!(!f.ws.join("fill").exists(), "what the call added stayed");
    // Twin: no watch, the write goes through and stays.
    let twin = run(f.isolated(&f.policy(), FILL), LIMIT);
    assert!(twin.stdout.contains("wrote all"), "{twin:?}");
    assert!(size_of(&f.ws) > 40 << 20);
}

#[test]
fn the_quota_sees_through_hidden_sparse_and_preallocated_files() {
    if !is_root() {
        eprintln!(
            "SKIPPED: a folder the box makes unreadable is unreadable to eve too unless root"
        );
        return;
    }
    let f = Fixture::new();
    let cap: u64 = 8 << 20;
    let attacks = [
        // Written into a folder made unreadable between writes.
        r#"mkdir h; i=0; while :; do chmod 700 h; head -c 1048576 /dev/zero > h/f$i; chmod 0 h; i=$((i+1)); done"#,
        // Blocks held past the file's length.
        r#"i=0; while :; do : > p$i; fallocate -n -l 1048576 p$i || exit 9; i=$((i+1)); done"#,
        // Sparse files, and files past the quota (the per-file cap stops each at it).
        r#"i=0; while :; do truncate -s 1G s$i; head -c 50000000 /dev/zero > one$i; i=$((i+1)); done"#,
    ];
    for attack in attacks {
        let iso = run(f.isolated(&quota_policy(&f, cap), attack), LIMIT);
        assert_eq!(iso.code(), isolate::SANDBOX_FAILURE, "{attack}: {iso:?}");
        assert!(iso.stderr.contains("past its quota"), "{attack}: {iso:?}");
        assert!(size_of(&f.ws) <= cap, "{attack}: {iso:?}");
        let _ = std::process::Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(&f.ws)
            .status();
    }
}

#[test]
fn vsock_and_unused_socket_families_are_refused() {
    let f = Fixture::new();
    // Family, type, protocol, name.
    let probe = r#"python3 -c '
import socket
for fam, typ, proto, name in [(40, 1, 0, "vsock"), (17, 3, 0, "packet"), (44, 3, 0, "xdp"),
        (16, 2, 15, "netlink-uevent"), (16, 3, 9, "netlink-audit"), (16, 3, 16, "netlink-generic"),
        (38, 5, 0, "alg"), (15, 3, 2, "key"), (31, 1, 3, "bluetooth"),
        (1, 1, 0, "unix"), (2, 1, 0, "inet"), (10, 1, 0, "inet6"), (16, 3, 0, "netlink-route")]:
    try:
        socket.socket(fam, typ, proto).close()
        print(name, "opened")
    except OSError as e:
        print(name, "refused", e.errno)
'"#;
    let host = run(f.host(probe), LIMIT);
    assert!(host.stdout.contains("vsock opened"), "unconfined: {host:?}");
    let iso = run(f.isolated(&f.policy(), probe), LIMIT);
    eprintln!("{}", iso.stdout);
    for name in [
        "vsock",
        "packet",
        "xdp",
        "netlink-uevent",
        "netlink-audit",
        "netlink-generic",
    ] {
        assert!(
            iso.stdout
                .contains(&format!("{name} refused {}", libc::EAFNOSUPPORT)),
            "{name}: {iso:?}"
        );
    }
    for name in ["alg", "key", "bluetooth"] {
        assert!(
            iso.stdout.contains(&format!("{name} refused")),
            "{name}: {iso:?}"
        );
    }
    for name in ["unix", "inet", "inet6", "netlink-route"] {
        assert!(
            iso.stdout.contains(&format!("{name} opened")),
            "{name}: {iso:?}"
        );
    }
}

#[test]
fn a_boxs_cgroup_is_removed_when_it_ends() {
    let Some(cgroups) = cgroups() else { return };
    let f = Fixture::new();
    let p = protected(&f, cgroups, 32, 256 << 20);
    let dirs = p.cgroup.paths();
    // A daemon that would outlive the call, were the box not torn down.
    let iso = run(
        f.isolated(&p.policy, "setsid sleep 60 & echo started"),
        LIMIT,
    );
    assert!(iso.stdout.contains("started"), "{iso:?}");
    drop(p);
    assert!(
        eventually(Duration::from_secs(10), || dirs.iter().all(|d| !d.exists())),
        "{dirs:?} stayed"
    );
}
