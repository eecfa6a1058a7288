//! Build artifacts: `.eve/builds/<hash>/{manifest.json, diagnostics.json, files.pack}` and
//! `.eve/current`. The runtime files (scripts, skill files, workspace seeds, `_`-prefixed files)
//! travel in one pack, unpacked into `files/` when the runtime first needs them ([`crate::pack`]).
//!
//! A build is immutable and content-addressed: the hash covers the manifest and every file the
//! runtime needs, so the same agent folder always gives the same hash and a session pinned to a
//! build can always find it again. `.eve/current` is a symlink swapped atomically (rename), so a
//! reader sees the old build or the new one, never half of either.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use eve_discover::{Diagnostic, FsSource};

use crate::compile::{Options, Output, compile};
use crate::manifest::{FileDigest, Manifest};
use crate::pack;
use crate::project::Project;

/// Why a build could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The agent folder cannot be opened.
    #[error("cannot open the agent folder {path}: {source}")]
    AgentDir {
        /// Folder.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Writing or reading `.eve/` failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A manifest on disk does not parse.
    #[error("the build at {path} is unreadable: {source}")]
    BadManifest {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: serde_json::Error,
    },
    /// There is no current build.
    #[error("no build yet in {0}: run `eve build` first")]
    NoBuild(PathBuf),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BuildError + 'a {
    move |source| BuildError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// What `eve build` did.
#[derive(Debug, Clone)]
pub struct Built {
    /// Compiler output: manifest, diagnostics, file list.
    pub output: Output,
    /// Content hash, when the build succeeded and was written.
    pub hash: Option<String>,
    /// Build folder, when written.
    pub dir: Option<PathBuf>,
    /// Whether the build folder already existed (nothing changed since a previous build).
    pub reused: bool,
    /// Time spent.
    pub elapsed: Duration,
}

/// Discovers and compiles the project's agent folder.
pub fn check(project: &Project) -> Result<Output, BuildError> {
    let source = FsSource::new(&project.agent_dir).map_err(|source| BuildError::AgentDir {
        path: project.agent_dir.clone(),
        source,
    })?;
    let discovery = if project.is_flat() {
        eve_discover::discover_flat(&source)
    } else {
        eve_discover::discover(&source)
    };
    let prefix = project.display_prefix();
    let mut output = compile(
        &discovery,
        &Options {
            name: project.name(),
            file_prefix: prefix.clone(),
            protected_dirs: vec![project.state_dir.clone(), project.agent_dir.clone()],
            agent_dir: Some(project.agent_dir.clone()),
            cache_dir: Some(project.state_dir.clone()),
            fetch: project.fetch.clone(),
        },
    );
    // The interpreters the scripts will run with, where eve runs (the one check that starts a
    // process, so only builds of a folder on disk whose caller gave a `PATH` make it).
    if let Some(path) = &project.interpreter_path {
        output.diagnostics.extend(crate::interpreters::check(
            &output.manifest,
            Some(path.as_os_str()),
            &prefix,
        ));
    }
    output.diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.code).cmp(&(&b.file, b.line, b.column, b.code))
    });
    Ok(output)
}

/// `eve build`: check, then write the artifact and point `.eve/current` at it when there are no errors.
pub fn build(project: &Project) -> Result<Built, BuildError> {
    let built = build_candidate(project)?;
    if let Some(hash) = &built.hash {
        point_current(project, hash)?;
    }
    Ok(built)
}

/// The content hash of a compiled build: manifest bytes plus each runtime file's path and bytes.
pub fn content_hash(
    manifest_json: &[u8],
    agent_dir: &Path,
    files: &[String],
) -> Result<String, BuildError> {
    Ok(hash_of(manifest_json, &read_files(agent_dir, files)?))
}

/// A runtime file read once, for hashing and then writing into the build.
struct FileData<'a> {
    rel: &'a str,
    bytes: Vec<u8>,
    /// Permission bits of the source (execute bits are part of what runs).
    mode: u32,
}

fn read_files<'a>(agent_dir: &Path, files: &'a [String]) -> Result<Vec<FileData<'a>>, BuildError> {
    files
        .iter()
        .map(|rel| {
            let path = source_of(agent_dir, rel);
            let mut file = std::fs::File::open(&path).map_err(io("cannot read", &path))?;
            let meta = file.metadata().map_err(io("cannot read", &path))?;
            let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
            std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io("cannot read", &path))?;
            Ok(FileData {
                rel,
                bytes,
                mode: pack::mode_of(&meta),
            })
        })
        .collect()
}

/// The manifest's record of every file the pack carries: what the runtime checks before running one.
fn digests(files: &[FileData<'_>]) -> std::collections::BTreeMap<String, FileDigest> {
    files
        .iter()
        .map(|f| {
            (
                f.rel.to_owned(),
                FileDigest {
                    sha256: hex::encode(Sha256::digest(&f.bytes)),
                    mode: f.mode,
                },
            )
        })
        .collect()
}

fn hash_of(manifest_json: &[u8], files: &[FileData<'_>]) -> String {
    let mut h = Sha256::new();
    h.update(b"eve-build-v1\0");
    h.update((manifest_json.len() as u64).to_le_bytes());
    h.update(manifest_json);
    for f in files {
        h.update((f.rel.len() as u64).to_le_bytes());
        h.update(f.rel.as_bytes());
        h.update([u8::from(f.mode & 0o111 != 0)]);
        h.update((f.bytes.len() as u64).to_le_bytes());
        h.update(&f.bytes);
    }
    let digest = hex::encode(h.finalize());
    digest[..16].to_owned()
}

/// Writes a successful build and points `.eve/current` at it. Returns (hash, folder, reused).
/// The manifest written records every runtime file's digest (`files`), as
/// [`write_recorded`] also leaves in the output.
pub fn write(project: &Project, output: &Output) -> Result<(String, PathBuf, bool), BuildError> {
    write_recorded(project, &mut output.clone())
}

/// [`write`], recording the runtime files' digests in `output.manifest.files` too, so the
/// output's manifest is the one written.
pub fn write_recorded(
    project: &Project,
    output: &mut Output,
) -> Result<(String, PathBuf, bool), BuildError> {
    let (hash, dir, reused) = write_candidate(project, output)?;
    point_current(project, &hash)?;
    Ok((hash, dir, reused))
}

/// [`build`] without moving `.eve/current`: the build is written for the runtime to decide
/// whether it becomes the active release.
pub fn build_candidate(project: &Project) -> Result<Built, BuildError> {
    let start = Instant::now();
    let mut output = check(project)?;
    if output.error_count() > 0 {
        return Ok(Built {
            output,
            hash: None,
            dir: None,
            reused: false,
            elapsed: start.elapsed(),
        });
    }
    let (hash, dir, reused) = write_candidate(project, &mut output)?;
    Ok(Built {
        output,
        hash: Some(hash),
        dir: Some(dir),
        reused,
        elapsed: start.elapsed(),
    })
}

/// [`write_recorded`] without moving `.eve/current`.
pub fn write_candidate(
    project: &Project,
    output: &mut Output,
) -> Result<(String, PathBuf, bool), BuildError> {
    let files = runtime_files(&project.agent_dir, &output.files);
    let (data, manifest_json, hash) = prepare(project, output, &files)?;
    let builds = project.builds_dir();
    std::fs::create_dir_all(&builds).map_err(io("cannot create", &builds))?;
    let dir = builds.join(&hash);
    let pack = (!data.is_empty())
        .then(|| pack::encode(data.iter().map(|f| (f.rel, f.mode, f.bytes.as_slice()))));
    let diagnostics = diagnostics_json(&output.diagnostics);
    let mut files: Vec<(&str, &[u8])> = vec![
        ("manifest.json", manifest_json.as_bytes()),
        ("diagnostics.json", diagnostics.as_bytes()),
    ];
    if let Some(pack) = &pack {
        files.push((pack::PACK, pack.as_slice()));
    }
    // The manifest and the pack make the build (its diagnostics may say more of a source the
    // hash does not cover, such as a comment's line): an earlier build of this hash is reused
    // when those two are whole.
    let kept = &files[..1]
        .iter()
        .chain(files.get(2))
        .copied()
        .collect::<Vec<_>>();
    let reused = is_whole(&dir, kept);
    if !reused {
        let tmp = builds.join(format!(".tmp-{hash}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(io("cannot create", &tmp))?;
        let paths: Vec<(PathBuf, &[u8])> = files
            .iter()
            .map(|(name, bytes)| (tmp.join(name), *bytes))
            .collect();
        write_files(&paths)?;
        if dir.exists() && !is_whole(&dir, kept) {
            // A torn build of this hash (a power cut while it was written): replace it.
            let _ = std::fs::remove_dir_all(&dir);
        }
        match std::fs::rename(&tmp, &dir) {
            Ok(()) => {}
            // Another process wrote the same build first: identical content, keep theirs.
            Err(_) if dir.join("manifest.json").is_file() => {
                let _ = std::fs::remove_dir_all(&tmp);
            }
            Err(e) => return Err(io("cannot move build into", &dir)(e)),
        }
    }
    Ok((hash, dir, reused))
}

/// Where a runtime file is read from: the agent folder, except a `node_modules/` file the agent
/// folder does not hold, which is the nearest folder above's that does, as Node resolves it (the
/// packages TypeScript and JavaScript modules import, carried into the build's
/// `files/node_modules/`; in `agents/NAME/agent/` or the flat layouts they sit at the project
/// root).
fn source_of(agent_dir: &Path, rel: &str) -> PathBuf {
    let path = agent_dir.join(rel);
    if rel.starts_with("node_modules/") && !path.exists() {
        for above in agent_dir.ancestors().skip(1) {
            let candidate = above.join(rel);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    path
}

/// The runtime files (`files`) of a checked output, its manifest JSON (with their digests recorded in
/// `output`) and the build's content hash: what [`write_candidate`] writes.
fn prepare<'a>(
    project: &Project,
    output: &mut Output,
    files: &'a [String],
) -> Result<(Vec<FileData<'a>>, String, String), BuildError> {
    let data = read_files(&project.agent_dir, files)?;
    output.manifest.files = digests(&data);
    let manifest_json = to_json(&output.manifest);
    let hash = hash_of(manifest_json.as_bytes(), &data);
    Ok((data, manifest_json, hash))
}

/// The hash `eve build` would give the agent folder as it is now, writing nothing (`None`: the
/// folder has errors). `eve serve` compares it with the build it serves.
pub fn hash_now(project: &Project) -> Result<Option<String>, BuildError> {
    let mut output = check(project)?;
    if output.error_count() > 0 {
        return Ok(None);
    }
    let files = runtime_files(&project.agent_dir, &output.files);
    Ok(Some(prepare(project, &mut output, &files)?.2))
}

/// The files a build carries: the compiler's list (scripts, skill files, workspace seeds) plus
/// everything under `_`-prefixed entries of the agent folder, which discovery ignores but which
/// `run:` commands, MCP servers and scripts use at run time (`_bin/`, `_lib/`, `_data.json`).
/// Dot-files and symlinks are never carried.
pub fn runtime_files(agent_dir: &Path, compiled: &[String]) -> Vec<String> {
    let mut files: std::collections::BTreeSet<String> = compiled.iter().cloned().collect();
    fn walk(
        dir: &Path,
        rel: &str,
        under_private: bool,
        depth: usize,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        if depth > eve_discover::MAX_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if name.starts_with('.') || kind.is_symlink() {
                continue;
            }
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let private = under_private || name.starts_with('_');
            if kind.is_dir() {
                walk(&entry.path(), &path, private, depth + 1, out);
            } else if kind.is_file() && private {
                out.insert(path);
            }
        }
    }
    walk(agent_dir, "", false, 0, &mut files);
    files.into_iter().collect()
}

/// Writes each file. A build is derived from the agent folder and written whole into a temporary
/// folder that is then renamed into place, so a killed process never leaves half a build; it is not
/// synced to the disk (as compilers and git leave their outputs), since a power cut that tears one
/// is found by the next build ([`is_whole`]) and by the digests checked when its files are
/// unpacked, and the build is written again.
fn write_files(files: &[(PathBuf, &[u8])]) -> Result<(), BuildError> {
    for (path, bytes) in files {
        let mut f = std::fs::File::create(path).map_err(io("cannot create", path))?;
        f.write_all(bytes).map_err(io("cannot write", path))?;
    }
    Ok(())
}

/// Whether the build folder `dir` holds exactly `files` (names relative to it): a build of the
/// same hash written earlier, whole.
fn is_whole(dir: &Path, files: &[(&str, &[u8])]) -> bool {
    files.iter().all(|(name, bytes)| {
        let path = dir.join(name);
        std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64)
            && std::fs::read(&path).is_ok_and(|on_disk| on_disk == *bytes)
    })
}

/// Atomically points `.eve/current` at `builds/<hash>`.
pub fn point_current(project: &Project, hash: &str) -> Result<(), BuildError> {
    let current = project.state_dir.join("current");
    let tmp = project
        .state_dir
        .join(format!(".current-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    symlink(Path::new("builds").join(hash), &tmp).map_err(io("cannot create link", &tmp))?;
    std::fs::rename(&tmp, &current).map_err(io("cannot update", &current))
}

#[cfg(unix)]
fn symlink(target: PathBuf, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(target: PathBuf, link: &Path) -> std::io::Result<()> {
    std::fs::write(link, target.to_string_lossy().as_bytes())
}

/// The manifest as written to `manifest.json`.
pub fn to_json(manifest: &Manifest) -> String {
    let mut s = serde_json::to_string_pretty(manifest).unwrap_or_default();
    s.push('\n');
    s
}

/// Diagnostics as written to `diagnostics.json` and printed by `--json`.
pub fn diagnostics_json(diags: &[Diagnostic]) -> String {
    let mut s = serde_json::to_string_pretty(diags).unwrap_or_default();
    s.push('\n');
    s
}

/// A build loaded from disk.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Content hash.
    pub hash: String,
    /// Build folder.
    pub dir: PathBuf,
    /// The manifest.
    pub manifest: Manifest,
}

impl Loaded {
    /// Folder holding the agent's runtime files (`files/`), the base for tool script paths:
    /// unpacked from the build's pack on first use, and unpacked again when its contents no longer
    /// match the manifest.
    pub fn files(&self) -> Result<PathBuf, pack::PackError> {
        pack::unpack_verified(&self.dir, &self.manifest.files)
    }
}

/// Loads the build with `hash`.
pub fn load(state_dir: &Path, hash: &str) -> Result<Loaded, BuildError> {
    let dir = state_dir.join("builds").join(hash);
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(io("cannot read", &path))?;
    let manifest =
        serde_json::from_str(&text).map_err(|source| BuildError::BadManifest { path, source })?;
    Ok(Loaded {
        hash: hash.to_owned(),
        dir,
        manifest,
    })
}

/// The hash `.eve/current` points at, if any.
pub fn current_hash(state_dir: &Path) -> Option<String> {
    let link = state_dir.join("current");
    let target = std::fs::read_link(&link)
        .ok()
        .or_else(|| std::fs::read_to_string(&link).ok().map(PathBuf::from))?;
    target.file_name()?.to_str().map(str::to_owned)
}

/// Loads the build `.eve/current` points at.
pub fn load_current(state_dir: &Path) -> Result<Loaded, BuildError> {
    let hash =
        current_hash(state_dir).ok_or_else(|| BuildError::NoBuild(state_dir.to_path_buf()))?;
    load(state_dir, &hash)
}

/// Counts of what a manifest holds, for summaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Tools (all agents).
    pub tools: usize,
    /// Skills.
    pub skills: usize,
    /// Subagents (all levels).
    pub subagents: usize,
    /// Schedules.
    pub schedules: usize,
    /// Hooks.
    pub hooks: usize,
    /// Connections.
    pub connections: usize,
    /// Channels.
    pub channels: usize,
}

/// Counts everything in an agent tree.
pub fn counts(agent: &crate::manifest::Agent) -> Counts {
    let mut c = Counts {
        tools: agent.tools.len(),
        skills: agent.skills.len(),
        subagents: agent.subagents.len(),
        schedules: agent.schedules.len(),
        hooks: agent.hooks.len(),
        connections: agent.connections.len(),
        channels: agent.channels.len(),
    };
    for s in &agent.subagents {
        let sc = counts(s);
        c.tools += sc.tools;
        c.skills += sc.skills;
        c.subagents += sc.subagents;
        c.schedules += sc.schedules;
        c.hooks += sc.hooks;
        c.connections += sc.connections;
        c.channels += sc.channels;
    }
    c
}
