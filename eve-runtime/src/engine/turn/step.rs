//! One step of a turn: what happens before the model is called (cancel, limits, steering messages,
//! compaction), the streamed model call with its live events, and the journal of its response
//! (the step row, the assistant message and the tool calls it asked for, in one commit).
//!
//! **Held writes.** Each commit is a round trip to the store's writer, and on a busy machine the
//! round trips are what a step costs. So a step holds two of its writes back and sends each with
//! the step's next commit, in the same order, when nothing in between can depend on them or be
//! seen before them:
//! - `step.started` (with the turn row saying so) goes out with the first streamed events, or
//!   with the journal when the model streamed none (after the first step of a turn, when the
//!   tools, the prompt's pinned block and the strategy need no commit of their own before the
//!   call); a step that ends otherwise (cancel, timeout, a model error) commits it on its own
//!   first;
//! - the journal of a response whose calls all settle without running (skill loads) goes out
//!   with their results and `step.completed` ([`super::calls`]);
//! - a new turn's start (its rows, the message taken from the inbox, `turn.started`), held by the
//!   drive loop, goes out with the first `step.started`, before the model is called, never
//!   later; whatever commits before it (the turn ending early, compaction) carries it first.
//!
//! Nothing is published before it is committed, so a live follower never sees an event the
//! store lacks. A process killed while writes are held loses only what was never committed: the
//! turn row still says the step has not started, and the driver that resumes it starts the step
//! again (the model call included, as after a kill before the journal), so every event index is
//! still published once; a turn whose start was held is not there at all, and its message, still
//! in the inbox, starts it again.

use serde_json::Value;
use tokio::sync::mpsc;

use super::{CallError, TurnDriver, TurnEnd, effect_str, finish_str, idempotency_key};
use crate::engine::RuntimeResult;
use crate::engine::build::LOAD_SKILL;
use crate::engine::compaction::to_message;
use crate::engine::events as ev;
use crate::engine::hollow;
use crate::engine::limits::sleep_until_opt;
use crate::engine::phases::converge_note;
use crate::engine::strategy;
use crate::model::{Message, ModelEvent, ModelRequest, ModelResponse, ToolCall, ToolChoice};
use crate::store::*;

impl TurnDriver<'_> {
    /// Checks cancel and limits, folds steering messages in, compacts, emits `step.started`.
    pub(in crate::engine) async fn before_step(
        &mut self,
        turn: &mut TurnRecord,
    ) -> RuntimeResult<Option<TurnEnd>> {
        // A new turn's start, held back by the drive loop, goes out with `step.started`.
        let starting = turn.step_index == 0 && self.held.is_some();
        let flag = match self.next_cancel.take() {
            Some(flag) => flag,
            None => self
                .rt
                .inner
                .store
                .session(&self.session.id)
                .await?
                .map(|s| s.cancel_requested),
        };
        if let Some(requested) = flag {
            self.session.cancel_requested = requested;
        }
        if self.session.cancel_requested || self.cancel.is_cancelled() {
            return self.end_cancelled(turn.clone()).await.map(Some);
        }
        if let Some((reason, message)) = match self.limit_hit(turn) {
            Some(hit) => Some(hit),
            None => self.budget_hit().await?,
        } {
            return self
                .end_failed(turn.clone(), "limit_exceeded", &message, Some(reason))
                .await
                .map(Some);
        }
        if turn.step_index == 0 {
            self.resolve_dynamic(turn).await?;
        }
        if turn.step_index > 0
            && self.build.manifest.agent.config.turn_policy == eve_compile::TurnPolicy::Steer
        {
            self.fold_steering(turn).await?;
        }
        self.maybe_compact(turn).await?;
        // Never past the model call: the turn is seen started before the model answers.
        let hold = self.may_hold() && !starting;
        turn.step_started = true;
        let mut batch = Batch::new();
        batch.push(Op::PutTurn(turn.clone())).event(
            self.id(),
            ev::STEP_STARTED,
            ev::step_started(turn, turn.step_index, &self.model.model_id),
        );
        if let Some(phase) = self.step_phase(turn).await?
            && phase.previous != Some(phase.phase)
        {
            self.ensure_extra().await?;
            batch.event(
                self.id(),
                ev::PHASE_CHANGED,
                ev::phase_changed(
                    turn,
                    turn.step_index,
                    phase.previous.map(|p| p.as_str()),
                    phase.phase.as_str(),
                    phase.progress,
                    &self.withdrawn_names(),
                ),
            );
        }
        let batch = self.with_held(batch);
        if hold {
            self.held = Some(batch);
        } else {
            self.rt.commit(batch).await?;
        }
        Ok(None)
    }

    /// Whether this step may hold writes back: nothing between `step.started` and the journal
    /// commits on its own (the turn's tools and the prompt's pinned block are loaded, no plan, no
    /// critic, no phases that read the journal).
    fn may_hold(&self) -> bool {
        let config = &self.build.manifest.agent.config;
        self.extra.is_some()
            && self.pinned.is_some()
            && config.strategy == eve_compile::Strategy::React
            && config.limits.phases.is_none()
    }

    /// `batch` after the writes held back, which go first.
    pub(in crate::engine) fn with_held(&mut self, batch: Batch) -> Batch {
        match self.held.take() {
            Some(mut held) => {
                held.ops.extend(batch.ops);
                held.durable |= batch.durable;
                held.fences.extend(batch.fences);
                held
            }
            None => batch,
        }
    }

    /// Commits the writes held back, if any.
    pub(in crate::engine) async fn flush_held(&mut self) -> RuntimeResult<()> {
        if let Some(held) = self.held.take() {
            self.rt.commit(held).await?;
        }
        Ok(())
    }

    pub(in crate::engine) async fn fold_steering(
        &mut self,
        turn: &TurnRecord,
    ) -> RuntimeResult<()> {
        let inbox = self.rt.inner.store.pending_inbox(self.id()).await?;
        if inbox.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new();
        for message in &inbox {
            batch
                .push(Op::ConsumeInbox {
                    id: message.id.clone(),
                    turn_seq: turn.seq,
                })
                .push(Op::AppendMessage {
                    session_id: self.session.id.clone(),
                    turn_seq: Some(turn.seq),
                    kind: MESSAGE_KIND_MESSAGE.to_owned(),
                    body: serde_json::to_value(Message::User {
                        content: message.text.clone(),
                    })?,
                })
                .event(
                    &self.session.id,
                    ev::MESSAGE_RECEIVED,
                    ev::message_received(turn, &message.text),
                );
        }
        self.rt.commit(batch).await?;
        self.context = None;
        Ok(())
    }

    pub(in crate::engine) async fn context(&mut self) -> RuntimeResult<&mut Vec<Message>> {
        if self.context.is_none() {
            let rows = self.rt.inner.store.context(&self.session.id).await?;
            let mut messages = Vec::with_capacity(rows.len());
            for row in rows {
                messages.push(to_message(&row)?);
            }
            self.context = Some(messages);
        }
        Ok(self.context.get_or_insert_with(Vec::new))
    }

    pub(super) async fn call_model(
        &mut self,
        turn: &TurnRecord,
    ) -> Result<ModelResponse, CallError> {
        if let Err(e) = self.ensure_extra().await {
            return Err(CallError::Model(e.to_string()));
        }
        let cut_lines = self.build.manifest.agent.config.lean_context.cut_lines as usize;
        let messages = match self.context().await {
            Ok(c) => crate::engine::lean::lean_messages(c, cut_lines),
            Err(e) => return Err(CallError::Model(e.to_string())),
        };
        if let Err(e) = self.step_phase(turn).await {
            return Err(CallError::Model(e.to_string()));
        }
        let (mut tools, withdrawn) = self.without_withdrawn(self.offered_specs());
        let mut system = match self.system_text(turn).await {
            Ok(system) => system,
            Err(e) => return Err(CallError::Model(e.to_string())),
        };
        if !withdrawn.is_empty() {
            system.push_str("\n\n");
            system.push_str(&converge_note(&withdrawn));
        }
        let mut forced = None;
        if self.plans() {
            let action = match self.plan_action(turn).await {
                Ok(a) => a,
                Err(e) => return Err(CallError::Model(e.to_string())),
            };
            match action {
                strategy::PlanAction::Plan => {
                    tools = vec![strategy::submit_plan_spec()];
                    system.push_str("\n\n");
                    system.push_str(strategy::PLANNING_NOTE);
                    forced = Some(ToolChoice::Tool(strategy::SUBMIT_PLAN.to_owned()));
                }
                strategy::PlanAction::Wave(calls) => return Ok(strategy::wave_response(calls)),
                strategy::PlanAction::Synthesize { failed } => {
                    tools = Vec::new();
                    system.push_str("\n\n");
                    system.push_str(&strategy::synthesis_note(&failed));
                }
                strategy::PlanAction::NoPlan(message) => {
                    return Err(CallError::Failed("plan_failed", message));
                }
            }
        }
        let config = &self.build.manifest.agent.config;
        let tool_choice = forced.unwrap_or_else(|| {
            ToolChoice::for_step(config.tool_choice.as_deref(), turn.step_index, &tools)
        });
        let request = ModelRequest {
            model: self.model.model.clone(),
            system,
            messages,
            tools,
            reasoning: config.reasoning.clone(),
            max_output_tokens: None,
            tool_choice,
            temperature: None,
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<ModelEvent>();
        let client = self.model.client.clone();
        let call = async move {
            let mut on_event = move |event: ModelEvent| {
                let _ = tx.send(event);
            };
            client.stream(&request, &mut on_event).await
        };
        let rt = self.rt;
        let session = self.session.id.clone();
        let step = turn.step_index;
        // `step.started`, when held, goes out with the first streamed events.
        let held = std::sync::Mutex::new(self.held.take());
        let consume = async {
            let mut names: Vec<(String, String)> = Vec::new();
            while let Some(first) = rx.recv().await {
                // Whatever else is already queued goes into the same commit.
                let mut queued = vec![first];
                while let Ok(more) = rx.try_recv() {
                    queued.push(more);
                }
                let mut batch = Batch::new();
                for event in queued {
                    let (kind, data) = match event {
                        ModelEvent::TextDelta { text } => (
                            ev::MESSAGE_APPENDED,
                            ev::message_appended(turn, step, &text),
                        ),
                        ModelEvent::ReasoningDelta { text } => (
                            ev::REASONING_APPENDED,
                            ev::reasoning_appended(turn, step, &text),
                        ),
                        ModelEvent::ToolCallStart { id, name } => {
                            names.push((id, name));
                            continue;
                        }
                        ModelEvent::ToolCallDelta { id, delta } => {
                            let name = names
                                .iter()
                                .find(|(i, _)| *i == id)
                                .map(|(_, n)| n.clone())
                                .unwrap_or_default();
                            if name == LOAD_SKILL {
                                // As eve: internal actions do not publish their input stream.
                                continue;
                            }
                            (
                                ev::ACTION_INPUT_APPENDED,
                                ev::action_input_appended(turn, step, &id, &name, &delta),
                            )
                        }
                    };
                    batch.event(&session, kind, data);
                }
                if batch.is_empty() {
                    continue;
                }
                let first = held.lock().ok().and_then(|mut h| h.take());
                let batch = match &first {
                    Some(start) => {
                        let mut start = start.clone();
                        start.ops.extend(batch.ops);
                        start
                    }
                    None => batch,
                };
                if let Err(e) = rt.commit(batch).await {
                    tracing::warn!(error = %e, "cannot store a stream event");
                    // `step.started` is not lost with them: it goes with the next commit.
                    if let (Some(start), Ok(mut h)) = (first, held.lock()) {
                        *h = Some(start);
                    }
                }
            }
        };
        let both = async { tokio::join!(call, consume).0 };
        let deadline = self.deadline(turn);
        let cancel = self.cancel.clone();
        let result = tokio::select! {
            r = both => Ok(r),
            () = cancel.cancelled() => Err(CallError::Cancelled),
            () = sleep_until_opt(deadline) => Err(CallError::TimedOut),
        };
        self.held = held.into_inner().ok().flatten();
        result?.map_err(|e| {
            if e.is_context_overflow() {
                CallError::ContextTooLong(e.to_string())
            } else {
                CallError::Model(e.to_string())
            }
        })
    }

    /// Journals a response; returns `true` when the turn is finished.
    pub(in crate::engine) async fn journal_response(
        &mut self,
        turn: &mut TurnRecord,
        response: ModelResponse,
    ) -> RuntimeResult<bool> {
        let step = turn.step_index;
        let finish = finish_str(&response);
        let mut used = match self.call_ids.take() {
            Some(ids) => ids,
            None => self
                .rt
                .inner
                .store
                .tool_calls(self.id(), turn.seq)
                .await?
                .into_iter()
                .map(|c| c.call_id)
                .collect(),
        };
        let mut calls = Vec::new();
        let mut assistant_calls = Vec::new();
        for (position, call) in response.tool_calls.iter().enumerate() {
            let mut call_id = call.id.clone();
            if call_id.is_empty() || used.contains(&call_id) {
                call_id = format!("call_{}_{}_{}", turn.seq, step, position);
            }
            used.insert(call_id.clone());
            let is_skill = call.name == LOAD_SKILL;
            let effect = match self.target(&call.name, &call.input) {
                Some(target) => effect_str(target.policy.effect),
                None => "read",
            };
            calls.push(ToolCallRecord {
                session_id: self.session.id.clone(),
                call_id: call_id.clone(),
                turn_seq: turn.seq,
                step_index: step,
                position: position as u64,
                kind: if is_skill { "load-skill" } else { "tool-call" }.to_owned(),
                name: call.name.clone(),
                input: call.input.clone(),
                idempotency_key: idempotency_key(&self.session.id, turn.seq, &call_id),
                effect: effect.to_owned(),
                status: CallStatus::Pending,
                approval: ApprovalState::None,
                output: None,
                is_error: false,
                attempts: 0,
                started_at: None,
                ended_at: None,
            });
            assistant_calls.push(ToolCall {
                id: call_id,
                name: call.name.clone(),
                input: call.input.clone(),
            });
        }
        let usage = response.usage;
        self.charge(turn, &usage, self.model.price_per_million);
        self.last_tokens = usage.input_tokens.saturating_add(usage.output_tokens);
        let assistant = Message::Assistant {
            content: response.content.clone(),
            reasoning: response.reasoning.clone(),
            tool_calls: assistant_calls,
        };
        let mut batch = Batch::new();
        batch
            .push(Op::PutStep(StepRecord {
                session_id: self.session.id.clone(),
                turn_seq: turn.seq,
                step_index: step,
                model_id: self.model.model_id.clone(),
                response: serde_json::to_value(&response)?,
                at: now_ms(),
            }))
            .push(Op::AppendMessage {
                session_id: self.session.id.clone(),
                turn_seq: Some(turn.seq),
                kind: MESSAGE_KIND_MESSAGE.to_owned(),
                body: serde_json::to_value(&assistant)?,
            });
        for call in &calls {
            batch.push(Op::PutToolCall(call.clone()));
        }
        if !response.content.is_empty() {
            batch.event(
                self.id(),
                ev::MESSAGE_COMPLETED,
                ev::message_completed(turn, step, &finish, &response.content),
            );
        }
        let step_usage = ev::step_usage(&usage);
        let step_usage_kept = step_usage.clone();
        // A final answer may go back to the model once more: the hollow-answer check's nudge,
        // or a critic's objections. The step ends; the message is the next step's last.
        let mut send_back: Option<(String, Vec<(&str, Value)>)> = None;
        let mut final_events: Vec<(&str, Value)> = Vec::new();
        if calls.is_empty() {
            if let Some(hollow) = self.hollow_answer(turn, &response.content).await? {
                let data = ev::hollow_nudged(turn, step, &hollow.claims, &hollow.reason);
                send_back = Some((hollow.nudge(), vec![(ev::HOLLOW_NUDGED, data)]));
            } else if let Some((critic, rounds)) = self.review_due(turn).await? {
                let round = rounds + 1;
                match self.review(turn, &critic, &response.content).await? {
                    strategy::Verdict::Revise(objections) => {
                        let data =
                            ev::reflect_round(turn, step, round, "revise", Some(&objections));
                        send_back = Some((
                            strategy::send_back(round, &objections),
                            vec![(ev::REFLECT_ROUND, data)],
                        ));
                    }
                    strategy::Verdict::Accept => {
                        final_events.push((
                            ev::REFLECT_ROUND,
                            ev::reflect_round(turn, step, round, "accept", None),
                        ));
                        final_events.push((
                            ev::REFLECT_COMPLETED,
                            ev::reflect_completed(turn, step, round, true, &response.content),
                        ));
                    }
                    strategy::Verdict::Error(error) => {
                        tracing::warn!(session = %self.session.id, %error, "the critic failed; the answer stands");
                        final_events.push((
                            ev::REFLECT_ROUND,
                            ev::reflect_round(turn, step, round, "error", Some(&error)),
                        ));
                        final_events.push((
                            ev::REFLECT_COMPLETED,
                            ev::reflect_completed(turn, step, round, false, &response.content),
                        ));
                    }
                }
            } else if self.build.manifest.agent.config.strategy == eve_compile::Strategy::Reflect {
                // No review left (`max_rounds` spent, or no step left): the answer is final.
                let rounds = self.review_rounds(turn).await?;
                final_events.push((
                    ev::REFLECT_COMPLETED,
                    ev::reflect_completed(turn, step, rounds, false, &response.content),
                ));
            }
        }
        let done = calls.is_empty() && send_back.is_none();
        let mut nudge = None;
        let mut counted = None;
        if let Some((text, events)) = send_back {
            batch.event(
                self.id(),
                ev::STEP_COMPLETED,
                ev::step_completed(turn, step, &finish, step_usage),
            );
            for (kind, data) in events {
                batch.event(self.id(), kind, data);
            }
            batch.push(Op::AppendMessage {
                session_id: self.session.id.clone(),
                turn_seq: Some(turn.seq),
                kind: MESSAGE_KIND_MESSAGE.to_owned(),
                body: serde_json::to_value(Message::User {
                    content: text.clone(),
                })?,
            });
            turn.phase = TurnPhase::Model;
            turn.step_index += 1;
            turn.step_started = false;
            nudge = Some(Message::User { content: text });
        } else if done {
            turn.phase = TurnPhase::Done;
            turn.status = TurnStatus::Completed;
            turn.ended_at = Some(now_ms());
            self.session.status = SessionStatus::Idle;
            batch.event(
                self.id(),
                ev::STEP_COMPLETED,
                ev::step_completed(turn, step, &finish, step_usage),
            );
            for (kind, data) in final_events {
                batch.event(self.id(), kind, data);
            }
            batch
                .event(self.id(), ev::TURN_COMPLETED, ev::turn_completed(turn))
                .event(
                    self.id(),
                    ev::SESSION_WAITING,
                    ev::session_waiting(&self.session.id, &self.session.usage),
                );
            // A failed call under the release's `rollback:` policy counts in this very commit.
            counted = self
                .rt
                .failure_to_count(turn, TurnStatus::Completed)
                .await?;
            if let Some((op, _)) = &counted {
                batch.push(op.clone());
            }
        } else {
            turn.phase = TurnPhase::Tools;
            batch.event(
                self.id(),
                ev::ACTIONS_REQUESTED,
                ev::actions_requested(turn, step, &calls),
            );
        }
        batch
            .push(Op::PutTurn(turn.clone()))
            .push(Op::UpdateSession(self.session.clone()));
        self.call_ids = Some(used);
        self.last_usage = Some((step, step_usage_kept));
        // Calls that all settle without running (skill loads): their results and
        // `step.completed` carry this journal (see the module header).
        let hold =
            !calls.is_empty() && calls.iter().all(|c| c.kind == "load-skill") && self.may_hold();
        self.fresh_calls = (!calls.is_empty()).then(|| calls.clone());
        let batch = self.with_held(batch);
        if hold {
            self.held = Some(batch);
        } else {
            self.rt.commit(batch).await?;
        }
        if let Some((_, counted)) = counted {
            self.rt.failure_counted(counted).await;
        }
        if let Some(context) = self.context.as_mut() {
            context.push(assistant);
            context.extend(nudge);
        }
        Ok(done)
    }

    /// The hollow-answer check of a final answer (`hollow_check: true`): `Some` when the answer
    /// gets its one nudge (never twice in a turn, never past the step limit).
    async fn hollow_answer(
        &self,
        turn: &TurnRecord,
        answer: &str,
    ) -> RuntimeResult<Option<hollow::Hollow>> {
        let config = &self.build.manifest.agent.config;
        if !config.hollow_check
            || turn.step_index + 1 >= u64::from(config.limits.max_steps_per_turn)
        {
            return Ok(None);
        }
        let store = &self.rt.inner.store;
        let nudged = store.context(self.id()).await?.iter().any(|row| {
            row.turn_seq == Some(turn.seq)
                && row.body["role"] == "user"
                && row.body["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(hollow::NUDGE_PREFIX))
        });
        if nudged {
            return Ok(None);
        }
        let calls = store.tool_calls(self.id(), turn.seq).await?;
        Ok(hollow::check(answer, &calls))
    }

    pub(in crate::engine) async fn step_usage(&self, turn: &TurnRecord) -> RuntimeResult<Value> {
        let steps = self.rt.inner.store.steps(self.id(), turn.seq).await?;
        let usage = steps
            .iter()
            .find(|s| s.step_index == turn.step_index)
            .and_then(|s| serde_json::from_value(s.response["usage"].clone()).ok())
            .unwrap_or_default();
        Ok(ev::step_usage(&usage))
    }
}
