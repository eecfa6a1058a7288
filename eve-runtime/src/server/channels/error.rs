//! Errors of the platform channel routes, each knowing its status and JSON body.
//!
//! A refused signature is a 401 with a reason a developer setting up the platform can act on
//! (missing header, stale timestamp, signature mismatch); it never says which secret was
//! expected. Everything else that can fail while accepting a message is an [`ApiError`] of the
//! session API and renders the same way.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::server::error::ApiError;

/// A platform request that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// Missing, malformed, stale or forged signature.
    #[error("{0}")]
    Unauthorized(String),
    /// The verified body is not what the platform sends.
    #[error("{message}")]
    BadRequest {
        /// Machine-readable code (`invalid_json`, `invalid_body`, …).
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// No platform channel has this name.
    #[error(
        "No platform channel named `{0}`: add agent/channels/{0}.yaml with `kind: slack`, \
         `discord`, `telegram` or `webhook` and rebuild."
    )]
    NotFound(String),
    /// Accepting the message failed.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl ChannelError {
    /// A 400 with `code` and `message`.
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// A 401 saying why.
    pub(crate) fn unauthorized(reason: impl Into<String>) -> Self {
        Self::Unauthorized(reason.into())
    }
}

impl IntoResponse for ChannelError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, *code),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::Api(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        };
        if let Self::Api(e) = self {
            return e.into_response();
        }
        let body = json!({"code": code, "error": self.to_string(), "ok": false});
        (status, axum::Json(body)).into_response()
    }
}
