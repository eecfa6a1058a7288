//! Spawn overhead of the `isolated` sandbox: `true` isolated vs unconfined, p50/p99 of spawn+exit
//! over N runs (default 200), with the ratio to the unconfined spawn, and, to see what the network
//! namespace costs, `unshare --net true` vs `unshare --ipc true` (util-linux, when present). Run
//! by `bench/sandbox.sh`.
//!
//! Three ways are measured, each back to back: unconfined, the cold path (`isolate::command`,
//! what every call paid before the pool), and the warm path (`isolate::Pool`, POOL boxes,
//! default 2), where the refill of each box taken runs concurrently with the next calls, as it
//! does under a burst of tool calls. Each row also gives the CPU per call of the whole process
//! tree (this process's threads, the refill included, and every descendant, the boxes started
//! but unused at the end included), from `getrusage`. A last row paces warm calls 25 ms apart,
//! the gap in which a real turn's model call lets the refill finish.
//!
//! Every isolated call pays what keeps boxes apart, as the runtime's does: a uid leased per box
//! (when root), a cgroup per box (made per call on the cold path, ahead by the pool on the warm
//! path, its limits written per call) and the workspace quota's watch. A row without them (the
//! cold path as it was) shows what they add.
//!
//! This example is its own sandbox helper: `helper_main()` comes first in `main`.

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_sandbox::isolate::{self, BoxCgroup, Cgroups, Policy, Pool, Quota, UidLease, Uids};
use nix::sys::resource::{UsageWho, getrusage};

/// What keeps boxes apart, as the runtime sets it up per call.
struct Fate {
    uids: Option<Arc<Uids>>,
    cgroups: Option<&'static Cgroups>,
}

/// What one call holds until it has ended.
#[allow(dead_code)]
struct Held(Option<UidLease>, Option<BoxCgroup>);

impl Fate {
    fn new() -> Fate {
        let uids = nix::unistd::getuid()
            .is_root()
            .then(|| Uids::new(isolate::DEFAULT_UIDS, isolate::uid_lock_dir()).ok())
            .flatten();
        let c = Cgroups::shared();
        Fate {
            uids,
            cgroups: c.available().then_some(c),
        }
    }

    fn describe(&self) -> String {
        format!(
            "uid per box: {}; cgroup per box: {:?}",
            self.uids
                .as_ref()
                .map_or("no (not root)".to_owned(), |u| u.range().to_string()),
            self.cgroups.map(|c| c.enforcement().clone())
        )
    }

    /// `policy` with this call's uid and quota (and, `cold`, its own cgroup, limited).
    fn apply(&self, policy: &Policy, ws: &Path, cold: bool) -> (Policy, Held) {
        let mut policy = policy.clone();
        let lease = self
            .uids
            .as_ref()
            .and_then(|u| u.lease(&policy.read_write).ok());
        if let Some(l) = &lease {
            policy.uid = Some(l.uid());
            let owner = std::os::unix::fs::MetadataExt::uid(
                &std::fs::metadata(ws).unwrap_or_else(|_| std::process::exit(2)),
            );
            if owner != l.uid() {
                let _ = isolate::prepare_writable(ws, &policy);
            }
        }
        policy.quota = Some(Quota {
            path: ws.to_path_buf(),
            max_bytes: 256 << 20,
            setting: None,
        });
        let mut cgroup = None;
        if cold && let Some(Ok(Some(cg))) = self.cgroups.map(Cgroups::create) {
            let _ = cg.limit(policy.limits.processes, policy.limits.memory);
            policy.cgroup = Some(cg.spec());
            cgroup = Some(cg);
        }
        (policy, Held(lease, cgroup))
    }
}

fn main() {
    isolate::helper_main();
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("cannot find this executable");
        std::process::exit(2);
    };
    let ws = std::env::temp_dir().join(format!("eve-sandbox-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&ws) {
        eprintln!("cannot create {}: {e}", ws.display());
        std::process::exit(2);
    }
    let policy = Policy {
        read_write: vec![ws.clone()],
        ..Policy::default()
    };
    if let Err(e) = isolate::prepare_writable(&ws, &policy) {
        eprintln!("cannot prepare {}: {e}", ws.display());
        std::process::exit(2);
    }
    match isolate::probe(&exe) {
        Ok(s) => eprintln!("probe: {s:?}"),
        Err(e) => {
            eprintln!("isolation unavailable: {e}");
            std::process::exit(2);
        }
    }
    let fate = Fate::new();
    eprintln!("{}", fate.describe());
    let bare = || {
        isolate::command(&exe, &policy, "true", Vec::<String>::new())
            .map(|mut c| {
                c.current_dir(&ws).env("PATH", "/usr/bin:/bin");
                (c, None)
            })
            .ok()
    };
    let isolated = || {
        let (policy, held) = fate.apply(&policy, &ws, true);
        isolate::command(&exe, &policy, "true", Vec::<String>::new())
            .map(|mut c| {
                c.current_dir(&ws).env("PATH", "/usr/bin:/bin");
                (c, Some(held))
            })
            .ok()
    };
    let plain = || {
        let mut c = Command::new("true");
        c.current_dir(&ws).env("PATH", "/usr/bin:/bin");
        Some((c, None))
    };
    let pool_size: usize = std::env::var("POOL")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(2);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a tokio runtime: {e}");
            std::process::exit(2);
        }
    };
    // ONLY=host|cold|warm runs that one way alone (for `perf stat` or `strace -f -c` of it);
    // with `warm`, GAP_MS paces the calls.
    match std::env::var("ONLY").as_deref() {
        Ok("host") => {
            let (t, cpu) = cpu_of(runs, || measure(runs, plain));
            row("unconfined", &t, cpu);
            return;
        }
        Ok("cold") => {
            let (t, cpu) = cpu_of(runs, || measure(runs, isolated));
            row("isolated, cold", &t, cpu);
            return;
        }
        Ok("warm") => {
            // GAP_MS=N paces the calls N ms apart, as a turn's model call does.
            let gap = std::env::var("GAP_MS")
                .ok()
                .and_then(|g| g.parse().ok())
                .map(Duration::from_millis);
            let ((t, fallbacks), cpu) = cpu_of(runs, || {
                rt.block_on(measure_warm(
                    &exe, pool_size, &policy, &ws, runs, gap, &fate,
                ))
            });
            row(&format!("isolated, warm ({pool_size})"), &t, cpu);
            println!("{fallbacks} of {runs} calls found no box and went cold");
            return;
        }
        _ => {}
    }
    let load_before = load();
    let (host, host_cpu) = cpu_of(runs, || measure(runs, plain));
    // Interleaved, so both see the same load: the difference is what the per-box setup costs.
    let ((bare_iso, iso), pair_cpu) = cpu_of(runs * 2, || measure_pair(runs, bare, isolated));
    let (bare_cpu, iso_cpu) = (pair_cpu, pair_cpu);
    let setup = {
        let mut t: Vec<Duration> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                drop(fate.apply(&policy, &ws, true));
                start.elapsed()
            })
            .collect();
        t.sort();
        t
    };
    let ((warm, cold_fallbacks), warm_cpu) = cpu_of(runs, || {
        rt.block_on(measure_warm(
            &exe, pool_size, &policy, &ws, runs, None, &fate,
        ))
    });
    let ((paced, _), _) = cpu_of(runs, || {
        rt.block_on(measure_warm(
            &exe,
            pool_size,
            &policy,
            &ws,
            runs,
            Some(Duration::from_millis(25)),
            &fate,
        ))
    });
    println!(
        "spawn+exit of `true`, {runs} runs each, back to back (load {load_before} before, {} after)",
        load()
    );
    row("unconfined", &host, host_cpu);
    row("isolated, cold, bare", &bare_iso, bare_cpu);
    row("isolated, cold", &iso, iso_cpu);
    println!(
        "per-box setup alone   p50 {:>8.3} ms   p99 {:>8.3} ms   (uid lease, cgroup made and limited, quota; removal in the background)",
        ms(pct(&setup, 50)),
        ms(pct(&setup, 99))
    );
    row(&format!("isolated, warm ({pool_size})"), &warm, warm_cpu);
    let ratio = |t: &[Duration]| ms(pct(t, 50)) / ms(pct(&host, 50)).max(f64::EPSILON);
    println!(
        "per-box uid, cgroup and quota add, cold  p50 {:>6.2} ms",
        ms(pct(&iso, 50)) - ms(pct(&bare_iso, 50))
    );
    println!(
        "isolation adds, cold  p50 {:>8.2} ms   p99 {:>8.2} ms   ({:.1}x the unconfined spawn)",
        ms(pct(&iso, 50)) - ms(pct(&host, 50)),
        ms(pct(&iso, 99)) - ms(pct(&host, 99)),
        ratio(&iso)
    );
    println!(
        "isolation adds, warm  p50 {:>8.2} ms   p99 {:>8.2} ms   ({:.1}x the unconfined spawn; {cold_fallbacks} of {runs} calls found no box and went cold)",
        ms(pct(&warm, 50)) - ms(pct(&host, 50)),
        ms(pct(&warm, 99)) - ms(pct(&host, 99)),
        ratio(&warm)
    );
    println!(
        "warm, paced 25 ms     p50 {:>8.2} ms   p99 {:>8.2} ms   (adds p50 {:.2} ms)",
        ms(pct(&paced, 50)),
        ms(pct(&paced, 99)),
        ms(pct(&paced, 50)) - ms(pct(&host, 50))
    );
    if Path::new("/usr/bin/unshare").exists() && nix::unistd::getuid().is_root() {
        let net = measure(runs, || {
            let mut c = Command::new("unshare");
            c.args(["--net", "true"]);
            Some((c, None))
        });
        let ipc = measure(runs, || {
            let mut c = Command::new("unshare");
            c.args(["--ipc", "true"]);
            Some((c, None))
        });
        row("unshare --ipc true", &ipc, Duration::ZERO);
        row("unshare --net true", &net, Duration::ZERO);
        println!(
            "a network namespace costs p50 {:>6.2} ms",
            ms(pct(&net, 50)) - ms(pct(&ipc, 50))
        );
    }
    let _ = std::fs::remove_dir_all(&ws);
}

/// CPU time (user + system) of this process and all its waited-for descendants.
fn cpu_now() -> Duration {
    let sum = |who| {
        getrusage(who)
            .map(|u| {
                let t = |tv: nix::sys::time::TimeVal| {
                    Duration::from_secs(tv.tv_sec().max(0) as u64)
                        + Duration::from_micros(tv.tv_usec().max(0) as u64)
                };
                t(u.user_time()) + t(u.system_time())
            })
            .unwrap_or_default()
    };
    sum(UsageWho::RUSAGE_SELF) + sum(UsageWho::RUSAGE_CHILDREN)
}

/// Runs `f`, returning its result and the tree's CPU time per call.
fn cpu_of<T>(runs: usize, f: impl FnOnce() -> T) -> (T, Duration) {
    let before = cpu_now();
    let out = f();
    let spent = cpu_now().saturating_sub(before);
    (out, spent / runs.max(1) as u32)
}

/// `runs` calls of `true` through a fresh pool of `size` boxes, back to back (or `gap` apart,
/// the gap not timed); the pool is started and shut down inside, so its CPU counts. Returns the
/// sorted times and how many calls found no box.
async fn measure_warm(
    exe: &Path,
    size: usize,
    policy: &Policy,
    ws: &Path,
    runs: usize,
    gap: Option<Duration>,
    fate: &Fate,
) -> (Vec<Duration>, usize) {
    let pool = match Pool::with_cgroups(exe.to_path_buf(), size, fate.cgroups) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot start the pool: {e}");
            std::process::exit(2);
        }
    };
    let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let null = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot open /dev/null: {e}");
            std::process::exit(2);
        }
    };
    let stderr = std::io::stderr();
    let mut times = Vec::with_capacity(runs);
    let mut cold = 0;
    // The first boxes get ready before the first call, as they do while a server waits.
    let ready_by = Instant::now() + Duration::from_secs(10);
    while pool.idle() < size && Instant::now() < ready_by {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for _ in 0..runs {
        if let Some(gap) = gap {
            tokio::time::sleep(gap).await;
        }
        let start = Instant::now();
        let (policy, held) = fate.apply(policy, ws, false);
        let policy = &policy;
        let status = match pool.take().await {
            Some(warm) => {
                let started = warm.start(
                    policy,
                    "true",
                    &[],
                    &env,
                    ws,
                    [null.as_fd(), null.as_fd(), stderr.as_fd()],
                );
                match started {
                    Ok(mut child) => {
                        if let Held(Some(lease), _) = held {
                            child.hold_until_removed(Box::new(lease));
                        }
                        child.wait().await
                    }
                    Err(e) => {
                        eprintln!("a warm box refused its call: {e}");
                        std::process::exit(1);
                    }
                }
            }
            None => {
                cold += 1;
                let Ok(mut cmd) = isolate::command(exe, policy, "true", Vec::<String>::new())
                else {
                    std::process::exit(2);
                };
                cmd.current_dir(ws)
                    .env_clear()
                    .env("PATH", "/usr/bin:/bin")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null());
                tokio::process::Command::from(cmd).status().await
            }
        };
        match status {
            Ok(s) if s.success() => times.push(start.elapsed()),
            Ok(s) => {
                eprintln!("the benchmarked command failed: {s}");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("cannot wait: {e}");
                std::process::exit(1);
            }
        }
    }
    pool.shutdown().await;
    times.sort();
    (times, cold)
}

/// `runs` of each of `a` and `b`, alternating; both sorted.
fn measure_pair(
    runs: usize,
    mut a: impl FnMut() -> Option<(Command, Option<Held>)>,
    mut b: impl FnMut() -> Option<(Command, Option<Held>)>,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut ta, mut tb) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        ta.extend(measure(1, &mut a));
        tb.extend(measure(1, &mut b));
    }
    ta.sort();
    tb.sort();
    (ta, tb)
}

fn measure(
    runs: usize,
    mut make: impl FnMut() -> Option<(Command, Option<Held>)>,
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let Some((mut cmd, held)) = make() else {
            eprintln!("cannot build the command");
            std::process::exit(2);
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let status = cmd.status();
        drop(held);
        match status {
            Ok(s) if s.success() => times.push(start.elapsed()),
            Ok(s) => {
                eprintln!("the benchmarked command failed: {s}");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("cannot spawn: {e}");
                std::process::exit(1);
            }
        }
    }
    times.sort();
    times
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    let i = (sorted.len().saturating_sub(1) * p) / 100;
    sorted.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn row(name: &str, t: &[Duration], cpu: Duration) {
    println!(
        "{name:<20}  p50 {:>8.2} ms   p99 {:>8.2} ms   CPU per call {:>6.2} ms",
        ms(pct(t, 50)),
        ms(pct(t, 99)),
        ms(cpu)
    );
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
