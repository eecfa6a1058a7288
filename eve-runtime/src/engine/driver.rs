//! The turn loop: one driver per session, holding its lease, moving the open turn forward.
//!
//! A turn is a small state machine stored in its row (`phase`, `step_index`, `step_started`):
//! `model` (call the model for this step), `tools` (settle the calls it asked for, then complete
//! the step), `waiting` (parked on approvals), `resume` (answers arrived: settle the parked calls at
//! the start of the next step, then call the model in that same step). Each transition is one
//! commit carrying its events, so a driver started on any stored state — after a crash, on another
//! process — knows what to do next from that row and the turn's tool calls alone.

#[path = "dynamic.rs"]
mod dynamic;
#[path = "hooks.rs"]
pub(super) mod hooks;
#[path = "subagents.rs"]
pub(super) mod subagents;
#[path = "targets.rs"]
mod targets;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::{Approval, Effect, Tool};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::build::{LOAD_SKILL, LoadedBuild};
use super::events as ev;
use super::{DriveOutcome, ResolvedModel, Runtime, RuntimeError, RuntimeResult};
use crate::model::{Message, ModelEvent, ModelRequest, ModelResponse, ToolCall};
use crate::store::*;
use crate::tools::{ToolContext, ToolResult, prepare_workspace, run_tool};

/// How a turn run ended.
enum TurnEnd {
    Finished,
    Parked(Vec<InputRequestRecord>),
}

/// Why a model call did not produce a response.
enum CallError {
    Cancelled,
    TimedOut,
    Model(String),
}

pub(super) async fn drive(rt: &Runtime, session: &str) -> RuntimeResult<DriveOutcome> {
    let Some(cancel) = rt.register(session) else {
        rt.settled(session).await;
        return outcome_from_store(rt, session).await;
    };
    let result = drive_registered(rt, session, cancel).await;
    if result.is_err() {
        rt.unregister(session);
    }
    result
}

async fn drive_registered(
    rt: &Runtime,
    session: &str,
    cancel: CancellationToken,
) -> RuntimeResult<DriveOutcome> {
    let store = rt.inner.store.clone();
    if store.session(session).await?.is_none() {
        return Err(RuntimeError::SessionNotFound(session.to_owned()));
    }
    let claim = LeaseClaim {
        session_id: session.to_owned(),
        holder: format!("{}:{}", rt.inner.holder, ulid::Ulid::new()),
        pid: std::process::id(),
        host: rt.inner.host.clone(),
        ttl_ms: i64::try_from(rt.inner.config.lease_ttl.as_millis()).unwrap_or(15_000),
    };
    if let LeaseOutcome::HeldBy { pid, .. } = store.acquire_lease(&claim).await? {
        rt.unregister(session);
        return Ok(DriveOutcome::Busy { pid });
    }
    let heartbeat = CancellationToken::new();
    {
        let store = store.clone();
        let claim = claim.clone();
        let stop = heartbeat.clone();
        let every = rt.inner.config.lease_ttl / 3;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(every) => {
                        if !matches!(store.renew_lease(&claim).await, Ok(true)) {
                            tracing::warn!(session = %claim.session_id, "lost the session lease");
                        }
                    }
                }
            }
        });
    }
    let mut cancel = cancel;
    let outcome = loop {
        match run_available(rt, session, &mut cancel).await {
            Err(e) => break Err(e),
            Ok(outcome) => {
                if !rt.finish_or_continue(session) {
                    break Ok(outcome);
                }
            }
        }
    };
    heartbeat.cancel();
    if let Err(e) = store.release_lease(session, &claim.holder).await {
        tracing::warn!(session, error = %e, "cannot release the session lease");
    }
    outcome
}

/// What the stored state says about the last drive.
async fn outcome_from_store(rt: &Runtime, session: &str) -> RuntimeResult<DriveOutcome> {
    let store = &rt.inner.store;
    let Some(turn) = store.last_turn(session).await? else {
        return Ok(DriveOutcome::Idle);
    };
    Ok(match turn.status {
        TurnStatus::Waiting => DriveOutcome::WaitingInput(pending_for_turn(rt, &turn).await?),
        TurnStatus::Failed => {
            let code = turn
                .stop_reason
                .clone()
                .unwrap_or_else(|| "failed".to_owned());
            DriveOutcome::Failed {
                message: failure_message(rt, session)
                    .await
                    .unwrap_or_else(|| code.clone()),
                code,
            }
        }
        TurnStatus::Cancelled => DriveOutcome::Cancelled,
        TurnStatus::Running | TurnStatus::Completed => DriveOutcome::Idle,
    })
}

async fn failure_message(rt: &Runtime, session: &str) -> Option<String> {
    let record = rt.inner.store.session(session).await.ok()??;
    let from = record.event_count.saturating_sub(4);
    let events = rt.inner.store.events(session, from, 4).await.ok()?;
    events
        .iter()
        .rev()
        .find(|e| e.kind == ev::TURN_FAILED)
        .and_then(|e| e.data["error"]["message"].as_str().map(str::to_owned))
}

/// Pending requests of a turn: its own, and those of the subagent sessions its calls wait on.
async fn pending_for_turn(
    rt: &Runtime,
    turn: &TurnRecord,
) -> RuntimeResult<Vec<InputRequestRecord>> {
    let mut pending: Vec<InputRequestRecord> = rt
        .inner
        .store
        .input_requests(&turn.session_id, true)
        .await?
        .into_iter()
        .filter(|r| r.turn_seq == turn.seq)
        .collect();
    pending.extend(subagents::descendant_pending(rt, &turn.session_id).await?);
    Ok(pending)
}

/// Runs turns until there is nothing to do or a turn parks.
async fn run_available(
    rt: &Runtime,
    session: &str,
    cancel: &mut CancellationToken,
) -> RuntimeResult<DriveOutcome> {
    let store = rt.inner.store.clone();
    loop {
        let record = store
            .session(session)
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session.to_owned()))?;
        let last = store.last_turn(session).await?;
        let open = last
            .clone()
            .filter(|t| matches!(t.status, TurnStatus::Running | TurnStatus::Waiting));
        if let Some(turn) = open {
            let build = rt.session_build(&turn.build_hash, &record).await?;
            let cancel_now = record.cancel_requested;
            let mut driver = TurnDriver::new(rt, record, build, cancel.clone())?;
            let end = if cancel_now {
                driver.end_cancelled(turn).await?
            } else {
                driver.run(turn).await?
            };
            match end {
                TurnEnd::Parked(requests) => return Ok(DriveOutcome::WaitingInput(requests)),
                TurnEnd::Finished => {
                    if cancel.is_cancelled() {
                        *cancel = rt.renew_cancel(session);
                    }
                    continue;
                }
            }
        }
        if record.cancel_requested {
            let mut batch = Batch::new();
            batch.push(Op::SetCancel {
                session_id: session.to_owned(),
                requested: false,
            });
            rt.commit(batch).await?;
            if cancel.is_cancelled() {
                *cancel = rt.renew_cancel(session);
            }
        }
        let inbox = store.pending_inbox(session).await?;
        let Some(message) = inbox.into_iter().next() else {
            return outcome_from_store(rt, session).await;
        };
        start_turn(rt, record, message).await?;
    }
}

/// Takes an accepted message into a new turn. An idle session moves to the newest build here.
async fn start_turn(
    rt: &Runtime,
    mut record: SessionRecord,
    message: InboxRecord,
) -> RuntimeResult<()> {
    let path = rt.agent_path(&record).await?;
    let build = match rt
        .inner
        .builds
        .current_hash()
        .and_then(|hash| rt.inner.builds.agent(&hash, &path))
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the current build; staying on the pinned one");
            rt.inner.builds.agent(&record.build_hash, &path)?
        }
    };
    let first = record.turn_count == 0;
    let now = now_ms();
    let turn = TurnRecord {
        session_id: record.id.clone(),
        seq: record.turn_count,
        status: TurnStatus::Running,
        phase: TurnPhase::Model,
        step_index: 0,
        step_started: false,
        build_hash: build.hash.clone(),
        inbox_id: Some(message.id.clone()),
        started_at: now,
        ended_at: None,
        stop_reason: None,
        usage: UsageTotals::default(),
    };
    record.turn_count += 1;
    record.status = SessionStatus::Running;
    record.build_hash = build.hash.clone();
    let mut batch = Batch::new();
    batch
        .push(Op::UpdateSession(record.clone()))
        .push(Op::PutTurn(turn.clone()))
        .push(Op::ConsumeInbox {
            id: message.id.clone(),
            turn_seq: turn.seq,
        })
        .push(Op::AppendMessage {
            session_id: record.id.clone(),
            turn_seq: Some(turn.seq),
            kind: MESSAGE_KIND_MESSAGE.to_owned(),
            body: serde_json::to_value(Message::User {
                content: message.text.clone(),
            })?,
        });
    if first {
        batch.event(
            &record.id,
            ev::SESSION_STARTED,
            ev::session_started(&build.manifest.agent.name, &build.hash),
        );
    }
    batch
        .event(&record.id, ev::TURN_STARTED, ev::turn_started(&turn))
        .event(
            &record.id,
            ev::MESSAGE_RECEIVED,
            ev::message_received(&turn, &message.text),
        );
    rt.commit(batch).await?;
    Ok(())
}

/// The idempotency key of a call: stable across retries, derived from where the call lives.
pub fn idempotency_key(session: &str, turn: u64, call_id: &str) -> String {
    let digest = Sha256::digest(format!("{session}:{turn}:{call_id}").as_bytes());
    format!("idem_{}", &hex::encode(digest)[..32])
}

fn effect_str(effect: Effect) -> &'static str {
    match effect {
        Effect::Read => "read",
        Effect::Idempotent => "idempotent",
        Effect::Write => "write",
    }
}

fn finish_str(response: &ModelResponse) -> String {
    serde_json::to_value(response.finish_reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "stop".to_owned())
}

/// Text the model sees for a tool result.
fn content_for_model(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What to do with one unsettled call.
enum Decision {
    Settle(CallStatus, Value),
    Run,
    Ask(String),
    Wait,
}

struct TurnDriver<'a> {
    rt: &'a Runtime,
    session: SessionRecord,
    build: Arc<LoadedBuild>,
    model: ResolvedModel,
    cancel: CancellationToken,
    context: Option<Vec<Message>>,
    last_tokens: u64,
    window: Option<Option<u64>>,
    /// Calls the last journaled response asked for (saves re-reading them to settle).
    fresh_calls: Option<Vec<ToolCallRecord>>,
    /// Call ids used in this turn so far (loaded once).
    call_ids: Option<HashSet<String>>,
    /// Usage of the step the model just answered, for `step.completed`.
    last_usage: Option<(u64, Value)>,
    /// MCP and dynamic tools of this turn run (loaded on first need).
    extra: Option<targets::Extra>,
    /// What a subagent's turn may spend, passed down by its parent.
    budget: Option<Budget>,
}

impl<'a> TurnDriver<'a> {
    fn new(
        rt: &'a Runtime,
        session: SessionRecord,
        build: Arc<LoadedBuild>,
        cancel: CancellationToken,
    ) -> RuntimeResult<Self> {
        let model = rt.inner.config.models.resolve(&build.manifest.agent)?;
        Ok(Self {
            rt,
            session,
            build,
            model,
            cancel,
            context: None,
            last_tokens: 0,
            fresh_calls: None,
            call_ids: None,
            last_usage: None,
            window: None,
            extra: None,
            budget: None,
        })
    }

    fn id(&self) -> &str {
        &self.session.id
    }

    async fn run(&mut self, mut turn: TurnRecord) -> RuntimeResult<TurnEnd> {
        if self.session.parent_id.is_some()
            && let Some(inbox) = &turn.inbox_id
        {
            self.budget = self
                .rt
                .inner
                .store
                .subagent_call_by_inbox(inbox)
                .await?
                .map(|w| w.budget);
        }
        loop {
            match turn.phase {
                TurnPhase::Model => {
                    if !turn.step_started
                        && let Some(end) = self.before_step(&mut turn).await?
                    {
                        return Ok(end);
                    }
                    match self.call_model(&turn).await {
                        Ok(response) => {
                            if self.journal_response(&mut turn, response).await? {
                                return Ok(TurnEnd::Finished);
                            }
                        }
                        Err(CallError::Cancelled) => return self.end_cancelled(turn).await,
                        Err(CallError::TimedOut) => {
                            return self
                                .end_failed(
                                    turn,
                                    "limit_exceeded",
                                    "the turn ran out of wall-clock time (limits.max_turn_seconds)",
                                    Some("max_turn_seconds"),
                                )
                                .await;
                        }
                        Err(CallError::Model(message)) => {
                            return self.end_failed(turn, "model_error", &message, None).await;
                        }
                    }
                }
                TurnPhase::Tools | TurnPhase::Resume => {
                    if let Some(end) = self.settle_calls(&mut turn).await? {
                        return Ok(end);
                    }
                    if self.cancel.is_cancelled() {
                        return self.end_cancelled(turn).await;
                    }
                }
                TurnPhase::Waiting => {
                    let pending = pending_for_turn(self.rt, &turn).await?;
                    if !pending.is_empty() {
                        return Ok(TurnEnd::Parked(pending));
                    }
                    let mut batch = Batch::new();
                    if !turn.step_started {
                        batch.event(
                            self.id(),
                            ev::STEP_STARTED,
                            ev::step_started(&turn, turn.step_index, &self.model.model_id),
                        );
                        turn.step_started = true;
                    }
                    turn.phase = TurnPhase::Resume;
                    turn.status = TurnStatus::Running;
                    self.session.status = SessionStatus::Running;
                    batch
                        .push(Op::PutTurn(turn.clone()))
                        .push(Op::UpdateSession(self.session.clone()));
                    self.rt.commit(batch).await?;
                }
                TurnPhase::Done => return Ok(TurnEnd::Finished),
            }
        }
    }

    /// Checks cancel and limits, folds steering messages in, compacts, emits `step.started`.
    async fn before_step(&mut self, turn: &mut TurnRecord) -> RuntimeResult<Option<TurnEnd>> {
        if let Some(fresh) = self.rt.inner.store.session(&self.session.id).await? {
            self.session.cancel_requested = fresh.cancel_requested;
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
        turn.step_started = true;
        let mut batch = Batch::new();
        batch.push(Op::PutTurn(turn.clone())).event(
            self.id(),
            ev::STEP_STARTED,
            ev::step_started(turn, turn.step_index, &self.model.model_id),
        );
        self.rt.commit(batch).await?;
        Ok(None)
    }

    fn limit_hit(&self, turn: &TurnRecord) -> Option<(&'static str, String)> {
        let limits = &self.build.manifest.agent.config.limits;
        if turn.step_index >= u64::from(limits.max_steps_per_turn) {
            return Some((
                "max_steps_per_turn",
                format!(
                    "the turn reached its step limit ({} model calls; limits.max_steps_per_turn)",
                    limits.max_steps_per_turn
                ),
            ));
        }
        if let Some(max) = limits.max_tokens
            && self.session.usage.total() >= max
        {
            return Some((
                "max_tokens",
                format!(
                    "the session used {} tokens, its limit is {max} (limits.max_tokens)",
                    self.session.usage.total()
                ),
            ));
        }
        if let Some(max) = limits.max_cost_usd
            && self.session.cost_usd >= max
        {
            return Some((
                "max_cost_usd",
                format!(
                    "the session cost ${:.4}, its limit is ${max} (limits.max_cost_usd)",
                    self.session.cost_usd
                ),
            ));
        }
        if let Some(max) = limits.max_turn_seconds {
            let elapsed = now_ms().saturating_sub(turn.started_at);
            if elapsed >= i64::try_from(max.saturating_mul(1000)).unwrap_or(i64::MAX) {
                return Some((
                    "max_turn_seconds",
                    format!("the turn ran for {max} s, its limit (limits.max_turn_seconds)"),
                ));
            }
        }
        None
    }

    fn deadline(&self, turn: &TurnRecord) -> Option<tokio::time::Instant> {
        let own = self
            .build
            .manifest
            .agent
            .config
            .limits
            .max_turn_seconds
            .map(|max| {
                let elapsed = u64::try_from(now_ms().saturating_sub(turn.started_at)).unwrap_or(0);
                max.saturating_mul(1000).saturating_sub(elapsed)
            });
        let inherited = self
            .budget
            .and_then(|b| b.deadline_ms)
            .map(|d| u64::try_from(d.saturating_sub(now_ms())).unwrap_or(0));
        let left = match (own, inherited) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(tokio::time::Instant::now() + Duration::from_millis(left))
    }

    async fn fold_steering(&mut self, turn: &TurnRecord) -> RuntimeResult<()> {
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

    async fn context(&mut self) -> RuntimeResult<&mut Vec<Message>> {
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

    async fn call_model(&mut self, turn: &TurnRecord) -> Result<ModelResponse, CallError> {
        if let Err(e) = self.ensure_extra().await {
            return Err(CallError::Model(e.to_string()));
        }
        let messages = match self.context().await {
            Ok(c) => c.clone(),
            Err(e) => return Err(CallError::Model(e.to_string())),
        };
        let request = ModelRequest {
            model: self.model.model.clone(),
            system: self.build.system_prompt.clone(),
            messages,
            tools: self.offered_specs(),
            reasoning: self.build.manifest.agent.config.reasoning.clone(),
            max_output_tokens: None,
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
                if let Err(e) = rt.commit(batch).await {
                    tracing::warn!(error = %e, "cannot store a stream event");
                }
            }
        };
        let both = async { tokio::join!(call, consume).0 };
        let deadline = self.deadline(turn);
        let cancel = self.cancel.clone();
        let result = tokio::select! {
            r = both => r,
            () = cancel.cancelled() => return Err(CallError::Cancelled),
            () = sleep_until_opt(deadline) => return Err(CallError::TimedOut),
        };
        result.map_err(|e| CallError::Model(e.to_string()))
    }

    /// Journals a response; returns `true` when the turn is finished.
    async fn journal_response(
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
        for totals in [&mut self.session.usage, &mut turn.usage] {
            totals.input_tokens = totals.input_tokens.saturating_add(usage.input_tokens);
            totals.output_tokens = totals.output_tokens.saturating_add(usage.output_tokens);
            totals.cache_read_tokens = totals
                .cache_read_tokens
                .saturating_add(usage.cache_read_tokens);
        }
        if let Some((input_price, output_price)) = self.model.price_per_million {
            self.session.cost_usd += (usage.input_tokens as f64 * input_price
                + usage.output_tokens as f64 * output_price)
                / 1_000_000.0;
        }
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
        let step_usage = ev::step_usage(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
        );
        let step_usage_kept = step_usage.clone();
        let done = calls.is_empty();
        if done {
            turn.phase = TurnPhase::Done;
            turn.status = TurnStatus::Completed;
            turn.ended_at = Some(now_ms());
            self.session.status = SessionStatus::Idle;
            batch
                .event(
                    self.id(),
                    ev::STEP_COMPLETED,
                    ev::step_completed(turn, step, &finish, step_usage),
                )
                .event(self.id(), ev::TURN_COMPLETED, ev::turn_completed(turn))
                .event(
                    self.id(),
                    ev::SESSION_WAITING,
                    ev::session_waiting(&self.session.id, &self.session.usage),
                );
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
        self.fresh_calls = (!done).then(|| calls.clone());
        self.rt.commit(batch).await?;
        if let Some(context) = self.context.as_mut() {
            context.push(assistant);
        }
        Ok(done)
    }

    fn needs_approval(&self, tool: &Tool) -> bool {
        match tool.approval {
            Approval::Never => false,
            Approval::Always => true,
            Approval::Once => !self.session.approved_tools.contains(&tool.name),
        }
    }

    async fn decide(&mut self, call: &ToolCallRecord) -> RuntimeResult<Decision> {
        if call.kind == "load-skill" {
            let name = call.input.get("name").and_then(Value::as_str).unwrap_or("");
            return Ok(match self.build.manifest.agent.skill(name) {
                Some(skill) => Decision::Settle(CallStatus::Completed, json!(skill.body)),
                None => {
                    let names: Vec<&str> = self
                        .build
                        .manifest
                        .agent
                        .skills
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect();
                    Decision::Settle(
                        CallStatus::Failed,
                        json!(format!(
                            "There is no skill named `{name}`. Skills: {}.",
                            if names.is_empty() {
                                "none".to_owned()
                            } else {
                                names.join(", ")
                            }
                        )),
                    )
                }
            });
        }
        let Some(tool) = self.target(&call.name, &call.input).map(|t| t.policy) else {
            return Ok(Decision::Settle(
                CallStatus::Failed,
                json!(format!(
                    "There is no tool named `{}`. Use one of the tools offered.",
                    call.name
                )),
            ));
        };
        match call.approval {
            ApprovalState::Denied => {
                let reason = self.denial_reason(call).await?;
                let text = match reason {
                    Some(r) => format!("The user denied this call of `{}`. Reason: {r}", call.name),
                    None => format!(
                        "The user denied this call of `{}`. It did not run.",
                        call.name
                    ),
                };
                return Ok(Decision::Settle(CallStatus::Denied, json!(text)));
            }
            ApprovalState::Pending => return Ok(Decision::Wait),
            ApprovalState::None | ApprovalState::Approved => {}
        }
        if call.status == CallStatus::Running {
            // It was running when its process died.
            if tool.effect != Effect::Write {
                return Ok(Decision::Run);
            }
            if tool.approval != Approval::Never && call.approval != ApprovalState::Pending {
                return Ok(Decision::Ask(format!(
                    "Approve {} again? A previous attempt was interrupted and its outcome is unknown.",
                    call.name
                )));
            }
            return Ok(Decision::Settle(
                CallStatus::Interrupted,
                json!(format!(
                    "The call of `{}` was interrupted (eve stopped while it ran), so its outcome is \
                     unknown: it may or may not have taken effect. It was not run again; check \
                     before retrying.",
                    call.name
                )),
            ));
        }
        if let Err(errors) = self.validate_input(&call.name, &call.input) {
            return Ok(Decision::Settle(
                CallStatus::Failed,
                json!(format!(
                    "Invalid input for `{}`; nothing ran:\n{}",
                    call.name,
                    errors
                        .iter()
                        .map(|e| format!("- {e}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )),
            ));
        }
        if let Some(message) = self.breaker_refusal(&tool.name).await? {
            return Ok(Decision::Settle(CallStatus::Failed, json!(message)));
        }
        if call.approval == ApprovalState::None && self.needs_approval(&tool) {
            return Ok(Decision::Ask(format!("Approve {}?", tool.name)));
        }
        Ok(Decision::Run)
    }

    async fn denial_reason(&self, call: &ToolCallRecord) -> RuntimeResult<Option<String>> {
        let requests = self
            .rt
            .inner
            .store
            .input_requests(&self.session.id, false)
            .await?;
        Ok(requests
            .into_iter()
            .rev()
            .find(|r| r.turn_seq == call.turn_seq && r.call_id == call.call_id)
            .and_then(|r| r.reason))
    }

    async fn breaker_refusal(&self, tool: &str) -> RuntimeResult<Option<String>> {
        let record = self.rt.breaker(tool).await?;
        let now = now_ms();
        Ok(match record {
            Some(b) if b.open_until > now => Some(format!(
                "`{tool}` is temporarily disabled: it failed {} times in a row. It will be \
                 available again in {} s. Do not call it before then; tell the user or try \
                 another way.",
                b.consecutive_failures,
                (b.open_until - now + 999) / 1000
            )),
            _ => None,
        })
    }

    /// Settles every unsettled call of the turn. Returns `Some` when the turn parks or ends.
    async fn settle_calls(&mut self, turn: &mut TurnRecord) -> RuntimeResult<Option<TurnEnd>> {
        self.ensure_extra().await?;
        let calls: Vec<ToolCallRecord> = match self.fresh_calls.take() {
            Some(calls) => calls,
            None => self
                .rt
                .inner
                .store
                .tool_calls(self.id(), turn.seq)
                .await?
                .into_iter()
                .filter(|c| !c.status.is_terminal())
                .collect(),
        };
        let step = turn.step_index;
        let mut to_run = Vec::new();
        let mut asks: Vec<(ToolCallRecord, String)> = Vec::new();
        let mut settled: Vec<(u64, Message)> = Vec::new();
        let mut once_approved = Vec::new();
        // A subagent call whose child parked on input stays running; the turn parks on the
        // child's requests.
        let mut parked = false;
        for call in calls {
            match self.decide(&call).await? {
                Decision::Settle(status, output) => {
                    if call.kind == "load-skill" && status == CallStatus::Completed {
                        let name = call.input["name"].as_str().unwrap_or_default().to_owned();
                        if !self.session.loaded_skills.contains(&name) {
                            self.session.loaded_skills.push(name);
                        }
                    }
                    let (seq, message) =
                        self.settle(turn, step, call, status, output, None).await?;
                    settled.push((seq, message));
                }
                Decision::Run => {
                    // Remembered under the policy's name: `call_tool` approves the tool it names.
                    if call.approval == ApprovalState::Approved
                        && let Some(t) = self
                            .target(&call.name, &call.input)
                            .filter(|t| t.policy.approval == Approval::Once)
                        && !self.session.approved_tools.contains(&t.policy.name)
                    {
                        once_approved.push(t.policy.name);
                    }
                    to_run.push(call);
                }
                Decision::Ask(prompt) => asks.push((call, prompt)),
                Decision::Wait => {}
            }
        }
        if !once_approved.is_empty() {
            for name in once_approved {
                if !self.session.approved_tools.contains(&name) {
                    self.session.approved_tools.push(name);
                }
            }
            let mut batch = Batch::new();
            batch.push(Op::UpdateSession(self.session.clone()));
            self.rt.commit(batch).await?;
        }
        if !to_run.is_empty() {
            let workspace = self.workspace()?;
            let futures = to_run
                .into_iter()
                .map(|call| self.run_call(turn, step, call, workspace.clone()));
            let results = futures::future::join_all(futures).await;
            for result in results {
                match result? {
                    Some(done) => settled.push(done),
                    None => parked = true,
                }
            }
        }
        settled.sort_by_key(|(seq, _)| *seq);
        if let Some(context) = self.context.as_mut() {
            context.extend(settled.into_iter().map(|(_, m)| m));
        }
        if !asks.is_empty() {
            let mut batch = Batch::durable();
            let now = now_ms();
            for (mut call, prompt) in asks {
                call.approval = ApprovalState::Pending;
                call.status = CallStatus::Pending;
                let request = InputRequestRecord {
                    id: format!("apr_{}", ulid::Ulid::new()),
                    session_id: self.session.id.clone(),
                    turn_seq: turn.seq,
                    step_index: step,
                    call_id: call.call_id.clone(),
                    tool_name: call.name.clone(),
                    kind: "tool-approval".to_owned(),
                    prompt,
                    action: ev::action(&call),
                    status: RequestStatus::Pending,
                    reason: None,
                    created_at: now,
                    answered_at: None,
                };
                batch
                    .push(Op::PutToolCall(call))
                    .push(Op::PutInputRequest(request));
            }
            self.rt.commit(batch).await?;
        }
        let pending = pending_for_turn(self.rt, turn).await?;
        if parked && pending.is_empty() {
            // The child's request was answered meanwhile: settle the call again.
            return Ok(None);
        }
        let mut batch = Batch::new();
        let was_tools = turn.phase == TurnPhase::Tools;
        if was_tools {
            let finish = "tool-calls";
            let usage = match self.last_usage.take() {
                Some((index, usage)) if index == step => usage,
                _ => self.step_usage(turn).await?,
            };
            batch.event(
                self.id(),
                ev::STEP_COMPLETED,
                ev::step_completed(turn, step, finish, usage),
            );
        }
        if !pending.is_empty() {
            batch.event(
                self.id(),
                ev::INPUT_REQUESTED,
                ev::input_requested(turn, step, &pending),
            );
            if was_tools {
                turn.step_index += 1;
                turn.step_started = false;
            }
            turn.phase = TurnPhase::Waiting;
            turn.status = TurnStatus::Waiting;
            self.session.status = SessionStatus::Waiting;
            batch
                .event(
                    self.id(),
                    ev::TURN_WAITING,
                    ev::turn_waiting(turn, &self.session.usage),
                )
                .push(Op::PutTurn(turn.clone()))
                .push(Op::UpdateSession(self.session.clone()));
            self.rt.commit(batch).await?;
            return Ok(Some(TurnEnd::Parked(pending)));
        }
        if was_tools {
            turn.step_index += 1;
            turn.step_started = false;
        }
        turn.phase = TurnPhase::Model;
        batch.push(Op::PutTurn(turn.clone()));
        self.rt.commit(batch).await?;
        Ok(None)
    }

    async fn step_usage(&self, turn: &TurnRecord) -> RuntimeResult<Value> {
        let steps = self.rt.inner.store.steps(self.id(), turn.seq).await?;
        let usage = steps
            .iter()
            .find(|s| s.step_index == turn.step_index)
            .map(|s| s.response["usage"].clone())
            .unwrap_or(Value::Null);
        let get = |k: &str| usage[k].as_u64().unwrap_or(0);
        Ok(ev::step_usage(
            get("inputTokens"),
            get("outputTokens"),
            get("cacheReadTokens"),
        ))
    }

    fn workspace(&self) -> RuntimeResult<std::path::PathBuf> {
        let dir = self
            .rt
            .inner
            .config
            .state_dir
            .join("sandboxes")
            .join(&self.session.id);
        if dir.is_dir() {
            return Ok(dir);
        }
        let seeds = &self.build.manifest.agent.sandbox.workspace;
        let seed_root = if seeds.is_empty() {
            std::path::PathBuf::new()
        } else {
            self.build.files()?
        };
        prepare_workspace(&dir, &seed_root, seeds).map_err(|e| {
            RuntimeError::Other(format!("cannot prepare the session workspace: {e}"))
        })?;
        Ok(dir)
    }

    async fn run_call(
        &self,
        turn: &TurnRecord,
        step: u64,
        mut call: ToolCallRecord,
        workspace: std::path::PathBuf,
    ) -> RuntimeResult<Option<(u64, Message)>> {
        let Some(resolved) = self.target(&call.name, &call.input) else {
            return self
                .settle(
                    turn,
                    step,
                    call,
                    CallStatus::Failed,
                    json!("unknown tool"),
                    None,
                )
                .await
                .map(Some);
        };
        // `tool.before` hooks see a call once, before it first runs (an interrupted call that is
        // picked up again was already allowed, with its journaled input).
        if call.status == CallStatus::Pending {
            // A `call_tool` call is shown to the hooks as the call of the tool it names.
            let verdict = self
                .tool_before(&resolved.as_called(&call), &workspace)
                .await;
            match verdict {
                hooks::Verdict::Allow(input) => {
                    call.input = resolved.with_input(&call.input, input)
                }
                hooks::Verdict::Deny(reason) => {
                    return self
                        .settle(turn, step, call, CallStatus::Denied, json!(reason), None)
                        .await
                        .map(Some);
                }
            }
        }
        let tool = &resolved.policy;
        if let targets::Target::Subagent(sub) = &resolved.target {
            return self.run_subagent(turn, step, call, sub).await;
        }
        call.status = CallStatus::Running;
        call.attempts = call.attempts.saturating_add(1);
        call.started_at = Some(now_ms());
        let mut batch = if tool.effect == Effect::Write {
            Batch::durable()
        } else {
            Batch::new()
        };
        batch.push(Op::PutToolCall(call.clone()));
        self.rt.commit(batch).await?;
        let files = match &resolved.target {
            targets::Target::Build(tool) if crate::tools::needs_files(tool) => self.build.files(),
            _ => Ok(self.build.dir.join(eve_compile::pack::FILES)),
        };
        let agent_dir = match files {
            Ok(dir) => dir,
            Err(e) => {
                return self
                    .settle(
                        turn,
                        step,
                        call,
                        CallStatus::Failed,
                        json!(e.to_string()),
                        None,
                    )
                    .await
                    .map(Some);
            }
        };
        let ctx = ToolContext {
            session_id: self.session.id.clone(),
            call_id: call.call_id.clone(),
            idempotency_key: call.idempotency_key.clone(),
            workspace,
            agent_dir,
            env: self.rt.inner.config.env.clone(),
        };
        let token = self.cancel.child_token();
        let input = resolved.run_input(&call.input);
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send + '_>> =
            match &resolved.target {
                targets::Target::Build(tool) => {
                    Box::pin(run_tool(tool, &input, &ctx, token.clone()))
                }
                targets::Target::Mcp(manager) => {
                    let (manager, name, input, token) = (
                        manager.clone(),
                        call.name.clone(),
                        input.clone(),
                        token.clone(),
                    );
                    Box::pin(async move { manager.call(&name, input, token).await })
                }
                targets::Target::Catalogue(manager) => {
                    let (manager, name, input, token) = (
                        manager.clone(),
                        call.name.clone(),
                        input.clone(),
                        token.clone(),
                    );
                    Box::pin(async move {
                        manager
                            .call_catalogue(&name, input, token)
                            .await
                            .unwrap_or_else(|| {
                                ToolResult::failure("not a catalogue tool", Duration::ZERO)
                            })
                    })
                }
                targets::Target::Dynamic(record, provider) => Box::pin(dynamic::run_dynamic(
                    self.rt,
                    record,
                    provider,
                    &input,
                    ctx.clone(),
                    token.clone(),
                )),
                targets::Target::Subagent(_) => Box::pin(async {
                    ToolResult::failure("a subagent call cannot run as a tool", Duration::ZERO)
                }),
            };
        let mut run = run;
        let deadline = self.deadline(turn);
        let result: ToolResult = tokio::select! {
            r = &mut run => r,
            () = sleep_until_opt(deadline) => { token.cancel(); run.await }
        };
        if self.cancel.is_cancelled() {
            return self
                .settle(
                    turn,
                    step,
                    call,
                    CallStatus::Cancelled,
                    json!("The turn was cancelled while this call ran; its outcome is unknown."),
                    None,
                )
                .await
                .map(Some);
        }
        let (status, output) = if result.ok {
            (CallStatus::Completed, result.output.clone())
        } else {
            let error = result
                .error
                .clone()
                .unwrap_or_else(|| "the tool failed".to_owned());
            let text = match &result.output {
                Value::Null => error,
                Value::String(s) if s.is_empty() => error,
                other => format!("{error}\n{}", content_for_model(other)),
            };
            (CallStatus::Failed, json!(text))
        };
        let breaker = self.rt.breaker_update(&tool.name, result.ok).await?;
        self.settle(turn, step, call, status, output, breaker)
            .await
            .map(Some)
    }

    /// Records a call's result, its message and its `action.result` in one commit.
    async fn settle(
        &self,
        turn: &TurnRecord,
        step: u64,
        mut call: ToolCallRecord,
        status: CallStatus,
        output: Value,
        breaker: Option<BreakerRecord>,
    ) -> RuntimeResult<(u64, Message)> {
        call.status = status;
        call.is_error = status != CallStatus::Completed;
        call.output = Some(output.clone());
        call.ended_at = Some(now_ms());
        let message = Message::Tool {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            content: content_for_model(&output),
            is_error: call.is_error,
        };
        let mut batch = Batch::new();
        let session_update = (call.kind == "load-skill" && status == CallStatus::Completed)
            .then(|| self.session.clone());
        batch
            .push(Op::AppendMessage {
                session_id: self.session.id.clone(),
                turn_seq: Some(turn.seq),
                kind: MESSAGE_KIND_MESSAGE.to_owned(),
                body: serde_json::to_value(&message)?,
            })
            .push(Op::PutToolCall(call.clone()))
            .event(
                self.id(),
                ev::ACTION_RESULT,
                ev::action_result(turn, step, &call),
            );
        if let Some(b) = breaker {
            batch.push(Op::PutBreaker(b));
        }
        if let Some(s) = session_update {
            batch.push(Op::UpdateSession(s));
        }
        let committed = self.rt.commit(batch).await?;
        let seq = committed.message_seqs.first().copied().unwrap_or(0);
        Ok((seq, message))
    }

    async fn refresh_session(&mut self) -> RuntimeResult<()> {
        if let Some(fresh) = self.rt.inner.store.session(&self.session.id).await? {
            let status = self.session.status;
            self.session = fresh;
            self.session.status = status;
        }
        Ok(())
    }

    async fn maybe_compact(&mut self, turn: &TurnRecord) -> RuntimeResult<()> {
        let config = &self.build.manifest.agent.config;
        if !config.compaction.enabled {
            return Ok(());
        }
        let window = match self.window {
            Some(w) => w,
            None => {
                let w = match config.context_window.or(self.model.context_window) {
                    Some(w) => Some(w),
                    None => provider_window(&self.model).await,
                };
                self.window = Some(w);
                w
            }
        };
        let Some(window) = window else {
            return Ok(());
        };
        let threshold = config.compaction.threshold;
        let system_chars = self.build.system_prompt.len();
        let context = self.context().await?;
        let chars: usize = context.iter().map(message_chars).sum::<usize>() + system_chars;
        let estimate = (chars as u64 / 4).max(self.last_tokens);
        if (estimate as f64) < threshold * window as f64 {
            return Ok(());
        }
        compact(
            self.rt,
            &self.session.id,
            &self.build,
            &self.model,
            Some(turn),
        )
        .await?;
        self.context = None;
        self.refresh_session().await?;
        Ok(())
    }

    async fn end_failed(
        &mut self,
        turn: TurnRecord,
        code: &str,
        message: &str,
        stop_reason: Option<&str>,
    ) -> RuntimeResult<TurnEnd> {
        let data = ev::turn_failed(&turn, code, message, stop_reason);
        self.end_turn(
            turn,
            TurnStatus::Failed,
            stop_reason.unwrap_or(code),
            ev::TURN_FAILED,
            data,
        )
        .await
    }

    async fn end_cancelled(&mut self, turn: TurnRecord) -> RuntimeResult<TurnEnd> {
        let data = ev::turn_cancelled(&turn);
        self.end_turn(
            turn,
            TurnStatus::Cancelled,
            "cancelled",
            ev::TURN_CANCELLED,
            data,
        )
        .await
    }

    /// Ends a turn early: unsettled calls get a result (so the context stays well-formed), pending
    /// requests are withdrawn, the session goes idle.
    async fn end_turn(
        &mut self,
        mut turn: TurnRecord,
        status: TurnStatus,
        reason: &str,
        kind: &str,
        data: Value,
    ) -> RuntimeResult<TurnEnd> {
        let store = self.rt.inner.store.clone();
        self.cancel_children(&turn).await?;
        let calls = store.tool_calls(self.id(), turn.seq).await?;
        let requests: Vec<InputRequestRecord> = pending_for_turn(self.rt, &turn)
            .await?
            .into_iter()
            .filter(|r| r.session_id == turn.session_id)
            .collect();
        let mut batch = Batch::new();
        for mut call in calls.into_iter().filter(|c| !c.status.is_terminal()) {
            let text = format!("This call did not run: the turn stopped ({reason}).");
            call.status = CallStatus::Cancelled;
            call.is_error = true;
            call.output = Some(json!(text));
            call.ended_at = Some(now_ms());
            batch
                .push(Op::AppendMessage {
                    session_id: self.session.id.clone(),
                    turn_seq: Some(turn.seq),
                    kind: MESSAGE_KIND_MESSAGE.to_owned(),
                    body: serde_json::to_value(Message::Tool {
                        call_id: call.call_id.clone(),
                        name: call.name.clone(),
                        content: text,
                        is_error: true,
                    })?,
                })
                .push(Op::PutToolCall(call));
        }
        for mut request in requests {
            request.status = RequestStatus::Cancelled;
            request.answered_at = Some(now_ms());
            batch.push(Op::PutInputRequest(request));
        }
        turn.status = status;
        turn.phase = TurnPhase::Done;
        turn.ended_at = Some(now_ms());
        turn.stop_reason = Some(reason.to_owned());
        self.session.status = SessionStatus::Idle;
        batch
            .push(Op::PutTurn(turn))
            .push(Op::UpdateSession(self.session.clone()))
            .event(self.id(), kind, data)
            .event(
                self.id(),
                ev::SESSION_WAITING,
                ev::session_waiting(&self.session.id, &self.session.usage),
            );
        if self.session.cancel_requested || status == TurnStatus::Cancelled {
            batch.push(Op::SetCancel {
                session_id: self.session.id.clone(),
                requested: false,
            });
            self.session.cancel_requested = false;
        }
        self.rt.commit(batch).await?;
        self.context = None;
        Ok(TurnEnd::Finished)
    }
}

/// Context windows the providers reported, by client: asked once per process, not once per turn.
static WINDOWS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
    std::sync::OnceLock::new();

async fn provider_window(model: &ResolvedModel) -> Option<u64> {
    let key = format!("{}@{:p}", model.model_id, Arc::as_ptr(&model.client));
    let cache = WINDOWS.get_or_init(Default::default);
    if let Some(w) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
        return Some(w);
    }
    let window = model.client.context_window(&model.model).await?;
    if let Ok(mut c) = cache.lock() {
        c.insert(key, window);
    }
    Some(window)
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending::<()>().await,
    }
}

fn message_chars(message: &Message) -> usize {
    match message {
        Message::User { content } => content.len(),
        Message::Assistant {
            content,
            reasoning,
            tool_calls,
        } => {
            content.len()
                + reasoning.as_ref().map(|r| r.text.len()).unwrap_or(0)
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.input.to_string().len())
                    .sum::<usize>()
        }
        Message::Tool { content, .. } => content.len(),
    }
}

/// A stored message row as the model sees it (a checkpoint becomes a user message holding the
/// summary and the pinned skills, verbatim).
fn to_message(row: &MessageRecord) -> RuntimeResult<Message> {
    if row.kind == MESSAGE_KIND_CHECKPOINT {
        let summary = row.body["summary"].as_str().unwrap_or_default();
        let mut content = format!(
            "[Earlier conversation, compacted into a summary]\n\n{}",
            summary.trim()
        );
        if let Some(skills) = row.body["skills"].as_array() {
            for skill in skills {
                let name = skill["name"].as_str().unwrap_or_default();
                let body = skill["body"].as_str().unwrap_or_default();
                content.push_str(&format!("\n\n[Loaded skill `{name}`]\n{body}"));
            }
        }
        return Ok(Message::User { content });
    }
    Ok(serde_json::from_value(row.body.clone())?)
}

const SUMMARY_PROMPT: &str = "Summarize the conversation so far for your own later use: the \
    user's goals and requests, decisions made, facts learned (including tool results that still \
    matter), and what is still open. Be concise and complete; write only the summary.";

/// Compacts a session's context: older messages become one summary checkpoint; messages of the
/// running turn (if any) are kept verbatim after it; loaded skills are pinned into the checkpoint.
async fn compact(
    rt: &Runtime,
    session: &str,
    build: &LoadedBuild,
    model: &ResolvedModel,
    turn: Option<&TurnRecord>,
) -> RuntimeResult<bool> {
    let store = &rt.inner.store;
    let rows = store.context(session).await?;
    let current_turn = turn.map(|t| t.seq);
    let (older, current): (Vec<MessageRecord>, Vec<MessageRecord>) = rows
        .into_iter()
        .partition(|r| current_turn.is_none() || r.turn_seq != current_turn);
    if older.is_empty() {
        return Ok(false);
    }
    let mut messages = Vec::with_capacity(older.len() + 1);
    for row in &older {
        messages.push(to_message(row)?);
    }
    messages.push(Message::User {
        content: SUMMARY_PROMPT.to_owned(),
    });
    let request = ModelRequest {
        model: model.model.clone(),
        system: build.system_prompt.clone(),
        messages,
        tools: Vec::new(),
        reasoning: None,
        max_output_tokens: None,
    };
    let mut ignore = |_event: ModelEvent| {};
    let response = match model.client.stream(&request, &mut ignore).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(session, error = %e, "compaction failed; keeping the full context");
            return Ok(false);
        }
    };
    let record = store
        .session(session)
        .await?
        .ok_or_else(|| RuntimeError::SessionNotFound(session.to_owned()))?;
    let skills: Vec<Value> = record
        .loaded_skills
        .iter()
        .filter_map(|name| build.manifest.agent.skill(name))
        .map(|s| json!({"name": s.name, "body": s.body}))
        .collect();
    let mut batch = Batch::new();
    batch.push(Op::AppendMessage {
        session_id: session.to_owned(),
        turn_seq: current_turn,
        kind: MESSAGE_KIND_CHECKPOINT.to_owned(),
        body: json!({"summary": response.content, "skills": skills}),
    });
    for row in current {
        batch.push(Op::AppendMessage {
            session_id: session.to_owned(),
            turn_seq: row.turn_seq,
            kind: row.kind,
            body: row.body,
        });
    }
    let (seq, step) = match turn {
        Some(t) => (t.seq, t.step_index),
        None => (record.turn_count, 0),
    };
    batch.event(
        session,
        ev::COMPACTION_COMPLETED,
        ev::compaction_completed(session, seq, step, &model.model_id),
    );
    if turn.is_none() {
        batch.event(
            session,
            ev::SESSION_WAITING,
            ev::session_waiting(session, &record.usage),
        );
    }
    rt.commit(batch).await?;
    Ok(true)
}

/// `Runtime::compact`: compacts an idle session under its lease.
pub(super) async fn manual_compact(rt: &Runtime, session: &str) -> RuntimeResult<()> {
    let record = rt.require_idle(session, "compact").await?;
    let Some(_cancel) = rt.register(session) else {
        return Err(RuntimeError::SessionNotActive {
            id: session.to_owned(),
            status: "running".to_owned(),
            what: "compact".to_owned(),
        });
    };
    let claim = LeaseClaim {
        session_id: session.to_owned(),
        holder: format!("{}:{}", rt.inner.holder, ulid::Ulid::new()),
        pid: std::process::id(),
        host: rt.inner.host.clone(),
        ttl_ms: i64::try_from(rt.inner.config.lease_ttl.as_millis()).unwrap_or(15_000),
    };
    let result = async {
        if let LeaseOutcome::HeldBy { .. } = rt.inner.store.acquire_lease(&claim).await? {
            return Err(RuntimeError::SessionNotActive {
                id: session.to_owned(),
                status: "driven by another process".to_owned(),
                what: "compact".to_owned(),
            });
        }
        let build = rt.inner.builds.get(&record.build_hash)?;
        let model = rt.inner.config.models.resolve(&build.manifest.agent)?;
        let done = compact(rt, session, &build, &model, None).await;
        let _ = rt.inner.store.release_lease(session, &claim.holder).await;
        done.map(|_| ())
    }
    .await;
    if rt.finish_or_continue(session) {
        rt.unregister(session);
        rt.kick(session);
    }
    result
}

impl Runtime {
    /// A fresh cancellation token for a driver that handled a cancel.
    pub(super) fn renew_cancel(&self, session: &str) -> CancellationToken {
        let token = CancellationToken::new();
        if let Ok(mut active) = self.inner.active.lock()
            && let Some(a) = active.get_mut(session)
        {
            a.cancel = token.clone();
        }
        token
    }

    async fn breaker(&self, tool: &str) -> RuntimeResult<Option<BreakerRecord>> {
        let mut cache = self.inner.breakers.lock().await;
        if let Some(b) = cache.get(tool) {
            return Ok(Some(b.clone()));
        }
        let stored = self.inner.store.breaker(tool).await?;
        if let Some(b) = &stored {
            cache.insert(tool.to_owned(), b.clone());
        }
        Ok(stored)
    }

    /// Applies a call's outcome to the tool's breaker; returns the row to store when it changed.
    async fn breaker_update(&self, tool: &str, ok: bool) -> RuntimeResult<Option<BreakerRecord>> {
        let policy = self.inner.config.breaker;
        let base = i64::try_from(policy.base.as_millis()).unwrap_or(30_000);
        let max = i64::try_from(policy.max.as_millis()).unwrap_or(600_000);
        let current = self.breaker(tool).await?;
        let mut cache = self.inner.breakers.lock().await;
        let mut record = current.unwrap_or(BreakerRecord {
            tool: tool.to_owned(),
            consecutive_failures: 0,
            open_until: 0,
            backoff_ms: base,
        });
        if ok {
            if record.consecutive_failures == 0 && record.open_until == 0 {
                return Ok(None);
            }
            record.consecutive_failures = 0;
            record.open_until = 0;
            record.backoff_ms = base;
        } else {
            record.consecutive_failures = record.consecutive_failures.saturating_add(1);
            if record.consecutive_failures >= policy.threshold {
                record.open_until = now_ms().saturating_add(record.backoff_ms);
                record.backoff_ms = record.backoff_ms.saturating_mul(2).min(max);
            }
        }
        cache.insert(tool.to_owned(), record.clone());
        Ok(Some(record))
    }
}
