//! Child processes for script, `run:` and `bash` tools.
//!
//! One place owns the hard parts of running untrusted programs: a process group per call so a
//! timeout or cancellation kills everything the tool started (not only its first process), stdout and
//! stderr drained concurrently so a chatty child never blocks on a full pipe, a byte cap that keeps
//! memory bounded while still draining, and a bounded wait for pipes that a process which escaped
//! the group keeps open. When the tool's main process ends, whatever it left running in its group is
//! killed too: a call's processes do not outlive the call.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use eve_compile::{Runner, Tool};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::error::ToolError;
use super::template::expand_argv;
use super::{Refused, ToolContext, ToolResult, effective_limit, effective_timeout, millis};
use crate::env_vars;
use crate::exec::{Confinement, Executor, Launch};

/// `PATH` when the lookup has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// `LANG` when the lookup has none.
const DEFAULT_LANG: &str = "C.UTF-8";
/// `TZ` when the lookup has none.
const DEFAULT_TZ: &str = "UTC";
/// How much of stderr's tail goes into an error message.
pub(crate) const STDERR_TAIL: usize = 2 * 1024;
/// How much of stderr is kept while reading (its tail).
const STDERR_KEEP: usize = 16 * 1024;
/// How long to wait for the pipes to close once the group is dead.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for a killed process to be reaped.
const REAP_GRACE: Duration = Duration::from_secs(2);
/// Read buffer size.
const CHUNK: usize = 64 * 1024;

/// What to do with the captured output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputMode {
    /// Tool protocol: stdout is the result (JSON when it parses), stderr only explains failures.
    Tool,
    /// Shell: stdout as text, followed by stderr when there is any.
    Shell,
}

/// One process to run.
#[derive(Debug)]
pub(crate) struct ProcessSpec {
    /// Program and arguments.
    pub(crate) argv: Vec<String>,
    /// Bytes for stdin (then closed); `None` connects stdin to `/dev/null`.
    pub(crate) stdin: Option<Vec<u8>>,
    /// The complete environment.
    pub(crate) env: Vec<(String, String)>,
    /// Working directory (created when missing).
    pub(crate) cwd: PathBuf,
    /// Wall-clock limit.
    pub(crate) timeout: Duration,
    /// Cap on captured stdout, in bytes.
    pub(crate) output_limit: usize,
    /// How output is turned into a result.
    pub(crate) mode: OutputMode,
    /// How the process and its descendants are confined.
    pub(crate) confinement: Confinement,
    /// Where progress lines on stderr go (`super::progress`).
    pub(crate) progress: Option<super::progress::ProgressSink>,
}

/// The environment of a tool process: the basic variables, the tool's allowlist, the `EVE_*` ones.
pub(crate) fn tool_env(ctx: &ToolContext, allow: &[String]) -> Vec<(String, String)> {
    let workspace = ctx.workspace.to_string_lossy().into_owned();
    let mut env = vec![
        (
            env_vars::PATH.to_owned(),
            (ctx.env)(env_vars::PATH).unwrap_or_else(|| DEFAULT_PATH.to_owned()),
        ),
        (
            env_vars::HOME.to_owned(),
            (ctx.env)(env_vars::HOME).unwrap_or_else(|| workspace.clone()),
        ),
        (
            env_vars::LANG.to_owned(),
            (ctx.env)(env_vars::LANG).unwrap_or_else(|| DEFAULT_LANG.to_owned()),
        ),
        (
            env_vars::TZ.to_owned(),
            (ctx.env)(env_vars::TZ).unwrap_or_else(|| DEFAULT_TZ.to_owned()),
        ),
    ];
    for name in allow {
        if name.is_empty() || name.contains(['=', '\0']) || name.starts_with("EVE_") {
            continue;
        }
        if let Some(value) = (ctx.env)(name) {
            env.push((name.clone(), value));
        }
    }
    env.extend([
        (env_vars::EVE_SESSION_ID.to_owned(), ctx.session_id.clone()),
        (env_vars::EVE_CALL_ID.to_owned(), ctx.call_id.clone()),
        (
            env_vars::EVE_IDEMPOTENCY_KEY.to_owned(),
            ctx.idempotency_key.clone(),
        ),
        (env_vars::EVE_WORKSPACE.to_owned(), workspace),
        (
            env_vars::EVE_AGENT_DIR.to_owned(),
            ctx.agent_dir.to_string_lossy().into_owned(),
        ),
    ]);
    if let Some(traceparent) = &ctx.traceparent {
        env.push((env_vars::TRACEPARENT.to_owned(), traceparent.clone()));
    }
    env
}

/// Runs a `Script` or `Command` tool.
pub(crate) async fn run_process_tool(
    tool: &Tool,
    input: &Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    let start = Instant::now();
    let (argv, shell_secrets) = match tool_argv(tool, ctx) {
        Ok(found) => found,
        Err(e) => return ToolResult::failure(e.to_string(), start.elapsed()),
    };
    let mut env = tool_env(ctx, &tool.env);
    env.push((env_vars::EVE_TOOL_NAME.to_owned(), tool.name.clone()));
    for name in shell_secrets {
        if !env.iter().any(|(n, _)| *n == name)
            && let Some(value) = ctx.lookup(&name)
        {
            env.push((name, value));
        }
    }
    let stdin = match serde_json::to_vec(input) {
        Ok(bytes) => bytes,
        Err(e) => return ToolResult::failure(format!("invalid input: {e}"), start.elapsed()),
    };
    let spec = ProcessSpec {
        argv,
        stdin: Some(stdin),
        env,
        cwd: ctx.workspace.clone(),
        timeout: effective_timeout(tool.timeout_ms),
        output_limit: effective_limit(tool.output_limit),
        mode: OutputMode::Tool,
        confinement: ctx.confinement.clone(),
        progress: ctx.progress.clone(),
    };
    run_process(spec, &ctx.exec, cancel).await
}

/// Whether `argv` is a shell running a script: `sh -c SCRIPT …` (what a `run:` string compiles to)
/// or the same with `bash`, `dash`, `zsh`.
fn is_shell_script(argv: &[String]) -> bool {
    let program = argv.first().map(|p| p.rsplit('/').next().unwrap_or(p));
    matches!(program, Some("sh" | "bash" | "dash" | "zsh"))
        && argv.get(1).is_some_and(|a| a == "-c")
        && argv.len() >= 3
}

/// The command line of a process tool, with `${VAR}` references resolved, and the secrets a shell
/// script expands itself.
///
/// A secret never goes on a command line, where every user of the machine can read it (`ps`): in
/// the script of `sh -c` (a `run:` string) a secret's `${VAR}` is left for the shell, and the
/// variable is added to the process's environment (returned here); anywhere else it fails the
/// call, saying to pass it by `env:`.
fn tool_argv(tool: &Tool, ctx: &ToolContext) -> Result<(Vec<String>, Vec<String>), ToolError> {
    let lookup = |name: &str| ctx.lookup(name);
    if let Runner::Command { argv } = &tool.runner
        && is_shell_script(argv)
    {
        let shell_secrets = std::cell::RefCell::new(Vec::new());
        let script = super::template::expand_vars(&argv[2], &|name| {
            if crate::redact::is_secret_name(name) {
                lookup(name)?;
                shell_secrets.borrow_mut().push(name.to_owned());
                Some(format!("${{{name}}}"))
            } else {
                lookup(name)
            }
        })
        .map_err(|name| ToolError::UnsetVar {
            name,
            place: "argv".to_owned(),
        })?;
        let mut resolved = vec![argv[0].clone(), argv[1].clone(), script];
        for arg in &argv[3..] {
            resolved.push(expand_argv(arg, &lookup, "argv")?);
        }
        return Ok((resolved, shell_secrets.into_inner()));
    }
    let argv = match &tool.runner {
        Runner::Script { path, interpreter } => {
            let mut argv = interpreter
                .iter()
                .map(|arg| {
                    // A TypeScript or JavaScript module tool: Node runs eve's own call runner.
                    if let Some(runner) = eve_compile::compile::modules::runner_for(arg) {
                        return Ok(runner.to_owned());
                    }
                    expand_argv(arg, &lookup, "interpreter")
                })
                .collect::<Result<Vec<_>, _>>()?;
            argv.push(ctx.agent_dir.join(path).to_string_lossy().into_owned());
            argv
        }
        Runner::Command { argv } => argv
            .iter()
            .map(|arg| expand_argv(arg, &lookup, "argv"))
            .collect::<Result<Vec<_>, _>>()?,
        Runner::Http(_) | Runner::OpenApi(_) => Vec::new(),
    };
    if argv.first().is_none_or(String::is_empty) {
        return Err(ToolError::EmptyArgv {
            tool: tool.name.clone(),
        });
    }
    Ok((argv, Vec::new()))
}

/// Bytes captured from one pipe.
#[derive(Debug, Default)]
struct Capture {
    /// Kept bytes: the head for stdout, the tail for stderr.
    bytes: Vec<u8>,
    /// Whether bytes were dropped.
    truncated: bool,
}

/// Shared so that a reader that never sees EOF can be abandoned without losing what it read.
type SharedCapture = Arc<Mutex<Capture>>;

fn take(capture: &SharedCapture) -> Capture {
    std::mem::take(&mut *capture.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Reads `pipe` to EOF, keeping the first `limit` bytes and discarding the rest.
async fn read_head(mut pipe: impl AsyncRead + Unpin, limit: usize, capture: SharedCapture) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut cap = capture.lock().unwrap_or_else(PoisonError::into_inner);
                let room = limit.saturating_sub(cap.bytes.len());
                let chunk = buf.get(..n).unwrap_or_default();
                if n > room {
                    cap.truncated = true;
                }
                cap.bytes
                    .extend_from_slice(chunk.get(..n.min(room)).unwrap_or_default());
            }
        }
    }
}

/// Reads `pipe` to EOF, keeping the last `keep` bytes.
async fn read_tail(
    mut pipe: impl AsyncRead + Unpin,
    keep: usize,
    capture: SharedCapture,
    mut progress: Option<super::progress::ProgressLines>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(lines) = progress.as_mut() {
                    lines.feed(buf.get(..n).unwrap_or_default());
                }
                let mut cap = capture.lock().unwrap_or_else(PoisonError::into_inner);
                cap.bytes
                    .extend_from_slice(buf.get(..n).unwrap_or_default());
                if cap.bytes.len() > keep {
                    let excess = cap.bytes.len() - keep;
                    cap.bytes.drain(..excess);
                    cap.truncated = true;
                }
            }
        }
    }
}

/// How the main process ended.
enum End {
    Exited(ExitStatus),
    WaitFailed(std::io::Error),
    TimedOut,
    Cancelled,
}

/// Kills the process group `pgid` (ignoring a group that is already gone).
fn kill_group(pgid: Option<Pid>) {
    if let Some(pgid) = pgid {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
}

/// Runs one process to completion, timeout or cancellation, started through `exec` under the
/// spec's confinement.
pub(crate) async fn run_process(
    spec: ProcessSpec,
    exec: &Executor,
    cancel: CancellationToken,
) -> ToolResult {
    let start = Instant::now();
    if let Err(source) = tokio::fs::create_dir_all(&spec.cwd).await {
        let err = ToolError::Workspace {
            path: spec.cwd.clone(),
            source,
        };
        return ToolResult::failure(err.to_string(), start.elapsed());
    }
    let Some((program, args)) = spec.argv.split_first() else {
        return ToolResult::failure("the command line is empty", start.elapsed());
    };
    let launch = Launch {
        program,
        args,
        env: &spec.env,
        cwd: &spec.cwd,
        confinement: &spec.confinement,
    };
    let mut prepared = match exec.prepare(&launch).await {
        Ok(prepared) => prepared,
        Err(e) => return ToolResult::failure(e.to_string(), start.elapsed()),
    };
    let isolated = matches!(spec.confinement, Confinement::Isolated(_));
    let mut child = match prepared.spawn_piped(spec.stdin.is_some()).await {
        Ok(child) => child,
        Err(source) => {
            let denied = source.kind() == std::io::ErrorKind::PermissionDenied;
            let mut message = ToolError::Spawn {
                program: program.clone(),
                source,
            }
            .to_string();
            if denied {
                message.push_str(
                    ": make the file executable (chmod +x) or give the tool an interpreter",
                );
            }
            return ToolResult::failure(message, start.elapsed());
        }
    };
    let guard = prepared.guard;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);

    let stdin_task = match (child.stdin.take(), spec.stdin) {
        (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
            // A child that exits without reading its input is not an error.
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        })),
        _ => None,
    };
    let stdout = SharedCapture::default();
    let stderr = SharedCapture::default();
    let stdout_task = child
        .stdout
        .take()
        .map(|pipe| tokio::spawn(read_head(pipe, spec.output_limit, stdout.clone())));
    let stderr_task = child.stderr.take().map(|pipe| {
        let lines = spec
            .progress
            .clone()
            .map(super::progress::ProgressLines::new);
        tokio::spawn(read_tail(pipe, STDERR_KEEP, stderr.clone(), lines))
    });

    let end = tokio::select! {
        biased;
        () = cancel.cancelled() => End::Cancelled,
        status = child.wait() => match status {
            Ok(status) => End::Exited(status),
            Err(e) => End::WaitFailed(e),
        },
        () = tokio::time::sleep(spec.timeout) => End::TimedOut,
    };
    // Whatever is still running in the group dies with the call.
    kill_group(pgid);
    if !matches!(end, End::Exited(_)) {
        let _ = child.start_kill();
        let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
    }
    // Pipes close once every holder is dead; one that escaped the group is not waited for long.
    for task in [stdout_task, stderr_task].into_iter().flatten() {
        let abort = task.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, task).await.is_err() {
            abort.abort();
        }
    }
    if let Some(task) = stdin_task {
        task.abort();
    }

    let out = take(&stdout);
    let err = take(&stderr);
    let mut refused = Vec::new();
    let duration = start.elapsed();
    let output = render_output(&out, spec.output_limit, spec.mode, &err);
    // Shell output already carries stderr (`[stderr]` above); the error does not repeat it.
    let with_stderr = |message: String| {
        if spec.mode == OutputMode::Shell {
            message
        } else {
            with_stderr(message, &err)
        }
    };
    let (ok, exit_code, error) = match end {
        End::Exited(status) => match status.code() {
            Some(0) => (true, Some(0), None),
            Some(code) => (
                false,
                Some(code),
                Some(with_stderr(format!("exited with code {code}"))),
            ),
            None => {
                let signal = status.signal().unwrap_or_default();
                (
                    false,
                    None,
                    Some(with_stderr(format!("killed by signal {signal}"))),
                )
            }
        },
        End::WaitFailed(e) => (
            false,
            None,
            Some(format!("could not wait for the process: {e}")),
        ),
        End::TimedOut => (
            false,
            None,
            Some(with_stderr(format!(
                "{}; the process group was killed",
                ToolError::Timeout {
                    ms: millis(spec.timeout)
                }
            ))),
        ),
        End::Cancelled => (
            false,
            None,
            Some("cancelled; the process group was killed".to_owned()),
        ),
    };
    // The sandbox's own failure (exit 125 with an `eve sandbox:` line) is not the tool's.
    let sandbox_failure = isolated
        && exit_code == Some(eve_sandbox::isolate::SANDBOX_FAILURE)
        && text_tail(&err.bytes, STDERR_TAIL).contains("eve sandbox: ");
    // A call the sandbox stopped while it ran (the workspace passed its quota) did start: its
    // one line says what happened and what was undone.
    let stopped = sandbox_failure
        .then(|| {
            text_tail(&err.bytes, STDERR_TAIL)
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("eve sandbox: the call was stopped"))
                .map(|rest| format!("the sandbox stopped the call{rest}"))
        })
        .flatten();
    let error = if let Some(stopped) = stopped {
        Some(stopped)
    } else if sandbox_failure {
        error.map(|e| {
            let e = if spec.mode == OutputMode::Shell {
                self::with_stderr(e, &err)
            } else {
                e
            };
            format!("the isolated sandbox could not start the process ({e})")
        })
    } else {
        error
    };
    guard_refusals(&guard, &mut refused);
    drop(guard);
    let error = match (error, refused_note(&refused)) {
        (error, None) => error,
        (Some(error), Some(note)) => Some(format!("{error}\n{note}")),
        (None, Some(note)) => Some(note),
    };
    ToolResult {
        ok,
        output,
        truncated: out.truncated,
        exit_code,
        duration_ms: millis(duration),
        error,
        refused,
        input_refused: false,
    }
}

/// Takes the destinations the call's egress proxy refused.
fn guard_refusals(guard: &crate::exec::Guard, into: &mut Vec<Refused>) {
    into.extend(guard.refusals().into_iter().map(|r| Refused {
        host: r.host,
        port: r.port,
        reason: r.reason,
    }));
}

/// What the model is told about refused destinations (the tool's own error may only say 403).
fn refused_note(refused: &[Refused]) -> Option<String> {
    if refused.is_empty() {
        return None;
    }
    let list = refused
        .iter()
        .map(|r| format!("{}:{} ({})", r.host, r.port, r.reason))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "[network] eve's egress proxy refused: {list}. The tool's `network:` setting decides \
         what it may reach."
    ))
}

/// `message`, followed by the tail of stderr when there is any.
fn with_stderr(message: String, stderr: &Capture) -> String {
    let tail = text_tail(&stderr.bytes, STDERR_TAIL);
    let tail = tail.trim_end();
    if tail.is_empty() {
        message
    } else {
        format!("{message}; stderr:\n{tail}")
    }
}

/// The last `max` bytes of `bytes` as text, starting at a character boundary.
pub(crate) fn text_tail(bytes: &[u8], max: usize) -> String {
    let mut start = bytes.len().saturating_sub(max);
    // Skip UTF-8 continuation bytes so the tail does not start mid-character.
    while start < bytes.len() && bytes.get(start).is_some_and(|b| b & 0xC0 == 0x80) {
        start += 1;
    }
    String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).into_owned()
}

/// Text of captured bytes; when the capture was cut, an incomplete trailing character is dropped
/// rather than shown as a replacement character.
pub(crate) fn capture_text(bytes: &[u8], truncated: bool) -> String {
    let bytes = if truncated {
        match std::str::from_utf8(bytes) {
            Err(e) if e.error_len().is_none() => bytes.get(..e.valid_up_to()).unwrap_or(bytes),
            _ => bytes,
        }
    } else {
        bytes
    };
    String::from_utf8_lossy(bytes).into_owned()
}

/// The note appended to capped output.
pub(crate) fn truncation_note(limit: usize) -> String {
    format!("[output truncated at {limit} bytes]")
}

/// Turns captured output into the result value.
fn render_output(out: &Capture, limit: usize, mode: OutputMode, err: &Capture) -> Value {
    if mode == OutputMode::Tool
        && !out.truncated
        && let Ok(value) = serde_json::from_slice::<Value>(&out.bytes)
    {
        return value;
    }
    let mut text = capture_text(&out.bytes, out.truncated);
    let trimmed = text.trim_end_matches(['\n', '\r']).len();
    text.truncate(trimmed);
    if out.truncated {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&truncation_note(limit));
    }
    if mode == OutputMode::Shell && !err.bytes.is_empty() {
        let stderr = text_tail(&err.bytes, STDERR_KEEP);
        let stderr = stderr.trim_end_matches(['\n', '\r']);
        if !stderr.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str("[stderr]\n");
            if err.truncated {
                text.push('…');
            }
            text.push_str(stderr);
        }
    }
    Value::String(text)
}
