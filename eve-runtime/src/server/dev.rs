//! Routes served only in dev mode (`eve dev`): `POST /eve/v1/dev/schedules/:id` fires a schedule
//! once, now, whatever its cron, so a schedule's prompt can be tried without waiting for it.
//!
//! Outside dev mode the route is not registered at all: the request gets the ordinary 404 of an
//! unknown route.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::App;
use super::error::ApiError;
use crate::schedule::ScheduleError;

/// `POST /eve/v1/dev/schedules/:id`: `202 {ok, sessionId, status: "accepted", schedule}`.
pub(crate) async fn fire_schedule(
    State(app): State<App>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    // A name that does not decode (not UTF-8) names no schedule.
    let name = name.map(|Path(n)| n).unwrap_or_default();
    let Some(scheduler) = app.scheduler.as_ref() else {
        return Err(ApiError::RouteNotFound(format!(
            "POST /eve/v1/dev/schedules/{name}"
        )));
    };
    let fire = scheduler.fire_now(&name).await.map_err(|e| match e {
        ScheduleError::NotFound(name) => ApiError::ScheduleNotFound(name),
        ScheduleError::Runtime(e) => ApiError::from(e),
        other => ApiError::Internal(other.to_string()),
    })?;
    let session = fire.session_id.unwrap_or_default();
    let mut response = (
        StatusCode::ACCEPTED,
        Json(json!({
            "ok": true,
            "sessionId": session,
            "status": "accepted",
            "schedule": fire.schedule,
        })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&session) {
        response.headers_mut().insert("x-eve-session-id", v);
    }
    Ok(response)
}
