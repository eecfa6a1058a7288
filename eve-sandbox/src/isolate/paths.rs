//! What the environment may add to a box's view, chosen from an allowlist, and handing the
//! writable tree to the sandbox uid.
//!
//! The view holds the system folders, the policy's own paths, and what [`path_view`] finds on
//! `PATH`: each entry adds **that one folder**, read-only, and nothing above it. A few layouts of
//! version managers need one precise neighbour besides, and get exactly that one (see
//! [`path_view`]). No entry ever adds a folder that is, holds or lies inside `HOME`'s credentials
//! ([`CREDENTIALS`]), a [`Protected`] folder (the project, eve's state folder `.eve/`…), the
//! system's live state (`/proc`, `/sys`, `/dev`, `/run`), `/` or `HOME` itself: such an entry is
//! left out, and the caller says so once ([`LeftOut`]).

use std::fs;
use std::io;
use std::os::unix::fs::lchown;
use std::path::{Component, Path, PathBuf};

use super::{DEFAULT_UID, Policy};

/// Top-level folders already in every view: `PATH` entries under them need no rule.
const SYSTEM_ROOTS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Folders holding the system's live state (devices, kernel tables, daemons' sockets such as
/// `/run/docker.sock`): never added, whatever `PATH` says.
const LIVE_STATE: &[&str] = &["/proc", "/sys", "/dev", "/run", "/var/run"];

/// Paths under `HOME` that hold credentials (keys, tokens, passwords, cookies): a `PATH` entry
/// inside one of them, or holding one of them, is left out of the view.
pub const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".password-store",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".oci",
    ".kube",
    ".docker",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".config/doctl",
    ".config/op",
    ".config/rclone",
    ".terraform.d",
    ".vault-token",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".config/pip",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".composer/auth.json",
    ".config/composer/auth.json",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".local/share/keyrings",
    ".pki",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
];

/// Names that mark a folder as holding credentials wherever it is (another user's `HOME` on
/// `PATH`, a tool's configuration folder): a folder holding one directly is never added.
const CREDENTIAL_NAMES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".vault-token",
    "credentials",
    "credentials.toml",
    "auth.json",
    "id_rsa",
    "id_ecdsa",
    "id_ed25519",
];

/// A folder no environment entry may expose, with the words that name it in a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    /// The folder (or file).
    pub path: PathBuf,
    /// What it is, for the warning: "the project", "eve's state folder".
    pub what: String,
}

impl Protected {
    /// `path`, named `what` in warnings.
    pub fn new(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        Protected {
            path: path.into(),
            what: what.into(),
        }
    }
}

/// A `PATH` entry (or the neighbour an entry would have added) that is not in the view, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The entry as `PATH` names it (or the neighbour it would have added).
    pub entry: PathBuf,
    /// Why, as a clause: "it lies inside the project (/srv/app)".
    pub reason: String,
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.entry.display(), self.reason)
    }
}

/// What `PATH` adds to a view: [`PathView::read_only`] goes into [`Policy::read_only`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathView {
    /// Existing folders to bind read-only, without duplicates, in `PATH` order.
    pub read_only: Vec<PathBuf>,
    /// Entries left out, in `PATH` order.
    pub left_out: Vec<LeftOut>,
}

/// The read-only folders that keep `PATH`'s programs working inside the box, from an allowlist.
///
/// Each absolute entry that exists and is not under a system folder (`/usr`, `/bin`, `/lib*`,
/// `/etc`, `/opt`, already in every view) adds that one folder. Three layouts add one neighbour
/// besides, because their programs cannot run without it:
/// - a `shims` folder whose parent is a version manager's root (it holds `libexec/`, `versions/`
///   or `installs/`: pyenv, rbenv, nodenv, asdf, mise) adds that root: every shim re-enters the
///   manager (`libexec/pyenv exec`), which reads the chosen version and runs it from `versions/`;
/// - a `bin` folder inside a manager's `versions/` or `installs/` folder
///   (`~/.nvm/versions/node/v22/bin`, `~/.pyenv/versions/3.12.1/bin`), and `~/.local/bin`, add
///   their sibling `lib` (npm is `../lib/node_modules/npm`, Python's standard library and
///   `pip --user` modules are in `lib/python3.x`), not the rest of the prefix (`etc/npmrc` may
///   hold a token);
/// - `~/.cargo/bin` adds `~/.rustup` (the toolchains its rustup proxies run), not `~/.cargo`
///   (which holds the registry token).
///
/// An entry, or a neighbour, that is `/`, `HOME` or holds `HOME`, lies inside or holds one of
/// [`CREDENTIALS`] or of `protected`, directly holds a credentials file ([`CREDENTIAL_NAMES`]), or
/// is the system's live state (`/proc`, `/sys`, `/dev`, `/run`) is left out and reported in
/// [`PathView::left_out`]; a symlinked entry is judged both as written and where it leads.
/// Relative entries (they resolve in the box's own working folder) and missing ones are skipped
/// without a word.
pub fn path_view(path_var: &str, home: Option<&Path>, protected: &[Protected]) -> PathView {
    let rules = Rules::new(home, protected);
    let mut view = PathView::default();
    let mut seen: Vec<&str> = Vec::new();
    for raw in path_var.split(':') {
        if raw.is_empty() || seen.contains(&raw) {
            continue;
        }
        seen.push(raw);
        let entry = Path::new(raw);
        if entry.is_relative() || entry.components().any(|c| c == Component::ParentDir) {
            continue;
        }
        if SYSTEM_ROOTS.iter().any(|r| entry.starts_with(r)) {
            continue;
        }
        let Ok(canon) = fs::canonicalize(entry) else {
            continue; // missing
        };
        if !canon.is_dir() {
            continue;
        }
        if let Some(reason) = rules.refusal(entry, &canon) {
            view.left_out.push(LeftOut {
                entry: entry.to_path_buf(),
                reason,
            });
            continue;
        }
        view.add(entry.to_path_buf());
        for extra in rules.neighbours(&canon) {
            let Ok(extra_canon) = fs::canonicalize(&extra) else {
                continue;
            };
            match rules.refusal(&extra, &extra_canon) {
                None => view.add(extra),
                Some(reason) => view.left_out.push(LeftOut {
                    entry: extra,
                    reason: format!("needed by {}, but {reason}", entry.display()),
                }),
            }
        }
    }
    // A folder under another one of the list is already bound with it.
    let all = view.read_only.clone();
    view.read_only
        .retain(|p| !all.iter().any(|a| a != p && p.starts_with(a)));
    view
}

impl PathView {
    fn add(&mut self, p: PathBuf) {
        if !self.read_only.contains(&p) {
            self.read_only.push(p);
        }
    }
}

/// The folders an entry is judged against, each as given and canonical.
struct Rules {
    homes: Vec<PathBuf>,
    credentials: Vec<(PathBuf, String)>,
    protected: Vec<(PathBuf, String)>,
}

impl Rules {
    fn new(home: Option<&Path>, protected: &[Protected]) -> Self {
        let homes = home.map(both).unwrap_or_default();
        let mut credentials = Vec::new();
        for h in &homes {
            for c in CREDENTIALS {
                credentials.push((h.join(c), format!("~/{c}")));
            }
        }
        let mut guarded = Vec::new();
        for p in protected {
            for at in both(&p.path) {
                guarded.push((at, format!("{} ({})", p.what, p.path.display())));
            }
        }
        Rules {
            homes,
            credentials,
            protected: guarded,
        }
    }

    /// Why `entry` (canonical `canon`) must stay out of the view, or `None`.
    fn refusal(&self, entry: &Path, canon: &Path) -> Option<String> {
        self.refusal_of(entry)
            .or_else(|| (canon != entry).then(|| self.refusal_of(canon)).flatten())
    }

    fn refusal_of(&self, p: &Path) -> Option<String> {
        if p == Path::new("/") {
            return Some("it is the root folder".into());
        }
        if let Some(live) = LIVE_STATE.iter().find(|l| p.starts_with(l)) {
            return Some(format!("it is the system's live state ({live})"));
        }
        for home in &self.homes {
            if p == home {
                return Some("it is HOME, which holds credentials and everything else".into());
            }
            if home.starts_with(p) {
                return Some(format!("it holds HOME ({})", home.display()));
            }
        }
        for (c, name) in &self.credentials {
            if p.starts_with(c) {
                return Some(format!("it lies inside {name}, which holds credentials"));
            }
            if c.starts_with(p) {
                return Some(format!("it holds {name}, which holds credentials"));
            }
        }
        for (at, what) in &self.protected {
            if p.starts_with(at) {
                return Some(format!("it lies inside {what}"));
            }
            if at.starts_with(p) {
                return Some(format!("it holds {what}"));
            }
        }
        // One listing rather than a lookup per name: this runs for every isolated call.
        let names = fs::read_dir(p).ok()?;
        names
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find(|name| CREDENTIAL_NAMES.contains(&name.as_str()))
            .map(|name| format!("it holds `{name}`, which holds credentials"))
    }

    /// The one neighbour a version manager's folder needs (see [`path_view`]).
    fn neighbours(&self, canon: &Path) -> Vec<PathBuf> {
        let (Some(name), Some(parent)) = (canon.file_name(), canon.parent()) else {
            return Vec::new();
        };
        let in_home = |rel: &str| self.homes.iter().any(|h| canon == h.join(rel));
        let mut out = Vec::new();
        if name == "shims"
            && ["libexec", "versions", "installs"]
                .iter()
                .any(|d| parent.join(d).is_dir())
        {
            out.push(parent.to_path_buf());
        }
        if name == "bin" {
            let in_versions = parent.ancestors().skip(1).any(|a| {
                a.file_name()
                    .is_some_and(|n| n == "versions" || n == "installs")
            });
            if in_versions || in_home(".local/bin") {
                out.push(parent.join("lib"));
            }
            if in_home(".cargo/bin")
                && let Some(home) = parent.parent()
            {
                out.push(home.join(".rustup"));
            }
        }
        out.retain(|p| p.is_dir());
        out
    }
}

/// `p` and, when it differs, where it leads.
fn both(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    if let Ok(c) = fs::canonicalize(p)
        && c != p
    {
        out.push(c);
    }
    out
}

/// Makes `path` (recursively, without following symlinks) owned by the sandbox uid when eve runs
/// as root, so an isolated command can write in it; does nothing otherwise.
///
/// Call it on the workspace (and every other `read_write` path) before each isolated call that
/// follows writes made by eve itself: files eve creates are root's, and the command, running as
/// the sandbox uid, could not change them.
pub fn prepare_writable(path: &Path, policy: &Policy) -> io::Result<()> {
    if !nix::unistd::getuid().is_root() {
        return Ok(());
    }
    let id = policy.uid.unwrap_or(DEFAULT_UID);
    chown_tree(path, id)
}

fn chown_tree(path: &Path, id: u32) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    lchown(path, Some(id), Some(id))?;
    // Below the top, every step is taken from a folder handle already open, by one name, never
    // through a symlink: another box of the same session may be swapping a folder of this tree
    // for a symlink to `/` while it is walked, and a path walked by name would then hand files
    // outside the tree to the sandbox uid.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(dir) => chown_below(&dir, id),
        // A file, or a symlink (changed as a link by `lchown`, never followed).
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Hands every entry below the open folder `dir` to `id`, one name at a time.
fn chown_below(dir: &std::os::fd::OwnedFd, id: u32) -> io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Uid};
    use rustix::io::Errno;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let owner = (Some(Uid::from_raw(id)), Some(Gid::from_raw(id)));
        match rustix::fs::chownat(dir, name, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(()) => {}
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        }
        if matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(sub) => chown_below(&sub, id)?,
                // Not a folder (any more): nothing below it.
                Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tree(dirs: &[&str], files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for d in dirs {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        for f in files {
            let p = dir.path().join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "x").unwrap();
        }
        dir
    }

    fn rel(root: &Path, paths: &[PathBuf]) -> Vec<String> {
        paths
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn each_entry_adds_its_own_folder_and_version_managers_their_one_neighbour() {
        let t = tree(
            &[
                "home/.pyenv/shims",
                "home/.pyenv/libexec",
                "home/.pyenv/versions/3.12.1/bin",
                "home/.pyenv/versions/3.12.1/lib",
                "home/.nvm/versions/node/v22/bin",
                "home/.nvm/versions/node/v22/lib/node_modules/npm",
                "home/.nvm/versions/node/v22/etc",
                "home/.local/bin",
                "home/.local/lib",
                "home/.local/share/keyrings",
                "home/.cargo/bin",
                "home/.rustup/toolchains",
                "home/bin",
                "home/.config/composer/vendor/bin",
                "home/tools/shims",
                "srv/tools/bin",
            ],
            &["home/.cargo/credentials.toml", "home/.config/gh/hosts.yml"],
        );
        let root = t.path();
        let home = root.join("home");
        let h = home.display();
        let r = root.display();
        let path = format!(
            "{h}/.pyenv/shims:/usr/bin:{h}/.nvm/versions/node/v22/bin:{h}/.local/bin:\
             {h}/.cargo/bin:{h}/bin:{h}/.config/composer/vendor/bin:{h}/tools/shims:\
             {r}/srv/tools/bin:relative/bin::{h}/.pyenv/shims:{h}/missing/bin:\
             {h}/.pyenv/versions/3.12.1/bin"
        );
        let view = path_view(&path, Some(&home), &[]);
        assert_eq!(
            rel(root, &view.read_only),
            [
                "home/.pyenv",
                "home/.nvm/versions/node/v22/bin",
                "home/.nvm/versions/node/v22/lib",
                "home/.local/bin",
                "home/.local/lib",
                "home/.cargo/bin",
                "home/.rustup",
                "home/bin",
                "home/.config/composer/vendor/bin",
                // No libexec/, versions/ or installs/ beside it: not a manager's root.
                "home/tools/shims",
                "srv/tools/bin",
            ]
        );
        assert_eq!(view.left_out, []);
    }

    #[test]
    fn entries_that_would_expose_the_project_the_state_or_credentials_are_left_out() {
        let t = tree(
            &[
                "home/.config/gh",
                "home/.ssh/keys",
                "home/.docker/cli-plugins",
                "project/node_modules/.bin",
                "project/.eve/bin",
                "project/agent",
                "other/.aws",
                "other/bin",
            ],
            &["home/.netrc"],
        );
        let root = t.path();
        let home = root.join("home");
        let project = root.join("project");
        std::os::unix::fs::symlink(root.join("home/.ssh/keys"), root.join("innocent")).unwrap();
        let protected = [
            Protected::new(&project, "the project"),
            Protected::new(project.join(".eve"), "eve's state folder"),
        ];
        let h = home.display();
        let p = project.display();
        let r = root.display();
        let entries = [
            (
                format!("{p}/node_modules/.bin"),
                "it lies inside the project",
            ),
            (format!("{p}/.eve/bin"), "it lies inside the project"),
            (format!("{r}"), "it holds HOME"),
            (format!("{h}"), "it is HOME"),
            (format!("{h}/.config"), "it holds ~/.config/"),
            (format!("{h}/.ssh/keys"), "it lies inside ~/.ssh"),
            (
                format!("{h}/.docker/cli-plugins"),
                "it lies inside ~/.docker",
            ),
            (format!("{r}/innocent"), "it lies inside ~/.ssh"),
            (format!("{r}/other"), "it holds `.aws`"),
            ("/proc/self".to_owned(), "it is the system's live state"),
            ("/".to_owned(), "it is the root folder"),
        ];
        let path = entries
            .iter()
            .map(|(e, _)| e.as_str())
            .chain([format!("{r}/other/bin").as_str()])
            .collect::<Vec<_>>()
            .join(":");
        let view = path_view(&path, Some(&home), &protected);
        assert_eq!(view.read_only, [root.join("other/bin")]);
        assert_eq!(view.left_out.len(), entries.len(), "{:#?}", view.left_out);
        for ((entry, why), got) in entries.iter().zip(&view.left_out) {
            assert_eq!(got.entry, Path::new(entry));
            assert!(got.reason.starts_with(why), "{entry}: {}", got.reason);
        }
    }

    #[test]
    fn a_neighbour_that_would_expose_something_is_left_out_alone() {
        // A manager's root that holds the project: its shims stay, the root does not.
        let t = tree(&["mgr/shims", "mgr/versions", "mgr/project/.eve"], &[]);
        let root = t.path();
        let protected = [Protected::new(root.join("mgr/project"), "the project")];
        let view = path_view(&format!("{}/mgr/shims", root.display()), None, &protected);
        assert_eq!(view.read_only, [root.join("mgr/shims")]);
        assert_eq!(view.left_out.len(), 1);
        assert_eq!(view.left_out[0].entry, root.join("mgr"));
        assert!(
            view.left_out[0].reason.contains("holds the project"),
            "{}",
            view.left_out[0]
        );
    }
}
