//! Invocations of the MCP channel: one eve session each, started, read, answered, followed up and
//! cancelled by the principal that started it (an operator reaches every one; anyone else is told
//! the invocation does not exist, as for an unknown id).
//!
//! The state a client reads is projected from what the session stores, as eve projects it from
//! its workflow run: the pending input batch (`input_required`), work in flight (`working`), and
//! how the last turn ended (`completed` with the final assistant message as `result`, `failed`
//! with a JSON-RPC style `error`, `cancelled`).

use serde_json::{Map, Value, json};

use super::ToolError;
use crate::engine::{Accept, Caller, Extra, InputAnswer, Runtime, RuntimeError, SessionRef};
use crate::server::quota::{Admission, Bounds, Quota, Refused};
use crate::store::{InputRequestRecord, RequestStatus, SessionRecord, SessionStatus};

/// How long a client waits before polling a working invocation again, in milliseconds.
const POLL_AFTER_MS: u64 = 1000;

/// How many of a session's last events the state is projected from: the current turn's (a turn
/// longer than this still projects right: pending inputs and status come from the store, only
/// the `result` text of an older message could be missed).
const EVENT_WINDOW: u64 = 512;

/// One answer of an `agent_update` batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Response {
    pub(super) request_id: String,
    pub(super) option_id: Option<String>,
    pub(super) text: Option<String>,
}

/// The invocation operations, as `caller` (its principal starts and owns what it starts).
pub(super) struct Invocations<'a> {
    pub(super) runtime: &'a Runtime,
    /// Whom the sessions are checked against (an operator for everyone when the test-only
    /// ownership switch is off).
    pub(super) reach: Caller,
    /// The authenticated principal (`None` for an API without authentication), as sender.
    pub(super) sender: Option<String>,
    /// The principal recorded as the session's owner.
    pub(super) owner: String,
    /// Per-principal admissions and their bounds (`None`: unbounded, tests only).
    pub(super) quota: Option<(Quota, Bounds)>,
    /// Its attributes, recorded with the session.
    pub(super) owner_attributes: serde_json::Map<String, serde_json::Value>,
}

impl Invocations<'_> {
    /// `agent_start`: a new session owned by the caller, with `message` durably in its inbox.
    pub(super) async fn start(&self, message: String) -> Result<Value, ToolError> {
        let admission = self.admit(None).await?;
        let mut extra: Vec<Extra> = self.sender.clone().map(Extra::Sender).into_iter().collect();
        extra.push(Extra::Owner(self.owner.clone()));
        extra.push(Extra::OwnerAttributes(self.owner_attributes.clone()));
        let accepted = self
            .runtime
            .accept(Accept {
                session: SessionRef::new_session(None),
                message: Some(message),
                extra,
            })
            .await
            .map_err(internal)?
            .ok_or_else(|| ToolError::internal("the new session was not stored"))?;
        if let Some(admission) = admission {
            admission.record(&accepted.session);
        }
        let record = self
            .runtime
            .session(&accepted.session)
            .await
            .map_err(internal)?
            .ok_or_else(|| ToolError::internal("the new session was not stored"))?;
        let mut state = base(&record);
        state.insert("pollAfterMs".into(), json!(POLL_AFTER_MS));
        state.insert("status".into(), json!("working"));
        Ok(Value::Object(state))
    }

    /// `agent_get`: the invocation's complete current state.
    pub(super) async fn get(&self, id: &str) -> Result<Value, ToolError> {
        let record = self.record(id).await?;
        self.project(&record).await
    }

    /// `agent_update` with `responses`: answers the complete pending batch, then the current
    /// state. Re-sending answers already accepted returns the state; anything else that does not
    /// match the pending batch is a conflict.
    pub(super) async fn answer(
        &self,
        id: &str,
        responses: &[Response],
    ) -> Result<Value, ToolError> {
        let record = self.record(id).await?;
        let pending = self.runtime.pending_inputs(id).await.map_err(internal)?;
        if pending.is_empty() {
            if self.replays(id, responses).await? {
                return self.project(&record).await;
            }
            return Err(ToolError::conflict(
                "Invocation is not waiting for input. Call agent_get to read the current state \
                 before answering again.",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in responses {
            if !pending.iter().any(|p| p.id == r.request_id) {
                return Err(ToolError::conflict(format!(
                    "Unknown input request: {}. Call agent_get to read the current state before \
                     answering again.",
                    r.request_id
                )));
            }
            seen.insert(r.request_id.as_str());
        }
        if seen.len() != responses.len() || seen.len() != pending.len() {
            return Err(ToolError::conflict(
                "Responses must answer the complete pending input batch exactly once.",
            ));
        }
        for r in responses {
            let answer = InputAnswer {
                option_id: r.option_id.clone(),
                text: r.text.clone(),
            };
            match self
                .runtime
                .respond_input_by(id, &r.request_id, &answer, &self.reach)
                .await
            {
                Ok(_) => {}
                Err(RuntimeError::InvalidAnswer(m)) => return Err(ToolError::invalid(m)),
                Err(RuntimeError::InputAlreadyAnswered(_) | RuntimeError::NoSuchRequest(_)) => {
                    return Err(ToolError::conflict(
                        "Invocation input changed before the update could be applied.",
                    ));
                }
                Err(e) => return Err(internal(e)),
            }
        }
        let record = self.record(id).await?;
        self.project(&record).await
    }

    /// `agent_update` with `message`: a follow-up message to an invocation that is not waiting
    /// for input; the next turn takes it.
    pub(super) async fn follow_up(&self, id: &str, message: String) -> Result<Value, ToolError> {
        self.record(id).await?;
        if !self
            .runtime
            .pending_inputs(id)
            .await
            .map_err(internal)?
            .is_empty()
        {
            return Err(ToolError::conflict(
                "Invocation is waiting for input: answer its inputRequests with `responses`.",
            ));
        }
        let admission = self.admit(Some(id)).await?;
        let mut accept = Accept::message(SessionRef::Existing(id.to_owned()), message);
        accept.extra.extend(self.sender.clone().map(Extra::Sender));
        self.runtime.accept(accept).await.map_err(internal)?;
        if let Some(admission) = admission {
            admission.record(id);
        }
        let record = self.record(id).await?;
        let mut state = base(&record);
        state.insert("pollAfterMs".into(), json!(POLL_AFTER_MS));
        state.insert("status".into(), json!("working"));
        Ok(Value::Object(state))
    }

    /// `agent_cancel`: requests cancellation of non-terminal work; the state after it.
    pub(super) async fn cancel(&self, id: &str) -> Result<Value, ToolError> {
        let record = self.record(id).await?;
        let state = self.project(&record).await?;
        if matches!(
            state.get("status").and_then(Value::as_str),
            Some("completed" | "failed" | "cancelled")
        ) {
            return Ok(state);
        }
        match self.runtime.cancel(id).await {
            Ok(()) | Err(RuntimeError::SessionNotActive { .. }) => {}
            Err(e) => return Err(internal(e)),
        }
        let record = self.record(id).await?;
        self.project(&record).await
    }

    /// Admits one more message of the caller's principal under its bounds (`None` when
    /// unbounded); the refusal otherwise.
    async fn admit(&self, target: Option<&str>) -> Result<Option<Admission>, ToolError> {
        match &self.quota {
            None => Ok(None),
            Some((quota, bounds)) => quota
                .admit(self.runtime, &self.owner, target, *bounds)
                .await
                .map(Some)
                .map_err(|refused| match refused {
                    Refused::Busy(message) => ToolError::busy(message),
                    Refused::Internal(detail) => ToolError::internal(&detail),
                }),
        }
    }

    /// The session `id` as the caller reaches it; else `not_found`, whether it exists or not.
    async fn record(&self, id: &str) -> Result<SessionRecord, ToolError> {
        match self.runtime.session_for(id, &self.reach).await {
            Ok(record) => Ok(record),
            Err(RuntimeError::SessionNotFound(_)) => Err(ToolError::not_found()),
            Err(e) => Err(internal(e)),
        }
    }

    /// Whether `responses` repeat answers already accepted (every request answered, each with
    /// the same decision).
    async fn replays(&self, id: &str, responses: &[Response]) -> Result<bool, ToolError> {
        for r in responses {
            let Some(stored) = self
                .runtime
                .answered_request(id, &r.request_id)
                .await
                .map_err(internal)?
            else {
                return Ok(false);
            };
            let denied = r.option_id.as_deref() == Some("cancel");
            let same = match stored.status {
                RequestStatus::Approved => !denied,
                RequestStatus::Denied => denied,
                _ => false,
            };
            if !same {
                return Ok(false);
            }
        }
        Ok(!responses.is_empty())
    }

    /// The state of an invocation from its session (see the module docs).
    async fn project(&self, record: &SessionRecord) -> Result<Value, ToolError> {
        let id = record.id.as_str();
        let from = record.event_count.saturating_sub(EVENT_WINDOW);
        let events = self.runtime.events(id, from, 0).await.map_err(internal)?;
        let mut asked: Map<String, Value> = Map::new();
        let mut result: Option<Value> = None;
        let mut ended: Option<(&str, Value)> = None;
        for e in &events {
            match e.kind.as_str() {
                "turn.started" => {
                    result = None;
                    ended = None;
                }
                "input.requested" => {
                    for r in e.data["requests"].as_array().into_iter().flatten() {
                        if let Some(rid) = r["requestId"].as_str() {
                            asked.insert(rid.to_owned(), r.clone());
                        }
                    }
                }
                "message.completed" if e.data["finishReason"] != "tool-calls" => {
                    result = Some(e.data["message"].clone());
                }
                "turn.waiting" => result = None,
                "turn.completed" => ended = Some(("completed", Value::Null)),
                "turn.cancelled" => ended = Some(("cancelled", Value::Null)),
                "turn.failed" | "session.failed" => ended = Some(("failed", e.data.clone())),
                _ => {}
            }
        }
        let mut state = base(record);
        let pending = self.runtime.pending_inputs(id).await.map_err(internal)?;
        if !pending.is_empty() {
            let requests: Map<String, Value> = pending
                .iter()
                .map(|p| {
                    let shown = asked.get(&p.id).cloned().unwrap_or_else(|| request(p));
                    (p.id.clone(), shown)
                })
                .collect();
            state.insert("inputRequests".into(), Value::Object(requests));
            if let Some(result) = result {
                state.insert("result".into(), result);
            }
            state.insert("status".into(), json!("input_required"));
            return Ok(Value::Object(state));
        }
        let queued = !self
            .runtime
            .store()
            .pending_inbox(id)
            .await
            .map_err(|e| internal(e.into()))?
            .is_empty();
        if queued || record.status != SessionStatus::Idle || ended.is_none() {
            state.insert("pollAfterMs".into(), json!(POLL_AFTER_MS));
            if let Some(result) = result {
                state.insert("result".into(), result);
            }
            state.insert("status".into(), json!("working"));
            return Ok(Value::Object(state));
        }
        match ended {
            Some(("failed", data)) => {
                let message = data["error"]["message"]
                    .as_str()
                    .filter(|m| !m.trim().is_empty())
                    .map_or_else(|| "Invocation failed.".to_owned(), truncate);
                let mut details = json!({"runId": id});
                if let Some(code) = data["error"]["code"].as_str() {
                    details["eveCode"] = json!(code);
                }
                state.insert(
                    "error".into(),
                    json!({"code": -32603, "data": details, "message": message}),
                );
                state.insert("status".into(), json!("failed"));
            }
            Some(("cancelled", _)) => {
                state.insert("status".into(), json!("cancelled"));
            }
            _ => {
                if let Some(result) = result {
                    state.insert("result".into(), result);
                }
                state.insert("status".into(), json!("completed"));
            }
        }
        Ok(Value::Object(state))
    }
}

/// `invocationId` and `createdAt` of every state.
fn base(record: &SessionRecord) -> Map<String, Value> {
    let created = chrono::DateTime::from_timestamp_millis(record.created_at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut m = Map::new();
    m.insert("createdAt".into(), json!(created));
    m.insert("invocationId".into(), json!(record.id));
    m
}

/// An input request as eve shows it, built from the stored request when its event is outside
/// the window read.
fn request(p: &InputRequestRecord) -> Value {
    let mut v = json!({
        "action": p.action,
        "kind": p.kind,
        "prompt": p.prompt,
        "requestId": p.id,
    });
    if p.kind == "tool-approval" {
        v["display"] = json!("confirmation");
        v["allowFreeform"] = json!(false);
        v["options"] =
            json!([{"id": "approve", "label": "Approve"}, {"id": "cancel", "label": "Cancel"}]);
    }
    v
}

/// A failure message short enough to show (eve's display truncation).
fn truncate(message: &str) -> String {
    let message = message.trim();
    if message.chars().count() <= 160 {
        return message.to_owned();
    }
    let cut: String = message.chars().take(159).collect();
    format!("{}…", cut.trim_end())
}

/// An unexpected runtime failure: logged with an id the client is given, no details exposed.
fn internal(e: RuntimeError) -> ToolError {
    ToolError::internal(&e.to_string())
}
