//! Where discovery reads from: the file system, or an in-memory tree for tests.
//!
//! Paths are relative to the agent folder and always use `/`. The root is `""`. A source never
//! follows a symlink out of its root: it reports such links as [`EntryKind::Escaping`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

/// What a directory entry is, after resolving symlinks that stay inside the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (or a symlink to one inside the root).
    File,
    /// A directory (or a symlink to one inside the root).
    Dir,
    /// A symlink that points outside the root, or to nothing.
    Escaping,
    /// A symlink to a folder that contains it (directly or through other links): following it
    /// would never end.
    Loop,
    /// A socket, FIFO, device or anything else.
    Other,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File name. Non-UTF-8 names are converted lossily and flagged by `name_is_utf8`.
    pub name: String,
    /// False when the on-disk name was not valid UTF-8.
    pub name_is_utf8: bool,
    /// What the entry is.
    pub kind: EntryKind,
    /// Whether any execute bit is set (files only).
    pub executable: bool,
}

/// A tree discovery can walk.
pub trait Source {
    /// Lists a directory, sorted by name.
    fn read_dir(&self, rel: &str) -> io::Result<Vec<DirEntry>>;
    /// Reads a file's bytes.
    fn read(&self, rel: &str) -> io::Result<Vec<u8>>;
    /// Reads several files, one result per path in the same order. Sources where reading is slow
    /// (the file system) read them concurrently; the default reads one after the other.
    fn read_many(&self, rels: &[String]) -> Vec<io::Result<Vec<u8>>> {
        rels.iter().map(|rel| self.read(rel)).collect()
    }
}

/// A real folder on disk.
#[derive(Debug, Clone)]
pub struct FsSource {
    root: PathBuf,
    canonical_root: PathBuf,
}

impl FsSource {
    /// Opens `root`; fails if it does not exist or is not a directory.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        let canonical_root = root.canonicalize()?;
        if !canonical_root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Self {
            root,
            canonical_root,
        })
    }

    /// The folder this source reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    fn classify(&self, dir: &str, path: &Path, meta: &std::fs::Metadata) -> (EntryKind, bool) {
        let ft = meta.file_type();
        if ft.is_symlink() {
            // Resolve fully; a link is acceptable only if it lands inside the root.
            match path.canonicalize() {
                Ok(target) if target.starts_with(&self.canonical_root) => {
                    match std::fs::metadata(&target) {
                        Ok(m) if m.is_dir() && self.on_walked_path(dir, &target) => {
                            (EntryKind::Loop, false)
                        }
                        Ok(m) if m.is_dir() => (EntryKind::Dir, false),
                        Ok(m) if m.is_file() => (EntryKind::File, is_exec(&m)),
                        _ => (EntryKind::Other, false),
                    }
                }
                _ => (EntryKind::Escaping, false),
            }
        } else if ft.is_dir() {
            (EntryKind::Dir, false)
        } else if ft.is_file() {
            (EntryKind::File, is_exec(meta))
        } else {
            (EntryKind::Other, false)
        }
    }
}

impl FsSource {
    /// Whether `target` is the folder `dir` or one of the folders walked to reach it (its
    /// path prefixes, resolved): a link there leads back to where the walk already is.
    fn on_walked_path(&self, dir: &str, target: &Path) -> bool {
        let mut prefix = dir;
        loop {
            if self.path(prefix).canonicalize().is_ok_and(|p| p == target) {
                return true;
            }
            match prefix.rfind('/') {
                Some(i) => prefix = &prefix[..i],
                None if prefix.is_empty() => return false,
                None => prefix = "",
            }
        }
    }
}

#[cfg(unix)]
fn is_exec(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_exec(_m: &std::fs::Metadata) -> bool {
    false
}

impl Source for FsSource {
    fn read_dir(&self, rel: &str) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(self.path(rel))? {
            let entry = entry?;
            let os_name = entry.file_name();
            let (name, name_is_utf8) = match os_name.to_str() {
                Some(s) => (s.to_owned(), true),
                None => (os_name.to_string_lossy().into_owned(), false),
            };
            // The entry's type comes from the listing itself: folders need no `stat`, and files
            // are stat'ed relative to the open folder rather than by their full path.
            let (kind, executable) = match entry.file_type() {
                Ok(ft) if ft.is_dir() => (EntryKind::Dir, false),
                _ => match entry.metadata() {
                    Ok(meta) => self.classify(rel, &entry.path(), &meta),
                    Err(_) => (EntryKind::Other, false),
                },
            };
            out.push(DirEntry {
                name,
                name_is_utf8,
                kind,
                executable,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path(rel))
    }

    /// Reads on a few threads when there are many files: a large agent is mostly small files, and
    /// their open/read/close calls are most of discovery's time.
    fn read_many(&self, rels: &[String]) -> Vec<io::Result<Vec<u8>>> {
        const MIN_PER_THREAD: usize = 32;
        let threads = threads_for(rels.len(), MIN_PER_THREAD, 4);
        if threads == 1 {
            return rels.iter().map(|rel| self.read(rel)).collect();
        }
        let chunk = rels.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = rels
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || part.iter().map(|rel| self.read(rel)).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    }
}

/// How many threads to share `items` items among, each taking at least `per_thread`, at most
/// `max` and no more than the machine's cores: 1 when there is not work for two (then the core
/// count, which costs reading cgroup files, is not asked).
pub fn threads_for(items: usize, per_thread: usize, max: usize) -> usize {
    let wanted = items / per_thread.max(1);
    if wanted < 2 {
        return 1;
    }
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(wanted)
        .clamp(1, max.max(1))
}

/// An in-memory tree: paths map to file contents; directories are implied by the paths.
#[derive(Debug, Clone, Default)]
pub struct MemSource {
    files: BTreeMap<String, MemFile>,
}

#[derive(Debug, Clone)]
struct MemFile {
    bytes: Vec<u8>,
    executable: bool,
    escaping: bool,
}

impl MemSource {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file (builder style).
    #[must_use]
    pub fn file(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.insert(path, contents.into(), false);
        self
    }

    /// Adds an executable file (builder style).
    #[must_use]
    pub fn executable(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.insert(path, contents.into(), true);
        self
    }

    /// Adds a symlink that points outside the tree (builder style).
    #[must_use]
    pub fn escaping_link(mut self, path: &str) -> Self {
        if let Some(p) = normalize(path) {
            self.files.insert(
                p,
                MemFile {
                    bytes: Vec::new(),
                    executable: false,
                    escaping: true,
                },
            );
        }
        self
    }

    /// Adds a file.
    pub fn insert(&mut self, path: &str, bytes: Vec<u8>, executable: bool) {
        if let Some(p) = normalize(path) {
            self.files.insert(
                p,
                MemFile {
                    bytes,
                    executable,
                    escaping: false,
                },
            );
        }
    }
}

/// Normalises a relative path to `a/b/c`; `None` if it is empty or climbs out.
fn normalize(path: &str) -> Option<String> {
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?.to_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

impl Source for MemSource {
    fn read_dir(&self, rel: &str) -> io::Result<Vec<DirEntry>> {
        let prefix = if rel.is_empty() {
            String::new()
        } else {
            format!("{rel}/")
        };
        let mut seen: BTreeMap<String, DirEntry> = BTreeMap::new();
        let mut any = rel.is_empty();
        for (path, file) in self.files.range(prefix.clone()..) {
            let Some(rest) = path.strip_prefix(&prefix) else {
                break;
            };
            any = true;
            let (name, entry) = match rest.split_once('/') {
                Some((dir, _)) => (
                    dir,
                    DirEntry {
                        name: dir.to_owned(),
                        name_is_utf8: true,
                        kind: EntryKind::Dir,
                        executable: false,
                    },
                ),
                None => (
                    rest,
                    DirEntry {
                        name: rest.to_owned(),
                        name_is_utf8: true,
                        kind: if file.escaping {
                            EntryKind::Escaping
                        } else {
                            EntryKind::File
                        },
                        executable: file.executable,
                    },
                ),
            };
            seen.entry(name.to_owned()).or_insert(entry);
        }
        if !any {
            return Err(io::Error::new(io::ErrorKind::NotFound, rel.to_owned()));
        }
        Ok(seen.into_values().collect())
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        match self.files.get(rel) {
            Some(f) if !f.escaping => Ok(f.bytes.clone()),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, rel.to_owned())),
        }
    }
}
