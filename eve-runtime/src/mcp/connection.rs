//! Supervision of one MCP connection: lazy start, death detection, restart with backoff, a circuit
//! breaker, per-call timeouts, and the tool list of the current server instance.
//!
//! One [`Supervisor`] per connection holds the client behind an async mutex that is only held while
//! deciding what to do and while starting, never during a call, so calls to one server run
//! concurrently. Every start after the first is a restart; restarts are counted in a sliding window
//! and each waits an exponential backoff after the last failure. When the window is full the circuit
//! opens: calls fail at once with the reason and the time of the next attempt. A call that outlives
//! its timeout is cancelled; if the server then does not answer a ping either, it is killed so the
//! next call gets a fresh one.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Connection, ToolFilter, Transport};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, ClientConfig, ClientRequest, PingRequest, RequestParamsMeta,
};
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::error::{McpError, stderr_suffix};
use super::result::map_call_result;
use super::transport::{self, StderrTail, kill_group};
use super::{ConnectionState, ConnectionStatus, EnvLookup, McpTool, Supervision};
use crate::tools::ToolResult;

/// What every supervisor of a manager shares.
pub(crate) struct Shared {
    /// `${VAR}` lookup.
    pub(crate) env: EnvLookup,
    /// Working directory of stdio servers.
    pub(crate) workdir: std::path::PathBuf,
    /// Timeouts and restart limits.
    pub(crate) supervision: Supervision,
    /// Starts stdio servers (the execution seam).
    pub(crate) exec: Arc<crate::exec::Executor>,
    /// How each stdio server is confined, by connection name (absent: `host`).
    pub(crate) confinements: std::collections::HashMap<String, crate::exec::Confinement>,
    /// Where OAuth connections keep their tokens (`None`: they cannot start).
    pub(crate) store: Option<Arc<dyn crate::store::Store>>,
}

/// A started server instance.
struct Client {
    service: RunningService<RoleClient, ClientConfig>,
    generation: u64,
    pgid: Option<u32>,
    stderr: Option<Arc<StderrTail>>,
    /// An isolated server's egress proxy, alive as long as the instance.
    _guard: crate::exec::Guard,
}

impl Client {
    /// Whether the instance can still take requests.
    fn alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// Kills the process group (stdio) and ends the client.
    fn stop(&self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
        self.service.cancellation_token().cancel();
    }

    fn stderr_text(&self) -> String {
        self.stderr.as_ref().map(|t| t.text()).unwrap_or_default()
    }
}

/// Mutable state of a connection.
#[derive(Default)]
struct State {
    client: Option<Arc<Client>>,
    generation: u64,
    /// Tools as last listed, with the generation they were listed from.
    tools: Option<(u64, Vec<McpTool>)>,
    started_once: bool,
    restarts: VecDeque<Instant>,
    last_failure: Option<Instant>,
    circuit_until: Option<Instant>,
    last_error: Option<String>,
    shut_down: bool,
}

/// Supervises one connection.
pub(crate) struct Supervisor {
    config: Connection,
    shared: Arc<Shared>,
    state: tokio::sync::Mutex<State>,
}

impl Supervisor {
    pub(crate) fn new(config: Connection, shared: Arc<Shared>) -> Self {
        Self {
            config,
            shared,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// Connection name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    fn is_http(&self) -> bool {
        matches!(self.config.transport, Transport::Http { .. })
    }

    /// Per-call timeout (0 = the default tool timeout).
    fn call_timeout(&self) -> Duration {
        let ms = if self.config.timeout_ms == 0 {
            eve_compile::DEFAULT_TIMEOUT_MS
        } else {
            self.config.timeout_ms
        };
        Duration::from_millis(ms)
    }

    /// Backoff before the next restart, given how many restarts the window holds.
    fn backoff(&self, restarts: usize) -> Duration {
        let sup = &self.shared.supervision;
        let factor = 1u32
            .checked_shl(u32::try_from(restarts).unwrap_or(31).min(16))
            .unwrap_or(u32::MAX);
        sup.backoff_base
            .checked_mul(factor)
            .unwrap_or(sup.backoff_max)
            .min(sup.backoff_max)
    }

    fn circuit_error(&self, st: &State, until: Instant, now: Instant) -> McpError {
        let remaining = until.saturating_duration_since(now);
        let retry_at = chrono::Utc::now()
            + chrono::Duration::from_std(remaining).unwrap_or_else(|_| chrono::Duration::zero());
        McpError::CircuitOpen {
            connection: self.config.name.clone(),
            restarts: st.restarts.len(),
            window_s: self.shared.supervision.restart_window.as_secs(),
            last_error: st
                .last_error
                .clone()
                .unwrap_or_else(|| "unknown".to_owned()),
            retry_at: retry_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            retry_in_s: remaining
                .as_millis()
                .div_ceil(1000)
                .try_into()
                .unwrap_or(u64::MAX),
        }
    }

    /// Returns a live client, starting (or restarting) the server when needed. With `wait`, a pending
    /// backoff is waited out (cancellable); without, it is an error.
    async fn ensure(
        &self,
        wait: bool,
        cancel: &CancellationToken,
    ) -> Result<Arc<Client>, McpError> {
        let sup = &self.shared.supervision;
        loop {
            let mut st = self.state.lock().await;
            if st.shut_down {
                return Err(McpError::ShutDown {
                    connection: self.config.name.clone(),
                });
            }
            if let Some(client) = st.client.clone() {
                if client.alive() {
                    return Ok(client);
                }
                st.client = None;
                client.stop();
                st.last_error = Some(self.gone(&client).to_string());
                st.last_failure = Some(Instant::now());
            }
            let now = Instant::now();
            if st.started_once {
                while st
                    .restarts
                    .front()
                    .is_some_and(|first| now.duration_since(*first) >= sup.restart_window)
                {
                    st.restarts.pop_front();
                }
                if let Some(until) = st.circuit_until {
                    if now < until {
                        return Err(self.circuit_error(&st, until, now));
                    }
                    st.circuit_until = None;
                    st.restarts.clear();
                } else if st.restarts.len() >= sup.max_restarts {
                    let until = st
                        .restarts
                        .front()
                        .map_or(now + sup.restart_window, |first| {
                            *first + sup.restart_window
                        });
                    st.circuit_until = Some(until);
                    tracing::warn!(connection = %self.config.name, "MCP server circuit opened");
                    return Err(self.circuit_error(&st, until, now));
                }
                let delay = self.backoff(st.restarts.len());
                if let Some(ready) = st.last_failure.map(|failed| failed + delay)
                    && now < ready
                {
                    let remaining = ready - now;
                    if !wait {
                        return Err(McpError::Backoff {
                            connection: self.config.name.clone(),
                            retry_in_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                            last_error: st.last_error.clone().unwrap_or_default(),
                        });
                    }
                    drop(st);
                    tokio::select! {
                        () = tokio::time::sleep(remaining) => continue,
                        () = cancel.cancelled() => return Err(McpError::Cancelled {
                            connection: self.config.name.clone(),
                        }),
                    }
                }
                st.restarts.push_back(now);
                tracing::info!(connection = %self.config.name, "restarting MCP server");
            }
            st.started_once = true;
            let confinement = self
                .shared
                .confinements
                .get(&self.config.name)
                .cloned()
                .unwrap_or(crate::exec::Confinement::Host);
            let started = transport::start(
                &self.config,
                &self.shared.env,
                &self.shared.workdir,
                self.config
                    .start_timeout_ms
                    .map_or(sup.start_timeout, Duration::from_millis),
                &self.shared.exec,
                &confinement,
                self.shared.store.as_ref(),
            )
            .await;
            return match started {
                Ok(started) => {
                    st.generation += 1;
                    let client = Arc::new(Client {
                        service: started.service,
                        generation: st.generation,
                        pgid: started.pgid,
                        stderr: started.stderr,
                        _guard: started.guard,
                    });
                    st.client = Some(client.clone());
                    Ok(client)
                }
                Err(e) => {
                    tracing::warn!(connection = %self.config.name, "MCP server failed to start: {e}");
                    st.last_error = Some(e.to_string());
                    st.last_failure = Some(Instant::now());
                    Err(e)
                }
            };
        }
    }

    /// Why an instance that is no longer alive is gone.
    fn gone(&self, client: &Client) -> McpError {
        if self.is_http() {
            McpError::Disconnected {
                connection: self.config.name.clone(),
            }
        } else {
            McpError::Exited {
                connection: self.config.name.clone(),
                stderr: stderr_suffix(&client.stderr_text()),
            }
        }
    }

    /// Forgets a dead (or unresponsive) instance, killing it; returns why it is gone.
    async fn mark_dead(&self, client: &Client, reason: Option<String>) -> String {
        if client.pgid.is_some() {
            // Let the stderr reader catch the last words of a crashing server.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let message = reason.unwrap_or_else(|| self.gone(client).to_string());
        client.stop();
        let mut st = self.state.lock().await;
        if st
            .client
            .as_ref()
            .is_some_and(|c| c.generation == client.generation)
        {
            st.client = None;
            st.last_error = Some(message.clone());
            st.last_failure = Some(Instant::now());
        }
        message
    }

    /// Whether the instance answers a ping within the liveness timeout.
    async fn responsive(&self, client: &Client) -> bool {
        let ping = client
            .service
            .send_request(ClientRequest::PingRequest(PingRequest::default()));
        matches!(
            tokio::time::timeout(self.shared.supervision.liveness_timeout, ping).await,
            Ok(Ok(_))
        )
    }

    /// The tools of this connection, filtered and named `NAME__tool`. Starts the server when needed
    /// (without waiting out a backoff); when it is unavailable, the last listed tools are returned
    /// (none if it never started).
    pub(crate) async fn tools(&self) -> Vec<McpTool> {
        match self.refresh_tools(false, &CancellationToken::new()).await {
            Ok(tools) => tools,
            Err(_) => self.cached_tools().await.unwrap_or_default(),
        }
    }

    async fn cached_tools(&self) -> Option<Vec<McpTool>> {
        self.state
            .lock()
            .await
            .tools
            .as_ref()
            .map(|(_, t)| t.clone())
    }

    /// Lists the tools of the live instance (cached per instance).
    async fn refresh_tools(
        &self,
        wait: bool,
        cancel: &CancellationToken,
    ) -> Result<Vec<McpTool>, McpError> {
        let client = self.ensure(wait, cancel).await?;
        if let Some((generation, tools)) = &self.state.lock().await.tools
            && *generation == client.generation
        {
            return Ok(tools.clone());
        }
        let listed =
            tokio::time::timeout(self.call_timeout(), client.service.list_all_tools()).await;
        let failure = match listed {
            Ok(Ok(list)) => {
                let tools = self.convert_tools(list);
                self.state.lock().await.tools = Some((client.generation, tools.clone()));
                return Ok(tools);
            }
            Ok(Err(e)) if client.alive() => {
                format!(
                    "listing its tools failed: {}",
                    transport::tidy(&e.to_string())
                )
            }
            Ok(Err(_)) => self.mark_dead(&client, None).await,
            Err(_) if self.responsive(&client).await => "listing its tools timed out".to_owned(),
            Err(_) => {
                self.mark_dead(
                    &client,
                    Some("it stopped responding while listing tools".to_owned()),
                )
                .await
            }
        };
        let error = McpError::Initialize {
            connection: self.config.name.clone(),
            reason: failure,
            stderr: String::new(),
        };
        self.state.lock().await.last_error = Some(error.to_string());
        Err(error)
    }

    /// rmcp tools → filtered [`McpTool`]s with model-safe, unique names.
    fn convert_tools(&self, list: Vec<rmcp::model::Tool>) -> Vec<McpTool> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(list.len());
        for tool in list {
            let remote = tool.name.to_string();
            if !allowed(&self.config.tools, &remote) {
                continue;
            }
            let name = format!("{}__{}", self.config.name, sanitize(&remote));
            if !seen.insert(name.clone()) {
                tracing::warn!(connection = %self.config.name, tool = %remote, "skipping MCP tool whose name collides after sanitising");
                continue;
            }
            let mut schema = (*tool.input_schema).clone();
            schema
                .entry("type")
                .or_insert_with(|| Value::String("object".to_owned()));
            out.push(McpTool {
                name,
                connection: self.config.name.clone(),
                remote_name: remote,
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object(schema),
                approval: self.config.approval,
                read_only: tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            });
        }
        out
    }

    /// Finds the tool the model called `name`, listing the server's tools when not yet known.
    async fn resolve(&self, name: &str, cancel: &CancellationToken) -> Result<McpTool, String> {
        let find = |tools: &[McpTool]| tools.iter().find(|t| t.name == name).cloned();
        if let Some(tool) = self.cached_tools().await.as_deref().and_then(find) {
            return Ok(tool);
        }
        let tools = self
            .refresh_tools(true, cancel)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(tool) = find(&tools) {
            return Ok(tool);
        }
        let suffix = name
            .strip_prefix(&format!("{}__", self.config.name))
            .unwrap_or(name);
        if !allowed(&self.config.tools, suffix) {
            return Err(format!(
                "`{name}` is not available: connection `{}` filters it out (`tools.allow`/`tools.block` in {})",
                self.config.name, self.config.source
            ));
        }
        let names = tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>();
        Err(format!(
            "the MCP server `{}` has no tool `{suffix}`; its tools are: {}",
            self.config.name,
            if names.is_empty() {
                "(none)".to_owned()
            } else {
                names.join(", ")
            }
        ))
    }

    /// Calls `name` (`NAME__tool`) with `input`, within the connection's timeout.
    pub(crate) async fn call(
        &self,
        name: &str,
        input: Value,
        cancel: CancellationToken,
        traceparent: Option<&str>,
    ) -> ToolResult {
        let start = Instant::now();
        let fail = |message: String| ToolResult::failure(message, start.elapsed());
        let arguments = match input {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return fail(format!(
                    "invalid input for `{name}`: expected a JSON object, got {}",
                    json_kind(&other)
                ));
            }
        };
        let tool = match self.resolve(name, &cancel).await {
            Ok(tool) => tool,
            Err(message) => return fail(message),
        };
        let timeout = self.call_timeout();
        let mut retried = false;
        loop {
            let client = match self.ensure(true, &cancel).await {
                Ok(client) => client,
                Err(e) => return fail(e.to_string()),
            };
            let mut params = CallToolRequestParams::new(tool.remote_name.clone());
            params.arguments = arguments.clone();
            if let Some(traceparent) = traceparent {
                params.set_traceparent(traceparent);
            }
            let outcome = tokio::select! {
                outcome = tokio::time::timeout(timeout, client.service.call_tool(params)) => outcome,
                () = cancel.cancelled() => return fail(format!("`{name}` was cancelled")),
            };
            match outcome {
                Ok(Ok(result)) => {
                    let json = serde_json::to_value(&result).unwrap_or(Value::Null);
                    return map_call_result(&json, start.elapsed());
                }
                Ok(Err(e)) if !client.alive() || is_transport_error(&e) => {
                    let why = self.mark_dead(&client, None).await;
                    if self.is_http() && !retried {
                        retried = true;
                        let reason = transport::tidy(&e.to_string());
                        tracing::info!(connection = %self.config.name, "retrying an MCP call after a connection error: {reason}");
                        continue;
                    }
                    return fail(format!("`{name}` failed: {why}"));
                }
                Ok(Err(e)) => {
                    return fail(format!(
                        "`{name}` failed: the MCP server `{}` answered with an error: {}",
                        self.config.name,
                        transport::tidy(&e.to_string())
                    ));
                }
                Err(_) => {
                    let note = if self.responsive(&client).await {
                        "the server is still responding and was asked to cancel the call".to_owned()
                    } else {
                        self.mark_dead(&client, Some(format!(
                            "it stopped responding (a call timed out after {} and a ping got no answer)",
                            human(timeout)
                        )))
                        .await;
                        "the server stopped responding and was stopped; it is restarted on the next call"
                            .to_owned()
                    };
                    return fail(format!(
                        "`{name}` timed out after {} (the timeout of connection `{}`); {note}",
                        human(timeout),
                        self.config.name
                    ));
                }
            }
        }
    }

    /// A snapshot of this connection for operators.
    pub(crate) fn status(&self) -> ConnectionStatus {
        let transport = if self.is_http() { "http" } else { "stdio" }.to_owned();
        let Ok(st) = self.state.try_lock() else {
            return ConnectionStatus {
                name: self.config.name.clone(),
                transport,
                state: ConnectionState::Starting,
                tools: None,
                pid: None,
                restarts: 0,
                last_error: None,
                retry_at: None,
            };
        };
        let now = Instant::now();
        let window = self.shared.supervision.restart_window;
        let restarts = st
            .restarts
            .iter()
            .filter(|t| now.duration_since(**t) < window)
            .count();
        let live = st.client.as_ref().filter(|c| c.alive());
        let circuit = st.circuit_until.filter(|until| now < *until);
        let state = if st.shut_down {
            ConnectionState::ShutDown
        } else if live.is_some() {
            ConnectionState::Running
        } else if circuit.is_some() {
            ConnectionState::CircuitOpen
        } else if st.started_once {
            ConnectionState::Stopped
        } else {
            ConnectionState::NotStarted
        };
        let retry_at = circuit.map(|until| {
            (chrono::Utc::now()
                + chrono::Duration::from_std(until - now)
                    .unwrap_or_else(|_| chrono::Duration::zero()))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        });
        ConnectionStatus {
            name: self.config.name.clone(),
            transport,
            state,
            tools: st.tools.as_ref().map(|(_, t)| t.len()),
            pid: live.and_then(|c| c.pgid),
            restarts,
            last_error: st.last_error.clone(),
            retry_at,
        }
    }

    /// Stops the server for good (kills a stdio server's whole process group).
    pub(crate) async fn shutdown(&self) {
        let client = {
            let mut st = self.state.lock().await;
            st.shut_down = true;
            st.client.take()
        };
        if let Some(client) = client {
            client.stop();
            if let Ok(mut client) = Arc::try_unwrap(client) {
                let _ = client
                    .service
                    .close_with_timeout(Duration::from_secs(2))
                    .await;
            }
        }
    }

    /// Kills the server without waiting (used when the manager is dropped).
    pub(crate) fn kill_now(&self) {
        if let Ok(st) = self.state.try_lock()
            && let Some(client) = &st.client
        {
            client.stop();
        }
    }
}

/// Whether a service error means the connection itself is gone.
fn is_transport_error(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// `tools.allow` / `tools.block` applied to a server's tool name (`*` matches any run of characters).
pub(crate) fn allowed(filter: &ToolFilter, remote: &str) -> bool {
    (filter.allow.is_empty() || filter.allow.iter().any(|p| glob(p, remote)))
        && !filter.block.iter().any(|p| glob(p, remote))
}

/// Matches `text` against a pattern where `*` stands for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A server's tool name made safe for model APIs (`[A-Za-z0-9_-]`).
pub(crate) fn sanitize(remote: &str) -> String {
    let name: String = remote
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "_".to_owned()
    } else {
        name
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `1.5 s`, `500 ms`.
pub(crate) fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("echo", "echo"));
        assert!(!glob("echo", "echoes"));
        assert!(glob("get_*", "get_issue"));
        assert!(glob("*_issue", "get_issue"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxc"));
        assert!(glob("*", ""));
        assert!(!glob("ab*ba", "aba"));
    }

    #[test]
    fn filters() {
        let f = ToolFilter {
            allow: vec!["get_*".into(), "echo".into()],
            block: vec!["get_secret".into()],
        };
        assert!(allowed(&f, "echo"));
        assert!(allowed(&f, "get_issue"));
        assert!(!allowed(&f, "get_secret"));
        assert!(!allowed(&f, "delete"));
        assert!(allowed(&ToolFilter::default(), "anything"));
    }

    #[test]
    fn sanitises_names() {
        assert_eq!(sanitize("files.read v2"), "files_read_v2");
        assert_eq!(sanitize(""), "_");
    }
}
