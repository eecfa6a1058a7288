//! MCP connections: the tools of MCP servers (`connections/NAME.yaml`) as eve tools named
//! `NAME__tool`.
//!
//! [`McpManager`] is the runtime's one handle on every connection. Servers start lazily on first use
//! and are supervised (see [`Supervision`]): a start timeout on `initialize`, a wall-clock timeout per
//! call, restart with exponential backoff when a server dies or stops answering, and a circuit
//! breaker after too many restarts, whose message says why and when the server is tried again.
//! Results are mapped onto [`ToolResult`] (structured content first, text joined, binary content
//! summarised, `isError` → `ok: false`).
//!
//! rmcp changes often, so it is used only inside this module (`transport` builds its clients,
//! `result` reads its results as JSON); nothing of rmcp appears in this module's API.
//!
//! When connections offer many tools, sending every schema each step wastes context: above
//! [`CATALOGUE_THRESHOLD`] tools the engine offers the two [`catalogue_tools`] instead, backed by
//! [`McpManager::search`] and [`McpManager::call_catalogue`]. The same two tools reach an agent's
//! deferred tools (`deferred: true`), which are named in the system prompt but not offered:
//! [`search_catalogue`] ranks both kinds with one set of rules.

mod connection;
pub mod direct;
mod error;
pub mod oauth;
mod result;
mod traceparent;
mod transport;
pub mod user;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::{Approval, Connection};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::model::ToolSpec;
use crate::tools::{EnvLookup, ToolResult};
use connection::{Shared, Supervisor};

pub use error::McpError;

/// Name of the catalogue tool that searches tools not offered directly (deferred and MCP tools).
pub const SEARCH_TOOLS: &str = "search_tools";
/// Name of the catalogue tool that calls a tool found with [`SEARCH_TOOLS`] by name.
pub const CALL_TOOL: &str = "call_tool";
/// Above this many MCP tools, the engine should offer [`catalogue_tools`] instead of every schema.
pub const CATALOGUE_THRESHOLD: usize = 40;
/// Results of `search_tools` when the model gives no `limit`.
pub(crate) const DEFAULT_SEARCH_LIMIT: usize = 10;
/// Most results `search_tools` returns.
pub(crate) const MAX_SEARCH_LIMIT: usize = 50;

/// Whether `mcp_tool_count` MCP tools are enough to offer the catalogue instead of their schemas.
pub fn use_catalogue(mcp_tool_count: usize) -> bool {
    mcp_tool_count > CATALOGUE_THRESHOLD
}

/// A tool of an MCP server, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    /// `NAME__tool`: the connection name, two underscores, the server's tool name (characters other
    /// than `[A-Za-z0-9_-]` replaced by `_`).
    pub name: String,
    /// Connection name.
    pub connection: String,
    /// The tool's name on the server.
    pub remote_name: String,
    /// Description from the server (empty when it gave none).
    pub description: String,
    /// JSON Schema of the input, from the server (`type: object` added when missing).
    pub input_schema: Value,
    /// The connection's approval setting.
    pub approval: Approval,
    /// The server marks the tool read-only (annotation `readOnlyHint`): the engine journals its
    /// calls with effect `read` (re-run after an interruption) instead of `write`.
    pub(crate) read_only: bool,
}

impl McpTool {
    /// The tool as a model tool definition.
    pub(crate) fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// On whose behalf, and within which trace, an MCP tool is called.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallScope<'a> {
    /// The session's principal: a user-scoped connection (`credentials: user`) uses its token
    /// (`None`: such a connection's tools fail, saying why).
    pub principal: Option<&'a str>,
    /// The W3C `traceparent` of the call's span, when the turn is traced.
    pub traceparent: Option<&'a str>,
}

/// Timeouts and restart limits of supervised servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    /// Longest wait for a server to start and finish `initialize`.
    pub start_timeout: Duration,
    /// Restarts allowed within `restart_window` before the circuit opens.
    pub max_restarts: usize,
    /// Sliding window in which restarts are counted; the circuit stays open until the oldest
    /// counted restart leaves it.
    pub restart_window: Duration,
    /// Backoff before the first restart; doubled for each restart already in the window.
    pub backoff_base: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
    /// After a call times out, how long a ping may take before the server counts as unresponsive
    /// and is killed.
    pub liveness_timeout: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Self {
            // `npx -y …` and `uvx …` servers download their packages on a first start.
            start_timeout: Duration::from_secs(30),
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            liveness_timeout: Duration::from_secs(2),
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// Not used yet.
    NotStarted,
    /// Being started right now.
    Starting,
    /// A server instance is up.
    Running,
    /// The server exited or failed to start; it is (re)started on next use.
    Stopped,
    /// Too many restarts: calls fail fast until `retry_at`.
    CircuitOpen,
    /// [`McpManager::shutdown`] was called.
    ShutDown,
}

/// What an operator wants to know about a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionStatus {
    /// Connection name.
    pub(crate) name: String,
    /// `stdio` or `http`.
    pub(crate) transport: String,
    /// Where it stands.
    pub state: ConnectionState,
    /// Tools offered (after filters) when last listed.
    pub tools: Option<usize>,
    /// Process (group) id of a running stdio server.
    pub(crate) pid: Option<u32>,
    /// Restarts within the restart window.
    pub restarts: usize,
    /// The last start failure or exit, as a sentence.
    pub last_error: Option<String>,
    /// When an open circuit lets the server be tried again (RFC 3339, UTC).
    pub retry_at: Option<String>,
}

/// Every MCP connection of a runtime. Cheap to clone; clones share the servers.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

struct Inner {
    supervisors: Vec<Arc<Supervisor>>,
    /// Connections with `credentials: user`: a session per principal.
    users: Vec<Arc<user::UserConnection>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for supervisor in &self.supervisors {
            supervisor.kill_now();
        }
    }
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field(
                "connections",
                &self
                    .inner
                    .supervisors
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl McpManager {
    /// A manager for `connections` with the default [`Supervision`]. Nothing starts until used.
    /// `env` resolves `${VAR}` references; stdio servers run with `workdir` as their cwd (relative
    /// commands such as `./server.py` are resolved against it).
    pub fn new(connections: &[Connection], env: EnvLookup, workdir: PathBuf) -> Self {
        Self::with_supervision(connections, env, workdir, Supervision::default())
    }

    /// Like [`McpManager::new`], with explicit timeouts and restart limits.
    pub fn with_supervision(
        connections: &[Connection],
        env: EnvLookup,
        workdir: PathBuf,
        supervision: Supervision,
    ) -> Self {
        Self::build(
            connections,
            Shared {
                env,
                workdir,
                supervision,
                exec: Arc::default(),
                confinements: std::collections::HashMap::new(),
                store: None,
            },
        )
    }

    /// A manager whose stdio servers are started by `exec`, each confined as `confinements`
    /// says (by connection name; absent means `host`); OAuth connections keep their tokens in
    /// `store`.
    pub fn with_exec(
        connections: &[Connection],
        env: EnvLookup,
        workdir: PathBuf,
        exec: Arc<crate::exec::Executor>,
        confinements: std::collections::HashMap<String, crate::exec::Confinement>,
        store: Option<Arc<dyn crate::store::Store>>,
    ) -> Self {
        Self::build(
            connections,
            Shared {
                env,
                workdir,
                supervision: Supervision::default(),
                exec,
                confinements,
                store,
            },
        )
    }

    fn build(connections: &[Connection], shared: Shared) -> Self {
        let shared = Arc::new(shared);
        let (users, supervised): (Vec<&Connection>, Vec<&Connection>) =
            connections.iter().partition(|c| user::is_user_scoped(c));
        let supervisors = supervised
            .into_iter()
            .map(|c| Arc::new(Supervisor::new(c.clone(), shared.clone())))
            .collect();
        let users = users
            .into_iter()
            .map(|c| Arc::new(user::UserConnection::new(c.clone(), shared.clone())))
            .collect();
        Self {
            inner: Arc::new(Inner { supervisors, users }),
        }
    }

    /// Every connection's tools (filtered by `tools.allow`/`tools.block`), starting servers as
    /// needed, concurrently. A server that fails to start contributes no tools (its error is in
    /// [`McpManager::status`]); one that is restarting contributes the tools it last listed.
    pub async fn tools(&self) -> Vec<McpTool> {
        self.tools_for(None).await
    }

    /// [`McpManager::tools`] as `principal` sees them: a user-scoped connection's tools are
    /// listed with that principal's token (its stand-in `NAME__authorize` while it has none).
    pub async fn tools_for(&self, principal: Option<&str>) -> Vec<McpTool> {
        let lists =
            futures::future::join_all(self.inner.supervisors.iter().map(|s| s.tools())).await;
        let users =
            futures::future::join_all(self.inner.users.iter().map(|u| u.tools(principal))).await;
        lists.into_iter().chain(users).flatten().collect()
    }

    /// Calls the MCP tool `name` (`NAME__tool`) with `input` (a JSON object), within `scope`: a
    /// user-scoped connection's tool runs with the token of `scope.principal` and with no other;
    /// the request of a traced call carries `scope.traceparent` (the call's span) in its `_meta`
    /// and, over Streamable HTTP, as a `traceparent` header. Never panics: every failure (unknown
    /// tool, start failure, open circuit, timeout, server error, `isError`) is a result with
    /// `ok: false` and a sentence saying why.
    pub async fn call(
        &self,
        name: &str,
        input: Value,
        cancel: CancellationToken,
        scope: CallScope<'_>,
    ) -> ToolResult {
        if let Some(connection) = self.user_connection_for(name) {
            return connection.call(name, input, cancel, scope).await;
        }
        match self.supervisor_for(name) {
            Some(supervisor) => {
                supervisor
                    .call(name, input, cancel, scope.traceparent)
                    .await
            }
            None => ToolResult::failure(
                format!(
                    "no MCP connection offers `{name}`: MCP tools are named `CONNECTION__tool`; connections: {}",
                    self.connection_names()
                ),
                Duration::ZERO,
            ),
        }
    }

    /// The user-scoped connection owning the `NAME__` prefix of `name`, when it is one.
    fn user_connection_for(&self, name: &str) -> Option<&Arc<user::UserConnection>> {
        let owner = |n: &str| {
            name.strip_prefix(n)
                .is_some_and(|rest| rest.starts_with("__") && rest.len() > 2)
        };
        let user = self
            .inner
            .users
            .iter()
            .filter(|u| owner(u.name()))
            .max_by_key(|u| u.name().len())?;
        let longer_supervised = self
            .inner
            .supervisors
            .iter()
            .any(|s| owner(s.name()) && s.name().len() > user.name().len());
        (!longer_supervised).then_some(user)
    }

    /// The connection owning the `NAME__` prefix of `name` (the longest match wins).
    fn supervisor_for(&self, name: &str) -> Option<&Arc<Supervisor>> {
        self.inner
            .supervisors
            .iter()
            .filter(|s| {
                name.strip_prefix(s.name())
                    .is_some_and(|rest| rest.starts_with("__") && rest.len() > 2)
            })
            .max_by_key(|s| s.name().len())
    }

    fn connection_names(&self) -> String {
        if self.inner.supervisors.is_empty() && self.inner.users.is_empty() {
            return "(none)".to_owned();
        }
        self.inner
            .supervisors
            .iter()
            .map(|s| s.name())
            .chain(self.inner.users.iter().map(|u| u.name()))
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A snapshot of every connection.
    pub async fn status(&self) -> Vec<ConnectionStatus> {
        self.inner.supervisors.iter().map(|s| s.status()).collect()
    }

    /// Stops every server (a stdio server's whole process group is killed). Later calls fail.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.inner.supervisors.iter().map(|s| s.shutdown())).await;
        futures::future::join_all(self.inner.users.iter().map(|u| u.shutdown())).await;
    }

    /// MCP tools matching `query`, best first, at most `limit`: each word of the query is looked for
    /// in the tool's name (weighs most) and description; an empty query lists tools by name.
    pub async fn search(&self, query: &str, limit: usize) -> Vec<McpTool> {
        let tools = self.tools().await;
        rank(tools, query, limit)
    }

    /// The catalogue entries of every connection's tools, as `principal` sees them (see
    /// [`McpManager::tools_for`]).
    pub(crate) async fn entries_for(&self, principal: Option<&str>) -> Vec<CatalogueEntry> {
        self.tools_for(principal)
            .await
            .iter()
            .map(CatalogueEntry::from)
            .collect()
    }

    /// Runs a catalogue tool ([`SEARCH_TOOLS`] or [`CALL_TOOL`]) within `scope`; `None` when
    /// `name` is neither. `call_tool` runs the named MCP tool as [`McpManager::call`] does: the
    /// engine applies that tool's approval (see [`McpManager::tool`]) and, for a user-scoped
    /// connection, the principal's authorization before calling this.
    pub async fn call_catalogue(
        &self,
        name: &str,
        input: Value,
        cancel: CancellationToken,
        scope: CallScope<'_>,
    ) -> Option<ToolResult> {
        let start = std::time::Instant::now();
        match name {
            SEARCH_TOOLS => Some(search_catalogue(
                self.entries_for(scope.principal).await,
                &input,
            )),
            CALL_TOOL => {
                let Some(target) = input.get("name").and_then(Value::as_str) else {
                    return Some(ToolResult::failure(
                        "invalid input for `call_tool`: `name` (a tool name from `search_tools`) is required",
                        start.elapsed(),
                    ));
                };
                let args = input.get("input").cloned().unwrap_or_else(|| json!({}));
                Some(self.call(target, args, cancel, scope).await)
            }
            _ => None,
        }
    }
}

/// A tool `search_tools` can find: a deferred tool of the agent or a catalogued MCP tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CatalogueEntry {
    /// The name `call_tool` takes.
    pub(crate) name: String,
    /// Another name an exact query matches (an MCP tool's name on its server); empty when none.
    pub(crate) alias: String,
    /// What the tool does.
    pub(crate) description: String,
    /// JSON Schema of the tool's input.
    pub(crate) input_schema: Value,
    /// A deferred skill, which the model loads with `load_skill` rather than calls.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) skill: bool,
}

impl CatalogueEntry {
    /// A deferred skill: found by its name and description, loaded with `load_skill`.
    pub(crate) fn skill(name: &str, description: &str) -> Self {
        Self {
            name: name.to_owned(),
            alias: String::new(),
            description: description.to_owned(),
            input_schema: Value::Null,
            skill: true,
        }
    }
}

impl From<&McpTool> for CatalogueEntry {
    fn from(tool: &McpTool) -> Self {
        Self {
            name: tool.name.clone(),
            alias: tool.remote_name.clone(),
            description: tool.description.clone(),
            input_schema: tool.input_schema.clone(),
            skill: false,
        }
    }
}

/// Runs `search_tools` over `entries`: `{query, limit?}` in, `{tools: [{name, description,
/// input_schema}]}` out, best first (see [`McpManager::search`] for the ranking).
pub(crate) fn search_catalogue(entries: Vec<CatalogueEntry>, input: &Value) -> ToolResult {
    let start = std::time::Instant::now();
    let Some(query) = input.get("query").and_then(Value::as_str) else {
        return ToolResult::failure(
            "invalid input for `search_tools`: `query` (a string) is required",
            start.elapsed(),
        );
    };
    let limit = input
        .get("limit")
        .and_then(Value::as_u64)
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_SEARCH_LIMIT)
        .clamp(1, MAX_SEARCH_LIMIT);
    let tools: Vec<Value> = rank(entries, query, limit)
        .into_iter()
        .map(|t| {
            if t.skill {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "kind": "skill",
                    "use": format!("load it with `load_skill` {{\"name\": \"{}\"}}", t.name),
                })
            } else {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            }
        })
        .collect();
    ToolResult::success(json!({ "tools": tools }), start.elapsed())
}

/// What `search_tools` searches, which the catalogue tools' descriptions say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Catalogued {
    /// The agent's deferred tools.
    pub(crate) deferred: bool,
    /// The tools of its MCP connections.
    pub(crate) mcp: bool,
    /// The agent's tools are many, and all of them are in the catalogue (`lean_context`): the
    /// system prompt does not list them.
    pub(crate) all_tools: bool,
    /// The agent's deferred skills (not listed in the system prompt, loaded with `load_skill`).
    pub(crate) skills: bool,
}

/// The two catalogue tools offered instead of every MCP schema when there are many.
pub fn catalogue_tools() -> Vec<ToolSpec> {
    catalogue_tools_for(Catalogued {
        deferred: false,
        mcp: true,
        all_tools: false,
        skills: false,
    })
}

/// The two catalogue tools, described for what they reach: deferred tools, MCP tools or both.
pub(crate) fn catalogue_tools_for(what: Catalogued) -> Vec<ToolSpec> {
    let (searched, name_hint) = match (what.deferred, what.mcp) {
        _ if what.all_tools => (
            if what.mcp {
                "Search this agent's tools and the tools of its MCP servers."
            } else {
                "Search this agent's tools, including those not offered directly."
            },
            "The tool's name, as `search_tools` gives it.",
        ),
        (true, false) => (
            "Search this agent's tools that are not offered directly (listed by name in the \
             system prompt).",
            "The tool's name, as `search_tools` gives it.",
        ),
        (true, true) => (
            "Search the tools not offered directly: this agent's deferred tools (listed by name \
             in the system prompt) and the tools of its MCP servers.",
            "The tool's name, as `search_tools` gives it (MCP tools: `CONNECTION__tool`).",
        ),
        (false, true) => (
            "Search the tools of the connected MCP servers.",
            "Full tool name, `CONNECTION__tool`.",
        ),
        (false, false) => (
            "Search this agent's skills that are not listed in the system prompt.",
            "The tool's name, as `search_tools` gives it.",
        ),
    };
    let searched = if what.skills && (what.deferred || what.mcp || what.all_tools) {
        format!(
            "{searched} It also finds the skills not listed in the system prompt (load one with \
             `load_skill`)."
        )
    } else {
        searched.to_owned()
    };
    vec![
        ToolSpec {
            name: SEARCH_TOOLS.to_owned(),
            description: format!(
                "{searched} Returns matching tool names, descriptions and input schemas; call \
                 one with `call_tool`."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for in tool names and descriptions (empty lists tools)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT,
                              "description": format!("Most results (default {DEFAULT_SEARCH_LIMIT}).")}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: CALL_TOOL.to_owned(),
            description: "Call a tool found with `search_tools`, by its name, with an input \
                          matching its schema."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": name_hint},
                    "input": {"type": "object", "description": "The tool's input."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
        },
    ]
}

/// What ranking looks at in a tool.
trait Searchable {
    fn name(&self) -> &str;
    fn alias(&self) -> &str;
    fn description(&self) -> &str;
}

impl Searchable for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn alias(&self) -> &str {
        &self.remote_name
    }
    fn description(&self) -> &str {
        &self.description
    }
}

impl Searchable for CatalogueEntry {
    fn name(&self) -> &str {
        &self.name
    }
    fn alias(&self) -> &str {
        &self.alias
    }
    fn description(&self) -> &str {
        &self.description
    }
}

/// Orders tools by how well they match `query` and keeps the best `limit` (ties by name): each
/// word of the query found in a name weighs 3, in a description 1; the whole query equal to the
/// name (or alias) adds 100. An empty query lists tools by name.
fn rank<T: Searchable>(tools: Vec<T>, query: &str, limit: usize) -> Vec<T> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let whole = query.trim().to_lowercase();
    let mut scored: Vec<(u32, T)> = tools
        .into_iter()
        .filter_map(|tool| {
            if words.is_empty() {
                return Some((0, tool));
            }
            let name = tool.name().to_lowercase();
            let description = tool.description().to_lowercase();
            let mut score = 0;
            if name == whole || (!tool.alias().is_empty() && tool.alias().to_lowercase() == whole) {
                score += 100;
            }
            for word in &words {
                if name.contains(word.as_str()) {
                    score += 3;
                }
                if description.contains(word.as_str()) {
                    score += 1;
                }
            }
            (score > 0).then_some((score, tool))
        })
        .collect();
    scored.sort_by(|(a, ta), (b, tb)| b.cmp(a).then_with(|| ta.name().cmp(tb.name())));
    scored.into_iter().take(limit).map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> McpTool {
        McpTool {
            name: format!("gh__{name}"),
            connection: "gh".into(),
            remote_name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
            approval: Approval::Never,
            read_only: false,
        }
    }

    #[test]
    fn ranks_names_above_descriptions() {
        let tools = vec![
            tool("list_issues", "List issues of a repository"),
            tool("create_issue", "Open a new issue"),
            tool("get_file", "Read a file; mentions issue once"),
        ];
        let names: Vec<_> = rank(tools.clone(), "create issue", 10)
            .into_iter()
            .map(|t| t.remote_name)
            .collect();
        assert_eq!(names, ["create_issue", "list_issues", "get_file"]);
        assert_eq!(rank(tools.clone(), "zebra", 10).len(), 0);
        assert_eq!(rank(tools, "", 2).len(), 2);
    }

    #[test]
    fn deferred_entries_rank_with_mcp_tools_by_the_same_rules() {
        let mut entries: Vec<CatalogueEntry> = vec![
            CatalogueEntry::from(&tool("send_mail", "Send an email")),
            CatalogueEntry {
                name: "notify".into(),
                alias: String::new(),
                description: "Send a notification".into(),
                input_schema: json!({"type": "object", "required": ["to"]}),
                skill: false,
            },
        ];
        entries.push(CatalogueEntry::from(&tool("list_issues", "List issues")));
        let result = search_catalogue(entries.clone(), &json!({"query": "notify"}));
        assert_eq!(result.output["tools"][0]["name"], "notify");
        assert_eq!(
            result.output["tools"][0]["input_schema"]["required"],
            json!(["to"])
        );
        assert_eq!(result.output["tools"].as_array().map(Vec::len), Some(1));
        let result = search_catalogue(entries.clone(), &json!({"query": "send", "limit": 5}));
        let names: Vec<_> = result.output["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(names, ["gh__send_mail", "notify"]);
        assert!(!search_catalogue(entries, &json!({})).ok);
    }

    #[test]
    fn catalogue_descriptions_say_what_is_searched() {
        let describe = |deferred, mcp| {
            catalogue_tools_for(Catalogued {
                deferred,
                mcp,
                all_tools: false,
                skills: false,
            })[0]
                .description
                .clone()
        };
        assert!(!describe(true, false).contains("MCP"));
        assert!(describe(true, true).contains("MCP"));
        assert!(describe(true, true).contains("deferred"));
        assert_eq!(describe(false, true), catalogue_tools()[0].description);
    }

    #[test]
    fn threshold() {
        assert!(!use_catalogue(CATALOGUE_THRESHOLD));
        assert!(use_catalogue(CATALOGUE_THRESHOLD + 1));
        let names: Vec<_> = catalogue_tools().into_iter().map(|t| t.name).collect();
        assert_eq!(names, [SEARCH_TOOLS, CALL_TOOL]);
    }
}
