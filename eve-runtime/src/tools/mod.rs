//! Tool execution: runs one tool call and reports what happened.
//!
//! The engine decides *whether* a call runs (validation, approval, journal, circuit breakers); this
//! module only decides *how*. It owns the tool protocol of the design (§3): a script or `run:` tool is
//! a child process in its own process group, cwd = the session workspace, the input JSON on stdin, a
//! cleared environment plus an allowlist, a timeout and a cancellation that kill the whole group, and
//! an output cap that is said out loud. HTTP tools render their templates and make one request. The
//! built-in `bash`, `read_file` and `write_file` tools live in [`builtin`], `web_fetch` and
//! `web_search` in [`web`].
//!
//! Every failure (a spawn error, a timeout, a non-zero exit, an unset `${VAR}`) becomes a
//! [`ToolResult`] with `ok: false` and a sentence the model can act on; nothing here panics.

pub mod beneath;
pub mod builtin;
pub mod content;
mod error;
pub(crate) mod guarded;
mod http;
pub mod openapi;
pub mod openapi_document;
mod process;
pub mod progress;
pub mod search;
pub(crate) mod template;
mod validate;
pub mod web;
mod workspace;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Runner, Tool};

use crate::exec::{Confinement, Executor};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::env_vars;

pub use beneath::Beneath;
pub use builtin::{builtin_tools, is_builtin, run_builtin};
pub use error::ToolError;
pub use guarded::HttpClient;
pub use validate::Validators;
pub use web::{WEB_FETCH, WEB_SEARCH, WebContext, web_tools};
pub use workspace::prepare_workspace;

/// How tool processes look up environment variables: `${VAR}` references and the `env:` allowlist
/// read through this, never through the process environment directly, so tests and embedders decide.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// An [`EnvLookup`] reading the environment of the eve process itself.
pub fn process_env() -> EnvLookup {
    Arc::new(|name: &str| std::env::var(name).ok())
}

/// Everything a tool call needs to know about where and on whose behalf it runs.
#[derive(Clone)]
pub struct ToolContext {
    /// Session the call belongs to (`EVE_SESSION_ID`).
    pub session_id: String,
    /// The model's call id (`EVE_CALL_ID`).
    pub call_id: String,
    /// Stable across retries of the same call (`EVE_IDEMPOTENCY_KEY`, and the `Idempotency-Key`
    /// header of HTTP tools that write).
    pub idempotency_key: String,
    /// The session workspace: the tool's cwd, created when missing (`EVE_WORKSPACE`).
    pub workspace: PathBuf,
    /// Folder holding the agent's files; scripts live at `agent_dir.join(runner.path)`
    /// (`EVE_AGENT_DIR`).
    pub agent_dir: PathBuf,
    /// Lookup for `${VAR}` references and the `env:` allowlist.
    pub env: EnvLookup,
    /// The runtime's HTTP client, shared by its HTTP tools.
    pub http: HttpClient,
    /// The runtime's executor: every process of the call is started through it.
    pub exec: Arc<Executor>,
    /// How the call's processes are confined (its effective sandbox, resolved).
    pub confinement: Confinement,
    /// What the tool's own `network:` says, for the requests the runtime makes for it (`http:`
    /// tools); `None` when it says nothing (an `http:` tool then reaches the origin of its `url:`).
    pub network: Option<eve_compile::Network>,
    /// Where the progress lines of a script tool go (see [`progress`]); `None` drops them.
    pub progress: Option<progress::ProgressSink>,
    /// The agent's `web:` settings, for `web_fetch` and `web_search`.
    pub web: WebContext,
    /// The W3C `traceparent` of the call's span, when tracing is on: the process gets it as
    /// `TRACEPARENT`, and the runtime's requests for the call carry it.
    pub traceparent: Option<String>,
    /// The runtime's store, where OAuth connections keep their tokens (`None`: none here).
    pub store: Option<Arc<dyn crate::store::Store>>,
    /// The session's principal: whose tokens a `credentials: user` connection uses.
    pub principal: Option<String>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("session_id", &self.session_id)
            .field("call_id", &self.call_id)
            .field("idempotency_key", &self.idempotency_key)
            .field("workspace", &self.workspace)
            .field("agent_dir", &self.agent_dir)
            .field("confinement", &self.confinement)
            .field("network", &self.network)
            .field("web", &self.web)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The context of call `call_id` of `session_id`, working in `workspace` with the agent's
    /// files in `agent_dir`: idempotency key `<session>:<call>`, no environment, unconfined
    /// ([`Confinement::Host`]), its own HTTP client and executor, the default `web:` settings, no
    /// `network:`, no progress sink and no trace context. The `with_*` methods set the rest.
    pub fn new(
        session_id: impl Into<String>,
        call_id: impl Into<String>,
        workspace: PathBuf,
        agent_dir: PathBuf,
    ) -> Self {
        let session_id = session_id.into();
        let call_id = call_id.into();
        Self {
            idempotency_key: format!("{session_id}:{call_id}"),
            session_id,
            call_id,
            workspace,
            agent_dir,
            env: Arc::new(|_: &str| None),
            http: HttpClient::default(),
            exec: Arc::default(),
            confinement: Confinement::Host,
            network: None,
            progress: None,
            web: WebContext::default(),
            traceparent: None,
            store: None,
            principal: None,
        }
    }

    /// With the store OAuth tokens are kept in, acting for `principal`.
    pub fn with_principal(
        mut self,
        store: Arc<dyn crate::store::Store>,
        principal: Option<String>,
    ) -> Self {
        self.store = Some(store);
        self.principal = principal;
        self
    }

    /// With this idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = key.into();
        self
    }

    /// With this environment lookup (`${VAR}` references and the `env:` allowlist).
    pub fn with_env(mut self, env: EnvLookup) -> Self {
        self.env = env;
        self
    }

    /// With the runtime's shared HTTP client and executor.
    pub fn with_services(mut self, http: HttpClient, exec: Arc<Executor>) -> Self {
        self.http = http;
        self.exec = exec;
        self
    }

    /// Confined by `confinement`.
    pub fn with_confinement(mut self, confinement: Confinement) -> Self {
        self.confinement = confinement;
        self
    }

    /// With the agent's `web:` settings.
    pub fn with_web(mut self, web: WebContext) -> Self {
        self.web = web;
        self
    }

    /// Looks a variable up: the `EVE_*` variables of this call first, then [`ToolContext::env`].
    pub(crate) fn lookup(&self, name: &str) -> Option<String> {
        match name {
            env_vars::EVE_SESSION_ID => Some(self.session_id.clone()),
            env_vars::EVE_CALL_ID => Some(self.call_id.clone()),
            env_vars::EVE_IDEMPOTENCY_KEY => Some(self.idempotency_key.clone()),
            env_vars::EVE_WORKSPACE => Some(self.workspace.to_string_lossy().into_owned()),
            env_vars::EVE_AGENT_DIR => Some(self.agent_dir.to_string_lossy().into_owned()),
            _ => (self.env)(name),
        }
    }
}

/// The outcome of one tool call, as journaled and as shown to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// Whether the tool succeeded (exit 0, HTTP 2xx).
    pub ok: bool,
    /// JSON when the output parsed as JSON, else a string (trailing newlines trimmed; a note
    /// `[output truncated at N bytes]` appended when capped).
    pub output: serde_json::Value,
    /// Whether the output was cut at the tool's cap.
    pub truncated: bool,
    /// Exit code of a process tool that exited normally.
    pub exit_code: Option<i32>,
    /// Wall-clock duration of the call.
    pub(crate) duration_ms: u64,
    /// Why the call failed, when `!ok`: exit code and stderr tail, HTTP status and body tail, timeout,
    /// cancellation, spawn failure, invalid input.
    pub error: Option<String>,
    /// Destinations the sandbox's egress proxy refused during the call (recorded as
    /// `sandbox.egress.refused` events).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// eve refused the call's input before anything ran (a path outside the workspace, a file
    /// that does not exist, an invalid argument): the caller's mistake, which circuit breakers do
    /// not count as a failure of the tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_refused: bool,
}

/// A destination the egress proxy of an isolated call refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Host as the process asked for it.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Why it was refused.
    pub(crate) reason: String,
}

impl ToolResult {
    /// A failed call that produced no output.
    pub(crate) fn failure(error: impl Into<String>, duration: Duration) -> Self {
        Self {
            ok: false,
            output: serde_json::Value::Null,
            truncated: false,
            exit_code: None,
            duration_ms: millis(duration),
            error: Some(error.into()),
            refused: Vec::new(),
            input_refused: false,
        }
    }

    /// A successful call with the given output.
    pub(crate) fn success(output: serde_json::Value, duration: Duration) -> Self {
        Self {
            ok: true,
            output,
            truncated: false,
            exit_code: None,
            duration_ms: millis(duration),
            error: None,
            refused: Vec::new(),
            input_refused: false,
        }
    }
}

/// `argv` marking a tool definition from [`builtin_tools`]: [`run_tool`] hands such a tool to
/// [`run_builtin`].
pub(crate) const BUILTIN_ARGV: &str = "<builtin>";

/// Whether running `tool` needs the build's files on disk (a script or a command, which may use
/// `_`-prefixed helpers); built-ins and HTTP tools do not.
pub(crate) fn needs_files(tool: &Tool) -> bool {
    match &tool.runner {
        Runner::Command { argv } => !(is_builtin(&tool.name) && argv.as_slice() == [BUILTIN_ARGV]),
        Runner::Script { .. } => true,
        Runner::Http(_) | Runner::OpenApi(_) => false,
    }
}

/// Runs one tool call. Does **not** validate `input` (see [`Validators`] and [`run_validated`]).
///
/// Built-in tools (as returned by [`builtin_tools`]) are dispatched to [`run_builtin`].
pub async fn run_tool(
    tool: &Tool,
    input: &serde_json::Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    match &tool.runner {
        Runner::Command { argv } if is_builtin(&tool.name) && argv.as_slice() == [BUILTIN_ARGV] => {
            run_builtin(&tool.name, input, ctx, cancel).await
        }
        Runner::Script { .. } | Runner::Command { .. } => {
            process::run_process_tool(tool, input, ctx, cancel).await
        }
        Runner::Http(request) => http::run_http_tool(tool, request, input, ctx, cancel).await,
        Runner::OpenApi(call) => openapi::run_openapi_tool(tool, call, input, ctx, cancel).await,
    }
}

/// Validates `input` against the tool's schema and runs it only when valid; an invalid input is a
/// failed result whose error lists every violation with its path.
pub async fn run_validated(
    validators: &Validators,
    tool: &Tool,
    input: &serde_json::Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    let start = Instant::now();
    match validators.validate(&tool.name, input) {
        Ok(()) => run_tool(tool, input, ctx, cancel).await,
        Err(errors) => ToolResult::failure(
            format!(
                "invalid input for `{}`:\n{}",
                tool.name,
                errors
                    .iter()
                    .map(|e| format!("- {e}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            start.elapsed(),
        ),
    }
}

/// Milliseconds of a duration, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The timeout of a tool, with 0 read as the default.
fn effective_timeout(timeout_ms: u64) -> Duration {
    if timeout_ms == 0 {
        Duration::from_millis(eve_compile::DEFAULT_TIMEOUT_MS)
    } else {
        Duration::from_millis(timeout_ms)
    }
}

/// The output cap of a tool in bytes, with 0 read as the default.
fn effective_limit(output_limit: u64) -> usize {
    let limit = if output_limit == 0 {
        eve_compile::DEFAULT_OUTPUT_LIMIT
    } else {
        output_limit
    };
    usize::try_from(limit).unwrap_or(usize::MAX)
}
