//! Errors of the HTTP server: typed, each knowing its status code and JSON body.
//!
//! [`ApiError`] is what a handler returns when a request cannot be served; it renders as eve's error
//! body `{"code", "error", "ok": false}` (keys in eve's order) with the matching status, so no
//! handler builds an error response by hand and no failure leaks as a bare 500 or a panic.
//! [`ServerError`] is what can go wrong before the server answers anything: configuration,
//! secrets, binding.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::engine::RuntimeError;

/// A request that cannot be served, as the client sees it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No session with this id (eve: `{"error":"Session not found.","ok":false}`).
    #[error("Session not found.")]
    SessionNotFound,
    /// The session expired (`limits.session_timeout`): eve's `410 session_expired`.
    #[error("Session history is no longer available.")]
    SessionExpired,
    /// The session cannot do this in its current state.
    #[error("{0}")]
    SessionNotActive(String),
    /// An answer names an input request that is not pending (withdrawn or unknown).
    #[error("{0}")]
    RequestNotPending(String),
    /// An answer to an input request someone else answered first; the body carries the answer
    /// that won (`outcome`, `responderPrincipalId`, `answeredAt`).
    #[error(
        "Input request {} was already answered ({} by {}): the first answer counts.",
        .0.id,
        .0.status,
        .0.responder.as_deref().unwrap_or(crate::engine::LOCAL_PRINCIPAL)
    )]
    InputAlreadyAnswered(Box<crate::store::InputRequestRecord>),
    /// The body or query is not what the route takes.
    #[error("{message}")]
    BadRequest {
        /// Machine-readable code (`invalid_json`, `invalid_body`, `invalid_query`, …).
        code: &'static str,
        /// What is wrong and what to send instead.
        message: String,
    },
    /// No credentials, or credentials that do not verify.
    #[error("Authorization is required for this route.")]
    Unauthorized {
        /// The `WWW-Authenticate` challenge to send.
        challenge: &'static str,
    },
    /// Verified credentials (or a browser origin, or a host name) that may not use this route.
    #[error("{0}")]
    Forbidden(String),
    /// Tool stubs from a caller who is not an operator (only operators and eval runs set them).
    #[error("{0}")]
    StubsForbidden(String),
    /// The body is larger than the configured limit.
    #[error("The request body is larger than the limit of {limit} bytes.")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A file of a message the channel's upload policy refuses: `413` for a size, `415` for a
    /// media type, with every violation in eve's shape.
    #[error("{message}")]
    Upload {
        /// 413 or 415.
        status: u16,
        /// The first violation, for people.
        message: String,
        /// Every violation (`kind`: `too-large` or `disallowed-media-type`).
        violations: Vec<serde_json::Value>,
    },
    /// No such route.
    #[error("No route for {0}.")]
    RouteNotFound(String),
    /// No schedule with this name in the current build (dev route).
    #[error("Schedule {0} not found.")]
    ScheduleNotFound(String),
    /// The route exists but not for this method.
    #[error("Method not allowed.")]
    MethodNotAllowed,
    /// No release or build with this id or hash.
    #[error("{0}")]
    ReleaseNotFound(String),
    /// A release action was refused (a rejected release without `force`, nothing to roll back
    /// to).
    #[error("{0}")]
    ReleaseRefused(String),
    /// The agent cannot serve sessions now (no loadable build).
    #[error("{0}")]
    Unavailable(String),
    /// The caller is past its bounds on sessions in flight or messages queued (`limits:` of
    /// `channels/eve.yaml`): retry later.
    #[error("{0}")]
    TooManyInFlight(String),
    /// A read hit damaged storage (the cause, as the store said it); logged as an error too.
    #[error(
        "A read hit damaged storage ({0}); run `eve store check` and restore the store from a backup (docs/operations.md)."
    )]
    StoreDamaged(String),
    /// Something failed on our side; details are logged, not sent.
    #[error("Internal error.")]
    Internal(String),
}

impl ApiError {
    /// A 400 with `code` and `message`.
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::SessionNotFound
            | Self::RouteNotFound(_)
            | Self::ScheduleNotFound(_)
            | Self::ReleaseNotFound(_) => StatusCode::NOT_FOUND,
            Self::SessionExpired => StatusCode::GONE,
            Self::SessionNotActive(_)
            | Self::RequestNotPending(_)
            | Self::InputAlreadyAnswered(_)
            | Self::ReleaseRefused(_) => StatusCode::CONFLICT,
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) | Self::StubsForbidden(_) => StatusCode::FORBIDDEN,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Upload { status: 415, .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Upload { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooManyInFlight(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal(_) | Self::StoreDamaged(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable code.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::SessionNotFound => "session_not_found",
            Self::SessionExpired => "session_expired",
            Self::SessionNotActive(_) => "session_not_active",
            Self::RequestNotPending(_) => "request_not_pending",
            Self::InputAlreadyAnswered(_) => "input_already_answered",
            Self::BadRequest { code, .. } => code,
            Self::Unauthorized { .. } => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::StubsForbidden(_) => "stubs_forbidden",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::Upload { status: 415, .. } => "unsupported_media_type",
            Self::Upload { .. } => "payload_too_large",
            Self::RouteNotFound(_) => "not_found",
            Self::ScheduleNotFound(_) => "schedule_not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::ReleaseNotFound(_) => "release_not_found",
            Self::ReleaseRefused(_) => "release_refused",
            Self::Unavailable(_) => "unavailable",
            Self::TooManyInFlight(_) => "too_many_in_flight",
            Self::Internal(_) => "internal_error",
            Self::StoreDamaged(_) => "store_damaged",
        }
    }

    /// The JSON body: `{"code", "error", "ok": false}`; an answer that came second also gets
    /// the one that won: `requestId`, `outcome`, `responderPrincipalId`, `answeredAt`.
    pub(crate) fn body(&self) -> serde_json::Value {
        let mut body = json!({"code": self.code(), "error": self.to_string(), "ok": false});
        if let Self::Upload { violations, .. } = self {
            body["violations"] = json!(violations);
        }
        if let Self::InputAlreadyAnswered(won) = self {
            body["requestId"] = json!(won.id);
            body["outcome"] = json!(won.status.as_str());
            body["responderPrincipalId"] = json!(
                won.responder
                    .as_deref()
                    .unwrap_or(crate::engine::LOCAL_PRINCIPAL)
            );
            body["answeredAt"] = json!(won.answered_at.map(crate::store::rfc3339));
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(detail) => tracing::error!(error = %detail, "request failed"),
            Self::StoreDamaged(detail) => {
                tracing::error!(error = %detail, "request failed: a read hit damaged storage");
            }
            _ => {}
        }
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if let Self::SessionExpired = &self {
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        if let Self::TooManyInFlight(_) = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let Self::Unauthorized { challenge } = &self {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        response
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::SessionNotFound(_) => Self::SessionNotFound,
            RuntimeError::SessionExpired(_) => Self::SessionExpired,
            RuntimeError::SessionNotActive { .. } => Self::SessionNotActive(format!("{e}.")),
            RuntimeError::NoSuchRequest(m) => Self::RequestNotPending(format!("{m}.")),
            RuntimeError::InputAlreadyAnswered(won) => Self::InputAlreadyAnswered(won),
            RuntimeError::InvalidAnswer(m) => Self::bad_request("invalid_input_response", m),
            RuntimeError::EmptyMessage => {
                Self::bad_request("empty_message", "`message` is empty: send some text.")
            }
            RuntimeError::Build { .. } => Self::Unavailable(format!("{e}.")),
            RuntimeError::ReleaseNotFound(_) => Self::ReleaseNotFound(e.to_string()),
            RuntimeError::Release(m) => Self::ReleaseRefused(m),
            // Nothing was stored: say so (503), never a 202 that is not durable.
            RuntimeError::Store(s) if s.is_storage_fault() => Self::Unavailable(format!(
                "The store cannot be written now ({s}); nothing was accepted. Try again later."
            )),
            RuntimeError::Store(s) if s.is_damage() => Self::StoreDamaged(s.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A `${VAR}` in `channels/eve.yaml` names a variable that is not set.
    #[error("{file}: `{field}` references ${{{var}}}, which is not set: export it before starting")]
    MissingSecret {
        /// Channel source file.
        file: String,
        /// Field holding the reference.
        field: String,
        /// Variable name.
        var: String,
    },
    /// A setting of the channel is not usable.
    #[error("{file}: {message}")]
    InvalidSetting {
        /// Channel source file.
        file: String,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// Serving without authentication on an address other machines can reach.
    #[error(
        "refusing to serve the session API on {host} without authentication: bind a loopback \
         address (--host 127.0.0.1), or configure `auth:` (bearer, basic or jwt) in \
         agent/channels/eve.yaml"
    )]
    PublicWithoutAuth {
        /// The requested host.
        host: String,
    },
    /// Binding or serving failed.
    #[error("cannot serve on {addr}: {source}")]
    Io {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
}
