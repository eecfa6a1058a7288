//! The agent's memory over HTTP, behind the API's authentication: `GET /eve/v1/memory` reads the
//! notes, `POST /eve/v1/memory` adds, replaces or removes one, `POST /eve/v1/memory/clear` empties
//! a scope (see `engine::memory`).
//!
//! A caller reaches the `agent` scope, its **own** `user` scope (the principal it authenticated
//! as; never another user's), and the scope of a session it reaches by `session` (one it
//! started, or any for an operator; another's is `404 session_not_found`, as on the session
//! routes). Agent memory is pinned into every session's prompt, every tenant's included, so
//! writing it is an operator's act (the `operators:` of `channels/eve.yaml`, `eve memory edit`):
//! anyone else may read it but not write it. An API without authentication has no user scope.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use eve_compile::MemoryScope;
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use super::auth::Identity;
use super::body;
use super::error::ApiError;
use crate::engine::Caller;
use crate::engine::memory::{MemoryError, Selector};
use crate::store::rfc3339;

/// Query of `GET /eve/v1/memory` and the addressing fields of the POST bodies.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Target {
    scope: Option<String>,
    session: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteBody {
    scope: Option<String>,
    session: Option<String>,
    action: String,
    id: Option<String>,
    text: Option<String>,
}

fn scope(name: Option<&str>) -> Result<Option<MemoryScope>, ApiError> {
    match name {
        None => Ok(None),
        Some("agent") => Ok(Some(MemoryScope::Agent)),
        Some("user") => Ok(Some(MemoryScope::User)),
        Some("session") => Ok(Some(MemoryScope::Session)),
        Some(other) => Err(ApiError::bad_request(
            "invalid_scope",
            format!("`scope` is `{other}`; use `agent`, `user` or `session`"),
        )),
    }
}

/// The caller's own user, for the `user` scope: its principal, with its attributes (the same
/// key a turn's sender has: the same subject under another tenant is another user).
fn own_user(identity: &Identity, caller: &Caller) -> Option<String> {
    match identity {
        Identity::Anonymous => None,
        other => Some(crate::tenancy::principal_key(
            &other.principal_id(),
            caller.attributes(),
        )),
    }
}

fn selector(
    identity: &Identity,
    caller: &Caller,
    scope: Option<MemoryScope>,
    session: Option<String>,
) -> Selector {
    Selector {
        scope,
        user: own_user(identity, caller),
        session,
    }
}

fn error(e: MemoryError) -> ApiError {
    match e {
        MemoryError::Off(_) => ApiError::bad_request("memory_off", e.to_string()),
        MemoryError::Target(_) | MemoryError::Refused(_) => {
            ApiError::bad_request("invalid_memory_request", e.to_string())
        }
        MemoryError::Runtime(e) => ApiError::from(e),
    }
}

/// Refuses a write to the agent scope by anyone but an operator.
fn may_write(caller: &Caller, scope: MemoryScope) -> Result<(), ApiError> {
    if scope == MemoryScope::Agent && !caller.is_operator() {
        return Err(ApiError::Forbidden(format!(
            "agent memory is pinned into every session; it is written by operators (named under \
             `operators:` in agent/channels/eve.yaml, or `eve memory edit`), and {} is not one",
            caller.id()
        )));
    }
    Ok(())
}

/// Refuses a `session` the caller does not reach, as the session routes do.
async fn may_reach(app: &App, caller: &Caller, session: Option<&str>) -> Result<(), ApiError> {
    if let Some(id) = session {
        app.runtime
            .session_for(id, &super::tenancy::reach(app, caller))
            .await?;
    }
    Ok(())
}

/// `GET /eve/v1/memory?scope=&session=`: `{ok, notes: [{scope, id, text, createdAt, updatedAt}]}`.
pub(crate) async fn show(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    Extension(caller): Extension<Caller>,
    body::ApiQuery(target): body::ApiQuery<Target>,
) -> Result<Response, ApiError> {
    let scope = scope(target.scope.as_deref())?;
    may_reach(&app, &caller, target.session.as_deref()).await?;
    let mut selector = selector(&identity, &caller, scope, target.session);
    let scopes = match scope {
        Some(s) => vec![s],
        None => vec![MemoryScope::Agent, MemoryScope::User, MemoryScope::Session],
    };
    let mut notes = Vec::new();
    for s in scopes {
        // Never every user's or every session's notes: only the caller's, and a named session's.
        if (s == MemoryScope::User && selector.user.is_none())
            || (s == MemoryScope::Session && selector.session.is_none())
        {
            continue;
        }
        selector.scope = Some(s);
        for n in app.runtime.memory_notes(&selector).await.map_err(error)? {
            notes.push(json!({
                "scope": s.as_str(), "id": n.key, "text": n.text,
                "createdAt": rfc3339(n.created_at), "updatedAt": rfc3339(n.updated_at),
            }));
        }
    }
    Ok(Json(json!({"ok": true, "notes": notes})).into_response())
}

/// `POST /eve/v1/memory` `{action: add|replace|remove, scope?, session?, id?, text?}`:
/// `{ok, result}`.
pub(crate) async fn write(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body::bytes(body, app.config.body_limit)?;
    let request: WriteBody = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request("invalid_body", format!("invalid memory request: {e}"))
    })?;
    let scope = scope(request.scope.as_deref())?.unwrap_or(MemoryScope::Agent);
    may_write(&caller, scope)?;
    may_reach(&app, &caller, request.session.as_deref()).await?;
    let input: Value = json!({"action": request.action, "id": request.id, "text": request.text});
    let result = app
        .runtime
        .memory_write(
            &selector(&identity, &caller, Some(scope), request.session),
            &input,
        )
        .await
        .map_err(error)?;
    tracing::info!(principal = %identity.principal_id(), scope = scope.as_str(), %result, "memory written over the API");
    Ok(Json(json!({"ok": true, "result": result})).into_response())
}

/// `POST /eve/v1/memory/clear` `{scope?, session?}`: `{ok, removed}`.
pub(crate) async fn clear(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body::bytes(body, app.config.body_limit)?;
    let target: Target = if bytes.iter().all(u8::is_ascii_whitespace) {
        Target::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request("invalid_body", format!("invalid memory request: {e}"))
        })?
    };
    let scope = scope(target.scope.as_deref())?.unwrap_or(MemoryScope::Agent);
    may_write(&caller, scope)?;
    may_reach(&app, &caller, target.session.as_deref()).await?;
    let removed = app
        .runtime
        .memory_clear(&selector(&identity, &caller, Some(scope), target.session))
        .await
        .map_err(error)?;
    tracing::info!(principal = %identity.principal_id(), scope = scope.as_str(), removed, "memory cleared over the API");
    Ok(Json(json!({"ok": true, "removed": removed})).into_response())
}
