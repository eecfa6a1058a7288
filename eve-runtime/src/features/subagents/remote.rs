//! Remote agents (`subagents/NAME.yaml` with `url:`): a subagent whose turns run on another eve
//! deployment, called like any subagent (a task, continued by its `task_id`).
//!
//! The call makes a local child session as for a local subagent (its row, link, inbox message and
//! task row), so everything the parent knows of children holds: the task, `agent.started`, the
//! child's own stream, cancellation, approvals surfacing on the root. Only the child's turns differ:
//! this feature is the whole of them ([`RemoteTurn`]). Where a local turn would call a model, it
//! talks to the remote's session API instead:
//!
//! 1. The first turn creates a session on the remote (`POST /eve/v1/session`), and every turn sends
//!    its message there (`POST /eve/v1/session/:id`); each step is recorded durably (the remote
//!    session's id, which turn's message was sent) before the next is made.
//! 2. It follows the remote session's NDJSON stream (`startIndex` = events already seen, stored
//!    with every batch of them), so a restart on either side resumes where it was: the parent
//!    reconnects from its stored position, and a remote that went away is reconnected to, with
//!    backoff, until the turn's deadline.
//! 3. What the remote child does (its tool calls and results, message text as it streams) is
//!    copied onto the local child's stream, which `agent.started` links from the parent's.
//! 4. An approval the remote child asks for (`input.requested`) becomes a request of the local
//!    child, for the same tool and input: it surfaces on the root as any child's does, and the
//!    answer given there is forwarded to the remote (`inputResponses`), once.
//! 5. The remote turn's end is the local turn's: its final message is the answer the task
//!    delivers; a remote failure fails the task with the remote's message.
//!
//! The calling session's principal is asserted to the remote only with `forward_principal:
//! true`, and the remote accepts it only from a caller it lists under `trusted_forwarders`
//! (see `server::forwarded`).

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::remote_http::{Fault, Remote, ok, segment, status_fault};
use crate::engine::turn::seam::{AskAs, Handled, Shaped, TurnExtension, TurnView};
use crate::engine::{Runtime, RuntimeResult};
use crate::model::{FinishReason, Message, ModelRequest, ModelResponse, ToolCall, Usage};
use crate::store::*;

/// The code of a turn that failed on the remote's account.
const REMOTE_FAILED: &str = "remote_agent_failed";
/// The prefix of a local call that mirrors a remote input request (`remote-<requestId>`).
const CALL_PREFIX: &str = "remote-";
/// The longest the remote may stay unreachable before the turn fails.
const UNREACHABLE_LIMIT: Duration = Duration::from_secs(600);
/// Events of the remote child that are copied onto the local child's stream: what it does.
/// Its lifecycle (turns, steps, waits, requests) is the local child's own.
const COPIED: &[&str] = &[
    "actions.requested",
    "action.input.appended",
    "action.partial",
    "action.result",
    "message.appended",
    "reasoning.appended",
    "sandbox.egress.refused",
    "task.started",
    "agent.started",
    "task.settled",
];

/// What a local child knows of its remote session, kept durably (a note).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    /// The remote session's id, once created.
    #[serde(default)]
    session: Option<String>,
    /// Events of the remote session already read.
    #[serde(default)]
    cursor: u64,
    /// The local turn whose message the remote has.
    #[serde(default)]
    sent: Option<u64>,
    /// The remote turn's last complete message (its answer, once the turn completes).
    #[serde(default)]
    answer: String,
    /// Input requests of the remote not yet answered, as its `input.requested` shows them.
    #[serde(default)]
    pending: Vec<Value>,
}

fn namespace(session: &str) -> String {
    format!("remote:{session}")
}

async fn read_state(rt: &Runtime, session: &str) -> RuntimeResult<State> {
    Ok(rt
        .inner
        .store
        .note(&namespace(session), "state")
        .await?
        .and_then(|n| serde_json::from_str(&n.text).ok())
        .unwrap_or_default())
}

fn put_state(batch: &mut Batch, session: &str, state: &State) -> RuntimeResult<()> {
    let now = now_ms();
    batch.push(Op::Note(NoteOp::Put(NoteRecord {
        namespace: namespace(session),
        key: "state".to_owned(),
        text: serde_json::to_string(state)?,
        created_at: now,
        updated_at: now,
    })));
    Ok(())
}

async fn save(rt: &Runtime, session: &str, state: &State) -> RuntimeResult<()> {
    let mut batch = Batch::durable();
    put_state(&mut batch, session, state)?;
    rt.commit(batch).await?;
    Ok(())
}

/// The turn of a remote agent's local child: the remote does the work.
#[derive(Default)]
pub(crate) struct RemoteTurn;

/// How the exchange with the remote ended for this step.
enum Outcome {
    Shaped(Shaped),
    Cancelled,
}

#[async_trait]
impl TurnExtension for RemoteTurn {
    fn name(&self) -> &'static str {
        "remote_agent"
    }

    fn lets_hold(&self, _view: &TurnView<'_>) -> bool {
        false
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        _request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        let agent = &view.build.manifest.agent;
        let remote = match Remote::new(view.rt, agent, view.session.owner.as_deref()) {
            Ok(remote) => remote,
            Err(message) => return Ok(Shaped::Fail(REMOTE_FAILED, message)),
        };
        let mut state = read_state(view.rt, view.id()).await?;
        let outcome = match exchange(view, &remote, &mut state).await? {
            Ok(outcome) => outcome,
            Err(fault) => Outcome::Shaped(Shaped::Fail(REMOTE_FAILED, fault.message().to_owned())),
        };
        match outcome {
            Outcome::Shaped(shaped) => Ok(shaped),
            Outcome::Cancelled => {
                if let Some(session) = &state.session {
                    let path = format!("eve/v1/session/{}/cancel", segment(session));
                    if let Err(fault) = remote.post(&path, &json!({})).await {
                        tracing::warn!(error = fault.message(), "cannot cancel the remote turn");
                    }
                }
                Ok(Shaped::Fail(
                    "turn_cancelled",
                    format!(
                        "the turn was cancelled; the remote agent `{}` was told",
                        remote.name
                    ),
                ))
            }
        }
    }

    async fn answer_call(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Option<Handled>> {
        let Some(request_id) = call.call_id.strip_prefix(CALL_PREFIX) else {
            return Ok(Some(Handled::settle(
                CallStatus::Failed,
                json!("A remote agent's turn runs no tools here."),
            )));
        };
        let mut state = read_state(view.rt, view.id()).await?;
        let asked = state
            .pending
            .iter()
            .find(|r| r["requestId"].as_str() == Some(request_id))
            .cloned();
        match call.approval {
            ApprovalState::Pending => Ok(Some(Handled::Wait)),
            ApprovalState::Approved | ApprovalState::Denied => {
                let approve = call.approval == ApprovalState::Approved;
                let agent = &view.build.manifest.agent;
                let remote = match Remote::new(view.rt, agent, view.session.owner.as_deref()) {
                    Ok(remote) => remote,
                    Err(message) => {
                        return Ok(Some(Handled::settle(CallStatus::Failed, json!(message))));
                    }
                };
                let reason = view
                    .rt
                    .inner
                    .store
                    .input_requests(view.id(), false)
                    .await?
                    .into_iter()
                    .rev()
                    .find(|r| r.call_id == call.call_id)
                    .and_then(|r| r.reason);
                let kind = asked
                    .as_ref()
                    .and_then(|r| r["kind"].as_str())
                    .unwrap_or("tool-approval");
                let response = answer_body(request_id, kind, approve, reason.as_deref());
                let Some(session) = state.session.clone() else {
                    return Ok(Some(Handled::settle(
                        CallStatus::Failed,
                        json!("The remote session is unknown."),
                    )));
                };
                let path = format!("eve/v1/session/{}", segment(&session));
                let body = json!({"inputResponses": [response]});
                let sent = retry(view, || remote.post(&path, &body)).await?;
                let output = match sent {
                    Some(Ok((status, _))) if ok(status) || status == 409 => {
                        json!(if approve {
                            "Approved on the remote agent."
                        } else {
                            "Denied on the remote agent."
                        })
                    }
                    Some(Ok((status, body))) => {
                        let fault = status_fault(status, &body.to_string(), &remote.name);
                        return Ok(Some(Handled::settle(
                            CallStatus::Failed,
                            json!(fault.message()),
                        )));
                    }
                    Some(Err(fault)) => {
                        return Ok(Some(Handled::settle(
                            CallStatus::Failed,
                            json!(fault.message()),
                        )));
                    }
                    None => return Ok(Some(Handled::Wait)),
                };
                state
                    .pending
                    .retain(|r| r["requestId"].as_str() != Some(request_id));
                save(view.rt, view.id(), &state).await?;
                Ok(Some(Handled::settle(CallStatus::Completed, output)))
            }
            _ => {
                let Some(asked) = asked else {
                    return Ok(Some(Handled::settle(
                        CallStatus::Completed,
                        json!("The remote agent no longer asks this."),
                    )));
                };
                let kind = asked["kind"].as_str().unwrap_or("tool-approval").to_owned();
                let mut action = asked["action"].clone();
                if !action.is_object() {
                    action = json!({});
                }
                action["callId"] = json!(call.call_id);
                if kind == crate::features::questions::QUESTION_KIND {
                    let mut question = json!({
                        "allowFreeform": asked["allowFreeform"].as_bool().unwrap_or(true),
                        "display": asked["display"].as_str().unwrap_or("text"),
                    });
                    if let Some(options) = asked.get("options") {
                        question["options"] = options.clone();
                    }
                    action["question"] = question;
                }
                Ok(Some(Handled::Ask {
                    prompt: asked["prompt"].as_str().unwrap_or_default().to_owned(),
                    request: Some(AskAs {
                        kind,
                        action,
                        writes: Batch::new(),
                    }),
                }))
            }
        }
    }
}

/// eve's `InputResponse` for an answer to a remote request of `kind`.
fn answer_body(request_id: &str, kind: &str, approve: bool, reason: Option<&str>) -> Value {
    if kind == crate::features::questions::QUESTION_KIND && approve {
        return json!({"requestId": request_id, "text": reason.unwrap_or_default()});
    }
    let mut body = json!({
        "requestId": request_id,
        "optionId": if approve { "approve" } else { "cancel" },
    });
    if let Some(reason) = reason.filter(|r| !r.trim().is_empty()) {
        body["text"] = json!(reason);
    }
    body
}

/// Runs `request` until it answers or fails for good, retrying what may pass with backoff (the
/// remote restarting) within [`UNREACHABLE_LIMIT`]. `None`: the turn was cancelled meanwhile.
async fn retry<T, F, Fut>(
    view: &TurnView<'_>,
    mut request: F,
) -> RuntimeResult<Option<Result<T, Fault>>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Fault>>,
{
    let started = std::time::Instant::now();
    let mut nap = Duration::from_millis(100);
    loop {
        if view.cancel.is_cancelled() {
            return Ok(None);
        }
        match request().await {
            Err(Fault::Transient(message)) if started.elapsed() < UNREACHABLE_LIMIT => {
                tracing::info!(error = %message, "the remote agent did not answer; trying again");
            }
            other => return Ok(Some(other)),
        }
        tokio::select! {
            () = view.cancel.cancelled() => return Ok(None),
            () = tokio::time::sleep(nap) => {}
        }
        nap = (nap * 2).min(Duration::from_secs(2));
    }
}

/// Sends this turn's message if the remote does not have it yet, then follows the remote session
/// until its turn ends or asks for input.
async fn exchange(
    view: &TurnView<'_>,
    remote: &Remote,
    state: &mut State,
) -> RuntimeResult<Result<Outcome, Fault>> {
    if state.sent != Some(view.turn.seq) {
        if state.session.is_none() {
            let mut body = json!({});
            if let Some(principal) = &remote.forwarded {
                body["forwardedPrincipal"] = json!({"current": principal});
            }
            let created = match retry(view, || remote.post("eve/v1/session", &body)).await? {
                None => return Ok(Ok(Outcome::Cancelled)),
                Some(Err(fault)) => return Ok(Err(fault)),
                Some(Ok((status, answer))) if ok(status) => answer,
                Some(Ok((status, answer))) => {
                    return Ok(Err(status_fault(status, &answer.to_string(), &remote.name)));
                }
            };
            let Some(id) = created["sessionId"].as_str() else {
                return Ok(Err(Fault::Fatal(format!(
                    "remote agent `{}` created no session: {created}",
                    remote.name
                ))));
            };
            state.session = Some(id.to_owned());
            state.cursor = 0;
            save(view.rt, view.id(), state).await?;
        }
        let session = state.session.clone().unwrap_or_default();
        let mut body = json!({"message": turn_message(view.context)});
        if let Some(principal) = &remote.forwarded {
            body["forwardedPrincipal"] = json!({"current": principal});
        }
        let path = format!("eve/v1/session/{}", segment(&session));
        match retry(view, || remote.post(&path, &body)).await? {
            None => return Ok(Ok(Outcome::Cancelled)),
            Some(Err(fault)) => return Ok(Err(fault)),
            Some(Ok((status, _))) if ok(status) => {}
            Some(Ok((status, answer))) => {
                return Ok(Err(status_fault(status, &answer.to_string(), &remote.name)));
            }
        }
        state.sent = Some(view.turn.seq);
        state.answer.clear();
        save(view.rt, view.id(), state).await?;
    }
    follow(view, remote, state).await
}

/// The text of this turn's message: the last user message of the context.
fn turn_message(context: &[Message]) -> String {
    context
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// What one event of the remote's stream means for the local turn.
enum Seen {
    /// Go on reading.
    More,
    /// The remote waits on its input requests.
    Asks,
    /// The remote turn ended.
    End(Shaped),
}

/// Follows the remote session's stream from the stored position.
async fn follow(
    view: &TurnView<'_>,
    remote: &Remote,
    state: &mut State,
) -> RuntimeResult<Result<Outcome, Fault>> {
    let Some(session) = state.session.clone() else {
        return Ok(Err(Fault::Fatal(
            "the remote session is unknown".to_owned(),
        )));
    };
    let started = std::time::Instant::now();
    let mut nap = Duration::from_millis(100);
    loop {
        if view.cancel.is_cancelled() {
            return Ok(Ok(Outcome::Cancelled));
        }
        let response = match retry(view, || remote.stream(&session, state.cursor)).await? {
            None => return Ok(Ok(Outcome::Cancelled)),
            Some(Err(fault)) => return Ok(Err(fault)),
            Some(Ok(response)) => response,
        };
        let mut body = response.bytes_stream();
        let mut partial: Vec<u8> = Vec::new();
        loop {
            let chunk = tokio::select! {
                () = view.cancel.cancelled() => return Ok(Ok(Outcome::Cancelled)),
                chunk = body.next() => chunk,
            };
            let Some(Ok(chunk)) = chunk else {
                // The stream ended (the remote at rest, or gone): read again from where it was.
                break;
            };
            partial.extend_from_slice(&chunk);
            let mut batch = Batch::new();
            let mut outcome = None;
            while let Some(at) = partial.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = partial.drain(..=at).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                let Ok(event) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                state.cursor += 1;
                match seen(view, state, &event, &mut batch) {
                    Seen::More => {}
                    Seen::Asks => {
                        outcome = Some(Shaped::Respond(asks(state)));
                        break;
                    }
                    Seen::End(shaped) => {
                        outcome = Some(shaped);
                        break;
                    }
                }
            }
            put_state(&mut batch, view.id(), state)?;
            view.rt.commit(batch).await?;
            if let Some(shaped) = outcome {
                return Ok(Ok(Outcome::Shaped(shaped)));
            }
        }
        // At rest while the remote waits on requests this turn has not asked yet.
        if !state.pending.is_empty() {
            return Ok(Ok(Outcome::Shaped(Shaped::Respond(asks(state)))));
        }
        if started.elapsed() > UNREACHABLE_LIMIT * 6 {
            return Ok(Err(Fault::Fatal(format!(
                "remote agent `{}` did not finish its turn",
                remote.name
            ))));
        }
        tokio::select! {
            () = view.cancel.cancelled() => return Ok(Ok(Outcome::Cancelled)),
            () = tokio::time::sleep(nap) => {}
        }
        nap = (nap * 2).min(Duration::from_secs(1));
    }
}

/// Takes one event of the remote's stream into `state` (and `batch`, what the local stream
/// shows of it).
fn seen(view: &TurnView<'_>, state: &mut State, event: &Value, batch: &mut Batch) -> Seen {
    let kind = event["type"].as_str().unwrap_or_default();
    let data = &event["data"];
    match kind {
        "turn.started" => state.answer.clear(),
        "message.completed" => {
            if let Some(text) = data["message"].as_str() {
                state.answer = text.to_owned();
            }
        }
        "input.requested" => {
            for request in data["requests"].as_array().into_iter().flatten() {
                let id = request["requestId"].as_str().unwrap_or_default();
                if !id.is_empty() && !state.pending.iter().any(|r| r["requestId"] == id) {
                    state.pending.push(request.clone());
                }
            }
        }
        "input.resolved" => {
            let resolved: Vec<&str> = data["requests"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["requestId"].as_str())
                .collect();
            state
                .pending
                .retain(|r| !resolved.contains(&r["requestId"].as_str().unwrap_or_default()));
        }
        "turn.waiting" if data["on"] == "input" && !state.pending.is_empty() => {
            return Seen::Asks;
        }
        "turn.completed" => {
            return Seen::End(Shaped::Respond(ModelResponse {
                content: std::mem::take(&mut state.answer),
                reasoning: None,
                tool_calls: Vec::new(),
                usage: Usage::default(),
                finish_reason: FinishReason::Stop,
            }));
        }
        "turn.failed" | "turn.cancelled" => {
            let why = data["error"]["message"]
                .as_str()
                .or_else(|| data["message"].as_str())
                .or_else(|| data["reason"].as_str())
                .unwrap_or(if kind == "turn.failed" {
                    "failed"
                } else {
                    "cancelled"
                });
            return Seen::End(Shaped::Fail(
                REMOTE_FAILED,
                format!("the remote agent's turn ended ({kind}): {why}"),
            ));
        }
        _ => {}
    }
    if COPIED.contains(&kind) {
        let mut copy = data.clone();
        if let Some(map) = copy.as_object_mut() {
            map.insert("remote".to_owned(), json!(true));
        }
        batch.event(view.id(), kind, copy);
    }
    Seen::More
}

/// A response whose calls mirror the remote's pending requests: each becomes a request of the
/// local child ([`RemoteTurn::answer_call`]).
fn asks(state: &State) -> ModelResponse {
    let tool_calls = state
        .pending
        .iter()
        .map(|r| ToolCall {
            id: format!(
                "{CALL_PREFIX}{}",
                r["requestId"].as_str().unwrap_or_default()
            ),
            name: r["action"]["toolName"]
                .as_str()
                .or_else(|| r["action"]["name"].as_str())
                .unwrap_or("remote_input")
                .to_owned(),
            input: r["action"]["input"].clone(),
        })
        .collect();
    ModelResponse {
        content: String::new(),
        reasoning: None,
        tool_calls,
        usage: Usage::default(),
        finish_reason: FinishReason::ToolCalls,
    }
}
