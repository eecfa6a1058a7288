//! Escape attempts: reading secrets, other processes, files outside the policy; writing outside the
//! writable set; outliving the call; regaining privileges.

use std::time::Duration;

use super::{Fixture, LIMIT, eventually, is_root, run, write};

#[test]
fn etc_shadow_is_unreadable() {
    let f = Fixture::new();
    let script = "cat /etc/shadow";
    let host = run(f.host(script), LIMIT);
    assert!(host.stdout.contains("root:"), "unconfined: {host:?}");
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    assert!(!iso.stdout.contains("root:"), "isolated: {iso:?}");
    // The rest of /etc is there: programs need it.
    let iso = run(f.isolated(&f.policy(), "cat /etc/passwd"), LIMIT);
    assert!(iso.stdout.contains("root:"), "isolated: {iso:?}");
}

/// A policy that shows all of `/etc` (or the folder holding a secret) still hides the secrets:
/// the masks go back over any policy path that covers one. The box's uid may not read the file
/// anyway, so the check is what sits at the path: the mask (`/dev/null`, a character device), not
/// the host's regular file.
#[test]
fn secrets_stay_masked_under_a_policy_path_that_covers_them() {
    let f = Fixture::new();
    if !std::path::Path::new("/etc/shadow").is_file() {
        eprintln!("skipped: this machine has no /etc/shadow");
        return;
    }
    for shown in ["/etc", "/etc/ssl"] {
        let mut policy = f.policy();
        policy.read_only.push(shown.into());
        let script = "stat -c 'shadow:%F' /etc/shadow; head -n 1 /etc/passwd";
        let iso = run(f.isolated(&policy, script), LIMIT);
        assert!(
            iso.stdout.contains("shadow:character special file"),
            "{shown}: /etc/shadow is not masked: {iso:?}"
        );
        assert!(
            iso.stdout.lines().any(|l| l.starts_with("root:x:")),
            "{shown}: /etc/passwd should be readable: {iso:?}"
        );
    }
}

/// A policy path reached through an absolute symlink is resolved as the host resolves it, though
/// the box resolves it after moving into its scratch root: both the link's path and its target
/// show the folder.
#[test]
fn a_policy_path_through_an_absolute_link_resolves_on_the_host() {
    let f = Fixture::new();
    let real = f.root.join("real-tools");
    write(&real.join("marker.txt"), "REAL-TOOLS-MARKER");
    let link = f.root.join("tools-link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut policy = f.policy();
    policy.read_only.push(link.clone());
    let script = format!(
        "cat {}/marker.txt; echo; cat {}/marker.txt",
        link.display(),
        real.display()
    );
    let iso = run(f.isolated(&policy, &script), LIMIT);
    assert_eq!(
        iso.stdout.matches("REAL-TOOLS-MARKER").count(),
        2,
        "isolated: {iso:?}"
    );
}

#[test]
fn the_parents_environment_is_invisible() {
    let f = Fixture::new();
    // The parent (a shell holding the marker) starts the command without it, as eve does.
    let attack = r#"cat /proc/$PPID/environ | tr '\0' '\n'; for e in /proc/[0-9]*/environ; do tr '\0' '\n' < "$e"; done 2>/dev/null"#;
    let wrap = |inner: std::process::Command| {
        let mut outer = std::process::Command::new("sh");
        outer
            .args(["-c", r#"env -u EVE_PARENT_SECRET "$@"; exit $?"#, "sh"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(&f.ws)
            .env("PATH", super::path_var())
            .env("EVE_PARENT_SECRET", "s3cret-marker");
        outer
    };
    let host = run(wrap(f.host(attack)), LIMIT);
    assert!(
        host.stdout.contains("s3cret-marker"),
        "unconfined: {host:?}"
    );
    let iso = run(wrap(f.isolated(&f.policy(), attack)), LIMIT);
    assert!(!iso.stdout.contains("s3cret-marker"), "isolated: {iso:?}");
}

#[test]
fn host_processes_are_invisible() {
    let f = Fixture::new();
    let me = std::process::id();
    let script = format!("test -e /proc/{me} && echo SEEN; ls /proc | grep -c '^[0-9]'");
    let host = run(f.host(&script), LIMIT);
    assert!(host.stdout.contains("SEEN"), "unconfined: {host:?}");
    let iso = run(f.isolated(&f.policy(), &script), LIMIT);
    assert!(!iso.stdout.contains("SEEN"), "isolated: {iso:?}");
    // Only the sandbox's own few processes exist.
    let count: u32 = iso.stdout.trim().parse().unwrap();
    assert!(count < 10, "isolated sees {count} processes: {iso:?}");
}

#[test]
fn files_outside_the_policy_are_absent() {
    let f = Fixture::new();
    write(&f.other.join("notes.txt"), "OTHER-SESSION");
    write(&f.root.join(".eve/eve.db"), "STORE-BYTES");
    write(&f.home.join(".ssh/id_x"), "PRIVATE-KEY");
    let script =
        r#"cat "$OTHER/notes.txt" "$ROOT/.eve/eve.db" "$FAKE_HOME/.ssh/id_x"; ls -a "$FAKE_HOME""#;
    let host = run(f.host(script), LIMIT);
    for s in ["OTHER-SESSION", "STORE-BYTES", "PRIVATE-KEY"] {
        assert!(host.stdout.contains(s), "unconfined: {host:?}");
    }
    // The temp HOME is the policy's HOME: recreated empty, its .ssh absent.
    let mut policy = f.policy();
    policy.home = Some(f.home.clone());
    let iso = run(f.isolated(&policy, script), LIMIT);
    for s in ["OTHER-SESSION", "STORE-BYTES", "PRIVATE-KEY", ".ssh"] {
        assert!(!iso.stdout.contains(s), "isolated leaked {s}: {iso:?}");
    }
}

#[test]
fn the_real_home_is_empty_but_version_managers_stay() {
    let f = Fixture::new();
    let home = super::real_home();
    let script = r#"ls -a "$HOME""#;
    let host = run(f.host(script), LIMIT);
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    let listed = |o: &super::Out| -> Vec<String> {
        o.stdout
            .lines()
            .filter(|l| *l != "." && *l != "..")
            .map(str::to_owned)
            .collect()
    };
    let allowed: Vec<String> = f
        .policy()
        .read_only
        .iter()
        .filter_map(|p| p.strip_prefix(&home).ok())
        .filter_map(|r| r.components().next())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for name in listed(&iso) {
        assert!(allowed.contains(&name), "{name} of HOME visible: {iso:?}");
    }
    assert!(
        listed(&host).len() > listed(&iso).len(),
        "unconfined {host:?}\nisolated {iso:?}"
    );
}

#[test]
fn writes_outside_the_workspace_are_refused() {
    let f = Fixture::new();
    write(&f.other.join("victim"), "ORIGINAL");
    std::os::unix::fs::symlink(f.other.join("victim"), f.ws.join("link")).unwrap();
    let attacks = [
        ("absolute", r#"echo PWNED > "$OTHER/victim""#),
        ("dotdot", r#"echo PWNED > ../other/victim"#),
        ("symlink", r#"echo PWNED > link"#),
        (
            "hardlink",
            r#"ln "$OTHER/victim" hard && echo PWNED > hard"#,
        ),
        ("new file", r#"echo PWNED > "$ROOT/new""#),
    ];
    for (name, attack) in attacks {
        write(&f.other.join("victim"), "ORIGINAL");
        let _ = std::fs::remove_file(f.ws.join("hard"));
        let _ = std::fs::remove_file(f.root.join("new"));
        let iso = run(f.isolated(&f.policy(), attack), LIMIT);
        let victim = std::fs::read_to_string(f.other.join("victim")).unwrap();
        assert_eq!(victim, "ORIGINAL", "{name}: isolated wrote: {iso:?}");
        assert!(
            !f.root.join("new").exists(),
            "{name}: isolated created a file"
        );
        assert_ne!(iso.code(), 0, "{name}: isolated: {iso:?}");

        let host = run(f.host(attack), LIMIT);
        let victim = std::fs::read_to_string(f.other.join("victim")).unwrap();
        let wrote = victim.contains("PWNED") || f.root.join("new").exists();
        assert!(wrote, "{name}: unconfined did not write: {host:?}");
    }
}

#[test]
fn read_only_paths_and_the_system_cannot_be_written() {
    let f = Fixture::new();
    let ro = f.root.join("build");
    write(&ro.join("tool.sh"), "echo original\n");
    let mut policy = f.policy();
    policy.read_only.push(ro.clone());
    let attack = format!(
        "echo 'echo altered' >> {0}/tool.sh; cat {0}/tool.sh; touch /usr/eve-x /etc/eve-x /eve-x; \
         ln {0}/tool.sh \"$WS/h\" && echo 'echo altered' >> \"$WS/h\"",
        ro.display()
    );
    let iso = run(f.isolated(&policy, &attack), LIMIT);
    assert!(
        iso.stdout.contains("original"),
        "build file readable: {iso:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ro.join("tool.sh")).unwrap(),
        "echo original\n",
        "isolated: {iso:?}"
    );
    for p in ["/usr/eve-x", "/etc/eve-x"] {
        assert!(!std::path::Path::new(p).exists(), "{p} created: {iso:?}");
    }
    let host = run(
        f.host(&format!("echo 'echo altered' >> {}/tool.sh", ro.display())),
        LIMIT,
    );
    assert!(
        std::fs::read_to_string(ro.join("tool.sh"))
            .unwrap()
            .contains("altered"),
        "unconfined: {host:?}"
    );
}

#[test]
fn a_setsid_daemon_dies_with_the_call() {
    let f = Fixture::new();
    let marker = f.ws.join("marker");
    let script = r#"setsid sh -c 'sleep 1; echo alive > "$WS/marker"' </dev/null >/dev/null 2>&1 &
( (sleep 1; echo alive > "$WS/marker2") </dev/null >/dev/null 2>&1 & ) &
echo started"#;
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    assert!(iso.stdout.contains("started"), "isolated: {iso:?}");
    assert!(
        iso.elapsed < Duration::from_secs(1),
        "the call waited: {iso:?}"
    );
    let appeared = eventually(Duration::from_secs(3), || {
        marker.exists() || f.ws.join("marker2").exists()
    });
    assert!(!appeared, "a daemon outlived the isolated call");

    let host = run(f.host(script), LIMIT);
    assert!(host.stdout.contains("started"), "unconfined: {host:?}");
    let appeared = eventually(Duration::from_secs(5), || {
        marker.exists() && f.ws.join("marker2").exists()
    });
    assert!(
        appeared,
        "the unconfined daemons did not write their markers"
    );
}

/// The host pids of `pid`'s children (`/proc/PID/task/PID/children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// When the process that started the box dies (the runtime crashed: its stage 1 dies with it),
/// the box dies too, however the command was left running; unconfined, a child outlives its
/// killed parent.
#[test]
fn the_box_dies_with_the_process_that_started_it() {
    let f = Fixture::new();
    let start = |mut cmd: std::process::Command| {
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .process_group(0);
        cmd.spawn().unwrap()
    };
    use std::os::unix::process::CommandExt;
    let mut stage1 = start(f.isolated(&f.policy(), "sleep 60 & wait"));
    let found = eventually(Duration::from_secs(10), || {
        children(stage1.id()).first().is_some_and(|init| {
            children(*init)
                .first()
                .is_some_and(|sh| !children(*sh).is_empty())
        })
    });
    let init = children(stage1.id()).first().copied();
    let sh = init.and_then(|i| children(i).first().copied());
    let sleep = sh.and_then(|s| children(s).first().copied());
    if !found {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(stage1.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(found, "the isolated `sleep` did not start");
    let (init, sh, sleep) = (init.unwrap(), sh.unwrap(), sleep.unwrap());
    stage1.kill().unwrap();
    stage1.wait().unwrap();
    let gone = eventually(Duration::from_secs(10), || {
        !alive(init) && !alive(sh) && !alive(sleep)
    });
    assert!(gone, "the box outlived the process that started it");

    let mut host = start(f.host("sleep 60 & wait"));
    assert!(eventually(Duration::from_secs(10), || !children(host.id()).is_empty()));
    let sleep = children(host.id())[0];
    host.kill().unwrap();
    host.wait().unwrap();
    let survived = alive(sleep);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sleep as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(
        survived,
        "unconfined, the child should outlive its killed parent"
    );
}

#[test]
fn no_capabilities_no_new_privs_and_no_root() {
    let f = Fixture::new();
    let script = "grep -E '^(Uid|Cap[A-Za-z]+|NoNewPrivs):' /proc/self/status";
    let host = run(f.host(script), LIMIT);
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = iso
            .stdout
            .lines()
            .find(|l| l.starts_with(cap))
            .unwrap_or_else(|| panic!("no {cap}: {iso:?}"));
        assert!(line.ends_with("0000000000000000"), "{line}: {iso:?}");
    }
    assert!(iso.stdout.contains("NoNewPrivs:\t1"), "isolated: {iso:?}");
    // The sandbox's init holds no capability either once the command runs.
    let init = "grep CapEff /proc/1/status";
    let iso_init = run(f.isolated(&f.policy(), init), LIMIT);
    assert!(
        iso_init.stdout.contains("CapEff:\t0000000000000000"),
        "isolated: {iso_init:?}"
    );
    if is_root() {
        let host_init = run(f.host(init), LIMIT);
        assert!(
            !host_init.stdout.contains("CapEff:\t0000000000000000"),
            "unconfined: {host_init:?}"
        );
        assert!(
            host.stdout.contains("NoNewPrivs:\t0"),
            "unconfined: {host:?}"
        );
        let eff = host
            .stdout
            .lines()
            .find(|l| l.starts_with("CapEff"))
            .unwrap();
        assert!(!eff.ends_with("0000000000000000"), "unconfined: {host:?}");
        let uid = iso.stdout.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(!uid.contains("\t0\t"), "isolated runs as root: {iso:?}");
        assert!(host.stdout.contains("Uid:\t0\t"), "unconfined: {host:?}");
    }
}

#[test]
fn nested_namespaces_and_mounts_are_refused() {
    let f = Fixture::new();
    // A nested user namespace would hand back a full capability set.
    let script = "unshare --user --map-root-user sh -c 'grep CapEff /proc/self/status'";
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    assert_ne!(iso.code(), 0, "isolated: {iso:?}");
    assert!(!iso.stdout.contains("CapEff"), "isolated: {iso:?}");
    let host = run(f.host(script), LIMIT);
    assert!(host.stdout.contains("CapEff"), "unconfined: {host:?}");
}

/// When eve is not root, the sandbox lives in a user namespace: the same guarantees hold.
#[test]
fn an_unprivileged_eve_gets_the_same_box() {
    if !is_root() {
        return; // the whole suite then runs this way already
    }
    let f = Fixture::new();
    write(&f.other.join("notes.txt"), "OTHER-SESSION");
    let script = r#"grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status; cat /etc/shadow "$OTHER/notes.txt"; echo ok > "$WS/written"; test -e /proc/1/environ && cat /proc/1/environ"#;
    // Only system paths and the workspace: the fixture must be reachable by that uid.
    std::fs::set_permissions(&f.root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policy = eve_sandbox::isolate::Policy {
        read_write: vec![f.ws.clone()],
        ..Default::default()
    };
    let mut cmd = f.isolated(&policy, script);
    std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
    std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
    let iso = run(cmd, LIMIT);
    assert!(iso.stdout.contains("CapEff:\t0000000000000000"), "{iso:?}");
    assert!(iso.stdout.contains("CapBnd:\t0000000000000000"), "{iso:?}");
    assert!(iso.stdout.contains("NoNewPrivs:\t1"), "{iso:?}");
    assert!(!iso.stdout.contains("root:"), "{iso:?}");
    assert!(!iso.stdout.contains("OTHER-SESSION"), "{iso:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("written")).unwrap(),
        "ok\n",
        "{iso:?}"
    );
}
