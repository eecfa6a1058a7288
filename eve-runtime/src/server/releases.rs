//! Releases over HTTP, behind the API's authentication: `GET /eve/v1/releases` (all, and which
//! is active), `GET /eve/v1/releases/{id}`, `POST /eve/v1/releases/{id}/activate` (`{force?}`),
//! `POST /eve/v1/rollback` (`{to?, reason?}`), and `GET /eve/v1/releases/stream`, the audit
//! events as NDJSON or Server-Sent Events (`Accept: text/event-stream`, `Last-Event-ID`), framed
//! as a session's stream, stored then live.
//!
//! Every release route is an operator's (the `operators:` of `channels/eve.yaml`, or every caller
//! of an API without authentication, which answers loopback only): the route table puts the
//! operator check on each, and anyone else gets `403 forbidden`. Activating and rolling back are
//! recorded with the caller's principal.

use std::collections::VecDeque;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use super::auth::Identity;
use super::body;
use super::error::ApiError;
use super::stream::{last_event_id, wants_sse};
use crate::engine::RuntimeError;
use crate::releases::Release;
use crate::store::ReleaseStatus;

fn release_json(r: &Release) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    v["widens"] = json!(r.delta.widens());
    v
}

fn error(e: RuntimeError) -> ApiError {
    ApiError::from(e)
}

/// The principal recorded with a change of the active release (the route's layer let only an
/// operator through).
fn may_change(identity: &Identity) -> Result<String, ApiError> {
    Ok(identity.principal_id())
}

/// `GET /eve/v1/releases`: `{ok, active, releases: [...]}` (oldest first).
pub(crate) async fn list(State(app): State<App>) -> Result<Response, ApiError> {
    let all = app.runtime.releases_list().await.map_err(error)?;
    let active = all
        .iter()
        .find(|r| r.status == ReleaseStatus::Active)
        .map(|r| r.id.clone());
    let releases: Vec<Value> = all.iter().map(release_json).collect();
    Ok(Json(json!({"ok": true, "active": active, "releases": releases})).into_response())
}

/// `GET /eve/v1/releases/{id}`: `{ok, release}`.
pub(crate) async fn show(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = release_id(id)?;
    let r = app.runtime.release(&id).await.map_err(error)?;
    Ok(Json(json!({"ok": true, "release": release_json(&r)})).into_response())
}

/// The `{id}` of a release route; one that does not decode (not UTF-8) names no release.
fn release_id(id: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    id.map(|Path(id)| id).map_err(|_| {
        ApiError::ReleaseNotFound(
            "no release or build with this id: it is not UTF-8 once decoded (`eve releases` \
             lists them)"
                .to_owned(),
        )
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateBody {
    #[serde(default)]
    force: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RollbackBody {
    to: Option<String>,
    reason: Option<String>,
}

fn parse<T: Default + for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("invalid_body", format!("invalid {what} request: {e}")))
}

/// `POST /eve/v1/releases/{id}/activate` `{force?}`: `{ok, release}`.
pub(crate) async fn activate(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    id: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = release_id(id)?;
    let principal = may_change(&identity)?;
    let bytes = body::bytes(body, app.config.body_limit)?;
    let request: ActivateBody = parse(&bytes, "activate")?;
    let r = app
        .runtime
        .activate(&id, &principal, request.force)
        .await
        .map_err(error)?;
    Ok(Json(json!({"ok": true, "release": release_json(&r)})).into_response())
}

/// `POST /eve/v1/rollback` `{to?, reason?}`: `{ok, release}` (the release now active).
pub(crate) async fn rollback(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let principal = may_change(&identity)?;
    let bytes = body::bytes(body, app.config.body_limit)?;
    let request: RollbackBody = parse(&bytes, "rollback")?;
    let reason = request
        .reason
        .unwrap_or_else(|| format!("rolled back over the API by {principal}"));
    let r = app
        .runtime
        .rollback(request.to.as_deref(), &principal, &reason)
        .await
        .map_err(error)?;
    Ok(Json(json!({"ok": true, "release": release_json(&r)})).into_response())
}

/// Query of the releases' stream.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StreamQuery {
    /// First event index.
    #[serde(default)]
    start_index: Option<u64>,
    /// `false`: end once the stored events are sent.
    #[serde(default)]
    follow: Option<String>,
}

/// `GET /eve/v1/releases/stream`: the releases' audit events, stored then live.
pub(crate) async fn stream(
    State(app): State<App>,
    body::ApiQuery(query): body::ApiQuery<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let sse = wants_sse(&headers);
    let start = match (
        sse.then(|| last_event_id(&headers)).flatten(),
        query.start_index,
    ) {
        (Some(last), _) => last.saturating_add(1),
        (None, Some(n)) => n,
        (None, None) => 0,
    };
    let follow = match query.follow.as_deref() {
        None | Some("true") | Some("1") => true,
        Some("false") | Some("0") => false,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("`follow` is `{other}`; use `true` or `false`"),
            ));
        }
    };
    let runtime = app.runtime.clone();
    let shutdown = app.config.shutdown.clone();
    let heartbeat = app.config.heartbeat;
    let stored_end = if follow {
        None
    } else {
        Some(runtime.release_events(start, 0).await.map_err(error)?.len())
    };
    struct St {
        follower: crate::releases::ReleaseFollower,
        out: VecDeque<Bytes>,
        left: Option<usize>,
        started: bool,
        done: bool,
    }
    let state = St {
        follower: runtime.follow_releases(start),
        out: VecDeque::new(),
        left: stored_end,
        started: false,
        done: false,
    };
    let body = futures::stream::unfold(state, move |mut st| {
        let shutdown = shutdown.clone();
        async move {
            loop {
                if let Some(b) = st.out.pop_front() {
                    return Some((Ok::<_, std::io::Error>(b), st));
                }
                if st.done {
                    return None;
                }
                if !st.started {
                    st.started = true;
                    st.out.push_back(if sse {
                        Bytes::from_static(b"retry: 1000\n\n")
                    } else {
                        Bytes::from_static(b"\n")
                    });
                    continue;
                }
                if st.left == Some(0) {
                    return None;
                }
                let next = tokio::select! {
                    () = shutdown.cancelled() => return None,
                    () = tokio::time::sleep(heartbeat), if sse => None,
                    e = st.follower.next() => Some(e),
                };
                match next {
                    None => st.out.push_back(Bytes::from_static(b": keep-alive\n\n")),
                    Some(Err(e)) => {
                        let failure = super::stream::StreamFailure::of("releases", e);
                        st.out.push_back(failure.bytes(sse));
                        st.done = true;
                    }
                    Some(Ok(event)) => {
                        let wire = event.to_wire();
                        st.out.push_back(Bytes::from(if sse {
                            format!("id: {}\ndata: {wire}\n\n", event.index)
                        } else {
                            format!("{wire}\n")
                        }));
                        if let Some(left) = st.left.as_mut() {
                            *left = left.saturating_sub(1);
                        }
                    }
                }
            }
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    let h = response.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, no-transform"),
    );
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if sse {
            "text/event-stream; charset=utf-8"
        } else {
            "application/x-ndjson; charset=utf-8"
        }),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
