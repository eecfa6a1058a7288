//! The built-in `glob` and `grep` tools (opt-in): ripgrep's file listing and content search on
//! the session workspace, in eve's process, with ripgrep's own crates.
//!
//! Their input and output are eve's (`pattern`, `path`, `glob`, `ignoreCase`, `literal`,
//! `context`, `limit`; `{content, count | matchCount, path, truncated}`), and what they find is
//! what `rg --files --hidden --glob '!.git/*' --glob PATTERN` and `rg --line-number --hidden
//! --glob '!.git/*' …` find, with `.gitignore` respected in every workspace (ripgrep only respects
//! it inside a git repository). Paths are relative to the workspace, as the file tools take
//! them, and results come sorted by path.
//!
//! The walk ([`walk`]) opens every folder and file from its parent's handle, never through a
//! symlink, so a tool cannot steer it out of the workspace, even by swapping a folder for a symlink
//! while it runs. Output is capped ([`MAX_OUTPUT_BYTES`], each line at [`MAX_LINE_CHARS`]) and a
//! capped result says so.

mod grep;
mod walk;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ignore::overrides::{Override, OverrideBuilder};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ToolError;
use super::workspace::relative;
use crate::env_vars::EVE_TEST_UNSAFE_WALK;

pub(crate) use grep::{GrepInput, grep};

/// Name of the file listing tool.
pub(crate) const GLOB: &str = "glob";
/// Name of the content search tool.
pub(crate) const GREP: &str = "grep";

/// Most bytes of output a call returns (eve's cap); what did not fit is said.
pub(crate) const MAX_OUTPUT_BYTES: usize = 51_200;
/// Longest line returned, in characters; a longer one is cut and marked ` [truncated]`.
pub(crate) const MAX_LINE_CHARS: usize = 2000;
/// Results a call returns when it gives no `limit`.
const DEFAULT_LIMIT: u64 = 100;
/// Largest `limit` a call may give.
const MAX_LIMIT: u64 = 1000;
/// How long a walk may take before it returns what it found.
const WALK_TIME: Duration = Duration::from_secs(30);
/// The override eve's ripgrep command adds: the workspace's own `.git` is never listed.
const NO_GIT: &str = "!.git/*";

/// The input schema of `glob`, eve's.
pub(crate) fn glob_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "The glob pattern to match files against (e.g. \"**/*.ts\", \"src/**/*.js\"); a pattern without `/` matches file names at any depth."},
            "path": {"type": "string", "description": "The folder to search in, relative to the workspace. Defaults to the workspace."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": format!("Maximum number of results to return. Defaults to {DEFAULT_LIMIT}.")}
        },
        "required": ["pattern"],
        "additionalProperties": false
    })
}

/// The input schema of `grep`, eve's.
pub(crate) fn grep_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "The regex pattern to search for in file contents (e.g. \"log.*Error\", \"function\\\\s+\\\\w+\")."},
            "path": {"type": "string", "description": "The folder or file to search in, relative to the workspace. Defaults to the workspace."},
            "glob": {"type": "string", "description": "Filter files by glob pattern (e.g. \"*.ts\", \"*.{ts,tsx}\")."},
            "ignoreCase": {"type": "boolean", "description": "Perform case-insensitive search. Defaults to false."},
            "literal": {"type": "boolean", "description": "Treat the pattern as a literal string instead of a regular expression. Defaults to false."},
            "context": {"type": "integer", "minimum": 0, "description": "Number of surrounding context lines to include before and after each match. Defaults to 0."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": format!("Maximum number of matches to return per file. Defaults to {DEFAULT_LIMIT}.")}
        },
        "required": ["pattern"],
        "additionalProperties": false
    })
}

/// The description of `glob`.
pub(crate) const GLOB_DESCRIPTION: &str = "Fast file pattern matching in the session workspace. Supports \
     glob patterns like \"**/*.js\" or \"src/**/*.ts\" and returns matching file paths (relative \
     to the workspace, sorted), respecting .gitignore. Call it in parallel when you know there are \
     several patterns to search for.";

/// The description of `grep`.
pub(crate) const GREP_DESCRIPTION: &str = "Fast content search in the session workspace, powered by \
     ripgrep's engine. Searches file contents with regular expressions (e.g. \"log.*Error\", \
     \"function\\s+\\w+\"); filter files with the glob parameter (e.g. \"*.js\", \"*.{ts,tsx}\"). \
     Returns matching lines as path:line:text, respecting .gitignore and skipping binary files. \
     Any line longer than 2000 characters is truncated. Call it in parallel when you have several \
     independent searches.";

/// The input of `glob`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GlobInput {
    pattern: String,
    path: Option<String>,
    limit: Option<u64>,
}

/// What a search is run with besides its input.
pub(crate) struct Env {
    /// The session workspace.
    pub(crate) workspace: PathBuf,
    /// Walk by path (`EVE_TEST_UNSAFE_WALK=1` in a debug build).
    pub(crate) unsafe_paths: bool,
    /// Set when the call is cancelled.
    pub(crate) cancelled: std::sync::Arc<AtomicBool>,
}

impl Env {
    /// The environment of a call in `workspace`; `lookup` reads the runtime's environment.
    pub(crate) fn new(workspace: PathBuf, lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            workspace,
            unsafe_paths: cfg!(debug_assertions)
                && lookup(EVE_TEST_UNSAFE_WALK).is_some_and(|v| v.trim() == "1"),
            cancelled: std::sync::Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The `path` of an input, checked lexically: relative and not above the workspace.
fn start(path: Option<&str>) -> Result<(PathBuf, String), ToolError> {
    let given = path.map(str::trim).filter(|p| !p.is_empty()).unwrap_or(".");
    let rel = relative(given)?;
    let shown = if rel.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        rel.to_string_lossy().into_owned()
    };
    Ok((rel, shown))
}

/// The overrides of a call: its glob, if any, and eve's `!.git/*`, matched against paths
/// relative to the start.
fn overrides(glob: Option<&str>) -> Result<Override, ToolError> {
    let mut builder = OverrideBuilder::new(".");
    if let Some(glob) = glob.map(str::trim).filter(|g| !g.is_empty()) {
        builder
            .add(glob)
            .map_err(|e| ToolError::InvalidInput(format!("`{glob}` is not a glob: {e}")))?;
    }
    builder
        .add(NO_GIT)
        .map_err(|e| ToolError::Internal(e.to_string()))?;
    builder
        .build()
        .map_err(|e| ToolError::InvalidInput(format!("the glob is not valid: {e}")))
}

/// The walk of a call.
fn walk_of<'a>(env: &'a Env, rel: &'a Path, overrides: &'a Override) -> walk::Walk<'a> {
    walk::Walk {
        workspace: &env.workspace,
        start: rel,
        overrides,
        unsafe_paths: env.unsafe_paths,
        deadline: Instant::now() + WALK_TIME,
        cancelled: &env.cancelled,
    }
}

/// What a start that cannot be walked tells the model.
fn start_error(shown: &str, e: walk::StartError, tool: &str) -> ToolError {
    match e {
        walk::StartError::Symlink(at) => ToolError::PathEscape {
            path: shown.to_owned(),
            reason: format!(
                "`{}` is a symlink, which {tool} does not follow: give the path it points to",
                at.display()
            ),
        },
        walk::StartError::File(_) => {
            ToolError::InvalidInput(format!("`{shown}` is a file: {tool} needs a folder"))
        }
        walk::StartError::Io(source) => ToolError::Io {
            action: "could not search",
            path: shown.to_owned(),
            source,
        },
    }
}

/// Cuts a line longer than [`MAX_LINE_CHARS`], as eve does.
fn cap_line(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => format!("{} [truncated]", &line[..at]),
        None => line.to_owned(),
    }
}

/// Runs `glob`: `{content, count, path, truncated}`.
pub(crate) fn glob(env: &Env, input: GlobInput) -> Result<(Value, bool), ToolError> {
    let (rel, shown) = start(input.path.as_deref())?;
    let limit = usize::try_from(input.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT))
        .unwrap_or(usize::MAX);
    let overrides = overrides(Some(&input.pattern))?;
    let found = Mutex::new(Vec::new());
    let ended = walk::walk(&walk_of(env, &rel, &overrides), |f| {
        found.lock().unwrap_or_else(|e| e.into_inner()).push(f.rel);
    })
    .map_err(|e| start_error(&shown, e, GLOB))?;
    let mut found = found.into_inner().unwrap_or_else(|e| e.into_inner());
    found.sort();
    let total = found.len();
    let mut lines = Vec::new();
    let mut bytes = 0;
    for path in found.iter().take(limit) {
        let line = path.to_string_lossy();
        if bytes + line.len() + 1 > MAX_OUTPUT_BYTES && !lines.is_empty() {
            break;
        }
        bytes += line.len() + 1;
        lines.push(line.into_owned());
    }
    if lines.is_empty() {
        let content = if ended.stopped {
            format!(
                "No files found before the search stopped after {}s",
                WALK_TIME.as_secs()
            )
        } else {
            "No files found".to_owned()
        };
        return Ok((
            json!({"content": content, "count": 0, "path": shown, "truncated": ended.stopped}),
            false,
        ));
    }
    let count = lines.len();
    let truncated = count < total || ended.stopped;
    let mut content = lines.join("\n");
    if count < total {
        content.push_str(&format!(
            "\n\n(Results truncated: showing first {count} results out of {total}. Use a more \
             specific path or pattern to narrow results.)"
        ));
    }
    if ended.stopped {
        content.push_str(&format!(
            "\n\n(The search stopped after {}s: results are partial.)",
            WALK_TIME.as_secs()
        ));
    }
    Ok((
        json!({"content": content, "count": count, "path": shown, "truncated": truncated}),
        truncated,
    ))
}
