//! Memory as a feature of the turn: the memory block in the system prompt (the notes of each
//! scope the agent may use), and the built-in `memory` tool's calls. The rules live in the
//! parent module; this is where a turn reads and writes them.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{MEMORY_TOOL, Place, namespace, pinned_block, target, write};
use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Builtin, Handled, Shaped, TurnExtension, TurnView};
use crate::model::ModelRequest;
use crate::store::{Batch, CallStatus, ToolCallRecord, now_ms};

/// The memory feature of one turn run.
#[derive(Default)]
pub(crate) struct MemoryFeature {
    /// The memory block (loaded on first need; cleared when the agent writes a note).
    block: Option<String>,
}

#[async_trait]
impl TurnExtension for MemoryFeature {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        if self.block.is_none() {
            let block = self.load_block(view).await?;
            self.block = Some(block);
        }
        request
            .system
            .push_str(self.block.as_deref().unwrap_or_default());
        Ok(Shaped::Call)
    }

    fn builtins(&self, view: &TurnView<'_>) -> Vec<Builtin> {
        // A tool of the agent's own named `memory` wins over the built-in one.
        if view.build.manifest.agent.config.memory.is_none()
            || view.build.tool(MEMORY_TOOL).is_some()
        {
            return Vec::new();
        }
        vec![Builtin {
            name: MEMORY_TOOL.to_owned(),
            policy: None,
        }]
    }

    async fn call_builtin(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        let (ok, output, writes) = self.call(view, &call.input).await?;
        Ok(Handled::Settle {
            status: if ok {
                CallStatus::Completed
            } else {
                CallStatus::Failed
            },
            output: json!(output),
            writes,
        })
    }
}

impl MemoryFeature {
    /// The notes of every scope the agent may use, as the prompt shows them.
    async fn load_block(&mut self, view: &TurnView<'_>) -> RuntimeResult<String> {
        let Some(config) = view.build.manifest.agent.config.memory.clone() else {
            return Ok(String::new());
        };
        let user = view.sender.map(str::to_owned);
        let mut scopes = Vec::new();
        for scope in config.scopes {
            let Some(ns) = namespace(
                scope,
                &view.shared_key(&view.build.manifest.agent.name),
                view.id(),
                user.as_deref(),
            ) else {
                continue;
            };
            scopes.push((scope, view.rt.inner.store.notes(&ns).await?));
        }
        Ok(pinned_block(&scopes))
    }

    /// Carries out a `memory` call: `(ok, what the model is told, the writes to commit with it)`.
    async fn call(
        &mut self,
        view: &TurnView<'_>,
        input: &Value,
    ) -> RuntimeResult<(bool, String, Batch)> {
        let Some(config) = view.build.manifest.agent.config.memory.clone() else {
            return Ok((
                false,
                "Memory is not enabled for this agent.".to_owned(),
                Batch::new(),
            ));
        };
        let user = view.sender.map(str::to_owned);
        let agent = view.shared_key(&view.build.manifest.agent.name);
        let place = Place {
            memory: &config,
            agent: &agent,
            session: view.id(),
            user: user.as_deref(),
        };
        // Only the addressed scope's notes are read; a call naming no valid scope reads none.
        let (ns, notes) = match target(&place, input) {
            Ok((_, ns)) => {
                let notes = view.rt.inner.store.notes(&ns).await?;
                (ns, notes)
            }
            Err(_) => (String::new(), Vec::new()),
        };
        let written = write(
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
        if written.ok {
            // The next step's prompt shows the note.
            self.block = None;
        }
        Ok((written.ok, written.output, written.batch))
    }
}
