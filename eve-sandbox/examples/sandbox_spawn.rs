//! Spawn overhead of the `isolated` sandbox: `true` isolated vs unconfined, p50/p99 of spawn+exit
//! over N runs (default 200), and, to see what the network namespace costs, `unshare --net true`
//! vs `unshare --ipc true` (util-linux, when present). Run by `bench/sandbox.sh`.
//!
//! This example is its own sandbox helper: `helper_main()` comes first in `main`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eve_sandbox::isolate::{self, Policy};

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
    let host = measure(runs, plain);
    let iso = measure(runs, isolated);
    println!("spawn+exit of `true`, {runs} runs each (load {})", load());
    row("unconfined", &host);
    row("isolated", &iso);
    println!(
        "isolation adds        p50 {:>8.2} ms   p99 {:>8.2} ms",
        ms(pct(&iso, 50)) - ms(pct(&host, 50)),
        ms(pct(&iso, 99)) - ms(pct(&host, 99))
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
        row("unshare --ipc true", &ipc);
        row("unshare --net true", &net);
        println!(
            "a network namespace costs p50 {:>6.2} ms",
            ms(pct(&net, 50)) - ms(pct(&ipc, 50))
        );
    }
    let _ = std::fs::remove_dir_all(&ws);
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

fn row(name: &str, t: &[Duration]) {
    println!(
        "{name:<20}  p50 {:>8.2} ms   p99 {:>8.2} ms",
        ms(pct(t, 50)),
        ms(pct(t, 99))
    );
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
