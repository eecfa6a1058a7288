//! Forwarded principals: another eve deployment that calls this one as a remote agent may assert
//! the principal its own caller is (eve's `forwardedPrincipal` body field, or the
//! `x-eve-forwarded-principal` header on requests without a body, such as the stream). The
//! assertion is taken only from a caller this deployment lists under `trusted_forwarders:` in
//! `channels/eve.yaml` (principal ids, as `operators:` names them); from anyone else it is
//! refused with `403 forbidden`, as eve's `trustedForwarders` does. Once taken, the request acts
//! as the forwarded principal: it owns the sessions it creates and reaches only those.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use serde_json::Value;

use super::App;
use super::error::ApiError;
use crate::engine::Caller;

/// The header that carries a forwarded principal (eve's `SessionAuthContext` as JSON).
pub(crate) const FORWARDED_HEADER: &str = "x-eve-forwarded-principal";

/// The callers that may forward a principal (`trusted_forwarders:` of `channels/eve.yaml`).
#[derive(Debug, Clone, Default)]
pub struct Forwarders {
    principals: BTreeSet<String>,
}

impl Forwarders {
    /// Reads `trusted_forwarders:` (a list of principal ids); `Err` says what is wrong.
    pub fn from_setting(value: Option<&Value>) -> Result<Self, String> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(Self::default());
        };
        let Value::Array(items) = value else {
            return Err(
                "`trusted_forwarders` must be a list of principal ids, such as \
                 `[token:ROUTER_TOKEN]`"
                    .to_owned(),
            );
        };
        let mut principals = BTreeSet::new();
        for item in items {
            match item.as_str().map(str::trim) {
                Some(id) if id.contains(':') && !id.ends_with(':') => {
                    principals.insert(id.to_owned());
                }
                _ => {
                    return Err(format!(
                        "`trusted_forwarders` entry {item} is not a principal id: write \
                         `token:VAR`, `basic:user` or `jwt:subject`"
                    ));
                }
            }
        }
        Ok(Self { principals })
    }

    /// Whether `principal` may forward a principal.
    pub(crate) fn trusts(&self, principal: &str) -> bool {
        self.principals.contains(principal)
    }
}

/// The request as it acts: `caller`, or the principal it forwards when `caller` may forward one.
pub(crate) async fn apply(
    app: &App,
    request: Request,
    caller: &Caller,
) -> Result<Request, ApiError> {
    let mut asserted = match request.headers().get(FORWARDED_HEADER) {
        Some(value) => Some(
            serde_json::from_slice::<Value>(value.as_bytes())
                .map_err(|_| invalid("the `x-eve-forwarded-principal` header is not JSON"))?,
        ),
        None => None,
    };
    let mut request = request;
    if request.method() == Method::POST
        && request.uri().path().starts_with("/eve/v1/session")
        && is_json(&request)
    {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, app.config.message_limit())
            .await
            .map_err(|_| ApiError::PayloadTooLarge {
                limit: app.config.message_limit(),
            })?;
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&bytes)
            && let Some(field) = map.get("forwardedPrincipal").filter(|v| !v.is_null())
        {
            asserted = Some(field.clone());
        }
        request = Request::from_parts(parts, Body::from(bytes));
    }
    let Some(asserted) = asserted else {
        return Ok(request);
    };
    let current = asserted.get("current").unwrap_or(&asserted);
    let Some(principal) = current
        .get("principalId")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())
    else {
        return Err(invalid(
            "`forwardedPrincipal` needs `current.principalId`, the principal asserted",
        ));
    };
    if !(app.config.forwarders_unchecked_for_tests || app.config.forwarders.trusts(caller.id())) {
        return Err(ApiError::Forbidden(format!(
            "{} may not forward a principal: this deployment takes a forwarded principal only \
             from the callers listed under `trusted_forwarders:` in agent/channels/eve.yaml",
            caller.id()
        )));
    }
    let acting = app.config.operators.platform(principal);
    tracing::debug!(
        forwarder = caller.id(),
        principal,
        "a forwarded principal was taken"
    );
    request.extensions_mut().insert(acting);
    Ok(request)
}

fn is_json(request: &Request) -> bool {
    request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"))
}

fn invalid(message: &str) -> ApiError {
    ApiError::bad_request("invalid_body", message.to_owned())
}
