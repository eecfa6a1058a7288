//! Resource limits bind, and a call that hits one still ends.

use std::time::Duration;

use eve_sandbox::isolate::Limits;

use super::{Fixture, LIMIT, run};

fn with(f: &Fixture, limits: Limits) -> eve_sandbox::isolate::Policy {
    let mut p = f.policy();
    p.limits = limits;
    p
}

#[test]
fn the_process_limit_stops_forks() {
    let f = Fixture::new();
    let script = r#"n=0; while [ $n -lt 120 ]; do sleep 3 2>/dev/null & [ $? -eq 0 ] || break; n=$((n+1)); done; echo "started $n"; kill $(jobs -p) 2>/dev/null; exit 0"#;
    let host = run(f.host(script), LIMIT);
    assert!(host.stdout.contains("started 120"), "unconfined: {host:?}");
    let policy = with(
        &f,
        Limits {
            processes: Some(40),
            ..Limits::defaults()
        },
    );
    let iso = run(f.isolated(&policy, script), LIMIT);
    assert!(!iso.stdout.contains("started 120"), "isolated: {iso:?}");
    assert!(
        iso.stderr.to_lowercase().contains("fork"),
        "isolated: {iso:?}"
    );
}

#[test]
fn a_fork_bomb_ends_with_the_call() {
    let f = Fixture::new();
    let policy = with(
        &f,
        Limits {
            processes: Some(64),
            ..Limits::defaults()
        },
    );
    // Only ever run isolated.
    let iso = run(
        f.isolated(
            &policy,
            "bomb() { bomb | bomb & }; bomb; sleep 2; echo done",
        ),
        Duration::from_secs(60),
    );
    assert!(iso.stdout.contains("done") || iso.code() != 0, "{iso:?}");
}

#[test]
fn a_file_over_the_size_limit_fails() {
    let f = Fixture::new();
    let script = "head -c 3000000 /dev/zero > big; echo status $?; wc -c < big";
    let host = run(f.host(script), LIMIT);
    assert!(host.stdout.contains("3000000"), "unconfined: {host:?}");
    let policy = with(
        &f,
        Limits {
            file_size: Some(1 << 20),
            ..Limits::defaults()
        },
    );
    let iso = run(f.isolated(&policy, script), LIMIT);
    assert!(!iso.stdout.contains("status 0"), "isolated: {iso:?}");
    let size = std::fs::metadata(f.ws.join("big")).unwrap().len();
    assert!(size <= 1 << 20, "isolated wrote {size} bytes: {iso:?}");
}

#[test]
fn the_memory_cap_hits() {
    let f = Fixture::new();
    let script = "python3 -c 'x = bytearray(600 * 1024 * 1024); print(\"allocated\")'";
    let host = run(f.host(script), LIMIT);
    assert!(host.stdout.contains("allocated"), "unconfined: {host:?}");
    let policy = with(
        &f,
        Limits {
            memory: Some(256 << 20),
            ..Limits::defaults()
        },
    );
    let iso = run(f.isolated(&policy, script), LIMIT);
    assert!(!iso.stdout.contains("allocated"), "isolated: {iso:?}");
    assert!(iso.stderr.contains("MemoryError"), "isolated: {iso:?}");
}

#[test]
fn the_cpu_limit_kills_a_spinning_process() {
    let f = Fixture::new();
    let policy = with(
        &f,
        Limits {
            cpu_seconds: Some(1),
            ..Limits::defaults()
        },
    );
    let iso = run(f.isolated(&policy, "while :; do :; done"), LIMIT);
    // SIGXCPU (24) at the soft limit: 128 + 24.
    assert_eq!(iso.code(), 152, "isolated: {iso:?}");
    assert!(iso.elapsed < Duration::from_secs(20), "isolated: {iso:?}");
}

#[test]
fn private_tmpfs_mounts_are_capped() {
    let f = Fixture::new();
    let policy = with(
        &f,
        Limits {
            tmpfs_size: Some(1 << 20),
            ..Limits::defaults()
        },
    );
    let script = "for d in /tmp /dev/shm \"$HOME\"; do head -c 3000000 /dev/zero > $d/fill && echo \"filled $d\"; done; echo end";
    let iso = run(f.isolated(&policy, script), LIMIT);
    assert!(iso.stdout.contains("end"), "isolated: {iso:?}");
    assert!(!iso.stdout.contains("filled"), "isolated: {iso:?}");
    // The same writes fit under the default cap.
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    assert_eq!(iso.stdout.matches("filled").count(), 3, "isolated: {iso:?}");
}
