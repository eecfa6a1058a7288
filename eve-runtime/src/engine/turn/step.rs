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

use super::limits::sleep_until_opt;
use super::seam::{AnswerVerdict, Hold, Shaped, StepStart, to_message};
use super::{CallError, TurnDriver, TurnEnd, effect_str, finish_str, idempotency_key, view};
use crate::builds::LOAD_SKILL;
use crate::engine::RuntimeResult;
use crate::engine::events as ev;
use crate::features::turn_input::{MessagePolicy, TurnInput};
use crate::model::{Message, ModelEvent, ModelRequest, ModelResponse, ToolCall, ToolChoice};
use crate::observe::{ModelCall, TurnWork};
use crate::store::*;

/// How long streamed deltas gather after a commit of the stream's events before the next one
/// (the first commit is at once): a commit per delta of a fast model is most of a turn's writes.
const STREAM_LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// A final answer that does not end the turn: the message it goes back with (none when a
/// feature holds the turn), and the events of the step's end.
type SendBack = (Option<String>, Vec<(&'static str, Value)>);

impl TurnDriver<'_> {
    /// Checks cancel and limits, folds steering messages in, compacts, emits `step.started`.
    pub(in crate::engine) async fn before_step(
        &mut self,
        turn: &mut TurnRecord,
    ) -> RuntimeResult<Option<TurnEnd>> {
        // A new turn's start, held back by the drive loop, goes out with `step.started`.
        let starting = turn.step_index == 0 && self.held.is_some();
        self.rt.observe_work(TurnWork::StepBegan {
            session: &turn.session_id,
            seq: turn.seq,
            step: turn.step_index,
        });
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
        // A feature may hold the turn open before this step (tasks it started still work).
        if let Some(end) = self.hold(turn).await? {
            return Ok(Some(end));
        }
        if turn.step_index > 0 {
            self.fold_steering(turn).await?;
        }
        // The features' writes before `step.started` (dynamic tools, a compaction), committed
        // first; then what goes out with it. A feature that reads what the held writes hold (a
        // compaction reads the context the turn's start adds to) has them committed first.
        self.context().await?;
        if self.held.is_some() {
            let mut flush = false;
            {
                let view = view!(self, turn);
                for feature in &mut self.features {
                    if feature.reads_committed_start(&view).await? {
                        flush = true;
                        break;
                    }
                }
            }
            if flush {
                self.flush_held().await?;
            }
        }
        let mut start = StepStart::default();
        {
            let view = view!(self, turn);
            for feature in &mut self.features {
                feature.prepare_step(&view, &mut start).await?;
            }
        }
        if !start.before.is_empty() {
            let before = self.with_held(std::mem::take(&mut start.before));
            self.rt.commit(before).await?;
        }
        if start.context_replaced {
            self.context = None;
            self.refresh_session().await?;
        }
        if start.tools_changed {
            self.extra = None;
        }
        // Never past the model call: the turn is seen started before the model answers.
        let hold = self.may_hold(turn) && !starting;
        turn.step_started = true;
        let mut batch = Batch::new();
        batch.push(Op::PutTurn(turn.clone())).event(
            self.id(),
            ev::STEP_STARTED,
            ev::step_started(turn, turn.step_index, &self.model.model_id),
        );
        if self.features.iter().any(|f| f.needs_tools_at_start()) {
            self.ensure_extra().await?;
        }
        self.context().await?;
        {
            let view = view!(self, turn);
            for feature in &mut self.features {
                feature.step_started(&view, &mut start).await?;
            }
        }
        batch.ops.extend(start.with.ops);
        batch.durable |= start.with.durable;
        let batch = self.with_held(batch);
        if hold {
            self.held = Some(batch);
        } else {
            self.rt.commit(batch).await?;
        }
        Ok(None)
    }

    /// Asks the features whether something holds the turn open before this step, and waits
    /// while it does: their writes are committed as they come, the cancel flag is read between
    /// rounds, and a turn that can only go on with a principal's answer parks on it.
    async fn hold(&mut self, turn: &mut TurnRecord) -> RuntimeResult<Option<TurnEnd>> {
        self.context().await?;
        loop {
            let mut held = Hold::Go;
            {
                let view = view!(self, &*turn);
                for feature in &mut self.features {
                    held = feature.hold(&view).await?;
                    if !matches!(held, Hold::Go) {
                        break;
                    }
                }
            }
            let writes = match held {
                Hold::Go => {
                    if turn.status == TurnStatus::Waiting {
                        // Back from a park: the turn runs again (committed with its next step).
                        turn.status = TurnStatus::Running;
                        self.session.status = SessionStatus::Running;
                        let mut batch = Batch::new();
                        batch
                            .push(Op::PutTurn(turn.clone()))
                            .push(Op::UpdateSession(self.session.clone()));
                        let batch = self.with_held(batch);
                        self.rt.commit(batch).await?;
                    }
                    return Ok(None);
                }
                Hold::Wait(writes) => writes,
                Hold::Fail(code, message) => {
                    return self
                        .end_failed(turn.clone(), code, &message, None)
                        .await
                        .map(Some);
                }
                Hold::Park(pending) => return self.park_on(turn, pending, None).await,
                Hold::Ask(pending, writes) => {
                    return self.park_on(turn, pending, Some(writes)).await;
                }
            };
            if !writes.is_empty() {
                let writes = self.with_held(writes);
                self.rt.commit(writes).await?;
            }
            let requested = self
                .rt
                .inner
                .store
                .session(&self.session.id)
                .await?
                .is_some_and(|s| s.cancel_requested);
            if requested || self.cancel.is_cancelled() {
                self.session.cancel_requested = requested;
                return self.end_cancelled(turn.clone()).await.map(Some);
            }
        }
    }

    /// Parks the turn on `pending`: `input.requested` and `turn.waiting` when it was not parked
    /// yet, or when `fresh` holds new requests of its own (their rows, which go out with it).
    async fn park_on(
        &mut self,
        turn: &mut TurnRecord,
        pending: Vec<InputRequestRecord>,
        fresh: Option<Batch>,
    ) -> RuntimeResult<Option<TurnEnd>> {
        if turn.status == TurnStatus::Waiting && self.held.is_none() && fresh.is_none() {
            // Parked already (a driver looked again): nothing changed.
            return Ok(Some(TurnEnd::Parked(pending)));
        }
        let asks = fresh.is_some();
        let mut batch = fresh.unwrap_or_default();
        if turn.status != TurnStatus::Waiting || asks {
            batch.event(
                self.id(),
                ev::INPUT_REQUESTED,
                ev::input_requested(turn, turn.step_index, &pending),
            );
        }
        if turn.status != TurnStatus::Waiting {
            batch.event(
                self.id(),
                ev::TURN_WAITING,
                ev::turn_waiting(turn, &self.session.usage),
            );
        }
        turn.status = TurnStatus::Waiting;
        self.session.status = SessionStatus::Waiting;
        batch
            .push(Op::PutTurn(turn.clone()))
            .push(Op::UpdateSession(self.session.clone()));
        let batch = self.with_held(batch);
        self.rt.commit(batch).await?;
        Ok(Some(TurnEnd::Parked(pending)))
    }

    /// Whether this step may hold writes back: nothing between `step.started` and the journal
    /// commits on its own (the turn's tools and the prompt's pinned block are loaded, no plan, no
    /// critic, no phases that read the journal).
    fn may_hold(&self, turn: &TurnRecord) -> bool {
        if self.extra.is_none() {
            return false;
        }
        let view = view!(self, turn);
        self.features.iter().all(|f| f.lets_hold(&view))
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
        // A message steers (joins the running turn) or queues (waits for a turn of its own):
        // its own `turnPolicy`, else the agent's.
        let agent_steers =
            self.build.manifest.agent.config.turn_policy == eve_compile::TurnPolicy::Steer;
        let mut batch = Batch::new();
        for message in &inbox {
            let content = crate::content::UserContent::decode(&message.text);
            let input = message
                .input
                .as_ref()
                .map(TurnInput::from_value)
                .unwrap_or_default();
            let steers = match input.turn_policy {
                Some(policy) => policy == MessagePolicy::Steer,
                None => agent_steers,
            };
            if !steers {
                continue;
            }
            if input.shapes_turn() {
                batch.push(self.join_input(turn, &input));
            }
            batch
                .push(Op::ConsumeInbox {
                    id: message.id.clone(),
                    turn_seq: turn.seq,
                })
                .push(Op::AppendMessage {
                    session_id: self.session.id.clone(),
                    turn_seq: Some(turn.seq),
                    kind: MESSAGE_KIND_MESSAGE.to_owned(),
                    body: serde_json::to_value(content.message())?,
                })
                .event(
                    &self.session.id,
                    ev::MESSAGE_RECEIVED,
                    ev::message_received(turn, &content),
                );
        }
        if batch.is_empty() {
            return Ok(());
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
        let request = match self.shape_request(turn).await {
            Ok(Ok(request)) => request,
            Ok(Err(Shaped::Respond(response))) => return Ok(response),
            Ok(Err(Shaped::Fail(code, message))) => return Err(CallError::Failed(code, message)),
            Ok(Err(Shaped::Call)) => {
                return Err(CallError::Model("no request was made".to_owned()));
            }
            Err(e) => return Err(CallError::Model(e.to_string())),
        };
        // What the observers are told of the call (the request itself only when one asks).
        let copy = self.rt.observers_want_requests().then(|| request.clone());
        let started = std::time::SystemTime::now();
        let (tx, mut rx) = mpsc::unbounded_channel::<ModelEvent>();
        let client = self.model.client.clone();
        let call = async move {
            let mut on_event = move |event: ModelEvent| {
                let _ = tx.send(event);
            };
            let clock = std::time::Instant::now();
            let response = client.stream(&request, &mut on_event).await;
            (response, clock.elapsed())
        };
        let rt = self.rt;
        let session = self.session.id.clone();
        let step = turn.step_index;
        // `step.started`, when held, goes out with the first streamed events.
        let held = std::sync::Mutex::new(self.held.take());
        let consume = async {
            let mut names: Vec<(String, String)> = Vec::new();
            let mut committed_at: Option<tokio::time::Instant> = None;
            while let Some(first) = rx.recv().await {
                // Whatever else is already queued goes into the same commit, and after the
                // first commit what arrives within [`STREAM_LINGER`] of the last one: a fast
                // model's burst of deltas is a few commits, not one each. The stream's end
                // flushes at once, and a delta arriving later than that is committed at once.
                let mut queued = vec![first];
                while let Ok(more) = rx.try_recv() {
                    queued.push(more);
                }
                if let Some(at) = committed_at {
                    let until = at + STREAM_LINGER;
                    while let Ok(Some(more)) = tokio::time::timeout_at(until, rx.recv()).await {
                        queued.push(more);
                    }
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
                let result = rt.commit(batch).await;
                committed_at = Some(tokio::time::Instant::now());
                if let Err(e) = result {
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
        let timed = tokio::select! {
            r = both => Ok(r),
            () = cancel.cancelled() => Err(CallError::Cancelled),
            () = sleep_until_opt(deadline) => Err(CallError::TimedOut),
        };
        self.held = held.into_inner().ok().flatten();
        let took = timed.as_ref().ok().map(|(_, took)| *took);
        let result = timed.map(|(response, _)| response);
        let outcome = match &result {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(e.to_string()),
            Err(CallError::Cancelled) => Err("cancelled".to_owned()),
            Err(_) => Err("the turn ran out of wall-clock time".to_owned()),
        };
        self.rt.observe_work(TurnWork::ModelCalled(ModelCall {
            session: &turn.session_id,
            seq: turn.seq,
            step,
            model_id: &self.model.model_id,
            model: &self.model.model,
            started,
            took,
            request: copy.as_ref(),
            outcome: outcome.as_ref().map(|r| *r).map_err(String::as_str),
        }));
        result?.map_err(|e| {
            if e.is_context_overflow() {
                CallError::ContextTooLong(e.to_string())
            } else {
                CallError::Model(e.to_string())
            }
        })
    }

    /// This step's model request: the build's prompt, the context and the offered tools, as the
    /// features shape them (their writes go out first, or with the held `step.started`).
    /// `Err(shaped)` when a feature answered instead of the model or failed the turn.
    async fn shape_request(
        &mut self,
        turn: &TurnRecord,
    ) -> RuntimeResult<Result<ModelRequest, Shaped>> {
        self.ensure_extra().await?;
        self.context().await?;
        let config = &self.build.manifest.agent.config;
        let view = view!(self, turn);
        let mut request = ModelRequest {
            model: self.model.model.clone(),
            system: self.build.system_prompt.clone(),
            messages: view.context.to_vec(),
            tools: view.offered_specs(),
            reasoning: config.reasoning.clone(),
            max_output_tokens: None,
            tool_choice: ToolChoice::Auto,
            temperature: None,
            output_schema: None,
            safety_identifier: None,
        };
        let mut writes = Batch::new();
        let mut shaped = Shaped::Call;
        for feature in &mut self.features {
            shaped = feature
                .shape_request(&view, &mut request, &mut writes)
                .await?;
            if !matches!(shaped, Shaped::Call) {
                break;
            }
        }
        if !writes.is_empty() {
            match self.held.as_mut() {
                Some(held) => {
                    held.ops.extend(writes.ops);
                    held.durable |= writes.durable;
                }
                None => {
                    self.rt.commit(writes).await?;
                }
            }
        }
        if !matches!(shaped, Shaped::Call) {
            return Ok(Err(shaped));
        }
        // A choice no feature made is the agent's `tool_choice` for this step.
        if request.tool_choice.is_auto() {
            request.tool_choice = ToolChoice::for_step(
                self.build.manifest.agent.config.tool_choice.as_deref(),
                turn.step_index,
                &request.tools,
            );
        }
        Ok(Ok(request))
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
            let effect = match self.policy_of(&*turn, &call.name, &call.input) {
                Some(policy) => effect_str(policy.effect),
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
        let model_id = self.model.model_id.clone();
        self.charge(turn, &usage, &model_id, self.model.price_per_million);
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
        // A feature may instead hold the turn open (tasks still working): the step ends, the
        // next starts once nothing holds it.
        let mut send_back: Option<SendBack> = None;
        let mut final_events: Vec<(&str, Value)> = Vec::new();
        let mut failed: Option<(&'static str, String)> = None;

        if calls.is_empty() {
            let view = view!(self, &*turn);
            for feature in &mut self.features {
                match feature.final_answer(&view, &response.content).await? {
                    AnswerVerdict::Accept(events) => final_events.extend(events),
                    AnswerVerdict::SendBack { message, events } => {
                        send_back = Some((Some(message), events));
                        break;
                    }
                    AnswerVerdict::Hold(events) => {
                        send_back = Some((None, events));
                        break;
                    }
                    AnswerVerdict::Fail(code, message) => {
                        failed = Some((code, message));
                        break;
                    }
                }
            }
        }
        if let Some((code, message)) = failed {
            // The journal and `step.completed` go out with `turn.failed`, in one commit.
            batch
                .event(
                    self.id(),
                    ev::STEP_COMPLETED,
                    ev::step_completed(turn, step, &finish, step_usage),
                )
                .push(Op::UpdateSession(self.session.clone()));
            self.call_ids = Some(used);
            self.last_usage = Some((step, step_usage_kept));
            let held = self.with_held(batch);
            self.held = Some(held);
            self.end_failed(turn.clone(), code, &message, None).await?;
            return Ok(true);
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
            if let Some(text) = text {
                batch.push(Op::AppendMessage {
                    session_id: self.session.id.clone(),
                    turn_seq: Some(turn.seq),
                    kind: MESSAGE_KIND_MESSAGE.to_owned(),
                    body: serde_json::to_value(Message::user(text.clone()))?,
                });
                nudge = Some(Message::user(text));
            }
            turn.phase = TurnPhase::Model;
            turn.step_index += 1;
            turn.step_started = false;
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
        let hold = !calls.is_empty()
            && calls.iter().all(|c| c.kind == "load-skill")
            && self.may_hold(turn);
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
