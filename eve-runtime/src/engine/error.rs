//! Errors of the session engine: what a caller of [`super::Runtime`] can get back.

use crate::model::ModelError;
use crate::store::StoreError;

/// Why a runtime operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The model could not be set up.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A value could not be encoded or decoded.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// No session with this id.
    #[error("session `{0}` not found")]
    SessionNotFound(String),
    /// The session stayed idle past `limits.session_timeout`: it can no longer be addressed.
    #[error("session `{0}` expired (idle longer than limits.session_timeout)")]
    SessionExpired(String),
    /// The session cannot do this now (for example a clear while a turn runs).
    #[error("session `{id}` is {status}: {what} needs an idle session")]
    SessionNotActive {
        /// Session.
        id: String,
        /// Its status.
        status: String,
        /// What was asked.
        what: String,
    },
    /// No pending input request matches.
    #[error("{0}")]
    NoSuchRequest(String),
    /// The input request was answered first by someone else: this answer does not count.
    /// Carries the request as stored, with the answer that won.
    #[error(
        "input request `{}` was already answered: {} by {}",
        .0.id,
        .0.status,
        .0.responder.as_deref().unwrap_or(crate::engine::LOCAL_PRINCIPAL)
    )]
    InputAlreadyAnswered(Box<crate::store::InputRequestRecord>),
    /// An answer that does not fit its request (an option it does not have, free text where it
    /// takes none): the request stays pending.
    #[error("{0}")]
    InvalidAnswer(String),
    /// The build could not be loaded.
    #[error("cannot load build {what}: {message}")]
    Build {
        /// Which build.
        what: String,
        /// Why.
        message: String,
    },
    /// The message is empty.
    #[error("the message is empty")]
    EmptyMessage,
    /// No release (or build) with this id or hash.
    #[error("no release or build `{0}` (`eve releases` lists them)")]
    ReleaseNotFound(String),
    /// A release action was refused (a rejected release, nothing to roll back to, …).
    #[error("{0}")]
    Release(String),
    /// Anything else, said plainly.
    #[error("{0}")]
    Other(String),
}

/// Result alias of the engine.
pub type RuntimeResult<T> = Result<T, RuntimeError>;
