//! Ordinary work still runs isolated; failures of the sandbox itself are told apart.

use std::path::Path;

use eve_sandbox::isolate::{self, Policy};

use super::{Fixture, LIMIT, helper, run};

#[test]
fn python_through_the_pyenv_shim() {
    let f = Fixture::new();
    let iso = run(f.isolated(&f.policy(), "python3 -c 'print(40 + 2)'"), LIMIT);
    assert_eq!(iso.stdout.trim(), "42", "isolated: {iso:?}");
}

#[test]
fn shell_git_and_tmp_work() {
    let f = Fixture::new();
    let script = "set -e
git init -q . && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x && git log --oneline | wc -l
echo scratch > /tmp/eve-sandbox-scratch && cat /tmp/eve-sandbox-scratch
mkdir -p \"$HOME/.cache/x\" && echo cached > \"$HOME/.cache/x/f\" && cat \"$HOME/.cache/x/f\"
echo ok > file && cat file
echo via-dev-stdout > /dev/stdout; echo via-dev-stderr > /dev/stderr";
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    assert_eq!(iso.code(), 0, "isolated: {iso:?}");
    assert_eq!(
        iso.stdout, "1\nscratch\ncached\nok\nvia-dev-stdout\n",
        "isolated: {iso:?}"
    );
    assert_eq!(iso.stderr, "via-dev-stderr\n", "isolated: {iso:?}");
    assert!(f.ws.join(".git/HEAD").exists());
    // The private /tmp and HOME went nowhere.
    assert!(!Path::new("/tmp/eve-sandbox-scratch").exists());
    assert!(!super::real_home().join(".cache/x/f").exists());
}

#[test]
fn exit_codes_are_the_commands() {
    let f = Fixture::new();
    assert_eq!(run(f.isolated(&f.policy(), "exit 7"), LIMIT).code(), 7);
    assert_eq!(
        run(f.isolated(&f.policy(), "kill -9 $$"), LIMIT).code(),
        137
    );
    let mut cmd = isolate::command(&helper(), &f.policy(), "no-such-program-x", ["a"]).unwrap();
    cmd.current_dir(&f.ws).env("PATH", super::path_var());
    let out = run(cmd, LIMIT);
    assert_eq!(out.code(), 127, "{out:?}");
    assert!(
        out.stderr
            .starts_with("eve sandbox: cannot run `no-such-program-x`"),
        "{out:?}"
    );
}

#[test]
fn sandbox_failures_exit_125_with_one_line() {
    let f = Fixture::new();
    let policy = Policy {
        read_write: vec![f.root.join("missing-workspace")],
        ..Policy::default()
    };
    let mut cmd = isolate::command(&helper(), &policy, "true", Vec::<String>::new()).unwrap();
    cmd.current_dir(&f.ws);
    let out = run(cmd, LIMIT);
    assert_eq!(out.code(), isolate::SANDBOX_FAILURE, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.starts_with("eve sandbox: "), "{out:?}");
    assert!(out.stderr.contains("missing-workspace"), "{out:?}");

    // A path inside the workspace could be redirected by a symlink the command left there.
    let mut policy = f.policy();
    policy.read_only.push(f.ws.join("build"));
    std::os::unix::fs::symlink("/etc", f.ws.join("build")).unwrap();
    let out = run(f.isolated(&policy, "ls build/"), LIMIT);
    assert_eq!(out.code(), isolate::SANDBOX_FAILURE, "{out:?}");
    assert!(
        out.stderr.contains("lies inside the writable path"),
        "{out:?}"
    );

    // A working directory outside the view is refused, not silently changed.
    let mut cmd =
        isolate::command(&helper(), &Policy::default(), "true", Vec::<String>::new()).unwrap();
    cmd.current_dir(&f.ws);
    let out = run(cmd, LIMIT);
    assert_eq!(out.code(), isolate::SANDBOX_FAILURE, "{out:?}");
    assert!(out.stderr.contains("not in the sandbox's view"), "{out:?}");

    assert!(matches!(
        isolate::command(
            &helper(),
            &Policy {
                read_only: vec!["rel".into()],
                ..Policy::default()
            },
            "true",
            ["x"]
        ),
        Err(isolate::Error::RelativePath(_))
    ));
}

#[test]
fn the_probe_reports_what_works() {
    let support = isolate::probe(&helper()).unwrap();
    assert_eq!(support.user_namespace, !super::is_root());
    // Seen from inside: the sandbox uid when eve is root, root of its own namespace otherwise.
    let want = if super::is_root() {
        isolate::DEFAULT_UID
    } else {
        0
    };
    assert_eq!(support.uid, want);
    assert_eq!(support.landlock, "fully enforced");
    let err = isolate::probe(Path::new("/nonexistent/helper")).unwrap_err();
    assert!(err.message.contains("/nonexistent/helper"), "{err}");
}

/// What `PATH` adds, through the public API: each entry its own folder, a version manager's
/// shims its root, a version's `bin` its sibling `lib`; HOME itself and relative, missing or
/// repeated entries nothing (the full table is in `paths.rs`'s unit tests).
#[test]
fn path_view_adds_each_entry_and_a_managers_one_neighbour() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    for d in [
        ".pyenv/shims",
        ".pyenv/libexec",
        ".nvm/versions/node/v22/bin",
        ".nvm/versions/node/v22/lib",
        ".local/bin",
        ".local/lib",
        ".local/share/keyrings",
        ".cargo/bin",
        ".rustup",
        "bin",
    ] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    let h = home.display();
    let path = format!(
        "{h}/.pyenv/shims:/usr/bin:{h}/.nvm/versions/node/v22/bin:{h}/.local/bin:{h}/.cargo/bin:{h}/bin:{h}:relative/bin:{h}/.pyenv/shims:{h}/missing/bin"
    );
    let got = isolate::path_view(&path, Some(home), &[]);
    let want: Vec<_> = [
        ".pyenv",
        ".nvm/versions/node/v22/bin",
        ".nvm/versions/node/v22/lib",
        ".local/bin",
        ".local/lib",
        ".cargo/bin",
        ".rustup",
        "bin",
    ]
    .iter()
    .map(|p| home.join(p))
    .collect();
    assert_eq!(got.read_only, want);
    assert_eq!(got.left_out.len(), 1, "{:?}", got.left_out);
    assert_eq!(got.left_out[0].entry, home);
}

/// The runtime re-executes a helper only when it speaks this build's stage protocol: this
/// crate's helper does; a program that is not a helper, or a helper of another protocol, does
/// not (so `default_helper` falls back to the running binary instead of using a stale file).
#[test]
fn only_a_helper_of_this_build_is_chosen() {
    assert!(isolate::speaks_protocol(&helper()));
    let f = Fixture::new();
    assert!(!isolate::speaks_protocol(Path::new("/usr/bin/true")));
    assert!(!isolate::speaks_protocol(&f.root.join("missing")));
    let stale = f.root.join("eve-sandbox-helper");
    std::fs::write(&stale, "#!/bin/sh\necho 'eve-sandbox 0.0.0 stages/1'\n").unwrap();
    std::fs::set_permissions(&stale, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert!(!isolate::speaks_protocol(&stale));
    // The same script answering like this build's helper is accepted: the check is the answer.
    let out = std::process::Command::new(helper())
        .arg("--eve-sandbox-protocol")
        .output()
        .unwrap();
    let answer = String::from_utf8(out.stdout).unwrap();
    std::fs::write(&stale, format!("#!/bin/sh\necho '{}'\n", answer.trim())).unwrap();
    assert!(isolate::speaks_protocol(&stale));
}
