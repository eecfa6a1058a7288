//! Governed self-change: the built-in `propose_change` tool of an agent with `self_change: true`.
//!
//! The agent may propose edits to its own folder; it can never make them. A call is handled in
//! three moves, each driven by the call's stored approval state, so a restart (or `kill -9`) at
//! any point picks up where the call was:
//!
//! 1. **Stage** (a fresh call). The changes are checked (paths relative to `agent/` that stay
//!    inside it: no absolute paths, no `..`, no dot-folders such as `.eve/` or `.git/`, no
//!    symbolic links on the way, capped sizes), `agent/` is copied to `.eve/staging/<id>/agent/`
//!    (never inside `agent/`), the changes are applied to the copy, and the copy is compiled and
//!    written into `.eve/builds/<hash>/` without moving `.eve/current`. The release candidate is
//!    computed (capability delta against the active release, gate evals). A proposal with build
//!    errors or failing gate evals goes back to the model as the call's result and is never
//!    offered. Otherwise the call parks on a durable input request of kind `change-approval`
//!    whose `action.proposal` holds everything a reviewer needs: summary, rationale, every file
//!    that differs between `agent/` and the staged copy with its own diff and its own cap (so a
//!    padded file cannot push another out of sight), diagnostics counts, eval results and the
//!    delta with widening changes marked (host code and hook bodies among them).
//! 2. **Apply** (approved by a principal through the one answer path, `Runtime::answer_input_as`).
//!    `agent/` must be as it was when the proposal was staged (a fingerprint of every file), else
//!    nothing is written and the model is told why. The same checked changes are written into
//!    `agent/`, `agent/` is built again and must give the staged build's hash, and in a git
//!    repository the changed paths are **staged** (`git add`), not committed. Then the build is
//!    activated as a release with the approver as its principal. The model gets the outcome.
//! 3. **Deny**: nothing in `agent/` changes, the staging folder is removed, the model gets the
//!    reason.
//!
//! Each move is recorded as an event (`change.proposed`, `change.approved`, `change.denied`) in
//! the session's stream and in the releases' audit stream. The tool's approval is always
//! `always`, whatever `agent.yaml` says, and only the active build's settings count: a proposal
//! cannot relax its own review.
//!
//! The moves live apart: `stage.rs` (copy, apply, build, the candidate, what a reviewer is
//! shown), `apply.rs` (an approved proposal written into `agent/` and activated) and `deny.rs`;
//! `check.rs` checks a proposal's input and paths (the project's state and `evals/` out of
//! reach), `folder.rs` does the file work on a folder (writing changes, fingerprints, the
//! staging copy) and `review.rs` lists the files a reviewer reads, each with its own diff. This module holds the
//! tool, the proposal types and the dispatch of a call to its move.

mod apply;
mod check;
mod deny;
mod folder;
mod review;
mod stage;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use eve_compile::{Approval, Tool};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use self::stage::Staged;
use crate::engine::turn::seam::TurnView;
use async_trait::async_trait;

use crate::engine::turn::seam::{AskAs, Builtin, Handled, TurnExtension};
use crate::engine::{Runtime, RuntimeResult};
use crate::model::ToolSpec;
use crate::store::{ApprovalState, Batch, CallStatus, InputRequestRecord, ToolCallRecord};

pub use self::check::{check_on_disk, check_path, check_protected, parse};
pub(crate) use self::folder::{apply, fingerprint};
pub(crate) use self::review::review;
pub use self::stage::render_text;
pub(crate) use self::stage::{discard_staged, proposed_event, staged_request};

/// The built-in tool's name.
pub(crate) const PROPOSE_CHANGE: &str = "propose_change";
/// The kind of input request a proposal parks on.
pub const REQUEST_KIND: &str = "change-approval";

pub(crate) use crate::releases::{CHANGE_APPROVED, CHANGE_DENIED, CHANGE_PROPOSED};

/// Most files one proposal may change.
pub(crate) const MAX_FILES: usize = 32;
/// Largest content of one file, in bytes.
pub(crate) const MAX_FILE_BYTES: usize = 256 * 1024;
/// Largest total content of one proposal, in bytes.
pub(crate) const MAX_TOTAL_BYTES: usize = 1024 * 1024;
/// Longest path, in bytes.
const MAX_PATH_BYTES: usize = 255;
/// Longest summary and rationale, in characters.
const MAX_SUMMARY_CHARS: usize = 500;
const MAX_RATIONALE_CHARS: usize = 8000;
/// Each changed file's diff a reviewer is shown is cut on its own after this many lines …
pub(crate) const FILE_DIFF_MAX_LINES: usize = 300;
/// … or this many bytes (one file's diff never takes another's room).
pub(crate) const FILE_DIFF_MAX_BYTES: usize = 16 * 1024;
/// Most diagnostics listed (the counts are complete).
const LISTED_DIAGNOSTICS: usize = 20;
/// A copy of `agent/` larger than this is refused (the staging folder is a full copy).
const MAX_COPY_BYTES: u64 = 256 * 1024 * 1024;

/// The `propose_change` tool offered to the model.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: PROPOSE_CHANGE.to_owned(),
        description: format!(
            "Propose a change to your own agent folder (instructions, skills, tools, \
             agent.yaml …). Nothing changes until a person approves it: eve builds the changed \
             folder, runs its checks and shows the person the diff and what the change would \
             allow you to do. Paths are relative to the agent folder (`skills/triage.md`, \
             `instructions.md`). Give the whole new content of each file, or `delete: true`. \
             At most {MAX_FILES} files, {} KiB each, {} KiB in all. You get the outcome as this \
             call's result: build errors to fix, or the person's decision.",
            MAX_FILE_BYTES / 1024,
            MAX_TOTAL_BYTES / 1024
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string", "description": "One line: what the change does."},
                "rationale": {"type": "string", "description": "Why it is needed."},
                "changes": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "Relative to the agent folder."},
                            "content": {"type": "string", "description": "The file's whole new content."},
                            "delete": {"type": "boolean", "description": "true to delete the file."}
                        },
                        "required": ["path"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["summary", "rationale", "changes"],
            "additionalProperties": false
        }),
    }
}

/// The policy the engine applies to `propose_change`: always asked, a write. Nothing in
/// `agent.yaml` loosens it.
pub(super) fn policy() -> Tool {
    let spec = spec();
    crate::features::subagents::synthetic_tool(
        &spec.name,
        &spec.description,
        spec.input_schema,
        Approval::Always,
        eve_compile::PROPOSE_CHANGE_EFFECT,
    )
}

/// One checked change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// Write `content` at `path` (created or replaced).
    Write {
        /// Relative to `agent/`, normalised.
        path: String,
        /// The whole new content.
        content: String,
    },
    /// Delete the file at `path`.
    Delete {
        /// Relative to `agent/`, normalised.
        path: String,
    },
}

impl FileChange {
    /// The path changed.
    pub(crate) fn path(&self) -> &str {
        match self {
            Self::Write { path, .. } | Self::Delete { path } => path,
        }
    }
}

/// A proposal as the model sent it, checked.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// What it does.
    pub(crate) summary: String,
    /// Why.
    pub(crate) rationale: String,
    /// The changes, in the order given.
    pub(crate) changes: Vec<FileChange>,
}

/// The staging folder of proposal `id`.
pub(crate) fn staging_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("staging").join(id)
}

/// The id of the proposal a call makes: stable for the call (its idempotency key), so staging
/// again after a restart reuses the same folder.
pub(crate) fn proposal_id(call: &ToolCallRecord) -> String {
    let digest = Sha256::digest(call.idempotency_key.as_bytes());
    format!("chg_{}", &hex::encode(digest)[..12])
}

impl Runtime {
    /// The agent folder proposals change: set by the CLI from the project (`--agent`), else
    /// `agent/` beside the state folder.
    pub(crate) fn agent_dir(&self) -> PathBuf {
        match self.inner.agent_dir.get() {
            Some(dir) => dir.clone(),
            None => self
                .inner
                .config
                .state_dir
                .parent()
                .map_or_else(|| PathBuf::from("agent"), |p| p.join("agent")),
        }
    }

    /// Sets the agent folder proposals change (once; later calls are ignored).
    pub fn set_agent_dir(&self, dir: impl Into<PathBuf>) {
        let _ = self.inner.agent_dir.set(dir.into());
    }

    /// Adds a `change.*` event to `batch` (the session's stream) and appends it to the releases'
    /// audit stream (`eve releases log`, `GET /eve/v1/releases/stream`). The audit event is
    /// stored first, so a crash before the session's commit can repeat it, never lose it.
    pub(super) async fn change_event(
        &self,
        batch: &mut Batch,
        session: &str,
        kind: &str,
        mut data: Value,
    ) -> RuntimeResult<()> {
        batch.event(session, kind, data.clone());
        data["sessionId"] = json!(session);
        self.audit(kind, data).await?;
        Ok(())
    }
}

/// Whether `name` is the built-in `propose_change` of this agent.
/// Whether `agent` has the built-in `propose_change` (a root agent with `self_change: true`).
pub(crate) fn enabled(agent: &eve_compile::Agent) -> bool {
    agent.config.self_change && agent.path.is_empty()
}

/// Self-change as a feature of the turn: the built-in `propose_change`, and proposals dropped
/// with a turn that stops before they are answered.
pub(crate) struct SelfChange;

#[async_trait]
impl TurnExtension for SelfChange {
    fn name(&self) -> &'static str {
        "selfchange"
    }

    fn builtins(&self, view: &TurnView<'_>) -> Vec<crate::engine::turn::seam::Builtin> {
        if !enabled(&view.build.manifest.agent) {
            return Vec::new();
        }
        vec![Builtin {
            name: PROPOSE_CHANGE.to_owned(),
            policy: Some(policy()),
        }]
    }

    async fn call_builtin(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        if call.approval == ApprovalState::Pending {
            return Ok(Handled::Wait);
        }
        Ok(match change_call(view, call).await? {
            ChangeStep::Settle(status, output, writes) => Handled::Settle {
                status,
                output,
                writes,
            },
            ChangeStep::Ask(prompt) => {
                // A staged proposal parks on a request of its own kind that shows it; the
                // audit stream has `change.proposed` before the session commits it.
                let state_dir = &view.rt.inner.config.state_dir;
                let request = match staged_request(state_dir, call) {
                    Some((kind, action)) => {
                        let data = proposed_event(call, &action);
                        let mut events = Batch::new();
                        view.rt
                            .change_event(&mut events, view.id(), CHANGE_PROPOSED, data)
                            .await?;
                        Some(AskAs {
                            kind,
                            action,
                            writes: events,
                        })
                    }
                    None => None,
                };
                Handled::Ask { prompt, request }
            }
        })
    }

    async fn turn_ended(
        &mut self,
        view: &TurnView<'_>,
        unsettled: &[ToolCallRecord],
        _writes: &mut Batch,
    ) -> RuntimeResult<()> {
        // A proposal parked with the turn is dropped with it: nothing stays staged.
        for call in unsettled {
            discard_staged(&view.rt.inner.config.state_dir, call);
        }
        Ok(())
    }
}

/// Moves a `propose_change` call on: stages a fresh one, applies an approved one, drops a
/// denied one.
async fn change_call(view: &TurnView<'_>, call: &ToolCallRecord) -> RuntimeResult<ChangeStep> {
    let id = proposal_id(call);
    let proposal = match parse(&call.input) {
        Ok(p) => p,
        Err(errors) => {
            return Ok(ChangeStep::Settle(
                CallStatus::Failed,
                json!(format!(
                    "The proposal was refused; nothing was staged:\n{}",
                    errors
                        .iter()
                        .map(|e| format!("- {e}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )),
                Batch::new(),
            ));
        }
    };
    match call.approval {
        ApprovalState::Approved => apply::apply_change(view, call, &id, &proposal).await,
        ApprovalState::Denied => deny::deny_change(view, call, &id, &proposal).await,
        _ => match view.rt.stage_proposal(&id, &proposal).await? {
            Staged::Refused(text) => Ok(ChangeStep::Settle(
                CallStatus::Failed,
                json!(text),
                Batch::new(),
            )),
            Staged::Offered(shown) => Ok(ChangeStep::Ask(format!(
                "Approve change {id} to the agent? {}{}",
                proposal.summary,
                if shown["widens"] == true {
                    " (it WIDENS what the agent may do)"
                } else {
                    ""
                }
            ))),
        },
    }
}

/// The input request of a `propose_change` call, newest first.
pub(super) async fn change_request(
    view: &TurnView<'_>,
    call: &ToolCallRecord,
) -> RuntimeResult<Option<InputRequestRecord>> {
    Ok(view
        .rt
        .inner
        .store
        .input_requests(&view.session.id, false)
        .await?
        .into_iter()
        .rev()
        .find(|r| r.turn_seq == call.turn_seq && r.call_id == call.call_id))
}
/// Where a `propose_change` call goes next.
pub(crate) enum ChangeStep {
    /// Settled now, with the writes committed with its result.
    Settle(CallStatus, Value, Batch),
    /// Staged and offered: ask a principal, with this prompt.
    Ask(String),
}
