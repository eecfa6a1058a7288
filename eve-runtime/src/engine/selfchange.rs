//! Governed self-change: the built-in `propose_change` tool of an agent with `self_change: true`.
//!
//! The agent may propose edits to its own folder; it can never make them. A call is handled in
//! three moves, each driven by the call's stored approval state, so a restart (or `kill -9`) at
//! any point picks up where the call was:
//!
//! 1. **Stage** (a fresh call). The changes are checked (paths relative to `agent/` that stay
//!    inside it: no absolute paths, no `..`, no dot-folders such as `.eve/` or `.git/`, no
//!    symbolic links on the way, capped sizes), `agent/` is copied to `.eve/staging/<id>/agent/`
//!    (never inside `agent/`), the changes are applied to the copy, and the copy is compiled and
//!    written into `.eve/builds/<hash>/` without moving `.eve/current`. The release candidate is
//!    computed (capability delta against the active release, gate evals). A proposal with build
//!    errors or failing gate evals goes back to the model as the call's result and is never
//!    offered. Otherwise the call parks on a durable input request of kind `change-approval`
//!    whose `action.proposal` holds everything a reviewer needs: summary, rationale, the unified
//!    diff (capped), diagnostics counts, eval results and the delta with widening changes marked.
//! 2. **Apply** (approved by a principal through the one answer path, `Runtime::answer_input_as`).
//!    `agent/` must be as it was when the proposal was staged (a fingerprint of every file), else
//!    nothing is written and the model is told why. The same checked changes are written into
//!    `agent/`, `agent/` is built again and must give the staged build's hash, and in a git
//!    repository the changed paths are **staged** (`git add`), not committed. Then the build is
//!    activated as a release with the approver as its principal. The model gets the outcome.
//! 3. **Deny**: nothing in `agent/` changes, the staging folder is removed, the model gets the
//!    reason.
//!
//! Each move is recorded as an event (`change.proposed`, `change.approved`, `change.denied`) in
//! the session's stream and in the releases' audit stream. The tool's approval is always
//! `always`, whatever `agent.yaml` says, and only the active build's settings count: a proposal
//! cannot loosen its own review.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use eve_compile::{Approval, Effect, Project, Tool};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::events as ev;
use super::turn::TurnDriver;
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::model::ToolSpec;
use crate::store::*;

/// The built-in tool's name.
pub const PROPOSE_CHANGE: &str = "propose_change";
/// The kind of input request a proposal parks on.
pub const REQUEST_KIND: &str = "change-approval";

pub use super::releases::{CHANGE_APPROVED, CHANGE_DENIED, CHANGE_PROPOSED};

/// Most files one proposal may change.
pub const MAX_FILES: usize = 32;
/// Largest content of one file, in bytes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Largest total content of one proposal, in bytes.
pub const MAX_TOTAL_BYTES: usize = 1024 * 1024;
/// Longest path, in bytes.
const MAX_PATH_BYTES: usize = 255;
/// Longest summary and rationale, in characters.
const MAX_SUMMARY_CHARS: usize = 500;
const MAX_RATIONALE_CHARS: usize = 8000;
/// The diff a reviewer is shown is cut after this many lines.
pub const DIFF_MAX_LINES: usize = 400;
/// … or this many bytes.
const DIFF_MAX_BYTES: usize = 48 * 1024;
/// Most diagnostics listed (the counts are complete).
const LISTED_DIAGNOSTICS: usize = 20;
/// A copy of `agent/` larger than this is refused (the staging folder is a full copy).
const MAX_COPY_BYTES: u64 = 256 * 1024 * 1024;

/// The `propose_change` tool offered to the model.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: PROPOSE_CHANGE.to_owned(),
        description: format!(
            "Propose a change to your own agent folder (instructions, skills, tools, \
             agent.yaml …). Nothing changes until a person approves it: eve builds the changed \
             folder, runs its checks and shows the person the diff and what the change would \
             allow you to do. Paths are relative to the agent folder (`skills/triage.md`, \
             `instructions.md`). Give the whole new content of each file, or `delete: true`. \
             At most {MAX_FILES} files, {} KiB each, {} KiB in all. You get the outcome as this \
             call's result: build errors to fix, or the person's decision.",
            MAX_FILE_BYTES / 1024,
            MAX_TOTAL_BYTES / 1024
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string", "description": "One line: what the change does."},
                "rationale": {"type": "string", "description": "Why it is needed."},
                "changes": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "Relative to the agent folder."},
                            "content": {"type": "string", "description": "The file's whole new content."},
                            "delete": {"type": "boolean", "description": "true to delete the file."}
                        },
                        "required": ["path"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["summary", "rationale", "changes"],
            "additionalProperties": false
        }),
    }
}

/// The policy the engine applies to `propose_change`: always asked, a write. Nothing in
/// `agent.yaml` loosens it.
pub(super) fn policy() -> Tool {
    let spec = spec();
    super::subagents::synthetic_tool(
        &spec.name,
        &spec.description,
        spec.input_schema,
        Approval::Always,
        Effect::Write,
    )
}

/// One checked change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// Write `content` at `path` (created or replaced).
    Write {
        /// Relative to `agent/`, normalised.
        path: String,
        /// The whole new content.
        content: String,
    },
    /// Delete the file at `path`.
    Delete {
        /// Relative to `agent/`, normalised.
        path: String,
    },
}

impl FileChange {
    /// The path changed.
    pub fn path(&self) -> &str {
        match self {
            Self::Write { path, .. } | Self::Delete { path } => path,
        }
    }
}

/// A proposal as the model sent it, checked.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// What it does.
    pub summary: String,
    /// Why.
    pub rationale: String,
    /// The changes, in the order given.
    pub changes: Vec<FileChange>,
}

/// Checks one path the model gave: relative to `agent/`, inside it, outside every dot-folder.
/// Returns the normalised path (no `./`, no trailing slash) or why it is refused.
pub fn check_path(raw: &str) -> Result<String, String> {
    let refuse = |why: &str| Err(format!("`{raw}`: {why}"));
    if raw.trim().is_empty() {
        return refuse("the path is empty; give a path relative to the agent folder");
    }
    if raw.contains('\0') || raw.chars().any(char::is_control) {
        return refuse("the path holds control characters");
    }
    if raw.len() > MAX_PATH_BYTES {
        return refuse(&format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if raw.contains('\\') {
        return refuse("use `/` between folders; `\\` is refused");
    }
    let bytes = raw.as_bytes();
    if raw.starts_with('/')
        || raw.starts_with('~')
        || (bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic())
    {
        return refuse(
            "absolute paths are refused: paths are relative to the agent folder, such as \
             `skills/triage.md`",
        );
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" => return refuse("the path has an empty segment (`//` or a trailing `/`)"),
            "." => continue,
            ".." => return refuse("`..` is refused: a change stays inside the agent folder"),
            p if p.starts_with('.') => {
                return refuse(
                    "dot-files and dot-folders (`.eve/`, `.git/`, …) are not part of the agent \
                     and cannot be changed",
                );
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return refuse("the path names the agent folder itself; name a file in it");
    }
    Ok(parts.join("/"))
}

/// Reads and checks a `propose_change` input: fields, paths, duplicates and size caps.
pub fn parse(input: &Value) -> Result<Proposal, Vec<String>> {
    let mut errors = Vec::new();
    let text = |key: &str, max: usize, errors: &mut Vec<String>| -> String {
        match input.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => {
                if s.chars().count() > max {
                    errors.push(format!("`{key}` is longer than {max} characters"));
                }
                s.trim().to_owned()
            }
            _ => {
                errors.push(format!("`{key}` is required: a non-empty string"));
                String::new()
            }
        }
    };
    let summary = text("summary", MAX_SUMMARY_CHARS, &mut errors);
    let rationale = text("rationale", MAX_RATIONALE_CHARS, &mut errors);
    let mut changes = Vec::new();
    match input.get("changes").and_then(Value::as_array) {
        None => errors.push(
            "`changes` is required: a list of `{path, content}` or `{path, delete: true}`"
                .to_owned(),
        ),
        Some(list) if list.is_empty() => {
            errors.push("`changes` is empty: nothing to propose".to_owned())
        }
        Some(list) if list.len() > MAX_FILES => errors.push(format!(
            "{} files are changed; a proposal changes at most {MAX_FILES}: split it",
            list.len()
        )),
        Some(list) => {
            let mut seen = BTreeSet::new();
            let mut total = 0usize;
            for (i, item) in list.iter().enumerate() {
                let Some(raw) = item.get("path").and_then(Value::as_str) else {
                    errors.push(format!("change {}: `path` is required", i + 1));
                    continue;
                };
                if let Some(extra) = item.as_object().and_then(|o| {
                    o.keys()
                        .find(|k| !["path", "content", "delete"].contains(&k.as_str()))
                }) {
                    errors.push(format!(
                        "change {} (`{raw}`): unknown field `{extra}`",
                        i + 1
                    ));
                }
                let path = match check_path(raw) {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                if !seen.insert(path.clone()) {
                    errors.push(format!("`{path}` is changed twice; give each file once"));
                    continue;
                }
                let delete = item.get("delete").and_then(Value::as_bool).unwrap_or(false);
                match (item.get("content"), delete) {
                    (Some(_), true) => errors.push(format!(
                        "`{path}`: give `content` or `delete: true`, not both"
                    )),
                    (None, true) => changes.push(FileChange::Delete { path }),
                    (Some(Value::String(content)), false) => {
                        if content.len() > MAX_FILE_BYTES {
                            errors.push(format!(
                                "`{path}` is {} KiB; a file is at most {} KiB",
                                content.len() / 1024,
                                MAX_FILE_BYTES / 1024
                            ));
                        }
                        total = total.saturating_add(content.len());
                        changes.push(FileChange::Write {
                            path,
                            content: content.clone(),
                        });
                    }
                    (Some(_), false) => {
                        errors.push(format!("`{path}`: `content` must be a string"))
                    }
                    (None, false) => errors.push(format!(
                        "`{path}`: give the whole new `content`, or `delete: true`"
                    )),
                }
            }
            if total > MAX_TOTAL_BYTES {
                errors.push(format!(
                    "the proposal holds {} KiB of content; at most {} KiB in all: split it",
                    total / 1024,
                    MAX_TOTAL_BYTES / 1024
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(Proposal {
            summary,
            rationale,
            changes,
        })
    } else {
        Err(errors)
    }
}

/// Checks `change` against the folder `root` it is applied to: no symbolic link on the way (it
/// could lead outside), no file where a folder is needed, a folder is not replaced, a deleted
/// file exists.
pub fn check_on_disk(root: &Path, change: &FileChange) -> Result<(), String> {
    let rel = change.path();
    let parts: Vec<&str> = rel.split('/').collect();
    let mut at = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "`{rel}`: `{}` is a symbolic link; changes through links are refused (a link \
                     can lead outside the agent folder)",
                    parts[..=i].join("/")
                ));
            }
            Ok(meta) if !last && !meta.is_dir() => {
                return Err(format!(
                    "`{rel}`: `{}` is a file, not a folder",
                    parts[..=i].join("/")
                ));
            }
            Ok(meta) if last && meta.is_dir() => {
                return Err(format!("`{rel}` is a folder; name a file"));
            }
            Ok(_) => {}
            Err(_) => {
                if let FileChange::Delete { .. } = change {
                    return Err(format!("`{rel}` does not exist, so it cannot be deleted"));
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Writes (or deletes) the checked `changes` under `root`, checking each on disk first. Every
/// check runs before anything is written, so a refused change leaves `root` untouched.
pub fn apply(root: &Path, changes: &[FileChange]) -> Result<(), String> {
    let problems: Vec<String> = changes
        .iter()
        .filter_map(|c| check_on_disk(root, c).err())
        .collect();
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    for change in changes {
        let target = root.join(change.path());
        match change {
            FileChange::Delete { .. } => std::fs::remove_file(&target)
                .map_err(|e| format!("cannot delete `{}`: {e}", change.path()))?,
            FileChange::Write { content, .. } => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        format!("cannot create the folder of `{}`: {e}", change.path())
                    })?;
                }
                let mode = std::fs::metadata(&target).ok().map(|m| m.permissions());
                let tmp = target.with_file_name(format!(
                    ".eve-change-{}",
                    target
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ));
                let written = (|| -> std::io::Result<()> {
                    let mut f = std::fs::File::create(&tmp)?;
                    f.write_all(content.as_bytes())?;
                    f.sync_all()?;
                    if let Some(perms) = mode {
                        std::fs::set_permissions(&tmp, perms)?;
                    }
                    std::fs::rename(&tmp, &target)
                })();
                if let Err(e) = written {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(format!("cannot write `{}`: {e}", change.path()));
                }
            }
        }
    }
    Ok(())
}

/// A fingerprint of a folder: every entry's path, kind, execute bit and content (a link's
/// target), dot-entries left out (they are not part of the agent). Two folders with the same
/// fingerprint build alike.
pub fn fingerprint(root: &Path) -> Result<String, String> {
    let mut h = Sha256::new();
    let mut entries = Vec::new();
    walk(root, "", 0, &mut entries).map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    entries.sort();
    for (rel, kind, mode) in entries {
        h.update(rel.as_bytes());
        h.update([0, kind]);
        let path = root.join(&rel);
        match kind {
            b'l' => {
                let target = std::fs::read_link(&path).map_err(|e| format!("{rel}: {e}"))?;
                h.update(target.to_string_lossy().as_bytes());
            }
            b'f' => {
                h.update([u8::from(mode & 0o111 != 0)]);
                let bytes = std::fs::read(&path).map_err(|e| format!("{rel}: {e}"))?;
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(&bytes);
            }
            _ => {}
        }
        h.update([0xff]);
    }
    Ok(hex::encode(h.finalize()))
}

fn walk(
    dir: &Path,
    rel: &str,
    depth: usize,
    out: &mut Vec<(String, u8, u32)>,
) -> std::io::Result<()> {
    if depth > 64 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let meta = std::fs::symlink_metadata(entry.path())?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            out.push((path, b'l', 0));
        } else if kind.is_dir() {
            out.push((path.clone(), b'd', 0));
            walk(&entry.path(), &path, depth + 1, out)?;
        } else if kind.is_file() {
            out.push((path, b'f', mode_of(&meta)));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&meta.permissions())
}

#[cfg(not(unix))]
fn mode_of(_meta: &std::fs::Metadata) -> u32 {
    0o644
}

/// Copies `from` into `to` (created), dot-entries left out, links recreated as links.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let mut entries = Vec::new();
    walk(from, "", 0, &mut entries).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    let mut total = 0u64;
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    entries.sort();
    for (rel, kind, _) in entries {
        let (src, dst) = (from.join(&rel), to.join(&rel));
        let done = match kind {
            b'd' => std::fs::create_dir_all(&dst),
            b'l' => std::fs::read_link(&src).and_then(|t| symlink(&t, &dst)),
            _ => std::fs::copy(&src, &dst).map(|n| {
                total = total.saturating_add(n);
            }),
        };
        done.map_err(|e| format!("cannot copy {rel}: {e}"))?;
        if total > MAX_COPY_BYTES {
            return Err(format!(
                "the agent folder holds more than {} MiB; it is too large to stage a copy of",
                MAX_COPY_BYTES / 1024 / 1024
            ));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(_target: &Path, _link: &Path) -> std::io::Result<()> {
    Ok(())
}

/// The unified diff of `changes` against `root` (what is there now), cut at [`DIFF_MAX_LINES`]
/// lines. Returns the diff and whether it was cut.
pub fn diff(root: &Path, changes: &[FileChange]) -> (String, bool) {
    let mut out = String::new();
    for change in changes {
        let path = change.path();
        let old = std::fs::read(root.join(path)).ok();
        let old_text = match &old {
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(t) => Some(t.to_owned()),
                Err(_) => {
                    out.push_str(&format!("Binary file {path} is replaced or deleted\n"));
                    continue;
                }
            },
            None => None,
        };
        let new_text = match change {
            FileChange::Write { content, .. } => Some(content.as_str()),
            FileChange::Delete { .. } => None,
        };
        let a = if old_text.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".to_owned()
        };
        let b = if new_text.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".to_owned()
        };
        let old_s = old_text.as_deref().unwrap_or("");
        let new_s = new_text.unwrap_or("");
        if old_text.is_some() && old_s == new_s {
            out.push_str(&format!("(unchanged: {path})\n"));
            continue;
        }
        let text = similar::TextDiff::from_lines(old_s, new_s)
            .unified_diff()
            .context_radius(3)
            .header(&a, &b)
            .to_string();
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    let lines = out.lines().count();
    if lines <= DIFF_MAX_LINES && out.len() <= DIFF_MAX_BYTES {
        return (out, false);
    }
    let mut cut = String::new();
    for line in out.lines().take(DIFF_MAX_LINES) {
        if cut.len() + line.len() + 1 > DIFF_MAX_BYTES {
            break;
        }
        cut.push_str(line);
        cut.push('\n');
    }
    let shown = cut.lines().count();
    cut.push_str(&format!(
        "… the diff is cut here: {} more lines\n",
        lines.saturating_sub(shown)
    ));
    (cut, true)
}

/// The staging folder of proposal `id`.
pub fn staging_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("staging").join(id)
}

/// The id of the proposal a call makes: stable for the call (its idempotency key), so staging
/// again after a restart reuses the same folder.
pub fn proposal_id(call: &ToolCallRecord) -> String {
    let digest = Sha256::digest(call.idempotency_key.as_bytes());
    format!("chg_{}", &hex::encode(digest)[..12])
}

/// A diagnostic as one line for the model and the reviewer.
fn diagnostic_line(d: &eve_discover::Diagnostic) -> String {
    let at = match (&d.file, d.line) {
        (Some(f), Some(l)) => format!("{f}:{l}: "),
        (Some(f), None) => format!("{f}: "),
        _ => String::new(),
    };
    let severity = serde_json::to_value(d.severity)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let code = serde_json::to_value(d.code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let help = d
        .help
        .as_deref()
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    format!("{at}{severity} {code}: {}{help}", d.message)
}

/// What staging found.
pub(super) enum Staged {
    /// The proposal cannot be offered: what the model is told.
    Refused(String),
    /// Built and checked: the proposal as shown for approval (`action.proposal`).
    Offered(Value),
}

impl Runtime {
    /// The agent folder proposals change: set by the CLI from the project (`--agent`), else
    /// `agent/` beside the state folder.
    pub fn agent_dir(&self) -> PathBuf {
        match self.inner.agent_dir.get() {
            Some(dir) => dir.clone(),
            None => self
                .inner
                .config
                .state_dir
                .parent()
                .map_or_else(|| PathBuf::from("agent"), |p| p.join("agent")),
        }
    }

    /// Sets the agent folder proposals change (once; later calls are ignored).
    pub fn set_agent_dir(&self, dir: impl Into<PathBuf>) {
        let _ = self.inner.agent_dir.set(dir.into());
    }

    /// A project whose agent folder is `agent_dir` and whose state is this runtime's.
    fn project_for(&self, agent_dir: PathBuf) -> Project {
        let state_dir = self.inner.config.state_dir.clone();
        let root = state_dir
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Project {
            root,
            agent_dir,
            state_dir,
        }
    }

    /// Compiles `agent_dir` as the project's agent (named as `eve build` names it, diagnostics
    /// under `agent/`) and writes the build without activating it. `Err` holds the diagnostics
    /// lines when the build has errors.
    fn build_unpointed(
        &self,
        agent_dir: PathBuf,
    ) -> RuntimeResult<Result<(String, eve_compile::Output), eve_compile::Output>> {
        let project = self.project_for(agent_dir);
        let real = self.project_for(self.agent_dir());
        let source = eve_discover::FsSource::new(&project.agent_dir).map_err(|e| {
            RuntimeError::Other(format!("cannot open {}: {e}", project.agent_dir.display()))
        })?;
        let discovery = eve_discover::discover(&source);
        let mut output = eve_compile::compile(
            &discovery,
            &eve_compile::Options {
                name: real.name(),
                file_prefix: real.display_prefix(),
                protected_dirs: vec![project.state_dir.clone(), real.agent_dir.clone()],
            },
        );
        if output.error_count() > 0 {
            return Ok(Err(output));
        }
        let (hash, _, _) = eve_compile::build::write_candidate(&project, &mut output)
            .map_err(|e| RuntimeError::Other(format!("cannot write the build: {e}")))?;
        Ok(Ok((hash, output)))
    }

    /// Stages `proposal` (call `id`): copy, apply, build, candidate. Blocking file work runs off
    /// the async threads.
    pub(super) async fn stage_proposal(
        &self,
        id: &str,
        proposal: &Proposal,
    ) -> RuntimeResult<Staged> {
        let agent_dir = self.agent_dir();
        let staging = staging_dir(&self.inner.config.state_dir, id);
        let rt = self.clone();
        let changes = proposal.changes.clone();
        let prepared =
            tokio::task::spawn_blocking(move || rt.prepare_staging(&agent_dir, &staging, &changes))
                .await
                .map_err(|e| RuntimeError::Other(format!("staging stopped: {e}")))??;
        let (base, result, diff_text, truncated, built) = match prepared {
            Err(refused) => return Ok(Staged::Refused(refused)),
            Ok(p) => p,
        };
        let staging = staging_dir(&self.inner.config.state_dir, id);
        let (hash, output) = match built {
            Err(output) => {
                let _ = std::fs::remove_dir_all(&staging);
                let lines: Vec<String> = output
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == eve_discover::Severity::Error)
                    .map(diagnostic_line)
                    .collect();
                return Ok(Staged::Refused(format!(
                    "The proposal was not offered for approval: the changed agent folder does not \
                     build ({} error{}). Fix these and propose again:\n{}",
                    lines.len(),
                    if lines.len() == 1 { "" } else { "s" },
                    lines
                        .iter()
                        .map(|l| format!("- {l}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )));
            }
            Ok(built) => built,
        };
        let candidate = self.proposal_candidate(&hash).await?;
        if let Some(failed) = candidate.failed_evals() {
            let _ = std::fs::remove_dir_all(&staging);
            return Ok(Staged::Refused(format!(
                "The proposal was not offered for approval: the gate evals failed on its build \
                 `{hash}`. Failing cases:\n{failed}\nFix the change and propose again."
            )));
        }
        let warnings: Vec<String> = output
            .diagnostics
            .iter()
            .filter(|d| d.severity != eve_discover::Severity::Error)
            .map(diagnostic_line)
            .collect();
        let files: Vec<Value> = proposal
            .changes
            .iter()
            .map(|c| match c {
                FileChange::Write { path, content } => json!({
                    "path": path, "op": "write", "bytes": content.len(),
                    "new": !self.agent_dir().join(path).exists(),
                }),
                FileChange::Delete { path } => json!({"path": path, "op": "delete"}),
            })
            .collect();
        let mut shown = json!({
            "id": id,
            "summary": proposal.summary,
            "rationale": proposal.rationale,
            "files": files,
            "diff": diff_text,
            "diffTruncated": truncated,
            "build": hash,
            "diagnostics": {
                "errors": 0,
                "warnings": warnings.len(),
                "items": warnings.iter().take(LISTED_DIAGNOSTICS).collect::<Vec<_>>(),
            },
            "evals": candidate.evals,
            "delta": candidate.delta,
            "widens": candidate.widens,
            "deltaText": candidate.delta_text,
            "activeBuild": candidate.active,
            "base": base,
            "result": result,
        });
        shown["text"] = json!(render_text(&shown));
        let record = serde_json::to_vec_pretty(&shown)?;
        std::fs::write(staging.join("proposal.json"), record).map_err(|e| {
            RuntimeError::Other(format!(
                "cannot write the proposal in {}: {e}",
                staging.display()
            ))
        })?;
        Ok(Staged::Offered(shown))
    }

    /// The blocking part of staging: fingerprints, the copy, the changes applied to it, the diff
    /// and the build. `Ok(Err)` is a refusal for the model.
    #[allow(clippy::type_complexity)]
    fn prepare_staging(
        &self,
        agent_dir: &Path,
        staging: &Path,
        changes: &[FileChange],
    ) -> RuntimeResult<
        Result<
            (
                String,
                String,
                String,
                bool,
                Result<(String, eve_compile::Output), eve_compile::Output>,
            ),
            String,
        >,
    > {
        if !agent_dir.is_dir() {
            return Ok(Err(format!(
                "The agent folder {} is not there, so no change can be proposed.",
                agent_dir.display()
            )));
        }
        if changes
            .iter()
            .any(|c| c.path() == "agent" || c.path().starts_with("agent/"))
            && !agent_dir.join("agent").exists()
        {
            return Ok(Err(
                "Paths are relative to the agent folder: write `skills/x.md`, not \
                 `agent/skills/x.md`. Nothing was staged."
                    .to_owned(),
            ));
        }
        let problems: Vec<String> = changes
            .iter()
            .filter_map(|c| check_on_disk(agent_dir, c).err())
            .collect();
        if !problems.is_empty() {
            return Ok(Err(format!(
                "The proposal was refused; nothing was staged:\n{}",
                problems
                    .iter()
                    .map(|p| format!("- {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )));
        }
        let base = fingerprint(agent_dir).map_err(RuntimeError::Other)?;
        let (diff_text, truncated) = diff(agent_dir, changes);
        let _ = std::fs::remove_dir_all(staging);
        let copy = staging.join("agent");
        if let Err(e) = copy_tree(agent_dir, &copy) {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(Err(format!("The proposal could not be staged: {e}")));
        }
        if let Err(e) = apply(&copy, changes) {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(Err(format!(
                "The proposal was refused; nothing was staged:\n{e}"
            )));
        }
        let result = fingerprint(&copy).map_err(RuntimeError::Other)?;
        let built = self.build_unpointed(copy)?;
        Ok(Ok((base, result, diff_text, truncated, built)))
    }
}

/// The plain-text card of a proposal (`action.proposal.text`): what the terminal, channels and
/// logs show a reviewer.
pub fn render_text(p: &Value) -> String {
    let s = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
    let mut out = String::new();
    out.push_str(&format!("Proposed change {}: {}\n", s("id"), s("summary")));
    out.push_str(&format!("Why: {}\n", s("rationale")));
    out.push_str("Files:\n");
    for f in p["files"].as_array().into_iter().flatten() {
        let path = f["path"].as_str().unwrap_or_default();
        match f["op"].as_str() {
            Some("delete") => out.push_str(&format!("  - delete {path}\n")),
            _ => out.push_str(&format!(
                "  - {} {path} ({} bytes)\n",
                if f["new"] == true { "add" } else { "write" },
                f["bytes"]
            )),
        }
    }
    out.push_str(&format!(
        "Build {}: {} errors, {} warnings\n",
        s("build"),
        p["diagnostics"]["errors"],
        p["diagnostics"]["warnings"]
    ));
    match &p["evals"] {
        Value::Null => out.push_str("Evals: no gate configured\n"),
        evals => out.push_str(&format!("Evals: {}\n", eval_summary(evals))),
    }
    let delta = s("deltaText");
    if p["widens"] == true {
        out.push_str("Capability delta (WIDENS what the agent may do):\n");
    } else {
        out.push_str("Capability delta:\n");
    }
    if delta.trim().is_empty() {
        out.push_str("  (no capability changes)\n");
    } else {
        for line in delta.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str("Diff:\n");
    out.push_str(&s("diff"));
    out
}

/// One line about gate eval results: `3 passed, 0 failed (tags: smoke)`.
fn eval_summary(evals: &Value) -> String {
    let passed = evals["passed"].as_u64().unwrap_or(0);
    let failed = evals["failed"].as_u64().unwrap_or(0);
    let tags = evals["tags"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    if tags.is_empty() {
        format!("{passed} passed, {failed} failed")
    } else {
        format!("{passed} passed, {failed} failed (tags: {tags})")
    }
}

/// A proposal's release candidate as shown: delta against the active release, gate evals.
pub(super) struct CandidateView {
    /// The delta (JSON), `null` when none could be computed.
    pub delta: Value,
    /// Whether the delta widens anything.
    pub widens: bool,
    /// The delta rendered, one change a line.
    pub delta_text: String,
    /// Gate evals: `{passed, failed, tags, cases: [{id, passed, reason}]}`, or `null` without a
    /// gate.
    pub evals: Value,
    /// The active build it is compared with.
    pub active: Option<String>,
}

impl CandidateView {
    /// The failing gate cases, one a line, when any failed.
    fn failed_evals(&self) -> Option<String> {
        let failed: Vec<String> = self.evals["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["passed"] == false)
            .map(|c| {
                format!(
                    "- {}: {}",
                    c["id"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or("failed")
                )
            })
            .collect();
        if failed.is_empty() && self.evals["failed"].as_u64().unwrap_or(0) == 0 {
            None
        } else {
            Some(failed.join("\n"))
        }
    }
}

impl TurnDriver<'_> {
    /// Whether `name` is the built-in `propose_change` of this agent.
    pub(in crate::engine) fn is_change_call(&self, name: &str) -> bool {
        name == PROPOSE_CHANGE
            && self.build.manifest.agent.config.self_change
            && self.build.manifest.agent.path.is_empty()
    }

    /// Moves a `propose_change` call on: stages a fresh one, applies an approved one, drops a
    /// denied one.
    pub(in crate::engine) async fn change_call(
        &mut self,
        call: &ToolCallRecord,
    ) -> RuntimeResult<ChangeStep> {
        let id = proposal_id(call);
        let proposal = match parse(&call.input) {
            Ok(p) => p,
            Err(errors) => {
                return Ok(ChangeStep::Settle(
                    CallStatus::Failed,
                    json!(format!(
                        "The proposal was refused; nothing was staged:\n{}",
                        errors
                            .iter()
                            .map(|e| format!("- {e}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )),
                    Batch::new(),
                ));
            }
        };
        match call.approval {
            ApprovalState::Approved => self.apply_change(call, &id, &proposal).await,
            ApprovalState::Denied => {
                let request = self.change_request(call).await?;
                let reason = request.as_ref().and_then(|r| r.reason.clone());
                let by = request
                    .as_ref()
                    .and_then(|r| r.responder.clone())
                    .unwrap_or_else(|| ev::LOCAL_PRINCIPAL.to_owned());
                let _ = std::fs::remove_dir_all(staging_dir(&self.rt.inner.config.state_dir, &id));
                let mut batch = Batch::new();
                let data = json!({"id": id, "callId": call.call_id, "by": by, "reason": reason,
                                  "summary": proposal.summary});
                self.rt
                    .change_event(&mut batch, self.id(), CHANGE_DENIED, data)
                    .await?;
                let text = match reason {
                    Some(r) => format!(
                        "The change `{id}` was denied by {by}. Reason: {r}\nNothing in the agent \
                         folder changed."
                    ),
                    None => format!(
                        "The change `{id}` was denied by {by}. Nothing in the agent folder changed."
                    ),
                };
                Ok(ChangeStep::Settle(CallStatus::Denied, json!(text), batch))
            }
            _ => match self.rt.stage_proposal(&id, &proposal).await? {
                Staged::Refused(text) => Ok(ChangeStep::Settle(
                    CallStatus::Failed,
                    json!(text),
                    Batch::new(),
                )),
                Staged::Offered(shown) => Ok(ChangeStep::Ask(format!(
                    "Approve change {id} to the agent? {}{}",
                    proposal.summary,
                    if shown["widens"] == true {
                        " (it WIDENS what the agent may do)"
                    } else {
                        ""
                    }
                ))),
            },
        }
    }

    /// The input request of a `propose_change` call, newest first.
    async fn change_request(
        &self,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Option<InputRequestRecord>> {
        Ok(self
            .rt
            .inner
            .store
            .input_requests(&self.session.id, false)
            .await?
            .into_iter()
            .rev()
            .find(|r| r.turn_seq == call.turn_seq && r.call_id == call.call_id))
    }

    /// Writes an approved proposal into `agent/`, stages it in git, and activates its build.
    async fn apply_change(
        &mut self,
        call: &ToolCallRecord,
        id: &str,
        proposal: &Proposal,
    ) -> RuntimeResult<ChangeStep> {
        let request = self.change_request(call).await?;
        let by = request
            .as_ref()
            .and_then(|r| r.responder.clone())
            .unwrap_or_else(|| ev::LOCAL_PRINCIPAL.to_owned());
        let shown = request
            .as_ref()
            .map(|r| r.action["proposal"].clone())
            .unwrap_or(Value::Null);
        let staged_hash = shown["build"].as_str().unwrap_or_default().to_owned();
        let base = shown["base"].as_str().unwrap_or_default().to_owned();
        let result = shown["result"].as_str().unwrap_or_default().to_owned();
        let state_dir = self.rt.inner.config.state_dir.clone();
        let agent_dir = self.rt.agent_dir();
        let conflict = |text: String| {
            let _ = std::fs::remove_dir_all(staging_dir(&state_dir, id));
            text
        };
        if staged_hash.is_empty() || base.is_empty() {
            let text = conflict(format!(
                "The change `{id}` was approved, but its staged proposal is missing; nothing \
                 was written. Propose it again."
            ));
            return self.refused_after_approval(call, id, &by, text).await;
        }
        // Written already (a restart after the write): the folder is the staged result.
        let changes = proposal.changes.clone();
        let (dir, b, r) = (agent_dir.clone(), base.clone(), result.clone());
        let written = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
            let now = fingerprint(&dir)?;
            if now == r {
                return Ok(changes.iter().map(|c| c.path().to_owned()).collect());
            }
            if now != b {
                return Err(
                    "The agent folder changed since the proposal was staged (someone edited it); \
                     nothing was written, so no edit was lost. Look at the folder as it is now \
                     and propose again."
                        .to_owned(),
                );
            }
            apply(&dir, &changes)?;
            Ok(changes.iter().map(|c| c.path().to_owned()).collect())
        })
        .await
        .map_err(|e| RuntimeError::Other(format!("applying stopped: {e}")))?;
        let paths = match written {
            Ok(paths) => paths,
            Err(why) => {
                let text = conflict(format!(
                    "The change `{id}` was approved by {by}, but: {why}"
                ));
                return self.refused_after_approval(call, id, &by, text).await;
            }
        };
        // What is in `agent/` now must be what was reviewed: the same build.
        let rt = self.rt.clone();
        let dir = agent_dir.clone();
        let rebuilt = tokio::task::spawn_blocking(move || rt.build_unpointed(dir))
            .await
            .map_err(|e| RuntimeError::Other(format!("building stopped: {e}")))??;
        let hash = match rebuilt {
            Ok((hash, _)) if hash == staged_hash => hash,
            Ok((hash, _)) => {
                let text = conflict(format!(
                    "The change `{id}` was written into the agent folder, but the folder now \
                     builds to `{hash}`, not the reviewed `{staged_hash}`; it was not activated. \
                     Check the folder and build it with `eve build`."
                ));
                return self.refused_after_approval(call, id, &by, text).await;
            }
            Err(output) => {
                let text = conflict(format!(
                    "The change `{id}` was written into the agent folder, but it no longer \
                     builds ({} errors); it was not activated.",
                    output.error_count()
                ));
                return self.refused_after_approval(call, id, &by, text).await;
            }
        };
        let git = git_stage(&agent_dir, &paths).await;
        let release = match self.rt.activate_proposal(&hash, &by).await {
            Ok(release) => release,
            Err(e) => {
                let text = conflict(format!(
                    "The change `{id}` was written into the agent folder, but activating its \
                     build `{hash}` failed: {e}. Activate it with `eve activate {hash}`."
                ));
                return self.refused_after_approval(call, id, &by, text).await;
            }
        };
        let _ = std::fs::remove_dir_all(staging_dir(&self.rt.inner.config.state_dir, id));
        let mut batch = Batch::new();
        let data = json!({
            "id": id, "callId": call.call_id, "by": by, "summary": proposal.summary,
            "files": paths, "build": hash, "release": release, "git": git,
        });
        self.rt
            .change_event(&mut batch, self.id(), CHANGE_APPROVED, data)
            .await?;
        let git_note = match git["staged"].as_bool() {
            Some(true) => " The changed files are staged in git (not committed).",
            _ => "",
        };
        Ok(ChangeStep::Settle(
            CallStatus::Completed,
            json!(format!(
                "The change `{id}` was approved by {by}: {} written into the agent folder and \
                 build `{hash}` is active as release {}.{git_note} It applies from the next \
                 message on.",
                paths.join(", "),
                release.as_str().unwrap_or("?")
            )),
            batch,
        ))
    }

    /// An approved proposal that could not be applied: the call fails with `text`, recorded as
    /// `change.denied` (`conflict: true`), with the approver.
    async fn refused_after_approval(
        &self,
        call: &ToolCallRecord,
        id: &str,
        by: &str,
        text: String,
    ) -> RuntimeResult<ChangeStep> {
        let mut batch = Batch::new();
        let data = json!({"id": id, "callId": call.call_id, "by": by, "reason": text,
                          "conflict": true});
        self.rt
            .change_event(&mut batch, self.id(), CHANGE_DENIED, data)
            .await?;
        Ok(ChangeStep::Settle(CallStatus::Failed, json!(text), batch))
    }
}

/// Where a `propose_change` call goes next.
pub(in crate::engine) enum ChangeStep {
    /// Settled now, with the writes committed with its result.
    Settle(CallStatus, Value, Batch),
    /// Staged and offered: ask a principal, with this prompt.
    Ask(String),
}

/// The request shown for a staged proposal of `call`: kind and action (with `proposal`), read
/// from the staging folder; `None` when `call` is no proposal or nothing is staged.
pub(in crate::engine) fn staged_request(
    state_dir: &Path,
    call: &ToolCallRecord,
) -> Option<(String, Value)> {
    if call.name != PROPOSE_CHANGE {
        return None;
    }
    let id = proposal_id(call);
    let text = std::fs::read(staging_dir(state_dir, &id).join("proposal.json")).ok()?;
    let proposal: Value = serde_json::from_slice(&text).ok()?;
    let mut action = ev::action(call);
    action["proposal"] = proposal;
    Some((REQUEST_KIND.to_owned(), action))
}

/// Removes the staging folder of `call`'s proposal, if it is one (its turn ended without an
/// answer: cancelled, failed, out of time).
pub(in crate::engine) fn discard_staged(state_dir: &Path, call: &ToolCallRecord) {
    if call.name == PROPOSE_CHANGE {
        let _ = std::fs::remove_dir_all(staging_dir(state_dir, &proposal_id(call)));
    }
}

/// Stages `paths` (relative to `agent_dir`) in git when `agent_dir` is in a work tree: `{staged:
/// true, repo}`; `{staged: false, why}` otherwise (no git, not a repository, `git add` failed).
async fn git_stage(agent_dir: &Path, paths: &[String]) -> Value {
    let dir = agent_dir.to_path_buf();
    let paths = paths.to_vec();
    tokio::task::spawn_blocking(move || {
        let top = std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["rev-parse", "--show-toplevel"])
            .stderr(std::process::Stdio::null())
            .output();
        let top = match top {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            Ok(_) => return json!({"staged": false, "why": "not a git repository"}),
            Err(_) => return json!({"staged": false, "why": "git is not installed"}),
        };
        let added = std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["add", "-A", "--"])
            .args(&paths)
            .output();
        match added {
            Ok(o) if o.status.success() => json!({"staged": true, "repo": top, "paths": paths}),
            Ok(o) => json!({"staged": false, "repo": top,
                            "why": String::from_utf8_lossy(&o.stderr).trim().to_owned()}),
            Err(e) => json!({"staged": false, "why": e.to_string()}),
        }
    })
    .await
    .unwrap_or_else(|e| json!({"staged": false, "why": e.to_string()}))
}

// ---- Releases: the candidate and the activation of a staged build (`engine::releases`). -----

impl Runtime {
    /// The candidate of a staged build as shown: delta against the active release and the gate
    /// evals of the active release's policy ([`Runtime::candidate`]; nothing is recorded).
    async fn proposal_candidate(&self, hash: &str) -> RuntimeResult<CandidateView> {
        let candidate = self.candidate(hash).await?;
        let evals = match &candidate.checks.gate {
            None => Value::Null,
            Some(report) => {
                let cases: Vec<Value> = report
                    .cases
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "passed": c.result == "passed",
                                    "result": c.result, "reason": c.reason})
                    })
                    .collect();
                let failed = report.failed().count() + usize::from(report.error.is_some());
                json!({
                    "tags": report.tags,
                    "passed": report.cases.len() - report.failed().count(),
                    "failed": failed,
                    "error": report.error,
                    "cases": cases,
                })
            }
        };
        Ok(CandidateView {
            widens: candidate.delta.widens(),
            delta_text: candidate.delta.render(),
            delta: serde_json::to_value(&candidate.delta)?,
            evals,
            active: candidate.base.map(|b| b.build_hash),
        })
    }

    /// Activates a staged build as a release, `by` the approver (the active release's policy
    /// still applies: a failing gate refuses it). Returns the release id.
    async fn activate_proposal(&self, hash: &str, by: &str) -> RuntimeResult<Value> {
        let release = self.activate(hash, by, false).await?;
        Ok(json!(release.id))
    }

    /// Adds a `change.*` event to `batch` (the session's stream) and appends it to the releases'
    /// audit stream (`eve releases log`, `GET /eve/v1/releases/stream`). The audit event is
    /// stored first, so a crash before the session's commit can repeat it, never lose it.
    pub(super) async fn change_event(
        &self,
        batch: &mut Batch,
        session: &str,
        kind: &str,
        mut data: Value,
    ) -> RuntimeResult<()> {
        batch.event(session, kind, data.clone());
        data["sessionId"] = json!(session);
        self.audit(kind, data).await?;
        Ok(())
    }
}

/// `change.proposed`: what was offered for approval (the proposal without its file contents).
pub(in crate::engine) fn proposed_event(call: &ToolCallRecord, action: &Value) -> Value {
    let p = &action["proposal"];
    json!({
        "id": p["id"], "callId": call.call_id, "summary": p["summary"],
        "rationale": p["rationale"], "files": p["files"], "build": p["build"],
        "diagnostics": {"errors": p["diagnostics"]["errors"], "warnings": p["diagnostics"]["warnings"]},
        "evals": p["evals"], "delta": p["delta"], "widens": p["widens"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_the_agent_folder_are_normalised() {
        assert_eq!(check_path("skills/triage.md").unwrap(), "skills/triage.md");
        assert_eq!(check_path("./skills/./x.md").unwrap(), "skills/x.md");
        assert_eq!(check_path("instructions.md").unwrap(), "instructions.md");
        assert_eq!(check_path("_lib/data.json").unwrap(), "_lib/data.json");
    }

    #[test]
    fn paths_leaving_the_agent_folder_are_refused() {
        for raw in [
            "",
            " ",
            "/etc/passwd",
            "//x",
            "../x",
            "a/../../x",
            "a/..",
            "..",
            ".",
            "./",
            ".eve/current",
            ".git/config",
            "skills/.hidden/x",
            "a//b",
            "a/",
            "C:/x",
            "c:x",
            "~/x",
            "a\\b",
            "a\0b",
            "a\nb",
        ] {
            assert!(check_path(raw).is_err(), "{raw:?} is refused");
        }
        let long = "a/".repeat(200) + "x";
        assert!(check_path(&long).is_err());
    }

    #[test]
    fn inputs_are_checked_whole_before_anything_is_staged() {
        let errors = parse(&json!({"summary": "", "changes": []})).unwrap_err();
        assert!(errors.iter().any(|e| e.contains("`summary`")), "{errors:?}");
        assert!(
            errors.iter().any(|e| e.contains("`rationale`")),
            "{errors:?}"
        );
        assert!(errors.iter().any(|e| e.contains("empty")), "{errors:?}");
        let errors = parse(&json!({"summary": "s", "rationale": "r", "changes": [
            {"path": "a.md", "content": "x"}, {"path": "./a.md", "delete": true},
            {"path": "b.md", "content": "x", "delete": true}, {"path": "c.md"},
            {"path": "d.md", "content": 5}, {"path": "e.md", "content": "x", "mode": "777"},
        ]}))
        .unwrap_err();
        for part in [
            "twice",
            "not both",
            "whole new",
            "must be a string",
            "unknown field `mode`",
        ] {
            assert!(
                errors.iter().any(|e| e.contains(part)),
                "{part}: {errors:?}"
            );
        }
        let big = "x".repeat(MAX_FILE_BYTES + 1);
        let errors = parse(&json!({"summary": "s", "rationale": "r",
                                   "changes": [{"path": "a.md", "content": big}]}))
        .unwrap_err();
        assert!(errors.iter().any(|e| e.contains("KiB")), "{errors:?}");
        let ok = parse(&json!({"summary": "s", "rationale": "r", "changes": [
            {"path": "a.md", "content": "x"}, {"path": "b.md", "delete": true}]}))
        .unwrap();
        assert_eq!(
            ok.changes,
            vec![
                FileChange::Write {
                    path: "a.md".into(),
                    content: "x".into()
                },
                FileChange::Delete {
                    path: "b.md".into()
                }
            ]
        );
    }

    #[test]
    fn a_long_diff_is_cut_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let content: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let (diff, cut) = diff(
            dir.path(),
            &[FileChange::Write {
                path: "big.md".into(),
                content,
            }],
        );
        assert!(cut);
        assert!(
            diff.lines().count() <= DIFF_MAX_LINES + 1,
            "{}",
            diff.lines().count()
        );
        assert!(diff.contains("the diff is cut here"));
    }
}
