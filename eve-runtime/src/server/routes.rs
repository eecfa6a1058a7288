//! Handlers of the `/eve/v1` routes: each turns a request into one [`Runtime`] call and an
//! eve-shaped answer.
//!
//! Accepting work is durable before the answer: `202 accepted` means the message is in the
//! session's inbox (or the answer is stored) and a driver has been told. Handlers never panic on
//! input; every failure is an [`ApiError`].

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::App;
use super::auth::Identity;
use super::body::{self, InputResponse, SessionInput};
use super::config::{authority_host, is_loopback_host};
use super::error::ApiError;
use super::stream::{self, EventCursor, Format};
use super::ui::{self, ChatInput, UI_STREAM_VERSION, UiStream};
use crate::engine::{Accept, Caller, Extra, Runtime, RuntimeError, SessionRef};
use crate::store::SessionStatus;

/// Longest session id looked up; longer ones cannot exist.
const MAX_ID_LEN: usize = 128;

fn accepted(session: &str) -> Response {
    accepted_delivery(session, None)
}

/// `202 accepted`; for a message, with its `deliveryId` (the inbox id): the events of the turn
/// that takes the message carry it in `meta.deliveryIds`, which is how eve's client finds the
/// turn boundary of the message it sent.
fn accepted_delivery(session: &str, delivery: Option<&str>) -> Response {
    let mut body = json!({"ok": true, "sessionId": session, "status": "accepted"});
    if let Some(delivery) = delivery {
        body["deliveryId"] = json!(delivery);
    }
    let mut response = (StatusCode::ACCEPTED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(session) {
        response.headers_mut().insert("x-eve-session-id", v);
    }
    response
}

fn done(session: &str, status: &str) -> Response {
    (
        StatusCode::OK,
        Json(json!({"ok": true, "sessionId": session, "status": status})),
    )
        .into_response()
}

/// The `:id` of a session route; an id that cannot name a session (not UTF-8 after decoding, empty,
/// too long) is a 404 like any unknown id.
pub(crate) struct SessionId(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::SessionNotFound)?;
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return Err(ApiError::SessionNotFound);
        }
        Ok(Self(id))
    }
}

/// Authentication, and for an API without it: only connections whose peer is a loopback
/// address (the socket's, never a header's word: a forwarder on another address, or a packet
/// routed to loopback from elsewhere, is refused), and protection of that loopback server from
/// browsers: a `Host` that is not a loopback name (DNS rebinding) or a foreign `Origin` is refused.
pub(crate) async fn guard(State(app): State<App>, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !app.config.auth.is_required() {
        let peer = request
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0);
        if !peer.is_some_and(|p| eve_sandbox::egress::canonical(p.ip()).is_loopback()) {
            let from = peer.map_or_else(|| "an unknown address".to_owned(), |p| p.ip().to_string());
            return ApiError::Forbidden(format!(
                "This API has no authentication and only answers connections from this \
                 machine's loopback; this one came from {from}. Configure `auth:` in \
                 agent/channels/eve.yaml to serve other machines."
            ))
            .into_response();
        }
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(authority_host);
        if host.is_some_and(|h| !is_loopback_host(h)) {
            return ApiError::Forbidden(
                "This API has no authentication and only answers requests addressed to a \
                 loopback host."
                    .to_owned(),
            )
            .into_response();
        }
        if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
            let host = origin.split_once("://").map_or("", |(_, rest)| rest);
            let host = authority_host(host.split('/').next().unwrap_or_default());
            if !is_loopback_host(host) && !app.config.origin_allowed(origin) {
                return ApiError::Forbidden(format!(
                    "Origin {origin} may not call this API: list it under `cors.origins` in \
                     agent/channels/eve.yaml."
                ))
                .into_response();
            }
        }
    }
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match app
        .config
        .auth
        .verify(authorization, chrono::Utc::now().timestamp())
        .await
    {
        Ok(verified) => {
            // The caller is its principal with the attributes its method carries.
            let caller = app
                .config
                .operators
                .caller(&verified.identity, verified.claims.as_ref())
                .with_attributes(verified.attributes.clone());
            request.extensions_mut().insert(verified.identity);
            request.extensions_mut().insert(caller.clone());
            request
                .extensions_mut()
                .insert(super::auth::Attributes(verified.attributes));
            // A trusted forwarder's request acts as the principal it forwards.
            match super::forwarded::apply(&app, request, &caller).await {
                Ok(request) => next.run(request).await,
                Err(e) => e.into_response(),
            }
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /eve/v1/health`.
pub(crate) async fn health(State(app): State<App>) -> Result<Response, ApiError> {
    let hash = app.runtime.builds().current_hash()?;
    if let Some(reason) = app.runtime.store().write_fault().await {
        let body = json!({"ok": false, "status": "degraded", "reason": reason, "workflowId": hash});
        return Ok((axum::http::StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response());
    }
    Ok(Json(json!({"ok": true, "status": "ready", "workflowId": hash})).into_response())
}

/// `GET /metrics`: the runtime's Prometheus metrics (operators only, like the releases).
pub(crate) async fn metrics(State(app): State<App>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        app.runtime.metrics_text(),
    )
        .into_response()
}

/// `GET /eve/v1/info`: eve's agent-info document (see `agent_info`).
pub(crate) async fn info(State(app): State<App>) -> Result<Response, ApiError> {
    let build = app.runtime.builds().current()?;
    let state = app.runtime.state_dir();
    let root = state.parent().unwrap_or(state);
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let dev = app.scheduler.is_some();
    Ok(Json(super::agent_info::document(&build, &root, dev)).into_response())
}

/// Who sent a message, for the `user` memory scope: the authenticated principal, with its
/// attributes when it has some (`jwt:alice{"tenant":"acme"}`: the same subject under another
/// tenant is another user); nobody for an API without authentication (anonymous callers must
/// not share one user's memory).
fn sender(identity: &Identity, caller: &Caller) -> Option<String> {
    match identity {
        Identity::Anonymous => None,
        other => Some(crate::tenancy::principal_key(
            &other.principal_id(),
            caller.attributes(),
        )),
    }
}

/// A valid W3C `traceparent` header of the request: the turn its message starts joins the
/// caller's trace (a malformed one is ignored, as the spec says).
fn with_traceparent(mut options: body::TurnOptions, headers: &HeaderMap) -> body::TurnOptions {
    if let Some(traceparent) = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|t| crate::telemetry::parse_traceparent(t).is_some())
    {
        options
            .input
            .get_or_insert_with(Default::default)
            .traceparent = Some(traceparent.trim().to_owned());
    }
    options
}

/// Admits one more message of `caller` under the API's `limits:` (a new session when `target`
/// is `None`); `None` when nothing bounds it (no `limits:`, an operator).
async fn admit(
    app: &App,
    caller: &Caller,
    target: Option<&str>,
) -> Result<Option<super::quota::Admission>, ApiError> {
    let Some(bounds) = app.config.limits else {
        return Ok(None);
    };
    if super::tenancy::reach(app, caller).is_operator() {
        return Ok(None);
    }
    app.config
        .quota
        .admit(&app.runtime, caller.id(), target, bounds)
        .await
        .map(Some)
        .map_err(|refused| match refused {
            super::quota::Refused::Busy(message) => ApiError::TooManyInFlight(message),
            super::quota::Refused::Internal(detail) => ApiError::Internal(detail),
        })
}

/// `POST /eve/v1/session`: a new session, with an optional first message. It belongs to the
/// caller (see `engine::tenancy`).
pub(crate) async fn create_session(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body::bytes(body, app.config.message_limit())?;
    let input = body::create(&bytes)?;
    let options = with_traceparent(body::turn_options(&bytes)?, &headers);
    let mut extra: Vec<Extra> = sender(&identity, &caller)
        .map(Extra::Sender)
        .into_iter()
        .collect();
    extra.push(Extra::Owner(caller.id().to_owned()));
    extra.push(Extra::OwnerAttributes(caller.attributes().clone()));
    if let Some(stubs) = options.stubs {
        // A stub replaces what a tool does: the operator's decision, never a stranger's.
        if !super::tenancy::reach(&app, &caller).is_operator() {
            return Err(ApiError::StubsForbidden(
                "Only an operator may set tool stubs on a session.".to_owned(),
            ));
        }
        extra.push(Extra::Stubs(stubs));
    }
    let session = SessionRef::new_session(None);
    // Counted before the files are staged, so a refused message leaves nothing behind.
    let admission = match &input {
        Some(_) => admit(&app, &caller, None).await?,
        None => None,
    };
    let mut message = None;
    if let Some(input) = input {
        let SessionRef::New { id, .. } = &session else {
            return Err(ApiError::Internal("a new session has no id".to_owned()));
        };
        let (text, attachments) = staged(&app, id, bytes.len(), input).await?;
        extra.push(Extra::Attachments(attachments));
        message = Some(text);
    }
    if let Some(input) = options.input {
        if message.is_none() && input.shapes_turn() {
            return Err(ApiError::bad_request(
                "invalid_body",
                "`outputSchema` and `clientContext` need a `message` to start a turn.",
            ));
        }
        extra.push(Extra::Input(input));
    }
    let accepted = app
        .runtime
        .accept(Accept {
            session,
            message,
            extra,
        })
        .await?
        .ok_or_else(|| ApiError::Internal("the new session was not stored".to_owned()))?;
    if let Some(admission) = admission {
        admission.record(&accepted.session);
    }
    Ok(accepted_delivery(
        &accepted.session,
        accepted.inbox_id.as_deref(),
    ))
}

/// A message's files checked against the channel's upload policy and staged in the workspace of
/// session `id`; `body_len` is the request body's length, whose part outside the files must
/// still fit the usual body limit. Returns the text and the staged files' references.
pub(super) async fn staged(
    app: &App,
    id: &str,
    body_len: usize,
    input: super::uploads::UserInput,
) -> Result<(String, Vec<crate::model::Attachment>), ApiError> {
    let encoded: usize = input.files.iter().map(|f| f.bytes.len() / 3 * 4).sum();
    if body_len.saturating_sub(encoded) > app.config.body_limit {
        return Err(ApiError::PayloadTooLarge {
            limit: app.config.body_limit,
        });
    }
    app.config.uploads.check(&input.files)?;
    if input.text.trim().is_empty() && input.files.is_empty() {
        return Err(ApiError::from(RuntimeError::EmptyMessage));
    }
    let attachments = app.runtime.stage_uploads(id, input.files).await?;
    Ok((input.text, attachments))
}

/// Answers `responses` on session `id` as `caller` (its principal lands in `approval.settled`).
/// Every response is checked before any is answered: one naming a request answered first is
/// `409 input_already_answered` with the answer that won, one naming no waiting request
/// `409 request_not_pending`.
async fn answer(
    runtime: &Runtime,
    id: &str,
    responses: &[InputResponse],
    caller: &Caller,
) -> Result<(), ApiError> {
    let pending = runtime.pending_inputs(id).await?;
    for r in responses {
        if pending.iter().any(|p| p.id == r.request_id) {
            continue;
        }
        if let Some(won) = runtime.answered_request(id, &r.request_id).await? {
            return Err(ApiError::from(RuntimeError::from_settled(won)));
        }
        if pending.is_empty() {
            return Err(ApiError::SessionNotActive(format!(
                "Session {id} is not waiting for input."
            )));
        }
        return Err(ApiError::RequestNotPending(format!(
            "Input request {} is not pending in session {id}.",
            r.request_id
        )));
    }
    for r in responses {
        runtime
            .respond_input_by(id, &r.request_id, &r.answer(), caller)
            .await?;
    }
    Ok(())
}

/// `POST /eve/v1/session/:id`: a message or answers to input requests.
pub(crate) async fn post_session(
    State(app): State<App>,
    SessionId(id): SessionId,
    Extension(identity): Extension<Identity>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body::bytes(body, app.config.message_limit())?;
    let options = with_traceparent(body::turn_options(&bytes)?, &headers);
    if options.stubs.is_some() {
        return Err(ApiError::bad_request(
            "invalid_body",
            "Tool stubs are set when a session is created (`POST /eve/v1/session`).",
        ));
    }
    match body::session_input(&bytes)? {
        SessionInput::Message(input) => {
            // A message that answers the pending requests it matches ("approve", an option of
            // a question) is that answer, as in eve. Its `deliveryId` is the one the resumed
            // turn's events carry (the message that started it), so eve's client follows that
            // turn to its end. A message with files, or one that asks something of its turn,
            // is always a message.
            if input.files.is_empty()
                && options.input.is_none()
                && !app
                    .runtime
                    .answer_by_text(&id, &input.text, &caller)
                    .await?
                    .is_empty()
            {
                let turn = app
                    .runtime
                    .store()
                    .last_turn(&id)
                    .await
                    .map_err(|e| ApiError::Internal(e.to_string()))?;
                let delivery = turn.and_then(|t| t.inbox_id);
                return Ok(accepted_delivery(&id, delivery.as_deref()));
            }
            if app.runtime.session(&id).await?.is_none() {
                return Err(ApiError::SessionNotFound);
            }
            let admission = admit(&app, &caller, Some(&id)).await?;
            let (text, attachments) = staged(&app, &id, bytes.len(), input).await?;
            let mut accept = Accept::message(SessionRef::Existing(id.clone()), text);
            accept
                .extra
                .extend(sender(&identity, &caller).map(Extra::Sender));
            if !attachments.is_empty() {
                accept.extra.push(Extra::Attachments(attachments));
            }
            accept.extra.extend(options.input.map(Extra::Input));
            let delivery = app
                .runtime
                .accept(accept)
                .await?
                .and_then(|a| a.inbox_id)
                .ok_or_else(|| ApiError::Internal("the message was not stored".to_owned()))?;
            if let Some(admission) = admission {
                admission.record(&id);
            }
            return Ok(accepted_delivery(&id, Some(&delivery)));
        }
        SessionInput::InputResponses(responses) => {
            if app.runtime.session(&id).await?.is_none() {
                return Err(ApiError::SessionNotFound);
            }
            if let Some(input) = &options.input {
                // The turn the answers resume runs under what they ask.
                if input.shapes_turn() && !app.runtime.pending_inputs(&id).await?.is_empty() {
                    app.runtime.set_waiting_turn_input(&id, input).await?;
                }
            }
            answer(&app.runtime, &id, &responses, &caller).await?;
        }
    }
    Ok(accepted(&id))
}

/// `POST /eve/v1/session/:id/cancel`: `202 accepted` when a turn is running or parked, else
/// `200 no_active_turn`.
pub(crate) async fn cancel(
    State(app): State<App>,
    SessionId(id): SessionId,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body::bytes(body, app.config.body_limit)?;
    let turn_id = body::cancel(&bytes)?;
    let record = app
        .runtime
        .session(&id)
        .await?
        .ok_or(ApiError::SessionNotFound)?;
    let no_active = || {
        (
            StatusCode::OK,
            Json(json!({"ok": true, "status": "no_active_turn"})),
        )
            .into_response()
    };
    if record.status == SessionStatus::Idle {
        return Ok(no_active());
    }
    if let Some(turn_id) = turn_id {
        let current = app
            .runtime
            .store()
            .last_turn(&id)
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if current.is_none_or(|t| t.turn_id() != turn_id) {
            return Ok(no_active());
        }
    }
    app.runtime.cancel(&id).await?;
    Ok(accepted(&id))
}

/// `POST /eve/v1/session/:id/compact`.
pub(crate) async fn compact(
    State(app): State<App>,
    SessionId(id): SessionId,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    body::control(&body::bytes(body, app.config.body_limit)?)?;
    app.runtime.compact(&id).await?;
    Ok(done(&id, "accepted"))
}

/// `POST /eve/v1/session/:id/clear`.
pub(crate) async fn clear(
    State(app): State<App>,
    SessionId(id): SessionId,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    body::control(&body::bytes(body, app.config.body_limit)?)?;
    app.runtime.clear(&id).await?;
    Ok(done(&id, "accepted"))
}

/// `POST /eve/v1/session/:id/reset`.
pub(crate) async fn reset(
    State(app): State<App>,
    SessionId(id): SessionId,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    body::control(&body::bytes(body, app.config.body_limit)?)?;
    app.runtime.reset(&id).await?;
    // eve's client checks `previousSessionId`: a reset keeps the session id.
    Ok((
        StatusCode::OK,
        Json(json!({"ok": true, "sessionId": id, "previousSessionId": id, "status": "reset"})),
    )
        .into_response())
}

/// `GET /eve/v1/session/:id/stream`.
pub(crate) async fn stream(
    State(app): State<App>,
    SessionId(id): SessionId,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = stream::parse_query(query.as_deref())?;
    stream::respond(
        app.runtime.clone(),
        id,
        query,
        &headers,
        app.config.heartbeat,
        app.config.stream_lease,
        app.config.shutdown.clone(),
    )
    .await
}

/// `POST /eve/v1/chat`: one turn as an AI SDK UI message stream. The chat id names a session of
/// the caller's own (see [`ui::chat_session`]); a session it does not reach is a 404.
pub(crate) async fn chat(
    State(app): State<App>,
    Extension(identity): Extension<Identity>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body::bytes(body, app.config.message_limit())?;
    let request = ui::parse_chat(&bytes)?;
    let reach = super::tenancy::reach(&app, &caller);
    let (id, may_create) = ui::chat_session(&request.chat_id, &reach);
    if let ChatInput::Message(input) = &request.input {
        if input.text.trim().is_empty() && input.files.is_empty() {
            return Err(ApiError::bad_request(
                "empty_message",
                "The last message has no text.",
            ));
        }
        if may_create {
            app.runtime
                .ensure_session_owned(&id, Some(caller.id().to_owned()), caller.attributes())
                .await?;
        }
    }
    let record = app.runtime.session_for(&id, &reach).await?;
    let from = record.event_count;
    match request.input {
        ChatInput::Message(input) => {
            let (text, attachments) = staged(&app, &id, bytes.len(), input).await?;
            app.runtime
                .post_content_from(&id, &text, attachments, sender(&identity, &caller))
                .await?;
        }
        ChatInput::InputResponses(responses) => {
            answer(&app.runtime, &id, &responses, &caller).await?
        }
    }
    let cursor = EventCursor::follow(
        app.runtime.clone(),
        id.clone(),
        from,
        app.config.shutdown.clone(),
    );
    let message_id = format!("msg_{}", ulid::Ulid::new());
    let format = Format::Ui(Box::new(UiStream::new(message_id)));
    let mut response = Response::new(Body::from_stream(stream::body_stream(
        cursor,
        format,
        app.config.heartbeat,
        None,
    )));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    h.insert(
        "x-vercel-ai-ui-message-stream",
        HeaderValue::from_static(UI_STREAM_VERSION),
    );
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-eve-session-id", v);
    }
    Ok(response)
}

/// Unknown routes.
pub(crate) async fn not_found(request: Request) -> ApiError {
    ApiError::RouteNotFound(format!("{} {}", request.method(), request.uri().path()))
}

/// Known routes with another method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
