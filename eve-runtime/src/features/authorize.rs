//! Authorizing a user-scoped connection (`credentials: user`) in the flow of a turn.
//!
//! A call of a tool of such a connection, by a session whose principal holds no token for it,
//! does not run: the feature starts the principal's authorization
//! ([`crate::mcp::oauth::user::begin`]) and parks the turn on an input request of kind
//! `authorization`, announced by eve's `authorization.required {name, authorization: {url}}`
//! (and `turn.waiting {on: "input"}`); no driver waits. The request is settled only by the
//! callback route, `GET /eve/v1/connections/NAME/callback` ([`Runtime::complete_authorization`]):
//! the code is exchanged, the token stored for the flow's principal, and the request answered in
//! one commit with `authorization.completed`; the turn resumes and the call is decided again
//! (its own approval still applies), now with a token. A declined or failed authorization
//! settles the call denied, with the reason. Everything is stored, so a runtime restarted
//! between the two finishes the flow.

use async_trait::async_trait;
use eve_compile::Connection;
use serde_json::json;

use crate::engine::turn::seam::{AskAs, Handled, TurnExtension, TurnView};
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::events as ev;
use crate::mcp::oauth::user::{self, Callback, Completion, REQUEST_KIND};
use crate::mcp::user::AUTHORIZE_TOOL;
use crate::store::{ApprovalState, Batch, CallStatus, ToolCallRecord};

/// The variable naming the URL the runtime is reached at from a browser (the callback's base).
pub use crate::env_vars::EVE_PUBLIC_URL;

/// Whether `agent` has a connection whose tokens are kept per principal.
pub(crate) fn enabled(agent: &eve_compile::Agent) -> bool {
    agent
        .connections
        .iter()
        .any(crate::mcp::user::is_user_scoped)
        || agent.tools.iter().any(|t| user_scoped_api(t).is_some())
}

/// The OpenAPI operation `tool` calls, when its connection keeps a token per principal.
fn user_scoped_api(tool: &eve_compile::Tool) -> Option<&eve_compile::OpenApiCall> {
    match &tool.runner {
        eve_compile::Runner::OpenApi(call)
            if call.oauth.is_some() && call.credentials == eve_compile::Credentials::User =>
        {
            Some(call)
        }
        _ => None,
    }
}

/// The user-scoped connection owning the `NAME__` prefix of `tool` (an MCP connection), or
/// offering `tool` (an OpenAPI connection, in the shape of an MCP one).
fn owner(agent: &eve_compile::Agent, tool: &str) -> Option<Connection> {
    if let Some(call) = agent
        .tools
        .iter()
        .find(|t| t.name == tool)
        .and_then(user_scoped_api)
    {
        return crate::mcp::oauth::api::connection_of(call);
    }
    agent
        .connections
        .iter()
        .filter(|c| {
            tool.strip_prefix(c.name.as_str())
                .is_some_and(|rest| rest.starts_with("__") && rest.len() > 2)
        })
        .max_by_key(|c| c.name.len())
        .filter(|c| crate::mcp::user::is_user_scoped(c))
        .cloned()
}

/// The user-scoped connection called `name`: an MCP connection, or an OpenAPI one.
fn named(agent: &eve_compile::Agent, name: &str) -> Option<Connection> {
    agent
        .connections
        .iter()
        .find(|c| c.name == name && crate::mcp::user::is_user_scoped(c))
        .cloned()
        .or_else(|| {
            agent
                .tools
                .iter()
                .filter_map(user_scoped_api)
                .find(|call| call.connection == name)
                .and_then(crate::mcp::oauth::api::connection_of)
        })
}

/// The tool a call runs: its own name, or for the catalogue's `call_tool`, the tool it names.
fn target(call: &ToolCallRecord) -> &str {
    if call.name == crate::mcp::CALL_TOOL
        && let Some(name) = call.input.get("name").and_then(serde_json::Value::as_str)
    {
        return name;
    }
    &call.name
}

/// The redirect URI of `connection`'s callback: under `EVE_PUBLIC_URL`, else under the runtime's
/// own listening address.
fn redirect_uri(rt: &Runtime, connection: &str) -> Option<String> {
    let base = (rt.inner.config.env)(EVE_PUBLIC_URL)
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            rt.inner.exec.own_listeners().first().map(|addr| {
                let ip = if addr.ip().is_unspecified() {
                    std::net::IpAddr::from([127, 0, 0, 1])
                } else {
                    addr.ip()
                };
                format!("http://{}", std::net::SocketAddr::new(ip, addr.port()))
            })
        })?;
    Some(format!(
        "{}/eve/v1/connections/{connection}/callback",
        base.trim_end_matches('/')
    ))
}

/// The feature.
pub(crate) struct Authorize;

#[async_trait]
impl TurnExtension for Authorize {
    fn name(&self) -> &'static str {
        "authorize"
    }

    async fn answer_call(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Option<Handled>> {
        let Some(connection) = owner(&view.build.manifest.agent, target(call)) else {
            return Ok(None);
        };
        let connection = &connection;
        // Asked already (it waits), or declined (it settles denied with the reason).
        if call.approval != ApprovalState::None {
            return Ok(None);
        }
        let failed = |message: String| {
            Ok(Some(Handled::settle(
                CallStatus::Failed,
                json!({"code": "AUTHORIZATION_UNAVAILABLE", "message": message}),
            )))
        };
        let Some(principal) = view.session.owner.as_deref() else {
            return failed(format!(
                "`{}` acts for a signed-in user (`credentials: user`), and this session was \
                 started by none, so nobody can authorize it",
                connection.name
            ));
        };
        let store = view.rt.inner.store.clone();
        let stand_in = format!("{}__{AUTHORIZE_TOOL}", connection.name);
        match user::has_token(&store, &connection.name, principal).await {
            // The stand-in's work is done once the principal holds a token.
            Ok(true) if target(call) == stand_in => {
                return Ok(Some(Handled::settle(
                    CallStatus::Completed,
                    json!({"connected": connection.name,
                           "note": "its tools are offered from the next step"}),
                )));
            }
            Ok(true) => return Ok(None),
            Ok(false) => {}
            Err(e) => return failed(e.to_string()),
        }
        let Some(redirect) = redirect_uri(view.rt, &connection.name) else {
            return failed(format!(
                "`{}` needs the user to sign in, and this runtime does not know the URL a \
                 browser reaches it at: set {EVE_PUBLIC_URL}",
                connection.name
            ));
        };
        let url = match user::begin(
            connection,
            &view.rt.inner.config.env,
            view.rt.inner.exec.own_listeners(),
            store,
            principal,
            &redirect,
            view.id(),
            &call.call_id,
        )
        .await
        {
            Ok(url) => url,
            Err(e) => return failed(e.to_string()),
        };
        let mut writes = Batch::new();
        writes.event(
            view.id(),
            ev::AUTHORIZATION_REQUIRED,
            ev::authorization_required(
                view.turn,
                view.turn.step_index,
                &connection.name,
                &url,
                principal,
                &call.call_id,
            ),
        );
        Ok(Some(Handled::Ask {
            prompt: format!("Sign in to {} to continue.", connection.name),
            request: Some(AskAs {
                kind: REQUEST_KIND.to_owned(),
                action: json!({"connection": connection.name, "url": url,
                               "principal": principal, "callId": call.call_id}),
                writes,
            }),
        }))
    }
}

/// What the callback route tells the browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// The connection is authorized; the turn goes on.
    Authorized,
    /// The user declined, or the exchange failed: the call was told why.
    NotAuthorized(String),
}

impl Runtime {
    /// Finishes an authorization the browser came back from: the `state` must name a pending
    /// flow of `connection` (a forged or replayed one is refused with
    /// [`RuntimeError::NoSuchRequest`], and nothing is stored), the code is exchanged and the
    /// token stored for the flow's principal, and the turn that waits on it resumes.
    pub async fn complete_authorization(
        &self,
        connection: &str,
        callback: Callback,
    ) -> RuntimeResult<Completed> {
        let refused = |why: &str| RuntimeError::NoSuchRequest(why.to_owned());
        let store = self.inner.store.clone();
        let state = callback.state.clone().unwrap_or_default();
        let Some(flow) = user::flow(&store, connection, &state)
            .await
            .map_err(|e| RuntimeError::Other(e.to_string()))?
        else {
            return Err(refused(
                "no pending authorization has this `state` (forged, already used, or expired)",
            ));
        };
        let session = self
            .inner
            .store
            .session(&flow.session)
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(flow.session.clone()))?;
        let build = self.inner.builds.get(&session.build_hash)?;
        let Some(config) = named(&build.manifest.agent, connection) else {
            return Err(refused("no user-scoped connection has this name"));
        };
        let completion = user::complete(
            &config,
            &self.inner.config.env,
            self.inner.exec.own_listeners(),
            store,
            &callback,
        )
        .await
        .map_err(|e| refused(&e.to_string()))?;
        let (flow, outcome, reason) = match completion {
            Completion::Authorized(flow) => (flow, "authorized", None),
            Completion::Declined(flow, why) => (flow, "declined", Some(why)),
            Completion::Failed(flow, why) => (flow, "failed", Some(why)),
        };
        let pending = self.inner.store.input_requests(&flow.session, true).await?;
        let Some(request) = pending
            .iter()
            .find(|r| r.kind == REQUEST_KIND && r.call_id == flow.call_id)
        else {
            return Err(refused(
                "the turn that asked for this authorization no longer waits on it",
            ));
        };
        let answer = crate::engine::turn::seam::Answer {
            approve: outcome == "authorized",
            reason: reason.clone(),
            principal: &flow.principal,
            may_activate: false,
            authorization: Some(outcome),
            attributes: None,
        };
        self.answer_input_with(&flow.session, Some(&request.id), answer)
            .await?;
        Ok(match reason {
            None => Completed::Authorized,
            Some(why) => Completed::NotAuthorized(why),
        })
    }
}
