//! Turns a connection's configuration into a running rmcp client: a supervised child process for
//! stdio servers, a Streamable HTTP session for URL servers.
//!
//! This is the one place that knows how rmcp builds transports, so an rmcp upgrade touches this file
//! and [`super::result`] only. `${VAR}` references (command, args, env values, url, header values) are
//! resolved here, at start time, from the manager's environment lookup; an unset variable fails the
//! start of that connection alone. A Streamable HTTP session's requests go through the runtime's
//! egress rules ([`crate::tools::guarded`]): the origin its `url:` names and no other, redirects
//! included, and never eve's own listeners. A stdio server runs in its own process group (a host
//! server in its own session, away from eve's terminal) so that killing it also kills whatever it
//! spawned; its stderr is kept as a short tail for error messages.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_compile::{Connection, Transport};
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;

use super::EnvLookup;
use super::error::{McpError, stderr_suffix};
use super::traceparent::Traced;
use crate::env_vars::{HOME, LANG, PATH, TMPDIR, TZ, USER};

/// Variables passed from the eve process to every stdio server (besides the connection's `env`).
const PASSTHROUGH_ENV: &[&str] = &[PATH, HOME, LANG, TZ, USER, TMPDIR];
/// Lines of stderr kept per server.
const STDERR_LINES: usize = 20;
/// Characters kept per stderr line.
const STDERR_LINE_CHARS: usize = 400;
/// Pause before the one retry of a failed HTTP connect.
const HTTP_RETRY_DELAY: Duration = Duration::from_millis(250);

/// A started MCP client and what is needed to stop it for good.
pub(crate) struct Started {
    /// The rmcp client.
    pub(crate) service: RunningService<RoleClient, ClientConfig>,
    /// Process group of a stdio server (its leader's pid).
    pub(crate) pgid: Option<u32>,
    /// The server's stderr tail (stdio only).
    pub(crate) stderr: Option<Arc<StderrTail>>,
    /// Keeps an isolated server's egress proxy running as long as the server.
    pub(crate) guard: crate::exec::Guard,
}

/// The last lines a stdio server wrote to stderr.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    /// Appends one line, forgetting the oldest beyond the limit.
    fn push(&self, line: &str) {
        let mut kept: String = line.chars().take(STDERR_LINE_CHARS).collect();
        if kept.len() < line.len() {
            kept.push('…');
        }
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == STDERR_LINES {
            lines.pop_front();
        }
        lines.push_back(kept);
    }

    /// The kept lines joined with ` | `.
    pub(crate) fn text(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

/// Bytes of one stderr line kept while it is read; the rest of a longer line is read and dropped.
const STDERR_LINE_BYTES: usize = STDERR_LINE_CHARS * 4;

/// Reads a server's stderr into its tail until EOF; each line is also traced at debug level.
///
/// The pipe is drained to the end whatever the server writes: bytes that are not UTF-8 are shown
/// lossily (a reader that stopped at them would leave the pipe full and the server blocked on
/// its next log line), and a line without end is kept to its first [`STDERR_LINE_BYTES`], so a
/// flood without newlines costs no memory.
fn collect_stderr(
    connection: String,
    mut stderr: ChildStderr,
    tail: Arc<StderrTail>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 8 * 1024];
        let mut line: Vec<u8> = Vec::new();
        let mut cut = false;
        let emit = |line: &mut Vec<u8>, cut: &mut bool| {
            let mut text = String::from_utf8_lossy(line).into_owned();
            if *cut {
                text.push('…');
            }
            tracing::debug!(connection = %connection, "mcp server stderr: {text}");
            tail.push(&text);
            line.clear();
            *cut = false;
        };
        loop {
            let n = match stderr.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            for piece in chunk
                .get(..n)
                .unwrap_or_default()
                .split_inclusive(|b| *b == b'\n')
            {
                let (body, ends) = match piece.strip_suffix(b"\n") {
                    Some(body) => (body, true),
                    None => (piece, false),
                };
                let room = STDERR_LINE_BYTES.saturating_sub(line.len());
                line.extend_from_slice(body.get(..room.min(body.len())).unwrap_or_default());
                cut |= body.len() > room;
                if ends {
                    emit(&mut line, &mut cut);
                }
            }
        }
        if !line.is_empty() {
            emit(&mut line, &mut cut);
        }
    })
}

/// Sends SIGKILL to a whole process group; errors (already gone) are ignored.
pub(crate) fn kill_group(pgid: u32) {
    if let Ok(raw) = i32::try_from(pgid)
        && raw > 1
    {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// What eve says about itself in `initialize`.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("eve", env!("CARGO_PKG_VERSION")),
    )
}

/// Starts the client of one connection: spawn (or connect) and `initialize`, within `start_timeout`.
pub(crate) async fn start(
    connection: &Connection,
    env: &EnvLookup,
    workdir: &Path,
    start_timeout: Duration,
    exec: &crate::exec::Executor,
    confinement: &crate::exec::Confinement,
    store: Option<&Arc<dyn crate::store::Store>>,
) -> Result<Started, McpError> {
    match &connection.transport {
        Transport::Stdio {
            command,
            args,
            env: vars,
        } => {
            let launch = StdioLaunch {
                vars,
                env,
                workdir,
                exec,
                confinement,
            };
            start_stdio(connection, command, args, launch, start_timeout).await
        }
        Transport::Http { url, headers } => {
            let http = HttpStart {
                url,
                headers,
                env,
                start_timeout,
                exec,
                store,
            };
            start_http(connection, http).await
        }
    }
}

/// Where and how a stdio server is started.
struct StdioLaunch<'a> {
    vars: &'a std::collections::BTreeMap<String, String>,
    env: &'a EnvLookup,
    workdir: &'a Path,
    exec: &'a crate::exec::Executor,
    confinement: &'a crate::exec::Confinement,
}

/// Spawns a stdio server in its own process group (through the execution seam, under its
/// connection's sandbox) and runs the handshake.
async fn start_stdio(
    connection: &Connection,
    command: &str,
    args: &[String],
    launch: StdioLaunch<'_>,
    start_timeout: Duration,
) -> Result<Started, McpError> {
    let StdioLaunch {
        vars,
        env,
        workdir,
        exec,
        confinement,
    } = launch;
    let name = connection.name.as_str();
    let program = expand_argv(command, env, name, "command")?;
    let args = args
        .iter()
        .enumerate()
        .map(|(i, arg)| expand_argv(arg, env, name, &format!("args[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut process_env: Vec<(String, String)> = Vec::new();
    for var in PASSTHROUGH_ENV {
        if let Some(value) = env(var) {
            process_env.push(((*var).to_owned(), value));
        }
    }
    for (key, value) in vars {
        process_env.push((
            key.clone(),
            expand_env(value, env, name, &format!("env {key}"))?,
        ));
    }
    let resolved = resolve_program(&program, workdir);
    let program_text = resolved.to_string_lossy().into_owned();
    let prepared = exec
        .prepare(&crate::exec::Launch {
            program: &program_text,
            args: &args,
            env: &process_env,
            cwd: workdir,
            confinement,
        })
        .await
        .map_err(|e| McpError::Spawn {
            connection: name.to_owned(),
            program: program.clone(),
            reason: e.to_string(),
        })?;
    // A host server makes itself a session's (and so a group's) leader; an isolated one is put
    // in a group of its own here.
    let own_session = prepared.starts_own_session();
    let cmd = prepared.command;
    let guard = prepared.guard;
    let mut wrapped = CommandWrap::from(cmd);
    if !own_session {
        wrapped.wrap(ProcessGroup::leader());
    }
    let (process, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| McpError::Spawn {
            connection: name.to_owned(),
            program: program.clone(),
            reason: e.to_string(),
        })?;
    let pgid = process.id();
    let tail = Arc::new(StderrTail::default());
    let reader = stderr.map(|s| collect_stderr(name.to_owned(), s, tail.clone()));

    let outcome = tokio::time::timeout(start_timeout, client_config().serve(process)).await;
    let failure = match outcome {
        Ok(Ok(service)) => {
            return Ok(Started {
                service,
                pgid,
                stderr: Some(tail),
                guard,
            });
        }
        Ok(Err(e)) => Some(tidy(&e.to_string())),
        Err(_) => None,
    };
    // The handshake failed: make sure nothing of the server is left, then say what stderr said.
    if let Some(pgid) = pgid {
        kill_group(pgid);
    }
    if let Some(reader) = reader {
        let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
    }
    let stderr = stderr_suffix(&tail.text());
    Err(match failure {
        Some(reason) => McpError::Initialize {
            connection: name.to_owned(),
            reason,
            stderr,
        },
        None => McpError::StartTimeout {
            connection: name.to_owned(),
            seconds: start_timeout.as_secs().max(1),
            stderr,
        },
    })
}

/// A program path with a `/` is taken relative to the working directory of the server.
fn resolve_program(program: &str, workdir: &Path) -> PathBuf {
    let path = Path::new(program);
    if program.contains('/') && path.is_relative() {
        workdir.join(path)
    } else {
        path.to_path_buf()
    }
}

/// Where and how a Streamable HTTP server is reached.
struct HttpStart<'a> {
    url: &'a str,
    headers: &'a std::collections::BTreeMap<String, String>,
    env: &'a EnvLookup,
    start_timeout: Duration,
    exec: &'a crate::exec::Executor,
    store: Option<&'a Arc<dyn crate::store::Store>>,
}

/// Connects to a Streamable HTTP server and runs the handshake; a failure is retried once.
async fn start_http(connection: &Connection, start: HttpStart<'_>) -> Result<Started, McpError> {
    let HttpStart {
        url,
        headers,
        env,
        start_timeout,
        exec,
        store,
    } = start;
    let name = connection.name.as_str();
    // Messages show `template` (as configured): the expanded URL may carry a secret.
    let template = url;
    let url = expand_env(template, env, name, "url")?;
    let parsed = reqwest::Url::parse(&url).map_err(|e| McpError::Config {
        connection: name.to_owned(),
        reason: format!("`url` is not a valid URL ({e}): give an absolute http(s) URL"),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(McpError::Config {
            connection: name.to_owned(),
            reason: format!("`url` must be http or https, not `{}`", parsed.scheme()),
        });
    }
    let mut map = HashMap::new();
    for (key, value) in headers {
        let value = expand_env(value, env, name, &format!("header {key}"))?;
        let header = HeaderName::from_bytes(key.as_bytes()).map_err(|e| McpError::Config {
            connection: name.to_owned(),
            reason: format!("header name `{key}` is invalid: {e}"),
        })?;
        let value = HeaderValue::from_str(&value).map_err(|e| McpError::Config {
            connection: name.to_owned(),
            reason: format!("the value of header `{key}` is invalid: {e}"),
        })?;
        map.insert(header, value);
    }
    // The requests go through the egress rules of the runtime's own requests: the origin the
    // connection names (nothing else, redirects included), never eve's own listeners.
    let client =
        crate::tools::guarded::origin_client(&parsed, exec.own_listeners()).map_err(|reason| {
            McpError::Config {
                connection: name.to_owned(),
                reason: format!("{reason} (url `{template}`)"),
            }
        })?;
    let authorizer = match &connection.oauth {
        Some(settings) => Some(
            super::oauth::connect::authorizer(connection, settings, &url, env, exec, store).await?,
        ),
        None => None,
    };
    let mut last = String::new();
    for attempt in 0..2 {
        if attempt > 0 {
            tokio::time::sleep(HTTP_RETRY_DELAY).await;
        }
        let config =
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map.clone());
        let serving = match &authorizer {
            Some(auth) => {
                let client =
                    auth.auth_client(client.clone())
                        .await
                        .map_err(|e| McpError::Unauthorized {
                            connection: name.to_owned(),
                            reason: e.to_string(),
                        })?;
                let transport = StreamableHttpClientTransport::with_client(Traced(client), config);
                tokio::time::timeout(start_timeout, client_config().serve(transport)).await
            }
            None => {
                let transport =
                    StreamableHttpClientTransport::with_client(Traced(client.clone()), config);
                tokio::time::timeout(start_timeout, client_config().serve(transport)).await
            }
        };
        match serving {
            Ok(Err(e)) if authorizer.is_some() && super::oauth::challenge_in(&e).is_some() => {
                return Err(McpError::Unauthorized {
                    connection: name.to_owned(),
                    reason: format!(
                        "the server refused the stored token ({}); authorize again with `eve connections login {name}`",
                        tidy(&e.to_string())
                    ),
                });
            }
            Ok(Ok(service)) => {
                return Ok(Started {
                    service,
                    pgid: None,
                    stderr: None,
                    guard: crate::exec::Guard::default(),
                });
            }
            Ok(Err(e)) => last = tidy(&e.to_string()),
            Err(_) => {
                return Err(McpError::StartTimeout {
                    connection: name.to_owned(),
                    seconds: start_timeout.as_secs().max(1),
                    stderr: String::new(),
                });
            }
        }
    }
    Err(McpError::Initialize {
        connection: name.to_owned(),
        reason: format!("{last} (url `{template}`, tried twice)"),
        stderr: String::new(),
    })
}

/// An rmcp error message without the Rust type names it embeds (`Transport [rmcp::…<…>] error`).
pub(crate) fn tidy(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(" [") {
        let after = &rest[open + 2..];
        let Some(close) = closing_bracket(after) else {
            break;
        };
        let inner = &after[..close];
        out.push_str(&rest[..open]);
        if !inner.contains("::") {
            out.push_str(" [");
            out.push_str(inner);
            out.push(']');
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Index of the `]` closing a bracket opened just before `text`, allowing nested brackets.
fn closing_bracket(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Some(i),
            ']' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Resolves `${VAR}` references in `text` (`$${` is a literal `${`); an unset variable is an error
/// naming the connection and `place`.
pub(crate) fn expand_env(
    text: &str,
    lookup: &EnvLookup,
    connection: &str,
    place: &str,
) -> Result<String, McpError> {
    crate::tools::template::expand_vars(text, &|name| lookup(name)).map_err(|name| {
        McpError::UnsetVar {
            connection: connection.to_owned(),
            name,
            place: place.to_owned(),
        }
    })
}

/// Resolves `${VAR}` references in the server's command line: an unset variable or a secret (which
/// every user of the machine could read there, `ps`) is an error naming the connection and `place`.
fn expand_argv(
    text: &str,
    lookup: &EnvLookup,
    connection: &str,
    place: &str,
) -> Result<String, McpError> {
    use crate::tools::template::{ArgvVar, expand_argv_vars};
    expand_argv_vars(text, &|name| lookup(name)).map_err(|e| match e {
        ArgvVar::Unset(name) => McpError::UnsetVar {
            connection: connection.to_owned(),
            name,
            place: place.to_owned(),
        },
        ArgvVar::Secret(name) => McpError::Config {
            connection: connection.to_owned(),
            reason: format!(
                "`${{{name}}}` in {place} would put a secret on a command line, which every user of the machine can read (`ps`); pass it under `env:` (`{name}: ${{{name}}}`) instead"
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup() -> EnvLookup {
        Arc::new(|name: &str| (name == "TOKEN").then(|| "t0k".to_owned()))
    }

    #[test]
    fn expands_set_variables_and_escapes() {
        let env = lookup();
        assert_eq!(
            expand_env("Bearer ${TOKEN}", &env, "c", "header A").ok(),
            Some("Bearer t0k".to_owned())
        );
        assert_eq!(
            expand_env("$${TOKEN} ${x:-y} $", &env, "c", "x").ok(),
            Some("${TOKEN} ${x:-y} $".to_owned())
        );
    }

    #[test]
    fn tidies_type_names_out_of_rmcp_messages() {
        assert_eq!(
            tidy("Send message error Transport [rmcp::a::W<rmcp::b::C<x::y>>] error: HTTP 401 [x]"),
            "Send message error Transport error: HTTP 401 [x]"
        );
        assert_eq!(tidy("no brackets ["), "no brackets [");
    }

    #[test]
    fn unset_variable_names_connection_and_place() {
        let env = lookup();
        let err = expand_env("${MISSING}", &env, "gh", "header Authorization")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("connection `gh`"), "{err}");
        assert!(
            err.contains("`${MISSING}` in header Authorization is not set"),
            "{err}"
        );
    }
}
