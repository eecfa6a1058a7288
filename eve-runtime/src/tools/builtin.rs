//! The built-in tools: `bash`, `read_file` and `write_file`, and the opt-in `glob` and `grep`
//! ([`super::search`]).
//!
//! They give an agent a working directory without writing a single tool (`default_tools` in
//! `agent.yaml`). The file tools are confined to the session workspace: absolute paths and `..`
//! above it are refused as written; every other path is resolved by the kernel beneath a handle of
//! the workspace ([`super::beneath`]), so a symlink leading out is refused even when a tool plants
//! it while the path is being opened. `bash` runs with the workspace as cwd through the same
//! process machinery as script tools (process group, timeout, cancellation, output cap, allowlisted
//! environment); it is a shell, so it is not a sandbox.

use std::io::{BufRead, BufReader};
use std::path::{Component, Path};
use std::time::{Duration, Instant};

use eve_compile::{Approval, DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT_MS, Effect, Runner, Tool};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::beneath::{self, Beneath};
use super::error::ToolError;
use super::process::{
    OutputMode, ProcessSpec, capture_text, run_process, tool_env, truncation_note,
};
use super::search::{self, GLOB, GLOB_DESCRIPTION, GREP, GREP_DESCRIPTION};
use super::workspace::relative;
use super::{BUILTIN_ARGV, ToolContext, ToolResult, effective_limit};

/// Name of the shell tool.
pub(crate) const BASH: &str = "bash";
/// Name of the file reading tool.
pub(crate) const READ_FILE: &str = "read_file";
/// Name of the file writing tool.
pub(crate) const WRITE_FILE: &str = "write_file";

/// Longest timeout a `bash` call may ask for: 10 minutes.
const MAX_BASH_TIMEOUT_MS: u64 = 600_000;
/// Lines `read_file` returns when no `limit` is given.
const DEFAULT_READ_LINES: u64 = 2000;

/// Whether `name` is a built-in tool.
pub fn is_builtin(name: &str) -> bool {
    matches!(
        name,
        BASH | READ_FILE | WRITE_FILE | GLOB | GREP | super::WEB_FETCH | super::WEB_SEARCH
    )
}

/// The definitions of the built-in tools, as the model sees them. Their runner is
/// `Command { argv: ["<builtin>"] }`; [`super::run_tool`] recognises it.
pub fn builtin_tools() -> Vec<Tool> {
    vec![
        builtin(
            BASH,
            "Run a bash command in the session workspace (the current directory) and return its \
             output (stdout, then stderr). A non-zero exit status is an error. Processes it starts \
             are killed when the command finishes or times out.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line, run with `bash -c`."},
                    "timeout_ms": {
                        "type": "integer", "minimum": 1, "maximum": MAX_BASH_TIMEOUT_MS,
                        "description": format!("Time limit in milliseconds (default {DEFAULT_TIMEOUT_MS}).")
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            builtin_effect(BASH),
        ),
        builtin(
            READ_FILE,
            "Read a text file from the session workspace. Paths are relative to the workspace. \
             Returns up to `limit` lines starting at line `offset` (1-based); when more lines \
             follow, the output ends with the offset to continue from.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": format!("Number of lines to read (default {DEFAULT_READ_LINES}).")}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            builtin_effect(READ_FILE),
        ),
        builtin(
            WRITE_FILE,
            "Write a text file in the session workspace, replacing it if it exists and creating \
             parent folders as needed. Paths are relative to the workspace.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            builtin_effect(WRITE_FILE),
        ),
        builtin(
            GLOB,
            GLOB_DESCRIPTION,
            search::glob_schema(),
            builtin_effect(GLOB),
        ),
        builtin(
            GREP,
            GREP_DESCRIPTION,
            search::grep_schema(),
            builtin_effect(GREP),
        ),
    ]
}

/// The effect of built-in `name`, from the table the capability delta reads too
/// ([`eve_compile::DEFAULT_TOOL_EFFECTS`]); a name missing from it is a `write`.
fn builtin_effect(name: &str) -> Effect {
    eve_compile::default_tool_effect(name).unwrap_or(Effect::Write)
}

/// One built-in tool definition.
fn builtin(name: &str, description: &str, input_schema: Value, effect: Effect) -> Tool {
    Tool {
        name: name.to_owned(),
        source: BUILTIN_ARGV.to_owned(),
        description: description.to_owned(),
        schema_hash: eve_compile::hash::json_hash(&input_schema),
        input_schema,
        approval: Approval::Never,
        effect,
        timeout_ms: DEFAULT_TIMEOUT_MS,
        output_limit: DEFAULT_OUTPUT_LIMIT,
        deferred: false,
        env: Vec::new(),
        dynamic: Vec::new(),
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner: Runner::Command {
            argv: vec![BUILTIN_ARGV.to_owned()],
        },
    }
}

#[derive(Deserialize)]
struct BashInput {
    command: String,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
struct ReadInput {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[derive(Deserialize)]
struct WriteInput {
    path: String,
    content: String,
}

fn parse<T: for<'de> Deserialize<'de>>(input: &Value) -> Result<T, ToolError> {
    T::deserialize(input).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

/// Runs a built-in tool. An unknown name is a failed result.
pub async fn run_builtin(
    name: &str,
    input: &Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    let start = Instant::now();
    let result = match name {
        BASH => match parse::<BashInput>(input) {
            Ok(input) => return run_bash(input, ctx, cancel).await,
            Err(e) => Err(e),
        },
        super::WEB_FETCH | super::WEB_SEARCH => {
            return super::web::run_web(name, input, ctx, cancel).await;
        }
        READ_FILE | WRITE_FILE | GLOB | GREP
            if let Some(reason) = beneath::refusal(&|n| ctx.lookup(n)) =>
        {
            Err(ToolError::FileToolsUnavailable {
                tool: [READ_FILE, WRITE_FILE, GLOB, GREP]
                    .into_iter()
                    .find(|n| *n == name)
                    .unwrap_or(READ_FILE),
                reason,
            })
        }
        READ_FILE => match parse::<ReadInput>(input) {
            Ok(input) => {
                let skills = ctx.agent_dir.join("skills");
                blocking(ctx, cancel, move |ws| read_file(ws, &skills, input)).await
            }
            Err(e) => Err(e),
        },
        WRITE_FILE => match parse::<WriteInput>(input) {
            Ok(input) => blocking(ctx, cancel, move |workspace| write_file(workspace, input)).await,
            Err(e) => Err(e),
        },
        GLOB => match parse::<search::GlobInput>(input) {
            Ok(input) => searching(ctx, cancel, move |env| search::glob(env, input)).await,
            Err(e) => Err(e),
        },
        GREP => match parse::<search::GrepInput>(input) {
            Ok(input) => searching(ctx, cancel, move |env| search::grep(env, input)).await,
            Err(e) => Err(e),
        },
        other => Err(ToolError::InvalidInput(format!(
            "`{other}` is not a built-in tool"
        ))),
    };
    match result {
        Ok((output, truncated)) => ToolResult {
            truncated,
            ..ToolResult::success(output, start.elapsed())
        },
        Err(e) => ToolResult {
            input_refused: e.is_input_refusal(),
            ..ToolResult::failure(e.to_string(), start.elapsed())
        },
    }
}

/// Runs file work off the async threads, unless the call is cancelled first.
async fn blocking<F>(
    ctx: &ToolContext,
    cancel: CancellationToken,
    work: F,
) -> Result<(Value, bool), ToolError>
where
    F: FnOnce(&Path) -> Result<(Value, bool), ToolError> + Send + 'static,
{
    let workspace = ctx.workspace.clone();
    let task = tokio::task::spawn_blocking(move || work(&workspace));
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(ToolError::Cancelled),
        joined = task => joined.map_err(|e| ToolError::Internal(e.to_string()))?,
    }
}

/// Runs a search off the async threads; a cancelled call tells the walk to stop.
async fn searching<F>(
    ctx: &ToolContext,
    cancel: CancellationToken,
    work: F,
) -> Result<(Value, bool), ToolError>
where
    F: FnOnce(&search::Env) -> Result<(Value, bool), ToolError> + Send + 'static,
{
    let env = search::Env::new(ctx.workspace.clone(), &|n| ctx.lookup(n));
    let stop = env.cancelled.clone();
    let task = tokio::task::spawn_blocking(move || work(&env));
    tokio::select! {
        biased;
        () = cancel.cancelled() => {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            Err(ToolError::Cancelled)
        }
        joined = task => joined.map_err(|e| ToolError::Internal(e.to_string()))?,
    }
}

async fn run_bash(input: BashInput, ctx: &ToolContext, cancel: CancellationToken) -> ToolResult {
    let timeout_ms = input
        .timeout_ms
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .clamp(1, MAX_BASH_TIMEOUT_MS);
    let spec = ProcessSpec {
        argv: vec!["bash".to_owned(), "-c".to_owned(), input.command],
        stdin: None,
        env: tool_env(ctx, &[]),
        cwd: ctx.workspace.clone(),
        timeout: Duration::from_millis(timeout_ms),
        output_limit: effective_limit(DEFAULT_OUTPUT_LIMIT),
        mode: OutputMode::Shell,
        confinement: ctx.confinement.clone(),
        progress: None,
    };
    run_process(spec, &ctx.exec, cancel).await
}

/// Opens what `read_file` reads at `path`: in the workspace, or, given absolute as the system
/// prompt and `load_skill` state it, under the build's `files/skills/` (packaged skills' files,
/// read-only: `write_file` never resolves there), with no `..` and no symlink on the way.
fn open_readable(workspace: &Path, skills: &Path, path: &str) -> Result<std::fs::File, ToolError> {
    let given = Path::new(path);
    let root = std::path::absolute(skills).unwrap_or_else(|_| skills.to_path_buf());
    let Some(rel) = given
        .is_absolute()
        .then(|| given.strip_prefix(&root).ok())
        .flatten()
    else {
        let rel = relative(path)?;
        let ws = open_workspace(workspace)?;
        return ws
            .open_read(&rel)
            .map_err(|e| file_error("could not read", path, e));
    };
    let escape = |reason: &str| ToolError::PathEscape {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let mut parts = Vec::new();
    for component in rel.components() {
        let Component::Normal(part) = component else {
            return Err(escape("`..` leads out of the build's skill files"));
        };
        parts.push(part);
    }
    let io_err = |source| ToolError::Io {
        action: "could not read",
        path: path.to_owned(),
        source,
    };
    Beneath::open(&root)
        .and_then(|skills| skills.open_plain(&parts))
        .map_err(|e| {
            if beneath::is_escape(&e) {
                escape("a symlink in the build's skill files is not followed")
            } else if e.kind() == std::io::ErrorKind::InvalidInput {
                not_regular(path, "a special file")
            } else {
                io_err(e)
            }
        })
}

/// A handle of the session workspace, created when missing.
fn open_workspace(workspace: &Path) -> Result<Beneath, ToolError> {
    Beneath::create(workspace).map_err(|source| ToolError::Workspace {
        path: workspace.to_owned(),
        source,
    })
}

/// What a failed open or write beneath the workspace tells the model.
fn file_error(action: &'static str, path: &str, e: std::io::Error) -> ToolError {
    if beneath::is_escape(&e) {
        return ToolError::PathEscape {
            path: path.to_owned(),
            reason: "a symlink on the way is absolute, leads out of it, loops, or is a `/proc` \
                     magic link (the file tools follow only relative symlinks that stay inside \
                     the workspace)"
                .to_owned(),
        };
    }
    match e.kind() {
        std::io::ErrorKind::IsADirectory => not_regular(path, "a directory"),
        std::io::ErrorKind::InvalidInput => not_regular(path, "a special file"),
        _ => ToolError::Io {
            action,
            path: path.to_owned(),
            source: e,
        },
    }
}

fn not_regular(path: &str, what: &str) -> ToolError {
    ToolError::InvalidInput(format!("`{path}` is {what}, not a regular file"))
}

fn read_file(
    workspace: &Path,
    skills: &Path,
    input: ReadInput,
) -> Result<(Value, bool), ToolError> {
    let file = open_readable(workspace, skills, &input.path)?;
    let io_err = |source| ToolError::Io {
        action: "could not read",
        path: input.path.clone(),
        source,
    };
    // The metadata of what was opened, not of a name looked up again.
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(not_regular(
            &input.path,
            if meta.is_dir() {
                "a directory"
            } else {
                "a special file"
            },
        ));
    }
    let offset = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(DEFAULT_READ_LINES).max(1);
    let cap = effective_limit(DEFAULT_OUTPUT_LIMIT);
    // Read by bytes, never a whole line: a line can be gigabytes (a file without newlines), and
    // at most `cap` bytes of it are ever held.
    let mut reader = BufReader::new(file);
    let mut line_no: u64 = 0;
    let mut taken: u64 = 0;
    let mut out = Vec::new();
    let mut truncated = false;
    let mut more = false;
    let mut at_line_start = true;
    loop {
        let buf = reader.fill_buf().map_err(io_err)?;
        if buf.is_empty() {
            break;
        }
        if at_line_start {
            if taken == limit {
                more = true;
                break;
            }
            line_no += 1;
            at_line_start = false;
        }
        let (len, ends) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line_no >= offset {
            let segment = buf.get(..len).unwrap_or_default();
            let room = cap.saturating_sub(out.len());
            if segment.len() > room {
                out.extend_from_slice(segment.get(..room).unwrap_or_default());
                truncated = true;
                break;
            }
            out.extend_from_slice(segment);
            if ends {
                taken += 1;
            }
        }
        at_line_start = ends;
        reader.consume(len);
    }
    if !truncated && !more && !at_line_start && line_no >= offset {
        taken += 1;
    }
    let mut text = capture_text(&out, truncated);
    if truncated {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&truncation_note(cap));
    } else if more {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[more lines follow: continue with offset={}]",
            offset.saturating_add(limit)
        ));
    } else if taken == 0 && offset > 1 {
        text = format!("[the file has {line_no} lines; offset {offset} is past its end]");
    }
    Ok((Value::String(text), truncated))
}

fn write_file(workspace: &Path, input: WriteInput) -> Result<(Value, bool), ToolError> {
    let rel = relative(&input.path)?;
    if rel.as_os_str().is_empty() {
        return Err(not_regular(&input.path, "the workspace's own folder"));
    }
    open_workspace(workspace)?
        .write(&rel, input.content.as_bytes())
        .map_err(|e| file_error("could not write", &input.path, e))?;
    Ok((
        Value::String(format!(
            "wrote {} bytes to {}",
            input.content.len(),
            input.path
        )),
        false,
    ))
}
