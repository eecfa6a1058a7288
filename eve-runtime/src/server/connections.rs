//! `GET /eve/v1/connections/NAME/callback`: where the browser comes back after a user signed in
//! to a user-scoped connection (`credentials: user`). The route is public: the browser carries
//! no credentials of eve, and the `state` in the query is the only key, single-use and bound to
//! the session and principal that started the flow ([`Runtime::complete_authorization`]). A
//! `state` that names no pending flow (forged, replayed, expired) is refused with `400` and
//! changes nothing.

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::App;
use super::error::ApiError;
use crate::engine::RuntimeError;
use crate::features::authorize::Completed;
use crate::mcp::oauth::user::Callback;

/// Completes the sign-in and tells the browser how it went (plain text).
pub(crate) async fn callback(
    State(app): State<App>,
    Path(name): Path<String>,
    Query(callback): Query<Callback>,
) -> Result<Response, ApiError> {
    let text = match app.runtime.complete_authorization(&name, callback).await {
        Ok(Completed::Authorized) => {
            format!("Signed in to {name}. You can close this window and return to the agent.")
        }
        Ok(Completed::NotAuthorized(why)) => format!(
            "Signing in to {name} did not complete ({why}). The agent was told; ask it again to \
             retry."
        ),
        Err(RuntimeError::NoSuchRequest(why)) => {
            return Err(ApiError::bad_request("authorization_refused", why));
        }
        Err(e) => return Err(e.into()),
    };
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response())
}
