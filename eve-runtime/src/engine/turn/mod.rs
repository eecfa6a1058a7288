//! One turn as a durable state machine: the turn core, the [`TurnDriver`] moving a stored turn
//! forward, and the [`seam`] its features plug into.
//!
//! A turn is a small state machine stored in its row (`phase`, `step_index`, `step_started`):
//! `model` (call the model for this step), `tools` (settle the calls it asked for, then complete
//! the step), `waiting` (parked on approvals), `resume` (answers arrived: settle the parked calls at
//! the start of the next step, then call the model in that same step). Each transition is one
//! commit carrying its events, so a driver started on any stored state (after a crash, on another
//! process) knows what to do next from that row and the turn's tool calls alone.
//!
//! This module holds the machine itself and how a turn ends; a step's model call and journal live
//! in [`step`], deciding and settling tool calls in [`calls`] (running one in [`run`], a long
//! result cut to the model's window in [`fit`]), approvals in [`approvals`], the turn's tools in
//! [`tools`], its limits in [`limits`]. Everything else a turn does is a feature
//! (`crate::features`) behind the [`seam`]: the core calls its hooks at fixed points and commits
//! what they add.

mod approvals;
pub(crate) use approvals::Answer;
pub use approvals::{InputAnswer, option_ids, resolve_text};
mod calls;
mod fit;
mod limits;
pub(super) use limits::provider_window;
mod pin;
mod run;
pub(crate) mod seam;
mod step;
pub(super) mod tools;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use eve_compile::{Effect, Tool};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use self::seam::TurnExtension;
use super::drive::pending_for_turn;
use super::events as ev;
use super::{ResolvedModel, Runtime, RuntimeError, RuntimeResult};
use crate::builds::LoadedBuild;
use crate::features::turn_input::TurnInput;
use crate::model::{Message, ModelResponse};
use crate::store::*;
use crate::tools::{ToolContext, prepare_workspace};

/// How a turn run ended.
pub(super) enum TurnEnd {
    Finished,
    Parked(Vec<InputRequestRecord>),
}

/// Why a model call did not produce a response.
enum CallError {
    Cancelled,
    TimedOut,
    Model(String),
    /// The provider said the prompt does not fit the context window.
    ContextTooLong(String),
    /// The turn cannot go on: a code and a message for `turn.failed`.
    Failed(&'static str, String),
}

/// The idempotency key of a call: stable across retries, derived from where the call lives.
pub(crate) fn idempotency_key(session: &str, turn: u64, call_id: &str) -> String {
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
    crate::tools::content::for_model(output).0
}

/// The workspace of `session`, prepared (seeded from `build`) on first use.
pub(in crate::engine) fn workspace_of(
    rt: &Runtime,
    build: &LoadedBuild,
    session: &str,
) -> RuntimeResult<std::path::PathBuf> {
    let dir = rt.inner.config.state_dir.join("sandboxes").join(session);
    if dir.is_dir() {
        return Ok(dir);
    }
    let seeds = &build.manifest.agent.sandbox.workspace;
    let seed_root = if seeds.is_empty() {
        std::path::PathBuf::new()
    } else {
        build.files()?
    };
    prepare_workspace(&dir, &seed_root, seeds)
        .map_err(|e| RuntimeError::Other(format!("cannot prepare the session workspace: {e}")))?;
    Ok(dir)
}

/// The context of one process started for a turn of `session` (see [`TurnView::tool_context`]).
#[allow(clippy::too_many_arguments)]
fn tool_context(
    rt: &Runtime,
    build: &LoadedBuild,
    session: &str,
    call_id: String,
    idempotency_key: String,
    workspace: std::path::PathBuf,
    agent_dir: std::path::PathBuf,
    sandbox: Option<eve_compile::EffectiveSandbox>,
) -> ToolContext {
    rt.tool_context(
        build,
        session,
        call_id,
        idempotency_key,
        workspace,
        agent_dir,
        sandbox,
    )
}

/// The [`TurnView`] of a driver for `$turn`, built from its fields (so the driver's features
/// can be borrowed mutably beside it).
macro_rules! view {
    ($d:expr, $turn:expr) => {
        $crate::engine::turn::seam::TurnView {
            rt: $d.rt,
            session: &$d.session,
            root: &$d.root,
            build: &$d.build,
            model: &$d.model,
            turn: $turn,
            cancel: &$d.cancel,
            budget: $d.budget,
            sender: $d.input.sender.as_deref(),
            context: $d.context.as_deref().unwrap_or(&[]),
            last_tokens: $d.last_tokens,
            extra: $d.extra.as_ref(),
        }
    };
}
use view;

pub(super) struct TurnDriver<'a> {
    rt: &'a Runtime,
    pub(super) session: SessionRecord,
    /// The root session of this session's tree (its own id for a root session).
    root: String,
    pub(super) build: Arc<LoadedBuild>,
    model: ResolvedModel,
    cancel: CancellationToken,
    pub(super) context: Option<Vec<Message>>,
    pub(super) last_tokens: u64,
    /// Calls the last journaled response asked for (saves re-reading them to settle).
    fresh_calls: Option<Vec<ToolCallRecord>>,
    /// Call ids used in this turn so far (loaded once).
    call_ids: Option<HashSet<String>>,
    /// Usage of the step the model just answered, for `step.completed`.
    last_usage: Option<(u64, Value)>,
    /// MCP and dynamic tools of this turn run (loaded on first need).
    extra: Option<tools::Extra>,
    /// The session's dynamic tools as the drive loop read them with the turn's view, for the
    /// first load of [`Self::extra`] (which reads them from the store otherwise).
    pub(super) dynamic_tools: Option<Vec<DynamicToolRecord>>,
    /// What a subagent's turn may spend, passed down by its parent.
    pub(super) budget: Option<Budget>,
    /// The session's cancel flag as read with the last step's final commit, for the next
    /// step's check (`Some(None)`: the session row was not found).
    pub(super) next_cancel: Option<Option<bool>>,
    /// Writes of this step held back to go out with its next commit (`step.started`, the
    /// journal of a response whose calls all settle without running): see [`step`].
    pub(super) held: Option<Batch>,
    /// The turn's features, in the order their hooks are called.
    features: Vec<Box<dyn TurnExtension>>,
    /// The built-in tools of the turn: name, the feature answering it, its policy.
    builtins: Option<HashMap<String, (usize, Option<Tool>)>>,
    /// What the turn's messages asked of it (see [`Self::take_input`]).
    input: TurnInput,
}

impl<'a> TurnDriver<'a> {
    /// Adds one model call's tokens to the session's and the turn's totals, and its cost (at
    /// the price of `model_id`: `agent.yaml` `prices:`, else `limits` (`price_per_million`,
    /// given as `limits_price`), else the built-in table) to both.
    pub(in crate::engine) fn charge(
        &mut self,
        turn: &mut TurnRecord,
        usage: &crate::model::Usage,
        model_id: &str,
        limits_price: Option<(f64, f64)>,
    ) {
        for totals in [&mut self.session.usage, &mut turn.usage] {
            totals.input_tokens = totals.input_tokens.saturating_add(usage.input_tokens);
            totals.output_tokens = totals.output_tokens.saturating_add(usage.output_tokens);
            totals.cache_read_tokens = totals
                .cache_read_tokens
                .saturating_add(usage.cache_read_tokens);
        }
        let config = &self.build.manifest.agent.config;
        let price = config.prices.get(model_id).copied().or_else(|| {
            limits_price
                .map(|(input, output)| eve_compile::ModelPrice {
                    input,
                    output,
                    cached: None,
                })
                .or_else(|| crate::model::prices::price_of(config, model_id))
        });
        if let Some(price) = price {
            let cost = crate::model::prices::cost(&price, usage);
            self.session.cost_usd += cost;
            turn.usage.cost_usd = Some(turn.usage.cost_usd.unwrap_or(0.0) + cost);
        }
    }

    pub(in crate::engine) fn new(
        rt: &'a Runtime,
        session: SessionRecord,
        root: String,
        build: Arc<LoadedBuild>,
        cancel: CancellationToken,
    ) -> RuntimeResult<Self> {
        // A model that cannot be built fails the turn on its first call (`turn.failed` with
        // the message), never the driver: an error here would leave the session `running`.
        let model = rt
            .inner
            .config
            .models
            .resolve_in(&build.manifest.agent, &root)
            .unwrap_or_else(|e| {
                crate::model::provider::UnavailableModel::resolved(&build.manifest.agent, &e)
            });
        let features = crate::features::for_turn(&build);
        tracing::debug!(
            session = %session.id,
            features = %features.iter().map(|f| f.name()).collect::<Vec<_>>().join(","),
            "the turn's features"
        );
        Ok(Self {
            features,
            rt,
            session,
            root,
            build,
            model,
            cancel,
            context: None,
            last_tokens: 0,
            fresh_calls: None,
            call_ids: None,
            last_usage: None,
            extra: None,
            dynamic_tools: None,
            budget: None,
            next_cancel: None,
            held: None,
            builtins: None,
            input: TurnInput::default(),
        })
    }

    pub(in crate::engine) fn id(&self) -> &str {
        &self.session.id
    }

    /// Adds the features of what the turn's message asked (`outputSchema`, `clientContext`).
    pub(in crate::engine) fn take_input(&mut self, input: &TurnInput) {
        self.features.extend(crate::features::for_input(input));
        self.input = input.clone();
    }

    /// What a message steered into the turn asked, joined to what the turn was asked: its
    /// context adds to the turn's, its schema replaces the turn's. The features follow; the
    /// write keeps the joined input with the turn.
    pub(in crate::engine) fn join_input(&mut self, turn: &TurnRecord, more: &TurnInput) -> Op {
        let before = crate::features::for_input(&self.input).len();
        let kept = self.features.len().saturating_sub(before);
        self.features.truncate(kept);
        self.input
            .client_context
            .extend(more.client_context.iter().cloned());
        if more.output_schema.is_some() {
            self.input.output_schema = more.output_schema.clone();
        }
        self.features
            .extend(crate::features::for_input(&self.input));
        self.builtins = None;
        crate::features::turn_input::keep_with_turn(&turn.session_id, turn.seq, &self.input)
    }

    /// Moves `turn` forward until it ends or parks. A subagent's [`Self::budget`] is set by the
    /// caller (the drive loop reads it with the session's state).
    pub(in crate::engine) async fn run(&mut self, turn: TurnRecord) -> RuntimeResult<TurnEnd> {
        let end = self.run_steps(turn).await?;
        // Every path commits what it held back; this only guards against one that would not.
        self.flush_held().await?;
        Ok(end)
    }

    async fn run_steps(&mut self, mut turn: TurnRecord) -> RuntimeResult<TurnEnd> {
        if (turn.step_started || turn.step_index > 0)
            && turn.phase != TurnPhase::Done
            && let Some(end) = self.check_model(&turn).await?
        {
            return Ok(end);
        }
        // Whether this step already compacted after a "context too long" answer.
        let mut overflow_compacted = false;
        loop {
            match turn.phase {
                TurnPhase::Model => {
                    if !turn.step_started
                        && let Some(end) = self.before_step(&mut turn).await?
                    {
                        return Ok(end);
                    }
                    let called = self.call_model(&turn).await;
                    if called.is_err() {
                        // The step ends otherwise: `step.started` goes out first, on its own.
                        self.flush_held().await?;
                    }
                    match called {
                        Ok(response) => {
                            overflow_compacted = false;
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
                        Err(CallError::Failed(code, message)) => {
                            return self.end_failed(turn, code, &message, None).await;
                        }
                        Err(CallError::ContextTooLong(message)) => {
                            match self.make_room(&turn, overflow_compacted).await? {
                                Ok(()) => overflow_compacted = true,
                                Err(why) => {
                                    let text = format!("{message}; {why}");
                                    return self
                                        .end_failed(turn, "context_too_long", &text, None)
                                        .await;
                                }
                            }
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
                    if let Some(at) = self.parked_until(&turn).await? {
                        // A timer not due yet (woken early, restarted): parked again, quietly.
                        self.rt.wake_at(self.id(), at);
                        return Ok(TurnEnd::Parked(Vec::new()));
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

    /// The time a feature keeps this parked turn parked until (the earliest of their timers
    /// not due yet), or `None` when it may go on.
    async fn parked_until(&self, turn: &TurnRecord) -> RuntimeResult<Option<i64>> {
        let view = view!(self, turn);
        let mut until = None;
        for feature in &self.features {
            if let Some(at) = feature.parked_until(&view).await? {
                until = Some(until.map_or(at, |u: i64| u.min(at)));
            }
        }
        Ok(until)
    }

    pub(in crate::engine) async fn refresh_session(&mut self) -> RuntimeResult<()> {
        if let Some(fresh) = self.rt.inner.store.session(&self.session.id).await? {
            let status = self.session.status;
            self.session = fresh;
            self.session.status = status;
        }
        Ok(())
    }

    /// After the provider answered "context too long" for this step: a feature makes room (a
    /// compaction), so the caller can call the model again. `Err(why)` when none can.
    async fn make_room(
        &mut self,
        turn: &TurnRecord,
        already_compacted: bool,
    ) -> RuntimeResult<Result<(), String>> {
        let view = view!(self, turn);
        let mut answer = Err("nothing can make room in this turn".to_owned());
        for feature in &mut self.features {
            if let Some(made) = feature.context_overflow(&view, already_compacted).await? {
                answer = made;
                break;
            }
        }
        match answer {
            Ok(writes) => {
                self.rt.commit(writes).await?;
                self.context = None;
                self.refresh_session().await?;
                Ok(Ok(()))
            }
            Err(why) => Ok(Err(why)),
        }
    }

    pub(in crate::engine) async fn end_failed(
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

    pub(in crate::engine) async fn end_cancelled(
        &mut self,
        turn: TurnRecord,
    ) -> RuntimeResult<TurnEnd> {
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
    pub(in crate::engine) async fn end_turn(
        &mut self,
        mut turn: TurnRecord,
        status: TurnStatus,
        reason: &str,
        kind: &str,
        data: Value,
    ) -> RuntimeResult<TurnEnd> {
        let store = self.rt.inner.store.clone();
        let calls = store.tool_calls(self.id(), turn.seq).await?;
        let unsettled: Vec<ToolCallRecord> = calls
            .iter()
            .filter(|c| !c.status.is_terminal())
            .cloned()
            .collect();
        // Features let go of what the unsettled calls hold (children, staged proposals, tasks).
        let mut ended = Batch::new();
        let view = view!(self, &turn);
        for feature in &mut self.features {
            feature.turn_ended(&view, &unsettled, &mut ended).await?;
        }
        let requests: Vec<InputRequestRecord> = pending_for_turn(self.rt, &turn)
            .await?
            .into_iter()
            .filter(|r| r.session_id == turn.session_id)
            .collect();
        let mut batch = ended;
        for mut call in unsettled {
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
                        attachments: Vec::new(),
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
        // A failure under the release's `rollback:` policy counts in this very commit.
        let counted = self.rt.failure_to_count(&turn, status).await?;
        if let Some((op, _)) = &counted {
            batch.push(op.clone());
        }
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
        // Writes held back (a turn's start, `step.started`) go first, in this commit.
        let batch = self.with_held(batch);
        self.rt.commit(batch).await?;
        self.context = None;
        if let Some((_, counted)) = counted {
            self.rt.failure_counted(counted).await;
        }
        Ok(TurnEnd::Finished)
    }
}
