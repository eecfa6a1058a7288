//! The environment does not widen the view: a `PATH` entry adds at most its own folder (and a
//! version manager's one neighbour), never the project, `.eve/` or a credentials folder.
//!
//! The layout is what broke: a project under `HOME` whose `node_modules/.bin` is on `PATH` (what
//! `npm run` does), `~/.config/composer/vendor/bin` beside `~/.config/gh/hosts.yml`, a folder
//! inside `.eve/`, and nvm's `versions/node/v20/bin`. With the view `isolate::path_view` gives,
//! the box reads none of the store, the agent folder or the credentials, still runs the composer
//! tool and nvm's `npm`; with the view the previous rule gave (each entry under `HOME` stood for
//! its whole top-level folder, kept here only as the twin) the same box reads them all. Both as
//! root and as an ordinary user.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use eve_sandbox::isolate::{self, Policy, Protected};

use super::{Fixture, LIMIT, is_root, run, write};

/// Files planted in the layout, each with the text that shows it was read.
struct Layout {
    home: PathBuf,
    project: PathBuf,
    path_var: String,
}

fn layout(f: &Fixture) -> Layout {
    let home = f.home.clone();
    let project = home.join("src/app");
    let files: &[(&str, &str)] = &[
        ("src/app/.eve/eve.db", "STORE-BYTES"),
        ("src/app/.eve/bin/tool", "EVE-BIN-TOOL"),
        ("src/app/agent/instructions.md", "AGENT-SOURCE"),
        ("src/app/node_modules/.bin/tool", "NODE-BIN-TOOL"),
        (".config/gh/hosts.yml", "GH-TOKEN"),
        (".config/composer/vendor/bin/phpunit", "COMPOSER-TOOL"),
        (".ssh/id_ed25519", "PRIVATE-KEY"),
        (".nvm/versions/node/v20/etc/npmrc", "NPMRC-TOKEN"),
        (
            ".nvm/versions/node/v20/lib/node_modules/npm/bin/npm-cli.js",
            "#!/bin/sh\necho NPM-RAN\n",
        ),
    ];
    for (rel, text) in files {
        write(&home.join(rel), text);
    }
    let npm = home.join(".nvm/versions/node/v20/lib/node_modules/npm/bin/npm-cli.js");
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(home.join(".nvm/versions/node/v20/bin")).unwrap();
    std::os::unix::fs::symlink(
        "../lib/node_modules/npm/bin/npm-cli.js",
        home.join(".nvm/versions/node/v20/bin/npm"),
    )
    .unwrap();
    let h = home.display();
    let path_var = format!(
        "{h}/src/app/node_modules/.bin:{h}/.config/composer/vendor/bin:{h}/src/app/.eve/bin:\
         {h}/.nvm/versions/node/v20/bin:/usr/local/bin:/usr/bin:/bin"
    );
    Layout {
        home,
        project,
        path_var,
    }
}

/// What the runtime protects: eve's state folder and the project holding it.
fn protected(l: &Layout) -> Vec<Protected> {
    vec![
        Protected::new(l.project.join(".eve"), "eve's state folder"),
        Protected::new(&l.project, "the project"),
    ]
}

/// The rule `PATH` entries followed before: each entry under `HOME` gave its whole top-level
/// folder (`~/.local` and `~/.cargo` aside). Kept only here, as the twin.
fn previous_rule(path_var: &str, home: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for entry in path_var.split(':').map(Path::new) {
        let Ok(rest) = entry.strip_prefix(home) else {
            continue;
        };
        if let Some(top) = rest.components().next() {
            let top = home.join(top);
            if top.is_dir() && !out.contains(&top) {
                out.push(top);
            }
        }
    }
    out
}

const ATTACK: &str = r#"for f in "$H/src/app/.eve/eve.db" "$H/src/app/agent/instructions.md" \
  "$H/src/app/node_modules/.bin/tool" "$H/src/app/.eve/bin/tool" "$H/.config/gh/hosts.yml" \
  "$H/.ssh/id_ed25519" "$H/.nvm/versions/node/v20/etc/npmrc" \
  "$H/.config/composer/vendor/bin/phpunit"; do cat "$f" 2>/dev/null; echo; done
npm"#;

const SECRETS: &[&str] = &[
    "STORE-BYTES",
    "AGENT-SOURCE",
    "NODE-BIN-TOOL",
    "EVE-BIN-TOOL",
    "GH-TOKEN",
    "PRIVATE-KEY",
    "NPMRC-TOKEN",
];

fn policy(f: &Fixture, l: &Layout, read_only: Vec<PathBuf>) -> Policy {
    Policy {
        read_only,
        read_write: vec![f.ws.clone()],
        home: Some(l.home.clone()),
        ..Policy::default()
    }
}

/// Runs the attack in a box of `policy`, as root or (`as_user`) as an ordinary user.
fn attack(f: &Fixture, l: &Layout, policy: &Policy, as_user: bool) -> super::Out {
    let mut cmd = f.isolated(policy, ATTACK);
    cmd.env("PATH", &l.path_var)
        .env("HOME", &l.home)
        .env("H", &l.home);
    if as_user {
        std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
        std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
    }
    run(cmd, LIMIT)
}

fn check(as_user: bool) {
    let f = Fixture::new();
    let l = layout(&f);
    if as_user {
        // The ordinary user must be able to read the layout (so the twin can), and own the
        // workspace.
        for entry in walk(&f.root) {
            let mode = if entry.is_dir() { 0o755 } else { 0o644 };
            let mode = if entry.ends_with("npm-cli.js") {
                0o755
            } else {
                mode
            };
            std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::os::unix::fs::chown(&f.ws, Some(65534), Some(65534)).unwrap();
    }
    let view = isolate::path_view(&l.path_var, Some(&l.home), &protected(&l));
    let left: Vec<String> = view.left_out.iter().map(ToString::to_string).collect();
    assert_eq!(left.len(), 2, "{left:#?}");
    assert!(
        left[0].contains("node_modules/.bin: it lies inside the project"),
        "{left:#?}"
    );
    assert!(
        left[1].contains(".eve/bin: it lies inside eve's state folder"),
        "{left:#?}"
    );

    let iso = attack(&f, &l, &policy(&f, &l, view.read_only.clone()), as_user);
    assert_eq!(iso.code(), 0, "isolated: {iso:?}");
    for s in SECRETS {
        assert!(!iso.stdout.contains(s), "isolated read {s}: {iso:?}");
    }
    // The one folder each allowed entry adds is there, and nvm's npm runs.
    assert!(iso.stdout.contains("COMPOSER-TOOL"), "isolated: {iso:?}");
    assert!(iso.stdout.contains("NPM-RAN"), "isolated: {iso:?}");

    let twin = attack(
        &f,
        &l,
        &policy(&f, &l, previous_rule(&l.path_var, &l.home)),
        as_user,
    );
    for s in ["STORE-BYTES", "AGENT-SOURCE", "GH-TOKEN", "NPMRC-TOKEN"] {
        assert!(
            twin.stdout.contains(s),
            "the previous rule must read {s}: {twin:?}"
        );
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    if root.is_symlink() {
        return Vec::new();
    }
    let mut out = vec![root.to_path_buf()];
    if root.is_dir() {
        for e in std::fs::read_dir(root).unwrap() {
            out.extend(walk(&e.unwrap().path()));
        }
    }
    out
}

#[test]
fn path_entries_add_their_own_folder_and_never_the_project_state_or_credentials() {
    check(false);
}

/// The same rules when eve runs as an ordinary user (the box then lives in a user namespace).
#[test]
fn an_unprivileged_eve_gets_the_same_view() {
    if !is_root() {
        return; // the test above already runs this way
    }
    check(true);
}
