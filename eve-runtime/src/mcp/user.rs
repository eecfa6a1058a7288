//! MCP connections with `credentials: user`: one Streamable HTTP session per principal, each
//! with that principal's own token.
//!
//! A principal's session is opened on first use with the token stored for it (`oauth:NAME`,
//! key = the principal id) and kept for later calls; no other principal's token is ever read
//! for it. A principal with no token is offered one stand-in tool, `NAME__authorize`, instead
//! of the server's tools (which cannot be listed without a token): calling it, like calling any
//! tool of the connection, parks the turn until the principal has authorized
//! (`crate::features::authorize`). A token the server stops accepting (revoked, refresh
//! refused) is forgotten, so the next call asks the principal again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Connection, Credentials, Transport};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::connection::{Shared, allowed, human, sanitize};
use super::direct::{HttpSession, SessionError, connect_http};
use super::error::McpError;
use super::oauth::connect::config;
use super::oauth::user::{has_token, place};
use super::oauth::{Authorizer, OAuthError, UserAgent};
use super::result::map_call_result;
use super::transport::expand_env;
use super::{EnvLookup, McpTool};
use crate::tools::ToolResult;

/// The stand-in tool's name within its connection (`NAME__authorize`).
pub const AUTHORIZE_TOOL: &str = "authorize";

/// Whether `connection` keeps a token per principal.
pub fn is_user_scoped(connection: &Connection) -> bool {
    connection.credentials == Credentials::User
        && connection.oauth.is_some()
        && matches!(connection.transport, Transport::Http { .. })
}

/// The redirect the runtime's own sessions name (they never complete a code flow themselves).
const SESSION_REDIRECT: &str = "http://127.0.0.1/callback";

/// A user agent that cannot approve: the turn parks for the principal instead.
struct AskThePrincipal(String);

#[async_trait::async_trait]
impl UserAgent for AskThePrincipal {
    async fn authorize(&self, _url: &str) -> Result<String, OAuthError> {
        Err(OAuthError::UserAgent(format!(
            "the authorization of `{}` for this user is no longer accepted: call the tool again \
             to ask the user to sign in again",
            self.0
        )))
    }
}

/// Most principals with an open session of one connection at once: past it, the least recently
/// used session is closed (and opened again, from the stored token, on that principal's next
/// call), so a runtime serving many users keeps a bounded number of sessions.
pub(crate) const MAX_OPEN_SESSIONS: usize = 256;

/// An open session and when it was last used (a tick of the connection's clock).
struct Used {
    open: Arc<Open>,
    tick: u64,
}

/// The principals to close so that the sessions (principal, last use) have room for one more
/// within `limit`: the least recently used first.
fn to_evict(mut sessions: Vec<(String, u64)>, limit: usize) -> Vec<String> {
    let excess = (sessions.len() + 1).saturating_sub(limit.max(1));
    sessions.sort_by_key(|(_, tick)| *tick);
    sessions.into_iter().take(excess).map(|(k, _)| k).collect()
}

/// One principal's open session.
struct Open {
    session: HttpSession,
    tools: Vec<McpTool>,
}

/// A user-scoped connection.
pub(crate) struct UserConnection {
    config: Connection,
    shared: Arc<Shared>,
    open: tokio::sync::Mutex<HashMap<String, Used>>,
    clock: std::sync::atomic::AtomicU64,
}

impl UserConnection {
    pub(crate) fn new(config: Connection, shared: Arc<Shared>) -> Self {
        Self {
            config,
            shared,
            open: tokio::sync::Mutex::new(HashMap::new()),
            clock: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Connection name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    fn stand_in(&self) -> McpTool {
        let name = &self.config.name;
        McpTool {
            name: format!("{name}__{AUTHORIZE_TOOL}"),
            connection: name.clone(),
            remote_name: AUTHORIZE_TOOL.to_owned(),
            description: format!(
                "Connect `{name}` for the current user: the user is asked to sign in, and the \
                 turn waits until they have. Once connected, `{name}`'s own tools are offered."
            ),
            input_schema: json!({"type": "object", "properties": {}}),
            approval: eve_compile::Approval::Never,
            read_only: true,
        }
    }

    /// The tools `principal` is offered: the server's (listed with the principal's token), or
    /// the stand-in while the principal has none. No principal: none.
    pub(crate) async fn tools(&self, principal: Option<&str>) -> Vec<McpTool> {
        let Some(principal) = principal else {
            return Vec::new();
        };
        match self.session(principal).await {
            Ok(Some(open)) => open.tools.clone(),
            Ok(None) => vec![self.stand_in()],
            Err(e) => {
                tracing::warn!(connection = %self.config.name, "user-scoped MCP connection: {e}");
                vec![self.stand_in()]
            }
        }
    }

    /// `principal`'s session, opened with its stored token; `None` when it has no token.
    async fn session(&self, principal: &str) -> Result<Option<Arc<Open>>, McpError> {
        let mut open = self.open.lock().await;
        let tick = self
            .clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(existing) = open.get_mut(principal) {
            existing.tick = tick;
            return Ok(Some(existing.open.clone()));
        }
        let name = self.config.name.as_str();
        let unauthorized = |reason: String| McpError::Unauthorized {
            connection: name.to_owned(),
            reason,
        };
        let Some(store) = &self.shared.store else {
            return Err(unauthorized(
                "this runtime has no store to keep its tokens in".to_owned(),
            ));
        };
        if !has_token(store, name, principal)
            .await
            .map_err(|e| unauthorized(e.to_string()))?
        {
            return Ok(None);
        }
        let (Transport::Http { url, .. }, Some(settings)) =
            (&self.config.transport, &self.config.oauth)
        else {
            return Ok(None);
        };
        let env: &EnvLookup = &self.shared.env;
        let url = expand_env(url, env, name, "url")?;
        let token_place = place(store.clone(), name, principal);
        let settings = config(
            &self.config,
            settings,
            env,
            SESSION_REDIRECT,
            Some(token_place),
        )?;
        let own = self.shared.exec.own_listeners();
        let agent = Arc::new(AskThePrincipal(name.to_owned()));
        let authorizer = Authorizer::new(&url, settings, own.clone(), agent)
            .await
            .map_err(|e| unauthorized(e.to_string()))?;
        authorizer
            .restore()
            .await
            .map_err(|e| unauthorized(e.to_string()))?;
        let connecting = connect_http(&url, Some(Arc::new(authorizer)), None, own);
        let session = tokio::time::timeout(self.start_timeout(), connecting)
            .await
            .map_err(|_| McpError::Initialize {
                connection: name.to_owned(),
                reason: format!("it did not answer within {}", human(self.start_timeout())),
                stderr: String::new(),
            })?
            .map_err(|e| self.session_error(principal, e))?;
        let listed = session
            .list_tools()
            .await
            .map_err(|e| self.session_error(principal, e))?;
        let tools = self.convert(listed);
        let entry = Arc::new(Open { session, tools });
        let ticks = open.iter().map(|(k, u)| (k.clone(), u.tick)).collect();
        for old in to_evict(ticks, MAX_OPEN_SESSIONS) {
            if let Some(used) = open.remove(&old)
                && let Ok(closing) = Arc::try_unwrap(used.open)
            {
                tokio::spawn(async move { closing.session.close().await });
            }
        }
        open.insert(
            principal.to_owned(),
            Used {
                open: entry.clone(),
                tick,
            },
        );
        Ok(Some(entry))
    }

    fn start_timeout(&self) -> Duration {
        self.config
            .start_timeout_ms
            .map_or(self.shared.supervision.start_timeout, Duration::from_millis)
    }

    fn call_timeout(&self) -> Duration {
        let ms = if self.config.timeout_ms == 0 {
            eve_compile::DEFAULT_TIMEOUT_MS
        } else {
            self.config.timeout_ms
        };
        Duration::from_millis(ms)
    }

    /// A session error as the connection's error; an authorization the server no longer
    /// accepts forgets the principal's token (spawned: the caller may hold the lock).
    fn session_error(&self, principal: &str, e: SessionError) -> McpError {
        if let SessionError::OAuth(_) = &e
            && let Some(store) = self.shared.store.clone()
        {
            let token_place = place(store, &self.config.name, principal);
            tokio::spawn(async move {
                let _ = token_place.remove().await;
            });
        }
        McpError::Unauthorized {
            connection: self.config.name.clone(),
            reason: e.to_string(),
        }
    }

    fn convert(&self, listed: Vec<super::direct::ListedTool>) -> Vec<McpTool> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for tool in listed {
            if !allowed(&self.config.tools, &tool.name) {
                continue;
            }
            let name = format!("{}__{}", self.config.name, sanitize(&tool.name));
            if !seen.insert(name.clone()) {
                continue;
            }
            let mut schema = tool.input_schema;
            if let Value::Object(map) = &mut schema {
                map.entry("type")
                    .or_insert_with(|| Value::String("object".to_owned()));
            }
            out.push(McpTool {
                name,
                connection: self.config.name.clone(),
                remote_name: tool.name,
                description: tool.description,
                input_schema: schema,
                approval: self.config.approval,
                read_only: tool.read_only,
            });
        }
        out
    }

    /// Calls `name` as `principal`, with its token.
    pub(crate) async fn call(
        &self,
        name: &str,
        input: Value,
        cancel: CancellationToken,
        scope: super::CallScope<'_>,
    ) -> ToolResult {
        let principal = scope.principal;
        let start = Instant::now();
        let fail = |message: String| ToolResult::failure(message, start.elapsed());
        let Some(principal) = principal else {
            return fail(format!(
                "`{name}` acts for a signed-in user (`credentials: user`), and this session has \
                 none"
            ));
        };
        let open = match self.session(principal).await {
            Ok(Some(open)) => open,
            Ok(None) => {
                return fail(format!(
                    "`{}` is not authorized for this user yet: call the tool again to ask them \
                     to sign in",
                    self.config.name
                ));
            }
            Err(e) => return fail(e.to_string()),
        };
        let stand_in = format!("{}__{AUTHORIZE_TOOL}", self.config.name);
        let Some(tool) = open.tools.iter().find(|t| t.name == name) else {
            if name == stand_in {
                return ToolResult::success(
                    json!({"connected": self.config.name,
                           "note": "its tools are offered from the next step"}),
                    start.elapsed(),
                );
            }
            return fail(format!(
                "the MCP server `{}` has no tool `{name}` for this user",
                self.config.name
            ));
        };
        let timeout = self.call_timeout();
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(timeout, open.session.call_tool_traced(&tool.remote_name, input, scope.traceparent)) => outcome,
            () = cancel.cancelled() => return fail(format!("`{name}` was cancelled")),
        };
        match outcome {
            Ok(Ok(json)) => map_call_result(&json, start.elapsed()),
            Ok(Err(e)) => {
                self.open.lock().await.remove(principal);
                fail(format!(
                    "`{name}` failed: {}",
                    self.session_error(principal, e)
                ))
            }
            Err(_) => fail(format!(
                "`{name}` timed out after {} (the timeout of connection `{}`)",
                human(timeout),
                self.config.name
            )),
        }
    }

    /// Closes every principal's session.
    pub(crate) async fn shutdown(&self) {
        let open: Vec<Arc<Open>> = self
            .open
            .lock()
            .await
            .drain()
            .map(|(_, v)| v.open)
            .collect();
        for entry in open {
            if let Ok(entry) = Arc::try_unwrap(entry) {
                entry.session.close().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_sessions_make_room() {
        let ticks = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
            pairs.iter().map(|(k, t)| ((*k).to_owned(), *t)).collect()
        };
        assert!(to_evict(ticks(&[("a", 1), ("b", 2)]), 3).is_empty());
        assert_eq!(to_evict(ticks(&[("a", 5), ("b", 2), ("c", 9)]), 3), ["b"]);
        assert_eq!(
            to_evict(ticks(&[("a", 5), ("b", 2), ("c", 9)]), 2),
            ["b", "a"]
        );
        assert!(to_evict(Vec::new(), MAX_OPEN_SESSIONS).is_empty());
        let full: Vec<(String, u64)> = (0..MAX_OPEN_SESSIONS as u64)
            .map(|i| (format!("p{i}"), 1000 - i))
            .collect();
        assert_eq!(
            to_evict(full, MAX_OPEN_SESSIONS),
            [format!("p{}", MAX_OPEN_SESSIONS - 1)]
        );
    }
}
