//! Who reaches what over HTTP: the operators of `channels/eve.yaml`, the [`Caller`] each
//! request acts as, and the access of every route ([`Access`]), enforced by layers the router
//! puts on each route from its entry in the route table (`server/mod.rs`), so no handler can
//! forget it.
//!
//! A caller is its authenticated principal, and an operator when `operators:` names it (by
//! token name, basic user, JWT `sub`, JWT claims, or a platform user id), or when the API has no
//! authentication (it answers loopback only: every caller is the one local operator). A session
//! route answers a caller that does not reach the session (see `engine::tenancy`) with
//! `404 session_not_found`, the body of an unknown session; an operator route answers anyone
//! but an operator with `403 forbidden`.

use std::collections::BTreeSet;

use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::App;
use super::auth::Identity;
use super::error::ApiError;
use crate::engine::Caller;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No API credentials: the health check, the console's page and assets, and the platform
    /// channels (each request signed by its platform).
    Public,
    /// Any authenticated caller; what the route shows or changes is the caller's own (the
    /// sessions it started, its memory, a session it creates).
    Caller,
    /// One session, named by the `{id}` of the path: a caller that reaches it (its owner, an
    /// operator); anyone else gets `404 session_not_found`.
    Session,
    /// Operators only; anyone else gets `403 forbidden`.
    Operator,
}

/// One route of the API: its method, its path as the router writes it, and who may call it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The path (`/eve/v1/session/{id}/stream`).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
}

/// The operators of `channels/eve.yaml`, as the server matches callers against them.
#[derive(Debug, Clone, Default)]
pub struct Operators {
    /// Principal ids (`token:NAME`, `basic:user`, `jwt:sub`, `slack:U…`).
    principals: BTreeSet<String>,
    /// JWT claims that must all hold.
    claims: Vec<(String, Value)>,
}

impl Operators {
    /// The operators a build names.
    pub fn from_manifest(operators: &eve_compile::Operators) -> Self {
        Self {
            principals: operators.principals.iter().cloned().collect(),
            claims: operators
                .claims
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// The caller a verified request acts as.
    pub(crate) fn caller(
        &self,
        identity: &Identity,
        claims: Option<&Map<String, Value>>,
    ) -> Caller {
        let id = identity.principal_id();
        let operator = match identity {
            // No authentication: the API answers loopback only, so the caller is the one local
            // operator.
            Identity::Anonymous => true,
            Identity::Jwt(_) => {
                self.principals.contains(&id)
                    || claims.is_some_and(|claims| self.claims_hold(claims))
            }
            Identity::Token(_) | Identity::User(_) => self.principals.contains(&id),
        };
        if operator {
            Caller::operator(id)
        } else {
            Caller::tenant(id)
        }
    }

    /// The caller a platform user (`slack:U…`, `discord:…`, `telegram:…`) acts as.
    pub(crate) fn platform(&self, principal: &str) -> Caller {
        if self.principals.contains(principal) {
            Caller::operator(principal)
        } else {
            Caller::tenant(principal)
        }
    }

    /// Whether a token's claims hold every operator claim (none listed: never).
    fn claims_hold(&self, claims: &Map<String, Value>) -> bool {
        !self.claims.is_empty()
            && self
                .claims
                .iter()
                .all(|(name, want)| claims.get(name).is_some_and(|have| claim_holds(have, want)))
    }
}

/// A claim equal to the wanted value, or a list holding it (`roles: [operator, billing]`).
fn claim_holds(have: &Value, want: &Value) -> bool {
    let same = |v: &Value| match (v, want) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => v == want,
    };
    match have {
        Value::Array(items) => items.iter().any(same),
        other => same(other),
    }
}

/// The caller as session routes see it: an operator for everyone when the test-only switch that
/// turns the ownership check off is on.
pub(crate) fn reach(app: &App, caller: &Caller) -> Caller {
    if app.config.ownership_unchecked_for_tests {
        Caller::operator(caller.id())
    } else {
        caller.clone()
    }
}

/// The caller a guarded request acts as (set by the guard).
pub(crate) fn caller_of(request: &Request) -> Result<Caller, ApiError> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("a guarded route ran without its caller".to_owned()))
}

/// The layer of [`Access::Session`] routes: the session of the path's `{id}` must be one the
/// caller reaches, else `404 session_not_found`, the same answer as for an unknown id.
pub(crate) async fn session_access(
    State(app): State<App>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    request: Request,
    next: Next,
) -> Response {
    let caller = match caller_of(&request) {
        Ok(c) => reach(&app, &c),
        Err(e) => return e.into_response(),
    };
    let Ok(Path(id)) = id else {
        return ApiError::SessionNotFound.into_response();
    };
    match app.runtime.session_for(&id, &caller).await {
        Ok(_) => next.run(request).await,
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The layer of [`Access::Operator`] routes: operators only, else `403 forbidden`.
pub(crate) async fn operator_access(request: Request, next: Next) -> Response {
    match caller_of(&request) {
        Ok(caller) if caller.is_operator() => next.run(request).await,
        Ok(caller) => ApiError::Forbidden(format!(
            "{} is not an operator of this agent: releases and dev routes are for the \
             principals named under `operators:` in agent/channels/eve.yaml",
            caller.id()
        ))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn operators(principals: &[&str], claims: Value) -> Operators {
        Operators::from_manifest(&eve_compile::Operators {
            principals: principals.iter().map(|p| (*p).to_owned()).collect(),
            claims: serde_json::from_value(claims).unwrap(),
        })
    }

    #[test]
    fn named_principals_and_claims_make_operators() {
        let ops = operators(&["token:OPS", "jwt:root"], json!({"role": "operator"}));
        let claims = |v: Value| v.as_object().cloned().unwrap();
        assert!(
            ops.caller(&Identity::Token("token:OPS".into()), None)
                .is_operator()
        );
        assert!(
            !ops.caller(&Identity::Token("token:APP".into()), None)
                .is_operator()
        );
        assert!(
            ops.caller(&Identity::Jwt(Some("root".into())), None)
                .is_operator()
        );
        let alice = Identity::Jwt(Some("alice".into()));
        assert!(
            !ops.caller(&alice, Some(&claims(json!({"sub": "alice"}))))
                .is_operator()
        );
        assert!(
            ops.caller(&alice, Some(&claims(json!({"role": "operator"}))))
                .is_operator()
        );
        assert!(
            ops.caller(&alice, Some(&claims(json!({"role": ["x", "operator"]}))))
                .is_operator()
        );
        assert!(
            !ops.caller(&alice, Some(&claims(json!({"role": "operators"}))))
                .is_operator()
        );
        assert!(ops.caller(&Identity::Anonymous, None).is_operator());
        assert!(
            !Operators::default()
                .caller(&alice, Some(&claims(json!({}))))
                .is_operator()
        );
        assert!(!ops.platform("slack:U1").is_operator());
        assert!(
            operators(&["slack:U1"], json!({}))
                .platform("slack:U1")
                .is_operator()
        );
    }
}
