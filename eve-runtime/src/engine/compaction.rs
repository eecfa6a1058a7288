//! Compaction: when the context nears the model's window, older messages become one summary
//! checkpoint (loaded skills pinned into it) and the running turn's messages are kept verbatim
//! after it. Also the manual `Runtime::compact` of an idle session, and how a stored checkpoint
//! reads back as a message.
//!
//! The window comes from `agent.yaml` `context_window`, else the model client (the server's
//! `/models` listing, else the table of well-known models in `model::windows`). Estimates can be
//! wrong, so a provider's "context too long" answer is recovered from too: the step compacts once
//! and calls the model again ([`TurnDriver::compact_after_overflow`]); a second overflow in the
//! same step fails the turn with `context_too_long`. When the older messages are themselves too
//! long for the summary call, the oldest of them are left out of the summary (whole turns at a
//! time, so tool calls stay paired with their results) and the summary says so.

use std::sync::Arc;

use serde_json::{Value, json};

use super::build::LoadedBuild;
use super::drive::{give_back_lease, lease_claim, take_lease};
use super::events as ev;
use super::turn::TurnDriver;
use super::{ResolvedModel, Runtime, RuntimeError, RuntimeResult};
use crate::model::{Message, ModelEvent, ModelRequest, ToolChoice};
use crate::store::*;

impl TurnDriver<'_> {
    pub(in crate::engine) async fn maybe_compact(
        &mut self,
        turn: &TurnRecord,
    ) -> RuntimeResult<()> {
        let config = &self.build.manifest.agent.config;
        if !config.compaction.enabled {
            return Ok(());
        }
        let window = match self.window {
            Some(w) => w,
            None => {
                let w = self.context_window().await;
                self.window = Some(w);
                w
            }
        };
        let Some(window) = window else {
            return Ok(());
        };
        let threshold = config.compaction.threshold;
        // Everything the request carries: the system prompt, the context and the tools' names,
        // descriptions and schemas (often the largest part), against what the provider last
        // reported, whichever is larger.
        let system_chars = self.build.system_prompt.len();
        let context_chars: usize = self.context().await?.iter().map(message_chars).sum();
        let tool_chars: usize = self.offered_specs().iter().map(spec_chars).sum();
        let chars = context_chars + tool_chars + system_chars;
        let estimate = (chars as u64 / 4).max(self.last_tokens);
        // With memory on, the model first gets one step to save what matters (once per context).
        if self.offer_save(turn, estimate, window).await? {
            return Ok(());
        }
        if (estimate as f64) < threshold * window as f64 {
            return Ok(());
        }
        // Writes held back (a turn's start) are committed before the compaction reads and commits.
        self.flush_held().await?;
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

    /// The model's context window: `agent.yaml` `context_window`, else the model client's (a
    /// provider's answer is asked once per runtime). `None` when nobody knows it.
    pub(in crate::engine) async fn context_window(&self) -> Option<u64> {
        if let Some(w) = self.window {
            return w;
        }
        match self
            .build
            .manifest
            .agent
            .config
            .context_window
            .or(self.model.context_window)
        {
            Some(w) => Some(w),
            None => provider_window(self.rt, &self.model).await,
        }
    }

    /// After the provider answered "context too long" for this step: compacts, so the caller
    /// can call the model again. `Ok(Err(why))` when that cannot help: the step already
    /// compacted once, or there is nothing older than the running turn to compact.
    pub(in crate::engine) async fn compact_after_overflow(
        &mut self,
        turn: &TurnRecord,
        already_compacted: bool,
    ) -> RuntimeResult<Result<(), String>> {
        const ADVICE: &str = "start a new session, shorten what the tools return, or use a model \
            with a longer context window (agent.yaml `context_window` makes eve compact earlier)";
        if already_compacted {
            return Ok(Err(format!(
                "it still did not fit after compacting the conversation: {ADVICE}"
            )));
        }
        tracing::info!(
            session = %self.session.id,
            turn = turn.seq,
            "the model's context window is full; compacting and calling again"
        );
        let outcome = compact(
            self.rt,
            &self.session.id,
            &self.build,
            &self.model,
            Some(turn),
        )
        .await?;
        match outcome {
            Compacted::Done => {
                self.context = None;
                self.refresh_session().await?;
                Ok(Ok(()))
            }
            Compacted::NothingOlder => Ok(Err(format!(
                "the running turn alone is too long and there is nothing older to compact: {ADVICE}"
            ))),
            Compacted::Failed(error) => Ok(Err(format!(
                "compacting the conversation failed ({error}): {ADVICE}"
            ))),
        }
    }
}

/// What [`compact`] did.
#[derive(Debug)]
enum Compacted {
    /// A checkpoint replaced the older messages.
    Done,
    /// Nothing older than the running turn: nothing to compact.
    NothingOlder,
    /// The summary call failed; the context is unchanged.
    Failed(String),
}

/// The context window the provider reports for `model`, asked once per runtime and client (the
/// cache is the runtime's `windows`, so two runtimes in one process never share an answer).
async fn provider_window(rt: &Runtime, model: &ResolvedModel) -> Option<u64> {
    let key = format!("{}@{:p}", model.model_id, Arc::as_ptr(&model.client));
    let cache = &rt.inner.windows;
    if let Some(w) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
        return Some(w);
    }
    let window = model.client.context_window(&model.model).await?;
    if let Ok(mut c) = cache.lock() {
        c.insert(key, window);
    }
    Some(window)
}

/// What a tool costs in a request: its name, description and input schema as sent.
fn spec_chars(spec: &crate::model::ToolSpec) -> usize {
    spec.name.len() + spec.description.len() + spec.input_schema.to_string().len()
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
pub(super) fn to_message(row: &MessageRecord) -> RuntimeResult<Message> {
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
    rt.commit(batch).await?;
    Ok(Compacted::Done)
}

/// Asks the model for a summary of `history`. When the provider answers that even that is too
/// long, the oldest part is left out (from a user message on, so no tool result loses its call),
/// halving what is summarised each time, and the summary says how much was left out.
async fn summarize(
    build: &LoadedBuild,
    model: &ResolvedModel,
    history: &[Message],
) -> Result<String, crate::model::ModelError> {
    let mut start = 0;
    loop {
        let kept = history.get(start..).unwrap_or_default();
        let mut messages = Vec::with_capacity(kept.len() + 1);
        messages.extend_from_slice(kept);
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
            tool_choice: ToolChoice::Auto,
            temperature: None,
        };
        let mut ignore = |_event: ModelEvent| {};
        match model.client.stream(&request, &mut ignore).await {
            Ok(response) if start == 0 => return Ok(response.content),
            Ok(response) => {
                return Ok(format!(
                    "[The {start} oldest messages were too long to summarize and were left out.]\n\n{}",
                    response.content.trim()
                ));
            }
            Err(error) if error.is_context_overflow() => {
                let half = start + (history.len() - start) / 2;
                let next = history
                    .iter()
                    .enumerate()
                    .skip(half.max(start + 1))
                    .find(|(_, m)| matches!(m, Message::User { .. }))
                    .map(|(i, _)| i);
                match next {
                    Some(next) => start = next,
                    None => return Err(error),
                }
            }
            Err(error) => return Err(error),
        }
    }
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
        let done = compact(rt, session, &build, &model, None).await;
        give_back_lease(rt, &claim).await;
        done.map(|_| ())
    }
    .await;
    if rt.finish_or_continue(session) {
        rt.unregister(session);
        rt.kick(session);
    }
    result
}
