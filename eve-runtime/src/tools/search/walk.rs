//! The walk `glob` and `grep` make of a workspace: ripgrep's rules, the kernel's handles.
//!
//! What is listed follows ripgrep's rules, with its own crates: `--glob` overrides
//! ([`ignore::overrides`]) decide first, then the `.rgignore`, `.ignore` and `.gitignore` files of
//! the folder and of every folder above it up to the workspace ([`ignore::gitignore`], deepest
//! first), hidden files included, symlinks never followed (ripgrep without `-L`).
//!
//! How it is walked is the trust boundary's (§15): the runtime walks the workspace in its own
//! process while the agent's processes may be changing it, so no name is ever looked up from the
//! workspace's path. Every folder is opened from the handle of its parent, one name at a time,
//! with `O_NOFOLLOW | O_DIRECTORY`, and every file with `O_NOFOLLOW`: a folder swapped for a
//! symlink between the listing and the open fails to open (`ELOOP`/`ENOTDIR`) and is skipped, so
//! nothing outside the workspace is ever listed or read. The starting folder is reached the same
//! way from the workspace's handle, name by name. Folders are walked by a few threads taking
//! folders from one stack (depth first, so few handles are open at once); a folder's handle is
//! shared by the entries found in it and closed when the last is done.
//!
//! `EVE_TEST_UNSAFE_WALK=1` (debug builds only) walks by path instead, as a naive walker does
//! (each entry's kind as listed, then the folder listed and the file opened by its path): the
//! escape tests' twin, which shows a swapped folder steering it out without the handles.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// How a folder is opened from its parent: never through a symlink.
const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
/// How a file is opened: never through a symlink, a FIFO never blocks, no device becomes eve's
/// terminal.
const FILE: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);
/// The ignore files of a folder, in ripgrep's order of precedence (first wins).
const IGNORE_FILES: [&str; 3] = [".rgignore", ".ignore", ".gitignore"];
/// Largest ignore file read; the rest of a larger one is left out.
const MAX_IGNORE_FILE: u64 = 1024 * 1024;
/// Most threads a walk uses.
const MAX_THREADS: usize = 8;

/// One regular file the walk found.
pub(crate) struct Found {
    /// Its path relative to the workspace, `/`-separated.
    pub(crate) rel: PathBuf,
    dir: Arc<Dir>,
    name: OsString,
}

impl Found {
    /// Opens the file from its folder's handle, never through a symlink; `None` when it is no
    /// longer a regular file (swapped, removed).
    pub(crate) fn open(&self) -> Option<std::fs::File> {
        let file = match &self.dir.fd {
            Some(fd) => {
                std::fs::File::from(rustix::fs::openat(fd, &self.name, FILE, Mode::empty()).ok()?)
            }
            // The unsafe twin opens by path, following whatever is there now.
            None => std::fs::File::open(self.dir.path.join(&self.name)).ok()?,
        };
        file.metadata().ok().filter(|m| m.is_file()).map(|_| file)
    }
}

/// What a walk is told.
pub(crate) struct Walk<'a> {
    /// The workspace.
    pub(crate) workspace: &'a Path,
    /// The folder to walk, relative to the workspace, already checked lexically.
    pub(crate) start: &'a Path,
    /// The `--glob` overrides, matched against paths relative to `start`.
    pub(crate) overrides: &'a Override,
    /// Walk by path (tests only: the protection off).
    pub(crate) unsafe_paths: bool,
    /// When to stop with what was found so far.
    pub(crate) deadline: Instant,
    /// Set when the call is cancelled.
    pub(crate) cancelled: &'a AtomicBool,
}

/// How a walk ended, besides what it handed over.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    /// The deadline or a cancellation cut it short.
    pub(crate) stopped: bool,
}

/// Why a walk could not start.
pub(crate) enum StartError {
    /// A name on the way to the start is a symlink (not followed).
    Symlink(PathBuf),
    /// The start is a regular file.
    File(Found),
    /// It cannot be opened.
    Io(std::io::Error),
}

/// An open folder: its handle (none in the unsafe twin) and its path, for the twin and messages.
struct Dir {
    fd: Option<OwnedFd>,
    path: PathBuf,
}

/// The ignore files of one folder and of those above it.
struct Ignores {
    here: Vec<Gitignore>,
    parent: Option<Arc<Ignores>>,
}

impl Ignores {
    /// Whether `rel` (relative to the workspace) is ignored: the deepest folder's files first,
    /// the first that says anything decides.
    fn ignored(&self, rel: &Path, is_dir: bool) -> bool {
        let mut at = Some(self);
        while let Some(level) = at {
            for gi in &level.here {
                match gi.matched(rel, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            at = level.parent.as_deref();
        }
        false
    }
}

/// A folder waiting to be walked: a name in an open parent.
struct Job {
    parent: Arc<Dir>,
    name: OsString,
    rel: PathBuf,
    ignores: Arc<Ignores>,
}

/// Walks the folder `walk.start`, handing every regular file it lists to `found` (from several
/// threads). A folder that cannot be opened (swapped for a symlink, removed, unreadable) is
/// skipped.
pub(crate) fn walk<F>(walk: &Walk<'_>, found: F) -> Result<Ended, StartError>
where
    F: Fn(Found) + Sync,
{
    let (start, ignores) = open_start(walk)?;
    let stack = Mutex::new(Vec::<Job>::new());
    let ready = Condvar::new();
    // The start counts as a folder being walked until this thread has listed it.
    let busy = AtomicUsize::new(1);
    let stopped = AtomicBool::new(false);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    let work = || {
        loop {
            let job = {
                let mut jobs = stack.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(job) = jobs.pop() {
                        busy.fetch_add(1, Ordering::SeqCst);
                        break Some(job);
                    }
                    if busy.load(Ordering::SeqCst) == 0 {
                        break None;
                    }
                    jobs = ready.wait(jobs).unwrap_or_else(|e| e.into_inner());
                }
            };
            let Some(job) = job else {
                ready.notify_all();
                return;
            };
            let stop = walk.cancelled.load(Ordering::Relaxed) || Instant::now() >= walk.deadline;
            if stop {
                stopped.store(true, Ordering::Relaxed);
                stack.lock().unwrap_or_else(|e| e.into_inner()).clear();
            } else if let Some(dir) = open_child(walk, &job.parent, &job.name) {
                let ignores = Arc::new(Ignores {
                    here: read_ignores(&dir, &job.rel),
                    parent: Some(job.ignores.clone()),
                });
                list(
                    walk,
                    &Arc::new(dir),
                    &job.rel,
                    &ignores,
                    &stack,
                    &ready,
                    &found,
                );
            }
            drop(job);
            done(&stack, &busy, &ready);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(work);
        }
        list(walk, &start, walk.start, &ignores, &stack, &ready, &found);
        done(&stack, &busy, &ready);
        work();
    });
    Ok(Ended {
        stopped: stopped.into_inner(),
    })
}

/// One folder is walked: under the lock, so a thread about to wait cannot miss it.
fn done(stack: &Mutex<Vec<Job>>, busy: &AtomicUsize, ready: &Condvar) {
    {
        let _jobs = stack.lock().unwrap_or_else(|e| e.into_inner());
        busy.fetch_sub(1, Ordering::SeqCst);
    }
    ready.notify_all();
}

/// Lists one open folder: its folders onto the stack first (in reverse order of name, so the
/// stack gives them back in order, and other threads take them meanwhile), then its files to
/// `found`.
fn list<F: Fn(Found)>(
    walk: &Walk<'_>,
    dir: &Arc<Dir>,
    rel: &Path,
    ignores: &Arc<Ignores>,
    stack: &Mutex<Vec<Job>>,
    ready: &Condvar,
    found: &F,
) {
    let mut entries = entries(dir);
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut folders = Vec::new();
    let mut files = Vec::new();
    for (name, kind) in entries {
        let child = rel.join(&name);
        let is_dir = kind == FileType::Directory;
        let from_start = child.strip_prefix(walk.start).unwrap_or(&child);
        let listed = match walk.overrides.matched(from_start, is_dir) {
            Match::Ignore(_) => false,
            Match::Whitelist(_) => true,
            Match::None => !ignores.ignored(&child, is_dir),
        };
        if !listed {
            continue;
        }
        if is_dir {
            folders.push(Job {
                parent: dir.clone(),
                name,
                rel: child,
                ignores: ignores.clone(),
            });
        } else if kind == FileType::RegularFile {
            files.push(Found {
                rel: child,
                dir: dir.clone(),
                name,
            });
        }
    }
    if !folders.is_empty() {
        stack
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(folders.into_iter().rev());
        ready.notify_all();
    }
    for file in files {
        found(file);
    }
}

/// The entries of a folder with their kind, not followed. An entry gone meanwhile is left out;
/// so is everything of a folder that cannot be read.
fn entries(dir: &Dir) -> Vec<(OsString, FileType)> {
    let Some(fd) = &dir.fd else {
        // The naive walk: listed by path (whatever the path leads to now), each entry's kind as
        // listed.
        let Ok(read) = std::fs::read_dir(&dir.path) else {
            return Vec::new();
        };
        return read
            .filter_map(Result::ok)
            .filter_map(|e| {
                let kind = e.file_type().ok()?;
                let kind = if kind.is_dir() {
                    FileType::Directory
                } else if kind.is_file() {
                    FileType::RegularFile
                } else {
                    FileType::Unknown
                };
                Some((e.file_name(), kind))
            })
            .collect();
    };
    let Ok(read) = rustix::fs::Dir::read_from(fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in read {
        let Ok(entry) = entry else {
            break;
        };
        let name = entry.file_name().to_bytes();
        if matches!(name, b"." | b"..") {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => {
                match rustix::fs::statat(fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(_) => continue,
                }
            }
            kind => kind,
        };
        out.push((OsStr::from_bytes(name).to_owned(), kind));
    }
    out
}

/// Opens the folder `name` in `parent`, never through a symlink (by path in the unsafe twin).
fn open_child(walk: &Walk<'_>, parent: &Dir, name: &OsStr) -> Option<Dir> {
    let path = parent.path.join(name);
    if walk.unsafe_paths {
        return path.is_dir().then_some(Dir { fd: None, path });
    }
    let fd = parent.fd.as_ref()?;
    let fd = rustix::fs::openat(fd, name, DIR, Mode::empty()).ok()?;
    Some(Dir { fd: Some(fd), path })
}

/// Opens the workspace and, name by name from it, the starting folder, reading the ignore files
/// of every folder on the way.
fn open_start(walk: &Walk<'_>) -> Result<(Arc<Dir>, Arc<Ignores>), StartError> {
    let root = if walk.unsafe_paths {
        Dir {
            fd: None,
            path: walk.workspace.to_path_buf(),
        }
    } else {
        let fd = rustix::fs::open(walk.workspace, DIR, Mode::empty())
            .map_err(|e| StartError::Io(e.into()))?;
        Dir {
            fd: Some(fd),
            path: walk.workspace.to_path_buf(),
        }
    };
    let mut rel = PathBuf::new();
    let mut ignores = Arc::new(Ignores {
        here: read_ignores(&root, &rel),
        parent: None,
    });
    let mut dir = Arc::new(root);
    let names: Vec<&OsStr> = walk.start.iter().collect();
    for (i, name) in names.iter().enumerate() {
        rel.push(name);
        let next = match &dir.fd {
            None => {
                let path = dir.path.join(name);
                if !path.is_dir() {
                    return Err(file_or_missing(
                        walk,
                        &dir,
                        name,
                        &rel,
                        i + 1 == names.len(),
                    ));
                }
                Dir { fd: None, path }
            }
            Some(fd) => match rustix::fs::openat(fd, *name, DIR, Mode::empty()) {
                Ok(next) => Dir {
                    fd: Some(next),
                    path: dir.path.join(name),
                },
                Err(Errno::LOOP) => return Err(StartError::Symlink(rel)),
                Err(Errno::NOTDIR) => {
                    return Err(file_or_missing(
                        walk,
                        &dir,
                        name,
                        &rel,
                        i + 1 == names.len(),
                    ));
                }
                Err(e) => return Err(StartError::Io(e.into())),
            },
        };
        ignores = Arc::new(Ignores {
            here: read_ignores(&next, &rel),
            parent: Some(ignores),
        });
        dir = Arc::new(next);
    }
    Ok((dir, ignores))
}

/// What a start that is not a folder is: the file itself when it is the last name, else an
/// error.
fn file_or_missing(
    walk: &Walk<'_>,
    dir: &Arc<Dir>,
    name: &OsStr,
    rel: &Path,
    last: bool,
) -> StartError {
    let found = Found {
        rel: rel.to_path_buf(),
        dir: dir.clone(),
        name: name.to_owned(),
    };
    if last && (walk.unsafe_paths || found.open().is_some()) {
        return StartError::File(found);
    }
    if let Some(fd) = &dir.fd
        && let Ok(st) = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
        && FileType::from_raw_mode(st.st_mode) == FileType::Symlink
    {
        return StartError::Symlink(rel.to_path_buf());
    }
    StartError::Io(std::io::Error::from(std::io::ErrorKind::NotADirectory))
}

/// The ignore files of one folder (`rel` from the workspace), read from its handle.
fn read_ignores(dir: &Dir, rel: &Path) -> Vec<Gitignore> {
    let root = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let mut out = Vec::new();
    for file in IGNORE_FILES {
        let opened = match &dir.fd {
            Some(fd) => rustix::fs::openat(fd, file, FILE, Mode::empty())
                .ok()
                .map(std::fs::File::from),
            None => std::fs::File::open(dir.path.join(file)).ok(),
        };
        let Some(opened) = opened.filter(|f| f.metadata().is_ok_and(|m| m.is_file())) else {
            continue;
        };
        let mut text = String::new();
        if opened
            .take(MAX_IGNORE_FILE)
            .read_to_string(&mut text)
            .is_err()
        {
            continue;
        }
        let mut builder = GitignoreBuilder::new(root);
        for line in text.lines() {
            // A line that is not a valid glob is skipped, as ripgrep does.
            let _ = builder.add_line(None, line);
        }
        if let Ok(gi) = builder.build()
            && !gi.is_empty()
        {
            out.push(gi);
        }
    }
    out
}
