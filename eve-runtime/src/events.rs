//! eve's events: names and data fields, as the reference product emits them.
//!
//! One constructor per event so the wire shape lives in one place. Field names follow the captured
//! eve 0.80.1 streams (`sequence` is the turn number, `turnId` is `turn_<sequence>`, `stepIndex`
//! counts model calls within the turn). Every event is stored with the state change it announces.

use serde_json::{Value, json};

use crate::store::{InputRequestRecord, ToolCallRecord, TurnRecord, UsageTotals};

/// Session created (the first turn is about to start).
pub(crate) const SESSION_STARTED: &str = "session.started";
/// A turn began.
pub const TURN_STARTED: &str = "turn.started";
/// A user message entered the turn.
pub(crate) const MESSAGE_RECEIVED: &str = "message.received";
/// A model call began.
pub const STEP_STARTED: &str = "step.started";
/// Visible text arrived.
pub const MESSAGE_APPENDED: &str = "message.appended";
/// Reasoning text arrived.
pub const REASONING_APPENDED: &str = "reasoning.appended";
/// Tool-call argument text arrived.
pub(crate) const ACTION_INPUT_APPENDED: &str = "action.input.appended";
/// The model asked for actions (tool calls, skill loads).
pub const ACTIONS_REQUESTED: &str = "actions.requested";
/// An action finished.
pub const ACTION_RESULT: &str = "action.result";
/// A running call's progress (a preliminary result with a label).
pub(crate) const ACTION_PARTIAL: &str = "action.partial";
/// The model's text for this step is complete.
pub const MESSAGE_COMPLETED: &str = "message.completed";
/// The turn's result, satisfying the `outputSchema` its message asked for.
pub(crate) const RESULT_COMPLETED: &str = "result.completed";
/// A step ended.
pub const STEP_COMPLETED: &str = "step.completed";
/// Input (approval) is needed.
pub const INPUT_REQUESTED: &str = "input.requested";
/// A call started a task.
pub(crate) const TASK_STARTED: &str = "task.started";
/// A task's run opened a child session.
pub(crate) const AGENT_STARTED: &str = "agent.started";
/// A task's call settled (its result, failure or cancellation).
pub(crate) const TASK_SETTLED: &str = "task.settled";
/// The turn is parked.
pub const TURN_WAITING: &str = "turn.waiting";
/// An approval was answered.
pub const APPROVAL_SETTLED: &str = "approval.settled";
/// Every pending input of the step is answered.
pub const INPUT_RESOLVED: &str = "input.resolved";
/// The turn finished.
pub const TURN_COMPLETED: &str = "turn.completed";
/// The turn stopped on an error or a limit.
pub const TURN_FAILED: &str = "turn.failed";
/// A resumed turn continues on another model than the one it ran on (the user allowed it).
pub(crate) const TURN_MODEL_SWITCHED: &str = "turn.model_switched";
/// The turn was cancelled.
pub const TURN_CANCELLED: &str = "turn.cancelled";
/// The session waits for its next message.
pub(crate) const SESSION_WAITING: &str = "session.waiting";
/// Context was compacted into a summary checkpoint.
pub const COMPACTION_COMPLETED: &str = "compaction.completed";
/// Context was cleared.
pub const CONTEXT_CLEARED: &str = "context.cleared";
/// The session was reset.
pub(crate) const SESSION_RESET: &str = "session.reset";
/// An isolated call's egress proxy refused a destination.
pub(crate) const EGRESS_REFUSED: &str = "sandbox.egress.refused";
/// A call needs the session's principal to authorize a user-scoped connection (eve's event).
pub const AUTHORIZATION_REQUIRED: &str = "authorization.required";
/// The authorization a call waited on completed (`outcome`: `authorized`, `declined`, `failed`).
pub const AUTHORIZATION_COMPLETED: &str = "authorization.completed";
/// The reviewer of an `approval: auto` call decided (`verdict`: `safe`, `unsafe`, `failed`).
pub(crate) const APPROVAL_REVIEWED: &str = "approval.reviewed";

fn turn_fields(turn: &TurnRecord) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("sequence".into(), json!(turn.seq));
    m.insert("turnId".into(), json!(turn.turn_id()));
    m
}

fn step_fields(turn: &TurnRecord, step: u64) -> serde_json::Map<String, Value> {
    let mut m = turn_fields(turn);
    m.insert("stepIndex".into(), json!(step));
    m
}

fn with(mut m: serde_json::Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            m.insert(k, v);
        }
    }
    Value::Object(m)
}

/// `session.started`.
pub(crate) fn session_started(agent: &str, build_hash: &str) -> Value {
    json!({
        "runtime": {
            "agentId": agent,
            "agentName": agent,
            "eveVersion": env!("CARGO_PKG_VERSION"),
            "buildHash": build_hash,
        }
    })
}

/// `turn.started`.
pub(crate) fn turn_started(turn: &TurnRecord) -> Value {
    Value::Object(turn_fields(turn))
}

/// `message.received`.
pub(crate) fn message_received(
    turn: &TurnRecord,
    content: &crate::engine::content::UserContent,
) -> Value {
    with(
        turn_fields(turn),
        json!({"message": content.text, "parts": content.parts()}),
    )
}

/// `step.started`.
pub(crate) fn step_started(turn: &TurnRecord, step: u64, model_id: &str) -> Value {
    with(step_fields(turn, step), json!({"modelId": model_id}))
}

/// `message.appended`.
pub(crate) fn message_appended(turn: &TurnRecord, step: u64, delta: &str) -> Value {
    with(step_fields(turn, step), json!({"messageDelta": delta}))
}

/// `reasoning.appended`.
pub(crate) fn reasoning_appended(turn: &TurnRecord, step: u64, delta: &str) -> Value {
    with(step_fields(turn, step), json!({"reasoningDelta": delta}))
}

/// `action.input.appended`.
pub(crate) fn action_input_appended(
    turn: &TurnRecord,
    step: u64,
    call_id: &str,
    tool: &str,
    delta: &str,
) -> Value {
    with(
        step_fields(turn, step),
        json!({"callId": call_id, "inputTextDelta": delta, "toolName": tool}),
    )
}

/// The action object of a call, as in `actions.requested` and `input.requested`.
pub(crate) fn action(call: &ToolCallRecord) -> Value {
    if call.kind == "load-skill" {
        let name = call
            .input
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        json!({"callId": call.call_id, "input": call.input, "kind": "load-skill", "name": name})
    } else {
        json!({"callId": call.call_id, "input": call.input, "kind": "tool-call",
               "toolName": call.name})
    }
}

/// `actions.requested`.
pub(crate) fn actions_requested(turn: &TurnRecord, step: u64, calls: &[ToolCallRecord]) -> Value {
    let actions: Vec<Value> = calls.iter().map(action).collect();
    let mut presentation = serde_json::Map::new();
    for call in calls.iter().filter(|c| c.kind == "load-skill") {
        let name = call
            .input
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        presentation.insert(
            call.call_id.clone(),
            json!({"label": format!("Load skill {name}")}),
        );
    }
    let mut extra = json!({"actions": actions});
    if !presentation.is_empty() {
        extra["presentation"] = Value::Object(presentation);
    }
    with(step_fields(turn, step), extra)
}

/// `sandbox.egress.refused`: the call, and the destination its egress proxy refused and why.
pub(crate) fn egress_refused(
    turn: &TurnRecord,
    step: u64,
    call: &ToolCallRecord,
    refused: &crate::tools::Refused,
) -> Value {
    with(
        step_fields(turn, step),
        json!({"callId": call.call_id, "toolName": call.name, "host": refused.host,
               "port": refused.port, "reason": refused.reason}),
    )
}

/// `action.result`.
pub(crate) fn action_result(turn: &TurnRecord, step: u64, call: &ToolCallRecord) -> Value {
    let output = call.output.clone().unwrap_or(Value::Null);
    let mut extra = if call.kind == "load-skill" {
        let name = call
            .input
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        json!({
            "presentation": {call.call_id.clone(): {"label": format!("Loaded skill {name}")}},
            "result": {"callId": call.call_id, "kind": "load-skill-result", "name": name,
                       "output": output},
        })
    } else {
        json!({"result": {"callId": call.call_id, "kind": "tool-result", "output": output,
                          "toolName": call.name}})
    };
    if call.is_error {
        extra["result"]["isError"] = json!(true);
    }
    extra["status"] = json!(call.status.as_str());
    with(step_fields(turn, step), extra)
}

/// `action.partial`: progress of a running call, `label` as its presentation and its
/// preliminary output.
pub(crate) fn action_partial(
    turn: &TurnRecord,
    step: u64,
    call: &ToolCallRecord,
    label: &Value,
) -> Value {
    with(
        step_fields(turn, step),
        json!({
            "presentation": {call.call_id.clone(): {"label": label}},
            "result": {"callId": call.call_id, "kind": "tool-result", "output": label,
                       "toolName": call.name},
        }),
    )
}

/// `message.completed`.
pub(crate) fn message_completed(turn: &TurnRecord, step: u64, finish: &str, text: &str) -> Value {
    with(
        step_fields(turn, step),
        json!({"finishReason": finish, "message": text}),
    )
}

/// `result.completed`: the value that satisfies the turn's `outputSchema`.
pub(crate) fn result_completed(turn: &TurnRecord, step: u64, result: &Value) -> Value {
    with(step_fields(turn, step), json!({"result": result}))
}

/// Usage of one step, as in `step.completed`; `estimated: true` when the server reported none.
pub(crate) fn step_usage(usage: &crate::model::Usage) -> Value {
    let mut value = json!({
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
    });
    if usage.estimated {
        value["estimated"] = Value::Bool(true);
    }
    value
}

/// `step.completed`.
pub(crate) fn step_completed(turn: &TurnRecord, step: u64, finish: &str, usage: Value) -> Value {
    with(
        step_fields(turn, step),
        json!({"finishReason": finish, "usage": usage}),
    )
}

/// The request object of `input.requested`.
pub(crate) fn input_request(request: &InputRequestRecord) -> Value {
    if request.kind == crate::features::questions::QUESTION_KIND {
        // A question keeps how it is asked beside its action; eve shows it on the request.
        let mut action = request.action.clone();
        let question = action
            .as_object_mut()
            .and_then(|a| a.remove("question"))
            .unwrap_or_else(|| json!({"allowFreeform": true, "display": "text"}));
        let mut shown = json!({
            "action": action,
            "allowFreeform": question["allowFreeform"].as_bool().unwrap_or(true),
            "display": question["display"].as_str().unwrap_or("text"),
            "kind": request.kind,
            "prompt": request.prompt,
            "requestId": request.id,
        });
        if let Some(options) = question.get("options") {
            shown["options"] = options.clone();
        }
        return shown;
    }
    json!({
        "action": request.action,
        "allowFreeform": false,
        "display": "confirmation",
        "kind": request.kind,
        "options": [{"id": "approve", "label": "Approve"}, {"id": "cancel", "label": "Cancel"}],
        "prompt": request.prompt,
        "requestId": request.id,
    })
}

/// `input.requested`.
pub(crate) fn input_requested(
    turn: &TurnRecord,
    step: u64,
    requests: &[InputRequestRecord],
) -> Value {
    let requests: Vec<Value> = requests.iter().map(input_request).collect();
    with(step_fields(turn, step), json!({"requests": requests}))
}

/// `turn.waiting` on input a principal must give.
pub(crate) fn turn_waiting(turn: &TurnRecord, usage: &UsageTotals) -> Value {
    turn_waiting_on(turn, usage, "input")
}

/// `turn.waiting`: `on` is `input` (a principal must act) or `tasks` (work the turn started is
/// still running; the turn resumes on its own).
pub(crate) fn turn_waiting_on(turn: &TurnRecord, usage: &UsageTotals, on: &str) -> Value {
    with(turn_fields(turn), json!({"on": on, "usage": usage}))
}

/// `task.started`: a call started a task (`kind` is `agent` for a subagent, `tool` otherwise).
pub(crate) fn task_started(
    turn: &TurnRecord,
    call_id: &str,
    task_id: &str,
    kind: &str,
    name: &str,
) -> Value {
    json!({"callId": call_id, "kind": kind, "name": name, "taskId": task_id,
           "turnId": turn.turn_id()})
}

/// `agent.started`: a task's run opened a child session, followed at `streamPath`.
pub(crate) fn agent_started(
    turn: &TurnRecord,
    call_id: &str,
    task_id: &str,
    name: &str,
    session_id: &str,
) -> Value {
    json!({"callId": call_id, "name": name, "sessionId": session_id,
           "streamPath": format!("/eve/v1/session/{session_id}/stream"),
           "taskId": task_id, "turnId": turn.turn_id()})
}

/// `task.settled`: `status` is `completed` (with `output`), `failed` (with `error.message`) or
/// `cancelled` (with `cancel.reason`: `task_cancel`, `turn_cancelled` or `turn_ended`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn task_settled(
    turn_id: &str,
    call_id: &str,
    task_id: &str,
    kind: &str,
    name: &str,
    status: &str,
    output: &Value,
    cancel_reason: Option<&str>,
) -> Value {
    let mut data = json!({"callId": call_id, "kind": kind, "name": name, "status": status,
                          "taskId": task_id, "turnId": turn_id});
    match status {
        "completed" => data["output"] = output.clone(),
        "cancelled" => {
            if let Some(reason) = cancel_reason {
                data["cancel"] = json!({"reason": reason});
            }
        }
        _ => {
            let message = match output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            data["error"] = json!({"message": message});
        }
    }
    data
}

/// The principal of the terminal (`eve chat`, `eve run`) and of `eve sessions approve|deny`; also
/// shown for answers stored before principals were recorded.
pub const LOCAL_PRINCIPAL: &str = "local";

/// `approval.settled`.
/// `memory.save_offered`: the step's fields, the context estimate and the window.
pub(crate) fn memory_save_offered(turn: &TurnRecord, estimate: u64, window: u64) -> Value {
    with(
        step_fields(turn, turn.step_index),
        json!({"estimatedTokens": estimate, "contextWindow": window}),
    )
}

/// `approval.reviewed`: the reviewer's verdict (`engine::review::event`) with the step's fields.
pub(crate) fn approval_reviewed(turn: &TurnRecord, step: u64, verdict: Value) -> Value {
    with(step_fields(turn, step), verdict)
}

/// `authorization.required`: the principal `principal` must visit `url` to authorize the
/// connection `name` for the call `call_id` (its `attemptId`).
pub(crate) fn authorization_required(
    turn: &TurnRecord,
    step: u64,
    name: &str,
    url: &str,
    principal: &str,
    call_id: &str,
) -> Value {
    with(
        step_fields(turn, step),
        json!({
            "attemptId": call_id,
            "authorization": {"url": url, "displayName": name},
            "description": format!("Sign in to {name} to let the agent use it on your behalf."),
            "name": name,
            "principalId": principal,
        }),
    )
}

/// `authorization.completed` for the authorization request `request` (its call is the
/// `attemptId`): `outcome` is `authorized`, `declined` or `failed`.
pub(crate) fn authorization_completed(request: &InputRequestRecord, outcome: &str) -> Value {
    let mut data = json!({
        "attemptId": request.call_id,
        "name": request.action["connection"],
        "outcome": outcome,
        "principalId": request.action["principal"],
        "sequence": request.turn_seq,
        "stepIndex": request.step_index,
        "turnId": format!("turn_{}", request.turn_seq),
    });
    if let Some(url) = request.action["url"].as_str() {
        data["authorization"] = json!({"url": url, "displayName": request.action["connection"]});
    }
    if let Some(reason) = &request.reason {
        data["reason"] = json!(reason);
    }
    data
}

pub(crate) fn approval_settled(request: &InputRequestRecord, approved: bool) -> Value {
    let mut data = json!({
        "outcome": if approved { "approved" } else { "denied" },
        "requestId": request.id,
        "responderPrincipalId": request.responder.as_deref().unwrap_or(LOCAL_PRINCIPAL),
        "sequence": request.turn_seq,
        "stepIndex": request.step_index,
        "turnId": format!("turn_{}", request.turn_seq),
    });
    if let Some(reason) = &request.reason {
        data["reason"] = json!(reason);
    }
    data
}

/// `input.resolved` for the given answered requests.
pub(crate) fn input_resolved(requests: &[InputRequestRecord]) -> Value {
    let first = requests.first();
    let resolutions: Vec<Value> = requests
        .iter()
        .map(|r| {
            let approved = r.status == crate::store::RequestStatus::Approved;
            if r.kind == crate::features::questions::QUESTION_KIND {
                return question_resolution(r, approved);
            }
            let mut response = json!({
                "optionId": if approved { "approve" } else { "cancel" },
                "requestId": r.id,
            });
            if let Some(reason) = &r.reason {
                response["text"] = json!(reason);
            }
            json!({
                "kind": r.kind,
                "outcome": if approved { "approved" } else { "denied" },
                "requestId": r.id,
                "responderPrincipalId": r.responder.as_deref().unwrap_or(LOCAL_PRINCIPAL),
                "response": response,
            })
        })
        .collect();
    json!({
        "resolutions": resolutions,
        "sequence": first.map(|r| r.turn_seq).unwrap_or_default(),
        "stepIndex": first.map(|r| r.step_index).unwrap_or_default(),
        "turnId": format!("turn_{}", first.map(|r| r.turn_seq).unwrap_or_default()),
    })
}

/// One resolution of `input.resolved` for an answered question: the option chosen (an answer
/// equal to an option's id) or the user's words.
fn question_resolution(r: &InputRequestRecord, answered: bool) -> Value {
    let answer = r.reason.clone().unwrap_or_default();
    let is_option = r.action["question"]["options"]
        .as_array()
        .is_some_and(|o| o.iter().any(|o| o["id"].as_str() == Some(answer.as_str())));
    let response = if is_option {
        json!({"optionId": answer, "requestId": r.id})
    } else {
        json!({"requestId": r.id, "text": answer})
    };
    let mut resolution = json!({
        "kind": r.kind,
        "outcome": if answered { "answered" } else { "cancelled" },
        "requestId": r.id,
        "responderPrincipalId": r.responder.as_deref().unwrap_or(LOCAL_PRINCIPAL),
    });
    if answered {
        resolution["response"] = response;
    }
    resolution
}

/// `turn.completed`.
pub(crate) fn turn_completed(turn: &TurnRecord) -> Value {
    // Beyond eve: what the turn's model calls used, cache reads included.
    with(turn_fields(turn), json!({"usage": turn.usage}))
}

/// `turn.failed`.
pub(crate) fn turn_failed(
    turn: &TurnRecord,
    code: &str,
    message: &str,
    stop_reason: Option<&str>,
) -> Value {
    let mut extra = json!({"error": {"code": code, "message": message}});
    if let Some(reason) = stop_reason {
        extra["stopReason"] = json!(reason);
    }
    with(turn_fields(turn), extra)
}

/// `turn.cancelled`.
pub(crate) fn turn_cancelled(turn: &TurnRecord) -> Value {
    Value::Object(turn_fields(turn))
}

/// `session.waiting`.
pub(crate) fn session_waiting(session_id: &str, usage: &UsageTotals) -> Value {
    json!({"continuationToken": session_id, "usage": usage, "wait": "next-user-message"})
}

/// `compaction.completed`.
pub(crate) fn compaction_completed(
    session_id: &str,
    turn_seq: u64,
    step: u64,
    model_id: &str,
) -> Value {
    json!({
        "modelId": model_id,
        "sequence": turn_seq,
        "sessionId": session_id,
        "stepIndex": step,
        "turnId": format!("turn_{turn_seq}"),
    })
}

/// `context.cleared` (and `session.reset`).
pub(crate) fn context_cleared(session_id: &str, turn_seq: u64) -> Value {
    json!({"sequence": turn_seq, "sessionId": session_id, "turnId": format!("turn_{turn_seq}")})
}

/// The turn moved to another phase of `limits.phases` (`explore`, `execute`, `converge`).
pub(crate) const PHASE_CHANGED: &str = "phase.changed";
/// The hollow-answer check sent the model back once: its answer claimed work no tool call did.
pub(crate) const HOLLOW_NUDGED: &str = "answer.hollow";

/// `phase.changed`: `from` is null at the turn's first step; `withdrawn` names the tools taken
/// away in this phase.
pub(crate) fn phase_changed(
    turn: &TurnRecord,
    step: u64,
    from: Option<&str>,
    to: &str,
    progress: f64,
    withdrawn: &[String],
) -> Value {
    with(
        step_fields(turn, step),
        json!({"from": from, "to": to, "progress": (progress * 1000.0).round() / 1000.0,
               "withdrawn": withdrawn}),
    )
}

/// `answer.hollow`: what the answer claimed and why no call of the turn backs it.
pub(crate) fn hollow_nudged(
    turn: &TurnRecord,
    step: u64,
    claims: &[String],
    reason: &str,
) -> Value {
    with(
        step_fields(turn, step),
        json!({"claims": claims, "reason": reason}),
    )
}

/// A `strategy: plan` turn's plan was accepted (its steps and their dependencies).
pub(crate) const PLAN_CREATED: &str = "plan.created";
/// A submitted plan was not a valid DAG; the model plans once more.
pub(crate) const PLAN_REJECTED: &str = "plan.rejected";
/// A critic reviewed an answer (`strategy: reflect`).
pub(crate) const REFLECT_ROUND: &str = "reflect.round";
/// A `strategy: reflect` turn's answer is final.
pub(crate) const REFLECT_COMPLETED: &str = "reflect.completed";

/// `plan.created`: the plan as journaled.
pub(crate) fn plan_created(turn: &TurnRecord, step: u64, plan: &Value) -> Value {
    with(step_fields(turn, step), json!({"plan": plan}))
}

/// `plan.rejected`: why the plan was not accepted.
pub(crate) fn plan_rejected(turn: &TurnRecord, step: u64, error: &Value) -> Value {
    with(step_fields(turn, step), json!({"error": error}))
}

/// `reflect.round`: one review; `verdict` is `accept`, `revise` or `error`.
pub(crate) fn reflect_round(
    turn: &TurnRecord,
    step: u64,
    round: u32,
    verdict: &str,
    objections: Option<&str>,
) -> Value {
    with(
        step_fields(turn, step),
        json!({"round": round, "verdict": verdict, "objections": objections}),
    )
}

/// `reflect.completed`: the final answer, how many reviews it took, and whether the last one
/// accepted it (`false` when `max_rounds` ran out).
pub(crate) fn reflect_completed(
    turn: &TurnRecord,
    step: u64,
    rounds: u32,
    accepted: bool,
    answer: &str,
) -> Value {
    with(
        step_fields(turn, step),
        json!({"rounds": rounds, "accepted": accepted, "answer": answer}),
    )
}
