//! Compaction: when the context nears the model's window, older messages become one summary
//! checkpoint (loaded skills pinned into it) and the running turn's messages are kept verbatim
//! after it. Also the manual `Runtime::compact` of an idle session, and how a stored checkpoint
//! reads back as a message.
//!
//! The window comes from `agent.yaml` `context_window`, else the model client (the server's
//! `/models` listing, else the table of well-known models in `model::windows`). Estimates can be
//! wrong, so a provider's "context too long" answer is recovered from too: the step compacts once
//! and calls the model again ([`TurnExtension::context_overflow`]); a second overflow in the
//! same step fails the turn with `context_too_long`. When the older messages are themselves too
//! long for the summary call, the oldest of them are left out of the summary (whole turns at a
//! time, so tool calls stay paired with their results) and the summary says so.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::drive::{give_back_lease, lease_claim, take_lease};
use crate::engine::events as ev;
use crate::engine::turn::seam::{Shaped, StepStart, TurnExtension, TurnView, to_message};
use crate::engine::{LoadedBuild, ResolvedModel, Runtime, RuntimeError, RuntimeResult};
use crate::features::memory;
use crate::model::{Message, ModelRequest, SideError, side_call};
use crate::store::*;

/// What the model is told, for one step, when the context nears its window and memory is on.
const SAVE_NUDGE: &str = "\n\n<context-nearly-full>\nYour context is nearly full: older messages \
will soon be replaced by a summary. Before you continue, save anything that will matter later \
(facts, decisions, where things are) with the `memory` tool. Then carry on with the task.\n\
</context-nearly-full>\n";

/// Namespace recording at which context start the save step was offered.
fn offer_namespace(session: &str) -> String {
    format!("memory-offer:{session}")
}

/// Compaction as a feature of the turn.
#[derive(Default)]
pub(crate) struct Compaction {
    /// The model's context window, once known (`Some(None)`: nobody knows it).
    window: Option<Option<u64>>,
    /// This step's model call is first told to save what matters (the context is near full).
    save_nudge: bool,
}

#[async_trait]
impl TurnExtension for Compaction {
    fn name(&self) -> &'static str {
        "compaction"
    }

    /// A compaction reads the stored context, which the turn's start adds its message to.
    async fn reads_committed_start(&mut self, view: &TurnView<'_>) -> RuntimeResult<bool> {
        Ok(match self.near_full(view).await {
            Some((estimate, window)) => {
                estimate as f64
                    >= view.build.manifest.agent.config.compaction.threshold * window as f64
                    || self.offer_due(view, estimate, window).await?
            }
            None => false,
        })
    }

    async fn prepare_step(
        &mut self,
        view: &TurnView<'_>,
        start: &mut StepStart,
    ) -> RuntimeResult<()> {
        let Some((estimate, window)) = self.near_full(view).await else {
            return Ok(());
        };
        // With memory on, the model first gets one step to save what matters (once per context).
        if self.offer_save(view, estimate, window, start).await? {
            return Ok(());
        }
        let threshold = view.build.manifest.agent.config.compaction.threshold;
        if (estimate as f64) < threshold * window as f64 {
            return Ok(());
        }
        if let Compacted::Done(writes) =
            compact(view.rt, view.id(), view.build, view.model, Some(view.turn)).await?
        {
            start.before.ops.extend(writes.ops);
            start.context_replaced = true;
        }
        Ok(())
    }

    async fn shape_request(
        &mut self,
        _view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        if std::mem::take(&mut self.save_nudge) {
            request.system.push_str(SAVE_NUDGE);
        }
        Ok(Shaped::Call)
    }

    /// After the provider answered "context too long" for this step: compacts, so the core can
    /// call the model again. `Err(why)` when that cannot help: the step already compacted once,
    /// or there is nothing older than the running turn to compact.
    async fn context_overflow(
        &mut self,
        view: &TurnView<'_>,
        already_compacted: bool,
    ) -> RuntimeResult<Option<Result<Batch, String>>> {
        const ADVICE: &str = "start a new session, shorten what the tools return, or use a model \
            with a longer context window (agent.yaml `context_window` makes eve compact earlier)";
        if already_compacted {
            return Ok(Some(Err(format!(
                "it still did not fit after compacting the conversation: {ADVICE}"
            ))));
        }
        tracing::info!(
            session = %view.id(),
            turn = view.turn.seq,
            "the model's context window is full; compacting and calling again"
        );
        let outcome = compact(view.rt, view.id(), view.build, view.model, Some(view.turn)).await?;
        Ok(Some(match outcome {
            Compacted::Done(writes) => Ok(writes),
            Compacted::NothingOlder => Err(format!(
                "the running turn alone is too long and there is nothing older to compact: {ADVICE}"
            )),
            Compacted::Failed(error) => Err(format!(
                "compacting the conversation failed ({error}): {ADVICE}"
            )),
        }))
    }
}

impl Compaction {
    /// With compaction on and the window known: the estimate of what the request carries (the
    /// system prompt, the context and the tools' names, descriptions and schemas, often the
    /// largest part, against what the provider last reported, whichever is larger), and the
    /// window.
    async fn near_full(&mut self, view: &TurnView<'_>) -> Option<(u64, u64)> {
        if !view.build.manifest.agent.config.compaction.enabled {
            return None;
        }
        let window = match self.window {
            Some(w) => w,
            None => {
                let w = view.context_window().await;
                self.window = Some(w);
                w
            }
        }?;
        let system_chars = view.build.system_prompt.len();
        let context_chars: usize = view.context.iter().map(message_chars).sum();
        let tool_chars: usize = view.offered_specs().iter().map(spec_chars).sum();
        let chars = context_chars + tool_chars + system_chars;
        Some(((chars as u64 / 4).max(view.last_tokens), window))
    }

    /// Whether the save step is due now: memory on, the context past `save_at`, and not yet
    /// offered for this context.
    async fn offer_due(
        &self,
        view: &TurnView<'_>,
        estimate: u64,
        window: u64,
    ) -> RuntimeResult<bool> {
        let Some(config) = &view.build.manifest.agent.config.memory else {
            return Ok(false);
        };
        if (estimate as f64) < config.save_at * window as f64 {
            return Ok(false);
        }
        let offered = view
            .rt
            .inner
            .store
            .note(&offer_namespace(view.id()), "context_start")
            .await?;
        Ok(offered.is_none_or(|n| n.text != view.session.context_start.to_string()))
    }

    /// Near a full context, with memory on: offers the model one step to save what matters
    /// before compaction summarises, once per context (a compaction starts a new one). Returns
    /// whether this step carries the offer (then it does not compact yet).
    async fn offer_save(
        &mut self,
        view: &TurnView<'_>,
        estimate: u64,
        window: u64,
        start: &mut StepStart,
    ) -> RuntimeResult<bool> {
        if !self.offer_due(view, estimate, window).await? {
            return Ok(false);
        }
        let ns = offer_namespace(view.id());
        let context_start = view.session.context_start.to_string();
        let now = now_ms();
        start
            .before
            .push(Op::Note(NoteOp::Put(NoteRecord {
                namespace: ns,
                key: "context_start".to_owned(),
                text: context_start,
                created_at: now,
                updated_at: now,
            })))
            .event(
                view.id(),
                memory::MEMORY_SAVE_OFFERED,
                ev::memory_save_offered(view.turn, estimate, window),
            );
        self.save_nudge = true;
        Ok(true)
    }
}

/// What [`compact`] did.
#[derive(Debug)]
enum Compacted {
    /// A checkpoint replaces the older messages with these writes.
    Done(Batch),
    /// Nothing older than the running turn: nothing to compact.
    NothingOlder,
    /// The summary call failed; the context is unchanged.
    Failed(String),
}

/// What a tool costs in a request: its name, description and input schema as sent.
fn spec_chars(spec: &crate::model::ToolSpec) -> usize {
    spec.name.len() + spec.description.len() + spec.input_schema.to_string().len()
}

fn message_chars(message: &Message) -> usize {
    match message {
        Message::User { content, .. } => content.len(),
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
) -> RuntimeResult<Compacted> {
    let store = &rt.inner.store;
    let rows = store.context(session).await?;
    let current_turn = turn.map(|t| t.seq);
    let (older, current): (Vec<MessageRecord>, Vec<MessageRecord>) = rows
        .into_iter()
        .partition(|r| current_turn.is_none() || r.turn_seq != current_turn);
    if older.is_empty() {
        return Ok(Compacted::NothingOlder);
    }
    let mut history = Vec::with_capacity(older.len());
    for row in &older {
        history.push(to_message(row)?);
    }
    let summary = match summarize(build, model, &history).await {
        Ok(summary) => summary,
        Err(e) => {
            tracing::warn!(session, error = %e, "compaction failed; keeping the full context");
            return Ok(Compacted::Failed(e.to_string()));
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
        body: json!({"summary": summary, "skills": skills}),
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
    Ok(Compacted::Done(batch))
}

/// Asks the model for a summary of `history`. When the provider answers that even that is too
/// long, the oldest part is left out (from a user message on, so no tool result loses its call),
/// halving what is summarised each time, and the summary says how much was left out.
async fn summarize(
    build: &LoadedBuild,
    model: &ResolvedModel,
    history: &[Message],
) -> Result<String, String> {
    let mut start = 0;
    loop {
        let kept = history.get(start..).unwrap_or_default();
        let mut messages = Vec::with_capacity(kept.len() + 1);
        messages.extend_from_slice(kept);
        messages.push(Message::user(SUMMARY_PROMPT.to_owned()));
        let request = ModelRequest::side(&model.model, build.system_prompt.clone(), messages);
        let answer = side_call(model.client.as_ref(), &request, None, None).await;
        match answer {
            Ok(response) if start == 0 => return Ok(response.content),
            Ok(response) => {
                return Ok(format!(
                    "[The {start} oldest messages were too long to summarize and were left out.]\n\n{}",
                    response.content.trim()
                ));
            }
            Err(SideError::Model(error)) if error.is_context_overflow() => {
                let half = start + (history.len() - start) / 2;
                let next = history
                    .iter()
                    .enumerate()
                    .skip(half.max(start + 1))
                    .find(|(_, m)| matches!(m, Message::User { .. }))
                    .map(|(i, _)| i);
                match next {
                    Some(next) => start = next,
                    None => return Err(error.to_string()),
                }
            }
            Err(SideError::Model(error)) => return Err(error.to_string()),
            Err(other) => return Err(other.to_string()),
        }
    }
}

/// `Runtime::compact`: compacts an idle session under its lease.
pub(crate) async fn manual_compact(rt: &Runtime, session: &str) -> RuntimeResult<()> {
    let record = rt.require_idle(session, "compact").await?;
    let Some(_cancel) = rt.register(session) else {
        return Err(RuntimeError::SessionNotActive {
            id: session.to_owned(),
            status: "running".to_owned(),
            what: "compact".to_owned(),
        });
    };
    let claim = lease_claim(rt, session);
    let result = async {
        if let LeaseOutcome::HeldBy { .. } = take_lease(rt, &claim).await? {
            return Err(RuntimeError::SessionNotActive {
                id: session.to_owned(),
                status: "driven by another process".to_owned(),
                what: "compact".to_owned(),
            });
        }
        let build = rt.inner.builds.get(&record.build_hash)?;
        let model = rt.inner.config.models.resolve(&build.manifest.agent)?;
        let done = match compact(rt, session, &build, &model, None).await {
            Ok(Compacted::Done(writes)) => rt.commit(writes).await.map(|_| ()),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        give_back_lease(rt, &claim).await;
        done
    }
    .await;
    if rt.finish_or_continue(session) {
        rt.unregister(session);
        rt.kick(session);
    }
    result
}
