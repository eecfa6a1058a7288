//! Spawn overhead of the `isolated` sandbox: `true` isolated vs unconfined, p50/p99 of spawn+exit
//! over N runs (default 200), and, to see what the network namespace costs, `unshare --net true`
//! vs `unshare --ipc true` (util-linux, when present). Run by `bench/sandbox.sh`.
//!
//! Three ways are measured, each back to back: unconfined, the cold path (`isolate::command`,
//! what every call paid before the pool), and the warm path (`isolate::Pool`, POOL boxes,
//! default 2), where the refill of each box taken runs concurrently with the next calls, as it
//! does under a burst of tool calls. Each row also gives the CPU per call of the whole process
//! tree (this process's threads, the refill included, and every descendant, the boxes started
//! but unused at the end included), from `getrusage`. A last row paces warm calls 25 ms apart,
//! the gap in which a real turn's model call lets the refill finish.
//!
//! This example is its own sandbox helper: `helper_main()` comes first in `main`.

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eve_sandbox::isolate::{self, Policy, Pool};
use nix::sys::resource::{UsageWho, getrusage};

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
    let isolated = || {
        isolate::command(&exe, &policy, "true", Vec::<String>::new())
            .map(|mut c| {
                c.current_dir(&ws).env("PATH", "/usr/bin:/bin");
                c
            })
            .ok()
    };
    let plain = || {
        let mut c = Command::new("true");
        c.current_dir(&ws).env("PATH", "/usr/bin:/bin");
        Some(c)
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
    // ONLY=host|cold|warm runs that one way alone (for `perf stat` or `strace -f -c` of it).
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
            let ((t, fallbacks), cpu) = cpu_of(runs, || {
                rt.block_on(measure_warm(&exe, pool_size, &policy, &ws, runs, None))
            });
            row(&format!("isolated, warm ({pool_size})"), &t, cpu);
            println!("{fallbacks} of {runs} calls found no box and went cold");
            return;
        }
        _ => {}
    }
    let load_before = load();
    let (host, host_cpu) = cpu_of(runs, || measure(runs, plain));
    let (iso, iso_cpu) = cpu_of(runs, || measure(runs, isolated));
    let ((warm, cold_fallbacks), warm_cpu) = cpu_of(runs, || {
        rt.block_on(measure_warm(&exe, pool_size, &policy, &ws, runs, None))
    });
    let ((paced, _), _) = cpu_of(runs, || {
        rt.block_on(measure_warm(
            &exe,
            pool_size,
            &policy,
            &ws,
            runs,
            Some(Duration::from_millis(25)),
        ))
    });
    println!(
        "spawn+exit of `true`, {runs} runs each, back to back (load {load_before} before, {} after)",
        load()
    );
    row("unconfined", &host, host_cpu);
    row("isolated, cold", &iso, iso_cpu);
    row(&format!("isolated, warm ({pool_size})"), &warm, warm_cpu);
    println!(
        "isolation adds, cold  p50 {:>8.2} ms   p99 {:>8.2} ms",
        ms(pct(&iso, 50)) - ms(pct(&host, 50)),
        ms(pct(&iso, 99)) - ms(pct(&host, 99))
    );
    println!(
        "isolation adds, warm  p50 {:>8.2} ms   p99 {:>8.2} ms   ({cold_fallbacks} of {runs} calls found no box and went cold)",
        ms(pct(&warm, 50)) - ms(pct(&host, 50)),
        ms(pct(&warm, 99)) - ms(pct(&host, 99))
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
            Some(c)
        });
        let ipc = measure(runs, || {
            let mut c = Command::new("unshare");
            c.args(["--ipc", "true"]);
            Some(c)
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
) -> (Vec<Duration>, usize) {
    let pool = match Pool::start(exe.to_path_buf(), size) {
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
                    Ok(mut child) => child.wait().await,
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

fn measure(runs: usize, mut make: impl FnMut() -> Option<Command>) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let Some(mut cmd) = make() else {
            eprintln!("cannot build the command");
            std::process::exit(2);
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let start = Instant::now();
        match cmd.status() {
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
