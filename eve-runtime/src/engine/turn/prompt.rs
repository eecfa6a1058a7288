//! What a turn's system prompt carries beyond the build's: the environment probe's text (run once
//! per session, stored) and the memory block (the notes of each scope the agent may use), plus the
//! `memory` tool's calls and the one-time "save what matters" nudge near a full context. The
//! rules live in [`crate::engine::memory`] and [`crate::engine::probe`]; this is where a turn
//! reads and writes them.

use serde_json::{Value, json};

use super::TurnDriver;
use crate::engine::events as ev;
use crate::engine::{RuntimeResult, memory, probe};
use crate::store::*;
use crate::tools::ToolContext;

/// What the model is told, for one step, when the context nears its window and memory is on.
const SAVE_NUDGE: &str = "\n\n<context-nearly-full>\nYour context is nearly full: older messages \
will soon be replaced by a summary. Before you continue, save anything that will matter later \
(facts, decisions, where things are) with the `memory` tool. Then carry on with the task.\n\
</context-nearly-full>\n";

/// Namespace recording at which context start the save step was offered.
fn offer_namespace(session: &str) -> String {
    format!("memory-offer:{session}")
}

impl TurnDriver<'_> {
    /// The system prompt of this step: the build's, the probe's block, the memory block, and the
    /// save nudge when this step carries it.
    pub(in crate::engine) async fn system_text(
        &mut self,
        turn: &TurnRecord,
    ) -> RuntimeResult<String> {
        if self.pinned.is_none() {
            let pinned = self.load_pinned(turn).await?;
            self.pinned = Some(pinned);
        }
        let mut system = self.build.system_prompt.clone();
        system.push_str(self.pinned.as_deref().unwrap_or_default());
        if std::mem::take(&mut self.save_nudge) {
            system.push_str(SAVE_NUDGE);
        }
        Ok(system)
    }

    async fn load_pinned(&mut self, turn: &TurnRecord) -> RuntimeResult<String> {
        let mut out = String::new();
        if self.build.manifest.agent.config.probe.is_some() {
            out.push_str(&self.probe_text(turn).await?);
        }
        let Some(config) = self.build.manifest.agent.config.memory.clone() else {
            return Ok(out);
        };
        let user = self.turn_sender(turn).await?;
        let mut scopes = Vec::new();
        for scope in config.scopes {
            let Some(ns) = memory::namespace(
                scope,
                &self.shared_key(&self.build.manifest.agent.name),
                &self.session.id,
                user.as_deref(),
            ) else {
                continue;
            };
            scopes.push((scope, self.rt.inner.store.notes(&ns).await?));
        }
        out.push_str(&memory::pinned_block(&scopes));
        Ok(out)
    }

    /// Who sent the turn's message (a principal or a channel identity), if anyone said.
    async fn turn_sender(&mut self, turn: &TurnRecord) -> RuntimeResult<Option<String>> {
        if let Some(sender) = &self.sender {
            return Ok(sender.clone());
        }
        let sender = match &turn.inbox_id {
            Some(inbox) => self
                .rt
                .inner
                .store
                .note(&memory::sender_namespace(&self.session.id), inbox)
                .await?
                .map(|n| n.text),
            None => None,
        };
        self.sender = Some(sender.clone());
        Ok(sender)
    }

    /// The session's probe text: stored, or probed now (once) in the `bash` tool's sandbox.
    async fn probe_text(&mut self, turn: &TurnRecord) -> RuntimeResult<String> {
        let ns = probe::namespace(&self.session.id);
        if let Some(note) = self.rt.inner.store.note(&ns, "text").await? {
            return Ok(note.text);
        }
        let agent = &self.build.manifest.agent;
        let Some(config) = agent.config.probe.clone() else {
            return Ok(String::new());
        };
        let workspace = self.workspace()?;
        let agent_dir = self.build.dir.join(eve_compile::pack::FILES);
        let confinement = self.rt.confinement(
            agent,
            Some(agent.bash_sandbox()),
            Some(&workspace),
            Some(&agent_dir),
        );
        let ctx = ToolContext {
            session_id: self.session.id.clone(),
            call_id: format!("probe_{}", turn.seq),
            idempotency_key: format!("probe-{}", self.session.id),
            workspace,
            agent_dir,
            env: self.rt.inner.config.env.clone(),
            http: self.rt.inner.http.clone(),
            exec: self.rt.inner.exec.clone(),
            confinement,
            network: None,
        };
        let found = probe::run(agent, &config, &ctx).await;
        let now = now_ms();
        let mut batch = Batch::new();
        batch
            .push(Op::Note(NoteOp::Put(NoteRecord {
                namespace: ns,
                key: "text".to_owned(),
                text: found.text.clone(),
                created_at: now,
                updated_at: now,
            })))
            .event(
                self.id(),
                probe::SESSION_PROBED,
                json!({"programs": found.programs, "chars": found.text.chars().count()}),
            );
        self.rt.commit(batch).await?;
        // What was committed is what every later turn reads (redaction included).
        Ok(self
            .rt
            .inner
            .store
            .note(&probe::namespace(&self.session.id), "text")
            .await?
            .map_or(found.text, |n| n.text))
    }

    /// Whether `name` is the built-in `memory` tool of this agent.
    pub(in crate::engine) fn is_memory_call(&self, name: &str) -> bool {
        name == memory::MEMORY_TOOL
            && self.build.manifest.agent.config.memory.is_some()
            && self.build.tool(name).is_none()
    }

    /// Carries out a `memory` call: `(ok, what the model is told, the writes to commit with it)`.
    pub(in crate::engine) async fn memory_call(
        &mut self,
        turn: &TurnRecord,
        input: &Value,
    ) -> RuntimeResult<(bool, String, Batch)> {
        let Some(config) = self.build.manifest.agent.config.memory.clone() else {
            return Ok((
                false,
                "Memory is not enabled for this agent.".to_owned(),
                Batch::new(),
            ));
        };
        let user = self.turn_sender(turn).await?;
        let agent = self.shared_key(&self.build.manifest.agent.name);
        let place = memory::Place {
            memory: &config,
            agent: &agent,
            session: &self.session.id,
            user: user.as_deref(),
        };
        // Only the addressed scope's notes are read; a call naming no valid scope reads none.
        let (ns, notes) = match memory::target(&place, input) {
            Ok((_, ns)) => {
                let notes = self.rt.inner.store.notes(&ns).await?;
                (ns, notes)
            }
            Err(_) => (String::new(), Vec::new()),
        };
        let write = memory::write(
            &place,
            input,
            &|wanted| {
                if wanted == ns {
                    notes.clone()
                } else {
                    Vec::new()
                }
            },
            now_ms(),
        );
        if write.ok {
            // The next step's prompt shows the note.
            self.pinned = None;
        }
        Ok((write.ok, write.output, write.batch))
    }

    /// Near a full context, with memory on: offers the model one step to save what matters
    /// before compaction summarises, once per context (a compaction starts a new one). Returns
    /// whether this step carries the offer (then it does not compact yet).
    pub(in crate::engine) async fn offer_save(
        &mut self,
        turn: &TurnRecord,
        estimate: u64,
        window: u64,
    ) -> RuntimeResult<bool> {
        let Some(config) = &self.build.manifest.agent.config.memory else {
            return Ok(false);
        };
        if (estimate as f64) < config.save_at * window as f64 {
            return Ok(false);
        }
        let ns = offer_namespace(&self.session.id);
        let start = self.session.context_start.to_string();
        let offered = self.rt.inner.store.note(&ns, "context_start").await?;
        if offered.is_some_and(|n| n.text == start) {
            return Ok(false);
        }
        let now = now_ms();
        let mut batch = Batch::new();
        batch
            .push(Op::Note(NoteOp::Put(NoteRecord {
                namespace: ns,
                key: "context_start".to_owned(),
                text: start,
                created_at: now,
                updated_at: now,
            })))
            .event(
                self.id(),
                memory::MEMORY_SAVE_OFFERED,
                ev::memory_save_offered(turn, estimate, window),
            );
        // Writes held back (a turn's start) go first, in this commit.
        let batch = self.with_held(batch);
        self.rt.commit(batch).await?;
        self.save_nudge = true;
        Ok(true)
    }
}
