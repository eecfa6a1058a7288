//! Tracing as an [`EventObserver`] of its runtime: the model and tool calls the turn core reports
//! (`chat {model}`, `execute_tool {tool}`, see `emit`), and spans read from the events a commit
//! stored (every commit's, once stored): a step (`agent.step`, from `step.started` to
//! `step.completed`), an approval wait (`await_approval {tool}`, from `input.requested` to
//! `approval.settled`), a compaction, a task a call started (`task {name}`, from `task.started`
//! to `task.settled`) and the turn itself (`invoke_agent {agent}`, from the turn's start to its
//! end). Only turns open in this process are traced here; the events are the same whoever
//! committed them, so the spans do not depend on which feature wrote them.

use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use serde_json::Value;

use super::emit::SpanSpec;
use super::{Telemetry, TurnTrace, at_ms};
use crate::engine::observe::{EventObserver, TurnWork};
use crate::events as ev;
use crate::store::StoredEvent;

/// At most this many waits and step starts are remembered (older ones are forgotten: their
/// spans then start when they end).
const MAX_OPEN: usize = 100_000;

fn seq_of(data: &Value) -> Option<u64> {
    data["sequence"].as_u64().or_else(|| {
        data["turnId"]
            .as_str()
            .and_then(|t| t.strip_prefix("turn_"))
            .and_then(|n| n.parse().ok())
    })
}

impl EventObserver for Telemetry {
    fn committed(&self, events: &[StoredEvent]) {
        self.observe(events);
    }

    fn turn_work(&self, work: &TurnWork<'_>) {
        match work {
            TurnWork::StepBegan { session, seq, step } => self.step_began(session, *seq, *step),
            TurnWork::ModelCalled(call) => {
                if let Some(trace) = self.turn(call.session, call.seq) {
                    self.chat(
                        &trace,
                        call.step,
                        call.model_id,
                        call.model,
                        call.started,
                        call.request,
                        call.outcome,
                    );
                }
            }
            TurnWork::ToolSettled { session, seq, call } => {
                if let Some(trace) = self.turn(session, *seq) {
                    self.tool(&trace, call);
                }
            }
        }
    }

    fn wants_requests(&self) -> bool {
        self.config.capture_content
    }
}

impl Telemetry {
    /// Spans of what `events` (one commit's, in order) close.
    pub fn observe(&self, events: &[StoredEvent]) {
        for event in events {
            if !matches!(
                event.kind.as_str(),
                ev::STEP_STARTED
                    | ev::STEP_COMPLETED
                    | ev::INPUT_REQUESTED
                    | ev::APPROVAL_SETTLED
                    | ev::COMPACTION_COMPLETED
                    | ev::TASK_STARTED
                    | ev::TASK_SETTLED
                    | ev::TURN_COMPLETED
                    | ev::TURN_FAILED
                    | ev::TURN_CANCELLED
            ) {
                continue;
            }
            let Some(seq) = seq_of(&event.data) else {
                continue;
            };
            let Some(turn) = self.turn(&event.session_id, seq) else {
                continue;
            };
            self.observe_one(&turn, event);
        }
    }

    fn observe_one(&self, turn: &TurnTrace, event: &StoredEvent) {
        let at = at_ms(event.at);
        let data = &event.data;
        let key = (event.session_id.clone(), turn.seq);
        match event.kind.as_str() {
            ev::STEP_STARTED => {
                if let Some(step) = data["stepIndex"].as_u64() {
                    self.remember_step(&key, step, at);
                }
            }
            ev::STEP_COMPLETED => {
                let Some(step) = data["stepIndex"].as_u64() else {
                    return;
                };
                let start = self
                    .open
                    .lock()
                    .ok()
                    .and_then(|mut o| o.steps.remove(&(key.0.clone(), key.1, step)))
                    .unwrap_or(at);
                let mut attributes = vec![KeyValue::new("eve.step", step as i64)];
                if let Some(finish) = data["finishReason"].as_str() {
                    attributes.push(self.text("eve.step.finish_reason", finish));
                }
                self.send(
                    turn,
                    SpanSpec {
                        name: "agent.step".to_owned(),
                        kind: SpanKind::Internal,
                        parent: Some(turn.span_id),
                        id: Some(turn.step_span(step)),
                        start,
                        end: at,
                        attributes,
                        links: Vec::new(),
                        error: None,
                    },
                );
            }
            ev::INPUT_REQUESTED => {
                let Some(requests) = data["requests"].as_array() else {
                    return;
                };
                if let Ok(mut open) = self.open.lock() {
                    if open.approvals.len() >= MAX_OPEN {
                        open.approvals.clear();
                    }
                    for request in requests {
                        let Some(id) = request["requestId"].as_str() else {
                            continue;
                        };
                        let tool = request["action"]["toolName"]
                            .as_str()
                            .or_else(|| request["kind"].as_str())
                            .unwrap_or("input")
                            .to_owned();
                        open.approvals
                            .insert(id.to_owned(), (key.clone(), at, tool));
                    }
                }
            }
            ev::APPROVAL_SETTLED => {
                let Some(id) = data["requestId"].as_str() else {
                    return;
                };
                let open = self
                    .open
                    .lock()
                    .ok()
                    .and_then(|mut o| o.approvals.remove(id));
                let (start, tool) = open.map_or((at, "tool".to_owned()), |(_, s, t)| (s, t));
                let mut attributes = vec![
                    self.text("gen_ai.tool.name", &tool),
                    self.text("eve.approval.request_id", id),
                    self.text(
                        "eve.approval.outcome",
                        data["outcome"].as_str().unwrap_or("unknown"),
                    ),
                ];
                if let Some(who) = data["responderPrincipalId"].as_str() {
                    attributes.push(self.text("eve.approval.responder", who));
                }
                let parent = data["stepIndex"]
                    .as_u64()
                    .map_or(turn.span_id, |s| turn.step_span(s));
                self.send(
                    turn,
                    SpanSpec {
                        name: format!("await_approval {tool}"),
                        kind: SpanKind::Internal,
                        parent: Some(parent),
                        id: None,
                        start,
                        end: at,
                        attributes,
                        links: Vec::new(),
                        error: None,
                    },
                );
            }
            ev::COMPACTION_COMPLETED => {
                let step = data["stepIndex"].as_u64().unwrap_or(0);
                let attributes = vec![
                    self.text(
                        "eve.compaction.model",
                        data["modelId"].as_str().unwrap_or(""),
                    ),
                    KeyValue::new("eve.step", step as i64),
                ];
                self.send(
                    turn,
                    SpanSpec {
                        name: "compaction".to_owned(),
                        kind: SpanKind::Internal,
                        parent: Some(turn.span_id),
                        id: None,
                        start: at,
                        end: at,
                        attributes,
                        links: Vec::new(),
                        error: None,
                    },
                );
            }
            ev::TASK_STARTED => {
                if let Some(task) = data["taskId"].as_str()
                    && let Ok(mut open) = self.open.lock()
                {
                    if open.approvals.len() >= MAX_OPEN {
                        open.approvals.clear();
                    }
                    let name = data["name"].as_str().unwrap_or("task").to_owned();
                    open.approvals
                        .insert(format!("task:{task}"), (key.clone(), at, name));
                }
            }
            ev::TASK_SETTLED => {
                let Some(task) = data["taskId"].as_str() else {
                    return;
                };
                let open = self
                    .open
                    .lock()
                    .ok()
                    .and_then(|mut o| o.approvals.remove(&format!("task:{task}")));
                let start = open.map_or(at, |(_, s, _)| s);
                let name = data["name"].as_str().unwrap_or("task");
                let status = data["status"].as_str().unwrap_or("unknown");
                let attributes = vec![
                    self.text("eve.task.id", task),
                    self.text("eve.task.kind", data["kind"].as_str().unwrap_or("")),
                    self.text("eve.task.status", status),
                    self.text("gen_ai.tool.call.id", data["callId"].as_str().unwrap_or("")),
                ];
                let error = (status != "completed")
                    .then(|| (status.to_owned(), format!("the task {status}")));
                self.send(
                    turn,
                    SpanSpec {
                        name: format!("task {name}"),
                        kind: SpanKind::Internal,
                        parent: Some(turn.span_id),
                        id: None,
                        start,
                        end: at,
                        attributes,
                        links: Vec::new(),
                        error,
                    },
                );
            }
            ev::TURN_COMPLETED | ev::TURN_FAILED | ev::TURN_CANCELLED => {
                if let Ok(mut open) = self.open.lock() {
                    open.turns.remove(&key);
                    open.steps.retain(|k, _| !(k.0 == key.0 && k.1 == key.1));
                }
                self.end_turn(turn, event, at);
            }
            _ => {}
        }
    }

    fn remember_step(&self, key: &(String, u64), step: u64, at: SystemTime) {
        if let Ok(mut open) = self.open.lock() {
            if open.steps.len() >= MAX_OPEN {
                open.steps.clear();
            }
            open.steps.entry((key.0.clone(), key.1, step)).or_insert(at);
        }
    }

    /// The turn's span (`invoke_agent {agent}`), from the turn's start to `at`.
    fn end_turn(&self, turn: &TurnTrace, event: &StoredEvent, at: SystemTime) {
        let data = &event.data;
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            self.text("gen_ai.agent.id", &turn.agent),
            KeyValue::new(
                "eve.turn.status",
                match event.kind.as_str() {
                    ev::TURN_COMPLETED => "completed",
                    ev::TURN_FAILED => "failed",
                    _ => "cancelled",
                },
            ),
        ];
        if let Some(usage) = data.get("usage") {
            for (field, key) in [
                ("inputTokens", "gen_ai.usage.input_tokens"),
                ("outputTokens", "gen_ai.usage.output_tokens"),
            ] {
                if let Some(n) = usage[field].as_u64() {
                    attributes.push(KeyValue::new(key, n as i64));
                }
            }
        }
        if let Some(parent) = &turn.parent_session {
            attributes.push(self.text("eve.parent_session.id", parent));
        }
        let error = (event.kind == ev::TURN_FAILED).then(|| {
            (
                data["error"]["code"]
                    .as_str()
                    .unwrap_or("failed")
                    .to_owned(),
                data["error"]["message"]
                    .as_str()
                    .unwrap_or("the turn failed")
                    .to_owned(),
            )
        });
        self.send(
            turn,
            SpanSpec {
                name: format!("invoke_agent {}", turn.agent),
                kind: SpanKind::Internal,
                parent: None,
                id: Some(turn.span_id),
                start: at_ms(turn.started_at),
                end: at,
                attributes,
                links: Vec::new(),
                error,
            },
        );
    }
}
