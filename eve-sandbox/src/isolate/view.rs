//! The filesystem view of a sandbox: a fresh tmpfs root holding only what the policy allows.
//!
//! Built by stage 2 inside its private mount namespace, the way bubblewrap does it: a scratch
//! tmpfs over `/tmp` becomes the root (the host's tree stays reachable under `/oldroot`), the new
//! root is filled with bind mounts of the allowed host paths (read-only ones remounted read-only),
//! a minimal `/dev`, a fresh `/proc`, tmpfs `/tmp` and `HOME`, secrets of `/etc` masked; then it
//! becomes `/` and the host tree is detached, so nothing else exists for the command at all.
//!
//! Two phases, so a warm box ([`super::pool`]) does most of the work before its call: [`prepare`]
//! builds what no policy changes (the scratch root, the system paths read-only, the masks over
//! `/etc`'s secrets, `/dev`, `/proc`), [`finish`] adds the call's own (its paths, `/tmp`, `HOME`,
//! `/dev/shm`, the egress socket), puts the masks back over any policy path that covers one, and
//! swaps the roots. The cold path runs both at once ([`build`]). Between the two phases the host
//! tree is reachable only under [`OLD`], so [`finish`] resolves the policy's paths there as the
//! host would ([`host_canonical`]: an absolute link target starts at the host's root).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Component, Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::unistd::pivot_root;

use super::helper::{Failure, Mode, Result};
use super::{DEFAULT_UID, Network, PROXY_SOCKET_IN_SANDBOX, Policy};

/// Host paths every program needs, bound read-only when present (or recreated as the same
/// symlink, as `/lib` is on merged-`/usr` systems).
const SYSTEM_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Files and folders of `/etc` that hold secrets: masked with an empty file or folder.
const SECRET_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/sudoers.d",
    "/etc/krb5.keytab",
];

/// Device nodes bound from the host's `/dev`. No terminal: `/dev/tty` (the caller's controlling
/// terminal), `/dev/console` and `/dev/pts` are absent, and the box runs in a session of its own
/// with no controlling terminal (see `helper.rs`).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Where the host tree and the new root live while the view is built.
const OLD: &str = "/oldroot";
/// Where the view is built, before it becomes `/`; between the phases its `/dev/null` and `/proc`
/// (the box's own) are reachable here.
pub(crate) const NEW: &str = "/newroot";
/// Symbolic links followed while resolving one host path before giving up (the kernel's limit).
const MAX_LINKS: usize = 40;

/// The paths of a built view, in the sandbox's coordinates, for stage 2 and Landlock.
#[derive(Debug, Default)]
pub(crate) struct Built {
    /// Everything bound or created that the command may enter.
    all: Vec<PathBuf>,
    /// Fresh, empty mounts (`/tmp`, `HOME`): only they themselves are in the view, not the host
    /// paths below them (a host folder under `/tmp` does not exist in the sandbox's `/tmp`).
    fresh: Vec<PathBuf>,
}

impl Built {
    /// Whether `path` lies inside the view (a host path the sandbox shows at the same place).
    pub(crate) fn contains(&self, path: &Path) -> bool {
        path == Path::new("/")
            || self.all.iter().any(|p| path.starts_with(p))
            || self.fresh.iter().any(|p| path == p)
    }
}

/// Landlock's view of a policy: what is read-only and what is read-write, in sandbox paths.
pub(crate) struct Access {
    pub(crate) read_only: Vec<PathBuf>,
    pub(crate) read_write: Vec<PathBuf>,
    pub(crate) devices: Vec<PathBuf>,
}

/// The paths Landlock allows for `policy` (the same sets the view is built from).
pub(crate) fn access(policy: &Policy) -> Access {
    let mut read_only: Vec<PathBuf> = SYSTEM_PATHS.iter().map(PathBuf::from).collect();
    read_only.extend(policy.read_only.iter().cloned());
    read_only.extend(canonical_variants(&policy.read_only));
    read_only.push("/proc".into());
    let mut read_write: Vec<PathBuf> = policy.read_write.clone();
    read_write.extend(canonical_variants(&policy.read_write));
    read_write.push("/tmp".into());
    read_write.push("/dev/shm".into());
    read_write.extend(policy.home.iter().cloned());
    Access {
        read_only,
        read_write,
        devices: vec!["/dev".into()],
    }
}

/// After the pivot, canonical paths of symlinked policy entries are bound too: both count.
fn canonical_variants(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter_map(|p| fs::canonicalize(p).ok().filter(|c| c != p))
        .collect()
}

#[derive(Debug, Clone)]
enum Kind {
    /// Bind the host path; read-only when `ro`.
    Bind { source: PathBuf, ro: bool },
    /// Recreate the host's symlink.
    Symlink(PathBuf),
    /// A fresh tmpfs with these options.
    Tmpfs(String),
    /// Hide a file (bind `/dev/null`) or folder (empty read-only tmpfs).
    Mask,
}

#[derive(Debug, Clone)]
struct Entry {
    /// Path inside the sandbox.
    path: PathBuf,
    kind: Kind,
}

fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

fn err(what: &str, path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::new(format!("{what} {}: {e}", path.display()))
}

/// Host path as seen while building (under [`OLD`]).
fn host(p: &Path) -> PathBuf {
    join(Path::new(OLD), p)
}

/// Sandbox path as seen while building (under [`NEW`]).
fn target(p: &Path) -> PathBuf {
    join(Path::new(NEW), p)
}

fn join(base: &Path, p: &Path) -> PathBuf {
    let rel: PathBuf = p
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    base.join(rel)
}

/// What no policy changes, computed on the host view before anything is mounted: the system
/// paths, and the masks over the secrets of `/etc` (applied after the system paths, and again
/// over any policy path that covers one).
fn base_plan() -> Result<(Vec<Entry>, Vec<Entry>)> {
    let mut system = Vec::new();
    for sys in SYSTEM_PATHS {
        let p = Path::new(sys);
        match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(p).map_err(|e| err("cannot read the link", p, e))?;
                system.push(Entry {
                    path: p.into(),
                    kind: Kind::Symlink(to),
                });
            }
            Ok(_) => system.push(Entry {
                path: p.into(),
                kind: Kind::Bind {
                    source: p.into(),
                    ro: true,
                },
            }),
            Err(_) => {}
        }
    }
    let mut masks = Vec::new();
    if Path::new("/etc").is_dir() {
        for s in SECRET_FILES {
            if fs::symlink_metadata(s).is_ok() {
                masks.push(Entry {
                    path: s.into(),
                    kind: Kind::Mask,
                });
            }
        }
        if let Ok(dir) = fs::read_dir("/etc/ssh") {
            for e in dir.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("ssh_host_") && !name.ends_with(".pub") {
                    masks.push(Entry {
                        path: e.path(),
                        kind: Kind::Mask,
                    });
                }
            }
        }
    }
    masks.sort_by_key(|e| depth(&e.path));
    Ok((system, masks))
}

/// The call's own mounts for `policy`, computed on the host tree under [`OLD`] before any of
/// them is mounted.
fn plan(policy: &Policy, mode: Mode) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let owner = match mode {
        Mode::Root => policy.uid.unwrap_or(DEFAULT_UID),
        Mode::User => 0,
    };
    let size = size_option(policy);
    entries.push(Entry {
        path: "/tmp".into(),
        kind: Kind::Tmpfs(format!("mode=1777{size}")),
    });
    if let Some(home) = &policy.home {
        entries.push(Entry {
            path: home.clone(),
            kind: Kind::Tmpfs(format!("mode=0700,uid={owner},gid={owner}{size}")),
        });
    }
    refuse_nesting(policy)?;
    for p in &policy.read_only {
        // Missing read-only paths are skipped: defaults name version managers that may not exist.
        if let Ok(canon) = host_canonical(p) {
            for at in dedup([p.clone(), canon.clone()]) {
                entries.push(Entry {
                    path: at,
                    kind: Kind::Bind {
                        source: canon.clone(),
                        ro: true,
                    },
                });
            }
        }
    }
    for p in &policy.read_write {
        let canon = host_canonical(p)
            .map_err(|e| err("the writable path cannot be used (create it first):", p, e))?;
        for at in dedup([p.clone(), canon.clone()]) {
            entries.push(Entry {
                path: at,
                kind: Kind::Bind {
                    source: canon.clone(),
                    ro: false,
                },
            });
        }
    }
    if let Network::Proxy { socket, .. } = &policy.network {
        let Ok(source) = host_canonical(socket) else {
            return Err(err(
                "the egress proxy socket does not exist:",
                socket,
                "start the proxy before the command",
            ));
        };
        entries.push(Entry {
            path: PROXY_SOCKET_IN_SANDBOX.into(),
            kind: Kind::Bind { source, ro: false },
        });
    }
    // Parents before children; at equal depth the later entry wins (writable over read-only).
    entries.sort_by_key(|e| depth(&e.path));
    Ok(entries)
}

/// Refuses a policy path inside a writable one. The command may have planted symlinks there in an
/// earlier call, and following them while binding (as root, before the host tree is detached)
/// would expose or create host paths; the view never needs such nesting.
fn refuse_nesting(policy: &Policy) -> Result<()> {
    let writable: Vec<(PathBuf, Option<PathBuf>)> = policy
        .read_write
        .iter()
        .map(|w| (w.clone(), host_canonical(w).ok()))
        .collect();
    let all = policy.read_only.iter().chain(&policy.read_write);
    for p in all.chain(policy.home.iter()) {
        for (w, canon) in &writable {
            let inside = |root: &Path| p != root && p.starts_with(root);
            if inside(w) || canon.as_deref().is_some_and(inside) {
                return Err(Failure::new(format!(
                    "the policy path {} lies inside the writable path {}: the command could \
                     redirect it with a symlink; give a path outside it",
                    p.display(),
                    w.display()
                )));
            }
        }
    }
    Ok(())
}

/// The `size=` option of the private tmpfs mounts, with its leading comma, or nothing.
fn size_option(policy: &Policy) -> String {
    policy
        .limits
        .tmpfs_size
        .map(|n| format!(",size={n}"))
        .unwrap_or_default()
}

fn dedup(paths: [PathBuf; 2]) -> Vec<PathBuf> {
    let [a, b] = paths;
    if a == b { vec![a] } else { vec![a, b] }
}

/// What [`prepare`] built: the view's policy-independent part, waiting for [`finish`].
#[derive(Debug)]
pub(crate) struct Base {
    built: Built,
    /// The masks over `/etc`'s secrets, to put back over a policy path that covers one.
    masks: Vec<Entry>,
}

/// Builds the view for `policy` and makes it the root of this mount namespace: [`prepare`], then
/// [`finish`].
pub(crate) fn build(policy: &Policy, mode: Mode) -> Result<Built> {
    finish(prepare()?, policy, mode)
}

/// The first phase: makes the mounts private, moves into a scratch root (the host tree under
/// [`OLD`]) and builds in [`NEW`] what no policy changes: the system paths read-only, the masks,
/// `/dev` (read-only, `/dev/shm` still to mount) and a fresh `/proc`. Run it as PID 1 of the
/// box's PID namespace (the `/proc` is that namespace's).
pub(crate) fn prepare() -> Result<Base> {
    let (system, masks) = base_plan()?;
    // Nothing we mount may propagate back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| err("cannot make the mounts private at", Path::new("/"), e))?;
    let base = Path::new("/tmp");
    mount_tmpfs(base, "mode=0755")?;
    for d in ["newroot", "oldroot"] {
        mkdir(&base.join(d), 0o755)?;
    }
    pivot_root(base, &base.join("oldroot"))
        .map_err(|e| err("pivot_root into the scratch root", base, e))?;
    std::env::set_current_dir("/").map_err(|e| err("chdir", Path::new("/"), e))?;
    mount_tmpfs(Path::new(NEW), "mode=0755")?;

    let mut built = Built::default();
    for e in system.iter().chain(&masks) {
        apply(e)?;
        if !matches!(e.kind, Kind::Mask) {
            built.all.push(e.path.clone());
        }
    }
    build_dev()?;
    let proc_at = target(Path::new("/proc"));
    mkdir_all(&proc_at)?;
    mount(
        Some("proc"),
        &proc_at,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| err("cannot mount a fresh /proc at", Path::new("/proc"), e))?;
    built.all.push("/proc".into());
    built.all.push("/dev".into());
    Ok(Base { built, masks })
}

/// The second phase: adds the call's own mounts for `policy` to a [`prepare`]d view, puts the
/// masks back over any policy path that covers one, mounts `/dev/shm`, and makes the view `/`
/// with the host tree detached.
pub(crate) fn finish(base: Base, policy: &Policy, mode: Mode) -> Result<Built> {
    let entries = plan(policy, mode)?;
    let Base { mut built, masks } = base;
    let mut seen: BTreeSet<PathBuf> = built.all.iter().cloned().collect();
    for e in &entries {
        apply(e)?;
        match e.kind {
            Kind::Mask => {}
            Kind::Tmpfs(_) => built.fresh.push(e.path.clone()),
            _ if seen.insert(e.path.clone()) => built.all.push(e.path.clone()),
            _ => {}
        }
    }
    // A policy path at or above a secret (say, all of `/etc`) would uncover it.
    for mask in &masks {
        let covered = entries
            .iter()
            .any(|e| matches!(e.kind, Kind::Bind { .. }) && mask.path.starts_with(&e.path));
        if covered {
            apply(mask)?;
        }
    }
    let shm = target(Path::new("/dev/shm"));
    mount_tmpfs(&shm, &format!("mode=1777{}", size_option(policy)))?;

    // Swap roots: the new root becomes `/`, the scratch root with the host tree is detached.
    let new = Path::new(NEW);
    std::env::set_current_dir(new).map_err(|e| err("chdir", new, e))?;
    pivot_root(".", ".").map_err(|e| err("pivot_root into the sandbox root", new, e))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| {
        err(
            "cannot detach the host's filesystem tree at",
            Path::new("/"),
            e,
        )
    })?;
    std::env::set_current_dir("/").map_err(|e| err("chdir", Path::new("/"), e))?;
    // The root tmpfs itself is read-only: the command can write only where the policy says.
    remount_ro(Path::new("/"), false)?;
    Ok(built)
}

/// `path` resolved on the host's tree (reachable under [`OLD`]) as `fs::canonicalize` resolves
/// it on the host: every link followed, an absolute target starting at the host's root, each
/// component required to exist.
fn host_canonical(path: &Path) -> std::io::Result<PathBuf> {
    use std::ffi::OsString;
    fn push_reversed(todo: &mut Vec<OsString>, p: &Path) {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_owned()),
                Component::ParentDir => todo.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    }
    let mut todo = Vec::new();
    push_reversed(&mut todo, path);
    let mut out = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&name);
        let on_host = host(&next);
        if fs::symlink_metadata(&on_host)?.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
            }
            let to = fs::read_link(&on_host)?;
            if to.is_absolute() {
                out = PathBuf::from("/");
            }
            push_reversed(&mut todo, &to);
        } else {
            out = next;
        }
    }
    Ok(out)
}

fn apply(e: &Entry) -> Result<()> {
    let at = target(&e.path);
    match &e.kind {
        Kind::Symlink(to) => {
            if let Some(parent) = at.parent() {
                mkdir_all(parent)?;
            }
            symlink(to, &at).map_err(|x| err("cannot create the symlink", &e.path, x))
        }
        Kind::Tmpfs(opts) => {
            mkdir_all(&at)?;
            mount_tmpfs(&at, opts)
        }
        Kind::Bind { source, ro } => {
            let src = host(source);
            let is_dir = fs::metadata(&src)
                .map_err(|x| err("cannot bind", source, x))?
                .is_dir();
            make_mount_point(&at, is_dir)?;
            mount(
                Some(&src),
                &at,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|x| err("cannot bind", source, x))?;
            if *ro {
                remount_ro(&at, true)?;
            }
            Ok(())
        }
        Kind::Mask => {
            let Ok(meta) = fs::symlink_metadata(&at) else {
                // Not in the view (its parent was not bound): nothing to hide.
                return Ok(());
            };
            if meta.is_dir() {
                mount(
                    Some("tmpfs"),
                    &at,
                    Some("tmpfs"),
                    MsFlags::MS_RDONLY
                        | MsFlags::MS_NOSUID
                        | MsFlags::MS_NODEV
                        | MsFlags::MS_NOEXEC,
                    Some("size=4k,mode=0755"),
                )
                .map_err(|x| err("cannot hide", &e.path, x))
            } else if meta.file_type().is_symlink() {
                // A link to a secret elsewhere resolves inside the view, where it is absent or
                // masked itself.
                Ok(())
            } else {
                mount(
                    Some(&host(Path::new("/dev/null"))),
                    &at,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(|x| err("cannot hide", &e.path, x))
            }
        }
    }
}

/// A minimal `/dev`: a few device nodes bound from the host, the usual links, and the folder
/// `/dev/shm` (its tmpfs, sized by the policy, comes with the call).
fn build_dev() -> Result<()> {
    let dev = target(Path::new("/dev"));
    mkdir_all(&dev)?;
    mount_tmpfs(&dev, "mode=0755")?;
    for name in DEVICES {
        let src = host(&Path::new("/dev").join(name));
        if fs::metadata(&src).is_err() {
            continue;
        }
        let at = dev.join(name);
        make_mount_point(&at, false)?;
        mount(
            Some(&src),
            &at,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|x| err("cannot bind the device", &Path::new("/dev").join(name), x))?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        symlink(to, dev.join(name)).map_err(|x| err("cannot create", &dev.join(name), x))?;
    }
    mkdir(&dev.join("shm"), 0o755)?;
    remount_ro(&dev, false)
}

fn mount_tmpfs(at: &Path, opts: &str) -> Result<()> {
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(opts),
    )
    .map_err(|e| err("cannot mount a tmpfs at", at, e))
}

/// Remounts the bind at `at` read-only, keeping the flags the kernel requires us to keep (in a
/// user namespace, `nosuid`/`nodev`/`noexec` of the original mount are locked).
fn remount_ro(at: &Path, add_nosuid: bool) -> Result<()> {
    let st = statvfs(at).map_err(|e| err("cannot stat the mount", at, e))?;
    let f = st.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for (fs_flag, ms_flag) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs_flag) {
            flags |= ms_flag;
        }
    }
    if add_nosuid {
        flags |= MsFlags::MS_NOSUID;
    }
    mount(None::<&str>, at, None::<&str>, flags, None::<&str>)
        .map_err(|e| err("cannot make read-only", at, e))
}

fn mkdir(p: &Path, mode: u32) -> Result<()> {
    match fs::DirBuilder::new().mode(mode).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(err("cannot create the folder", p, e)),
    }
}

fn mkdir_all(p: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .mode(0o755)
        .recursive(true)
        .create(p)
        .map_err(|e| err("cannot create the folder", p, e))
}

/// Creates the folder or empty file a bind mount lands on (its parents included).
fn make_mount_point(at: &Path, dir: bool) -> Result<()> {
    if dir {
        return mkdir_all(at);
    }
    if let Some(parent) = at.parent() {
        mkdir_all(parent)?;
    }
    if fs::symlink_metadata(at).is_ok() {
        return Ok(());
    }
    fs::File::create(at)
        .map(drop)
        .map_err(|e| err("cannot create the mount point", at, e))
}
