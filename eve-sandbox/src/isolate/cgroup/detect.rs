//! Finding where this process may make box cgroups: its own cgroup in each hierarchy (from
//! `/proc/self/cgroup` and `/proc/self/mountinfo`), cgroup v1 per controller first, else v2 with
//! the controllers delegated; and sweeping the folders of eve processes that are gone.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use super::{Cgroups, Enforcement, Hierarchy, Mechanism, kill_all};

/// Finds this process's cgroups, makes its folder in each usable hierarchy, and says what is
/// enforced and why not.
pub(super) fn detect() -> Cgroups {
    let none = |why: &str| Cgroups {
        hierarchies: Vec::new(),
        enforcement: Enforcement {
            processes: Err(why.to_owned()),
            memory: Err(why.to_owned()),
            swap: false,
        },
        next: AtomicU64::new(0),
        reaper: Mutex::new(None),
    };
    let (Ok(own), Ok(mounts)) = (
        fs::read_to_string("/proc/self/cgroup"),
        fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return none("/proc/self/cgroup cannot be read");
    };
    let mounts = parse_mounts(&mounts);
    let own = parse_own(&own);
    let tag = process_tag();
    sweep_all(&own, &mounts);
    let mut hierarchies: Vec<Hierarchy> = Vec::new();
    let mut processes = Err(String::new());
    let mut memory = Err(String::new());
    let mut swap = false;
    // v1 first: a controller bound to a v1 hierarchy is absent from v2.
    for controller in ["pids", "memory"] {
        let v1 = own
            .iter()
            .find(|c| c.controllers.iter().any(|n| n == controller));
        let outcome = match v1 {
            Some(c) if !c.controllers.is_empty() => v1_hierarchy(c, controller, &mounts, &tag),
            _ => Err(format!(
                "no cgroup v1 hierarchy has the {controller} controller"
            )),
        };
        let slot = if controller == "pids" {
            &mut processes
        } else {
            &mut memory
        };
        match outcome {
            Ok(h) => {
                swap |= h.swap;
                hierarchies.push(h);
                *slot = Ok(Mechanism::V1);
            }
            Err(e) => *slot = Err(e),
        }
    }
    let want_pids = processes.is_err();
    let want_memory = memory.is_err();
    if want_pids || want_memory {
        match own.iter().find(|c| c.v2) {
            Some(c) => match v2_hierarchy(c, &mounts, &tag, want_pids, want_memory) {
                Ok(h) => {
                    if h.pids {
                        processes = Ok(Mechanism::V2);
                    }
                    if h.memory {
                        memory = Ok(Mechanism::V2);
                        swap = h.swap;
                    }
                    if want_pids
                        && !h.pids
                        && let Err(e) = &mut processes
                    {
                        e.push_str("; cgroup v2 does not offer pids to this process's cgroup");
                    }
                    if want_memory
                        && !h.memory
                        && let Err(e) = &mut memory
                    {
                        e.push_str("; cgroup v2 does not offer memory to this process's cgroup");
                    }
                    hierarchies.push(h);
                }
                Err(why) => {
                    for slot in [&mut processes, &mut memory] {
                        if let Err(e) = slot {
                            e.push_str("; ");
                            e.push_str(&why);
                        }
                    }
                }
            },
            None => {
                for slot in [&mut processes, &mut memory] {
                    if let Err(e) = slot {
                        e.push_str("; no cgroup v2 hierarchy is mounted");
                    }
                }
            }
        }
    }
    if hierarchies.iter().all(|h| !h.pids && !h.memory) {
        hierarchies.clear();
    }
    Cgroups {
        hierarchies,
        enforcement: Enforcement {
            processes,
            memory,
            swap,
        },
        next: AtomicU64::new(0),
        reaper: Mutex::new(None),
    }
}

/// One line of `/proc/self/cgroup`.
#[derive(Debug)]
struct Own {
    v2: bool,
    controllers: Vec<String>,
    path: String,
}

fn parse_own(text: &str) -> Vec<Own> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?.to_owned();
            let v2 = id == "0" && controllers.is_empty();
            Some(Own {
                v2,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path,
            })
        })
        .collect()
}

/// A cgroup mount: where it is mounted, the hierarchy folder it shows, its type and options.
#[derive(Debug)]
struct Mount {
    point: PathBuf,
    root: String,
    v2: bool,
    options: Vec<String>,
}

fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let options = right.next().unwrap_or("");
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                point: PathBuf::from(unescape(fields.get(4)?)),
                root: unescape(fields.get(3)?),
                v2: fstype == "cgroup2",
                options: options.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// `/proc/self/mountinfo` writes space, tab, newline and backslash as octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let digit = |k: usize| u32::from(b[i + k] - b'0');
            let n = digit(1) * 64 + digit(2) * 8 + digit(3);
            out.push(u8::try_from(n).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The folder of cgroup `path` under `mount`, when the mount shows it.
fn folder(mount: &Mount, path: &str) -> Option<PathBuf> {
    let rel = if mount.root == "/" {
        path
    } else {
        let rest = path.strip_prefix(mount.root.as_str())?;
        if !rest.is_empty() && !rest.starts_with('/') {
            return None;
        }
        rest
    };
    let dir = mount.point.join(rel.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// `eve-<pid>-<start time>`: unique to this process for as long as the host runs.
fn process_tag() -> String {
    format!(
        "eve-{}-{}",
        std::process::id(),
        start_time("self").unwrap_or(0)
    )
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time, in clock ticks after boot.
fn start_time(pid: &str) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Removes the box folders of eve processes that are gone, in every hierarchy this process is in.
fn sweep_all(own: &[Own], mounts: &[Mount]) {
    for o in own {
        for m in mounts.iter().filter(|m| {
            m.v2 == o.v2 && (m.v2 || o.controllers.iter().all(|c| m.options.contains(c)))
        }) {
            if let Some(dir) = folder(m, &o.path) {
                sweep(&dir, m.v2);
            }
        }
    }
}

fn sweep(parent: &Path, v2: bool) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix("eve-") else {
            continue;
        };
        let mut parts = rest.splitn(2, '-');
        let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
            continue;
        };
        let alive = start_time(pid).is_some_and(|s| s.to_string() == start);
        if alive {
            continue;
        }
        let dir = entry.path();
        if let Ok(boxes) = fs::read_dir(&dir) {
            for b in boxes.flatten() {
                if b.path().is_dir() {
                    kill_all(&b.path(), v2);
                    let _ = fs::remove_dir(b.path());
                }
            }
        }
        let _ = fs::remove_dir(&dir);
    }
}

fn v1_hierarchy(
    own: &Own,
    controller: &str,
    mounts: &[Mount],
    tag: &str,
) -> Result<Hierarchy, String> {
    let mount = mounts
        .iter()
        .find(|m| !m.v2 && m.options.iter().any(|o| o == controller))
        .ok_or_else(|| format!("the cgroup v1 {controller} hierarchy is not mounted"))?;
    let base = folder(mount, &own.path).ok_or_else(|| {
        format!(
            "this process's cgroup {} is not visible under {}",
            own.path,
            mount.point.display()
        )
    })?;
    let dir = base.join(tag);
    make_dir(&dir).map_err(|e| {
        format!(
            "cannot create a cgroup under {} ({e}): cgroup v1 needs eve to run as root",
            base.display()
        )
    })?;
    let swap = controller == "memory" && dir.join("memory.memsw.limit_in_bytes").exists();
    if controller == "memory" {
        // Children count in their parent (the default on current kernels; older ones need it).
        let _ = fs::write(dir.join("memory.use_hierarchy"), "1");
    }
    Ok(Hierarchy {
        dir,
        v2: false,
        pids: controller == "pids",
        memory: controller == "memory",
        swap,
    })
}

fn v2_hierarchy(
    own: &Own,
    mounts: &[Mount],
    tag: &str,
    want_pids: bool,
    want_memory: bool,
) -> Result<Hierarchy, String> {
    let mount = mounts
        .iter()
        .find(|m| m.v2)
        .ok_or_else(|| "no cgroup v2 hierarchy is mounted".to_owned())?;
    let base = folder(mount, &own.path).ok_or_else(|| {
        format!(
            "this process's cgroup {} is not visible under {}",
            own.path,
            mount.point.display()
        )
    })?;
    let offered = fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    let offered: Vec<&str> = offered.split_whitespace().collect();
    let pids = want_pids && offered.contains(&"pids");
    let memory = want_memory && offered.contains(&"memory");
    if !pids && !memory {
        return Err(format!(
            "cgroup v2 offers neither pids nor memory to {} (its cgroup.controllers: {:?})",
            base.display(),
            offered.join(" ")
        ));
    }
    let wanted: Vec<&str> = [(pids, "pids"), (memory, "memory")]
        .into_iter()
        .filter_map(|(w, n)| w.then_some(n))
        .collect();
    let dir = base.join(tag);
    make_dir(&dir).map_err(|e| {
        format!(
            "cannot create a cgroup under {} ({e}): the cgroup is not delegated to eve's user",
            base.display()
        )
    })?;
    if !enabled(&base, &wanted) {
        delegate_to_children(&base, &dir, &wanted).inspect_err(|_| {
            let _ = fs::remove_dir(dir.join("self"));
            let _ = fs::remove_dir(&dir);
        })?;
    }
    let control: String = wanted.iter().map(|c| format!("+{c} ")).collect();
    fs::write(dir.join("cgroup.subtree_control"), control.trim_end()).map_err(|e| {
        format!(
            "cannot enable {} for the sandbox's cgroups under {} ({e})",
            wanted.join(" and "),
            dir.display()
        )
    })?;
    let swap =
        memory && (dir.join("memory.swap.max").exists() || base.join("memory.swap.max").exists());
    Ok(Hierarchy {
        dir,
        v2: true,
        pids,
        memory,
        swap,
    })
}

fn enabled(dir: &Path, wanted: &[&str]) -> bool {
    let on = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let on: Vec<&str> = on.split_whitespace().collect();
    wanted.iter().all(|w| on.contains(w))
}

/// Under v2 a cgroup holding processes cannot enable controllers for its children. When this
/// process is the only one in its cgroup, it moves itself into a leaf `<dir>/self` and enables
/// them (what a systemd unit with `Delegate=yes` expects its service to do).
fn delegate_to_children(base: &Path, dir: &Path, wanted: &[&str]) -> Result<(), String> {
    let me = std::process::id().to_string();
    let procs = fs::read_to_string(base.join("cgroup.procs")).unwrap_or_default();
    let others = procs.lines().filter(|p| p.trim() != me).count();
    let hint = format!(
        "{} does not enable {} for its children (cgroup.subtree_control) and holds other \
         processes: run eve in a cgroup of its own with them delegated (for example a systemd \
         unit with Delegate=yes)",
        base.display(),
        wanted.join(" and ")
    );
    if others > 0 {
        return Err(hint);
    }
    let leaf = dir.join("self");
    make_dir(&leaf).map_err(|e| format!("{hint} ({e})"))?;
    fs::write(leaf.join("cgroup.procs"), &me).map_err(|e| format!("{hint} ({e})"))?;
    let control: String = wanted.iter().map(|c| format!("+{c} ")).collect();
    if let Err(e) = fs::write(base.join("cgroup.subtree_control"), control.trim_end()) {
        let _ = fs::write(base.join("cgroup.procs"), &me);
        return Err(format!("{hint} ({e})"));
    }
    Ok(())
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn mountinfo_lines_are_read() {
        let text = "30 23 0:26 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n\
                    31 23 0:27 /process_api /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                    32 23 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                    33 23 8:1 / / rw - ext4 /dev/vda rw\n";
        let m = parse_mounts(text);
        assert_eq!(m.len(), 3);
        assert!(m[0].options.iter().any(|o| o == "pids"));
        assert_eq!(m[1].root, "/process_api");
        assert!(m[2].v2);
    }

    #[test]
    fn own_cgroups_are_read() {
        let own = parse_own("4:memory:/process_api/x\n8:pids:/\n0::/\n1:name=systemd:/\n");
        assert_eq!(own[0].controllers, vec!["memory"]);
        assert!(own[2].v2);
        assert!(!own[3].v2);
    }

    #[test]
    fn a_mount_root_is_taken_off_the_path() {
        let m = Mount {
            point: PathBuf::from("/"),
            root: "/a".into(),
            v2: true,
            options: vec![],
        };
        assert_eq!(folder(&m, "/a"), Some(PathBuf::from("/")));
        assert_eq!(folder(&m, "/ab"), None);
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\0"), r"/a\0");
    }
}
