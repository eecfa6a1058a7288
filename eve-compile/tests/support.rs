//! Test support: a `TestAgent` builder that lays out an agent folder on disk (in a temp dir) or in
//! memory, and helpers to compile it and render what a user would see.

use std::io;
use std::path::{Path, PathBuf};

use eve_compile::build::{self, Built};
use eve_compile::render::{Style, render_all};
use eve_compile::{Options, Output, Project, compile};
use eve_discover::{Diagnostic, DirEntry, MemSource, Source, discover};

/// Name of the project folder every test agent lives in (and so the root agent's name).
pub const PROJECT: &str = "demo";

/// One entry of a test agent folder, relative to the agent folder.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A file with contents and an execute bit.
    File { bytes: Vec<u8>, executable: bool },
    /// An empty folder.
    Dir,
    /// A symlink (on disk only; in memory, a link leaving the folder becomes an escaping link and
    /// one staying inside is skipped).
    Symlink { target: PathBuf },
}

/// An agent folder described in code.
#[derive(Debug, Clone, Default)]
pub struct TestAgent {
    entries: Vec<(String, Entry)>,
}

impl TestAgent {
    /// An empty agent folder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The smallest valid agent: `instructions.md` only.
    pub fn minimal() -> Self {
        Self::new().file("instructions.md", "Be brief.\n")
    }

    /// Adds a file.
    pub fn file(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.entries.push((
            path.to_owned(),
            Entry::File {
                bytes: contents.into(),
                executable: false,
            },
        ));
        self
    }

    /// Adds an executable file.
    pub fn exec(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.entries.push((
            path.to_owned(),
            Entry::File {
                bytes: contents.into(),
                executable: true,
            },
        ));
        self
    }

    /// Adds an empty folder.
    pub fn dir(mut self, path: &str) -> Self {
        self.entries.push((path.to_owned(), Entry::Dir));
        self
    }

    /// Adds a symlink pointing at `target` (relative to the link's folder, or absolute).
    pub fn symlink(mut self, path: &str, target: impl Into<PathBuf>) -> Self {
        self.entries.push((
            path.to_owned(),
            Entry::Symlink {
                target: target.into(),
            },
        ));
        self
    }

    /// The folder as an in-memory source.
    pub fn mem(&self) -> MemSource {
        let mut src = MemSource::new();
        for (path, entry) in &self.entries {
            match entry {
                Entry::File { bytes, executable } => src.insert(path, bytes.clone(), *executable),
                Entry::Dir => {}
                Entry::Symlink { target } => {
                    if leaves_folder(path, target) {
                        src = src.escaping_link(path);
                    }
                }
            }
        }
        src
    }

    /// Lays the folder out in a fresh temp dir as `<tmp>/demo/agent/`.
    pub fn on_disk(&self) -> OnDisk {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(PROJECT);
        let agent = root.join("agent");
        std::fs::create_dir_all(&agent).unwrap();
        for (path, entry) in &self.entries {
            write_entry(&agent, path, entry).unwrap();
        }
        let mut project = Project::at(root, agent);
        // As the CLI does: the interpreters are looked up where the test runs.
        project.interpreter_path = std::env::var_os("PATH");
        OnDisk { project, _tmp: tmp }
    }

    /// Discovers and compiles the in-memory folder, as `eve build` would with `agent/` as prefix.
    pub fn check_mem(&self) -> Checked {
        let src = self.mem();
        checked_from_source(&src, &|file| {
            let rel = file.strip_prefix("agent/")?;
            let bytes = src.read(rel).ok()?;
            String::from_utf8(bytes).ok()
        })
    }
}

/// Whether a symlink at `path` pointing at `target` lands outside the agent folder.
fn leaves_folder(path: &str, target: &Path) -> bool {
    if target.is_absolute() {
        return true;
    }
    let mut depth: i64 = path.matches('/').count() as i64;
    for c in target.components() {
        match c {
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Writes one entry under `agent`, creating parent folders.
pub fn write_entry(agent: &Path, path: &str, entry: &Entry) -> io::Result<()> {
    let full = agent.join(path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match entry {
        Entry::File { bytes, executable } => {
            std::fs::write(&full, bytes)?;
            set_executable(&full, *executable)?;
        }
        Entry::Dir => std::fs::create_dir_all(&full)?,
        Entry::Symlink { target } => std::os::unix::fs::symlink(target, &full)?,
    }
    Ok(())
}

/// Sets or clears the execute bits of a file.
pub fn set_executable(path: &Path, on: bool) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if on { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// A test agent laid out on disk. The temp dir lives as long as this value.
pub struct OnDisk {
    /// The project: `<tmp>/demo` with `agent/` and (after a build) `.eve/`.
    pub project: Project,
    _tmp: tempfile::TempDir,
}

impl OnDisk {
    /// The agent folder.
    pub fn agent_dir(&self) -> &Path {
        &self.project.agent_dir
    }

    /// Path of a file inside the agent folder.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.project.agent_dir.join(rel)
    }

    /// `eve build` without the command line.
    pub fn build(&self) -> Built {
        build::build(&self.project).unwrap()
    }

    /// Builds once with every OpenAPI document named by URL answered by `document` (so the
    /// build's cache keeps it), then makes every later fetch fail with `why`: what a build sees
    /// when the API it fetched from before is down.
    pub fn fetched_then_failing(mut self, document: &str, why: &str) -> Self {
        struct Once {
            document: std::sync::Mutex<Option<String>>,
            why: String,
        }
        impl eve_compile::compile::openapi::Fetch for Once {
            fn fetch(&self, _url: &str) -> Result<Vec<u8>, String> {
                match self.document.lock().unwrap().take() {
                    Some(document) => Ok(document.into_bytes()),
                    None => Err(self.why.clone()),
                }
            }
        }
        self.project.fetch = Some(eve_compile::compile::openapi::Fetcher::new(Once {
            document: std::sync::Mutex::new(Some(document.to_owned())),
            why: why.to_owned(),
        }));
        let first = build::check(&self.project).unwrap();
        assert!(first.diagnostics.is_empty(), "{:#?}", first.diagnostics);
        self
    }

    /// Discovery + compile, plus the rendered diagnostics.
    pub fn check(&self) -> Checked {
        let output = build::check(&self.project).unwrap();
        let root = self.project.root.clone();
        let rendered = render_plain(&output.diagnostics, &|f| {
            std::fs::read_to_string(root.join(f)).ok()
        });
        Checked { output, rendered }
    }
}

/// Compiler output and what a user sees for its diagnostics.
pub struct Checked {
    /// The compiler's output.
    pub output: Output,
    /// The diagnostics rendered as plain text.
    pub rendered: String,
}

impl Checked {
    /// The diagnostics.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.output.diagnostics
    }

    /// The diagnostics as `diagnostics.json` holds them.
    pub fn json(&self) -> String {
        build::diagnostics_json(&self.output.diagnostics)
    }

    /// `CODE file:line message` for each error (warnings left out), for assertions on what a
    /// user is told.
    pub fn errors(&self) -> Vec<String> {
        self.diagnostics()
            .iter()
            .filter(|d| d.is_error())
            .map(|d| {
                format!(
                    "{} {}:{} {}",
                    d.code,
                    d.file.as_deref().unwrap_or(""),
                    d.line.unwrap_or(0),
                    d.message
                )
            })
            .collect()
    }

    /// `CODE file:line` for each diagnostic, for short assertion messages.
    pub fn summary(&self) -> Vec<String> {
        self.diagnostics()
            .iter()
            .map(|d| {
                format!(
                    "{} {}:{}",
                    d.code,
                    d.file.as_deref().unwrap_or("-"),
                    d.line.map_or_else(|| "-".to_owned(), |l| l.to_string())
                )
            })
            .collect()
    }
}

/// Discovers and compiles any source, with `agent/` as the display prefix.
pub fn checked_from_source(src: &dyn Source, lookup: &dyn Fn(&str) -> Option<String>) -> Checked {
    let discovery = discover(src);
    let output = compile(
        &discovery,
        &Options {
            name: PROJECT.to_owned(),
            file_prefix: "agent/".to_owned(),
            protected_dirs: Vec::new(),
            agent_dir: None,
            cache_dir: None,
            fetch: None,
        },
    );
    let rendered = render_plain(&output.diagnostics, lookup);
    Checked { output, rendered }
}

/// Renders diagnostics without colour.
pub fn render_plain(diags: &[Diagnostic], lookup: &dyn Fn(&str) -> Option<String>) -> String {
    render_all(diags, lookup, Style { color: false })
}

/// A source whose reads of some paths fail, as a file without read permission does.
pub struct FailingReads {
    /// The tree.
    pub inner: MemSource,
    /// Paths whose `read` (file) or `read_dir` (folder) fails.
    pub failing: Vec<String>,
}

impl Source for FailingReads {
    fn read_dir(&self, rel: &str) -> io::Result<Vec<DirEntry>> {
        if self.failing.iter().any(|f| f == rel) {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        self.inner.read_dir(rel)
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        if self.failing.iter().any(|f| f == rel) {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        self.inner.read(rel)
    }
}

/// insta settings that hide temp paths, for snapshots of anything that may mention one.
pub fn insta_settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(r"/tmp/\.tmp[A-Za-z0-9]+", "[TMP]");
    s.add_filter(r"/tmp/[A-Za-z0-9._-]+", "[TMP]");
    s.add_filter(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "[TIME]");
    s
}

/// Discovers and compiles an `evals/` folder holding `files` (paths relative to it), with
/// `evals/` as the display prefix; the diagnostics are the suite's alone.
pub fn checked_evals(files: &[(&str, &str)]) -> Checked {
    let mut src = MemSource::new();
    for (path, text) in files {
        src = src.file(path, *text);
    }
    let suite = eve_compile::evals::compile_evals(&eve_discover::discover_evals(&src), "evals/");
    let mut output = compile(
        &eve_discover::Discovery::default(),
        &Options {
            name: PROJECT.to_owned(),
            file_prefix: "agent/".to_owned(),
            protected_dirs: Vec::new(),
            agent_dir: None,
            cache_dir: None,
            fetch: None,
        },
    );
    output.diagnostics = suite.diagnostics;
    let lookup = |f: &str| {
        let rel = f.strip_prefix("evals/")?;
        files
            .iter()
            .find(|(p, _)| *p == rel)
            .map(|(_, t)| (*t).to_owned())
    };
    let rendered = render_plain(&output.diagnostics, &lookup);
    Checked { output, rendered }
}
