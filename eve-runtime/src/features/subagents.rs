//! Subagents: each subagent of an agent is a tool named after it; a call runs a child session.
//!
//! A call `{message, task_id?}` starts a child session (or, with `task_id`, continues the one that
//! token names) in one durable commit with the parent's call marked running: the child's session
//! row and link, the message in its inbox, and the wait row saying which inbox message the parent
//! call waits on. The child is an ordinary session — its own events, stream, lease and turns — run
//! on the subagent's manifest. The parent's call drives it (or waits for whoever drives it) and is
//! completed with the answer of the child turn that took the message. After a restart the wait row
//! reconnects the two: the running parent call finds its child instead of starting another.
//!
//! A child that parks on an approval parks its parent too: the child's pending requests count as
//! the parent's (recursively up to the root), so they appear in the root's `input.requested`, and
//! an answer given on the root is routed to the child that asked. Budgets (tokens, cost, wall
//! clock) pass down as what remains of the parent's, never renewed: what children spend counts
//! against their parent.

pub(crate) mod remote;
mod remote_http;

use std::time::Duration;

use eve_compile::{Agent, Approval, Effect, Runner, Tool};
use serde_json::{Value, json};

use async_trait::async_trait;

use crate::engine::drive::failure_message;
use crate::engine::events as ev;
use crate::engine::turn::seam::{TurnExtension, TurnView, min_opt, spent};
use crate::engine::{DriveOutcome, LoadedBuild, Runtime, RuntimeResult, new_session_id};
use crate::model::ToolSpec;
use crate::store::*;

/// The path suffix of the root agent's copy that the built-in `agent` calls: its child sessions
/// run `agent` at path `#copy`.
pub(crate) const COPY_SUFFIX: &str = "#copy";

/// Description of the built-in `agent` (eve's).
const AGENT_DESCRIPTION: &str = "Delegate a focused subtask to a copy of yourself. Use it to \
     isolate complex work or split a large task into independent pieces. A new child has fresh \
     history and state but reuses your tools and workspace, so give parallel writers \
     non-overlapping scopes. In message, state the goal, what to return, and whether it may \
     change files. Continue a conversation with the `task_id` an answer returned.";

/// The root agent's copy that the built-in `agent` calls: the same agent, named `agent`, at its
/// own path, without the `agent` tool (never offered inside its own children).
pub(crate) fn root_copy(root: &Agent) -> Agent {
    let mut copy = root.clone();
    copy.name = eve_compile::AGENT_TOOL.to_owned();
    copy.path = format!("{}{COPY_SUFFIX}", root.path);
    copy.description = Some(AGENT_DESCRIPTION.to_owned());
    let on: Vec<String> = root
        .config
        .builtins_on()
        .into_iter()
        .filter(|n| *n != eve_compile::AGENT_TOOL)
        .map(str::to_owned)
        .collect();
    copy.config.default_tools = !on.is_empty();
    copy.config.builtins = Some(on);
    copy
}

/// Whether `agent` is offered the built-in `agent`: it is the root agent, the built-in is on, and
/// no tool or subagent of its own takes the name.
pub(crate) fn offers_agent_tool(agent: &Agent) -> bool {
    agent.path.is_empty()
        && agent.runs_builtin(eve_compile::AGENT_TOOL)
        && agent.subagent(eve_compile::AGENT_TOOL).is_none()
}

/// The tool a subagent is offered as.
pub(crate) fn tool_spec(sub: &Agent) -> ToolSpec {
    ToolSpec {
        name: sub.name.clone(),
        description: sub
            .description
            .clone()
            .unwrap_or_else(|| format!("The `{}` subagent.", sub.name)),
        input_schema: json!({
            "type": "object",
            "properties": {
                "message": {
                    "type": "string",
                    "minLength": 1,
                    "description": "What to ask the subagent: the task, with everything it needs to know."
                },
                "task_id": {
                    "type": "string",
                    "description": "Continue an earlier conversation with this subagent: the `task_id` its answer returned."
                }
            },
            "required": ["message"],
            "additionalProperties": false
        }),
    }
}

/// The policy of a subagent call as a tool: never asks approval (the child's own tools do), and
/// is `idempotent` so an interrupted call is picked up again (it reconnects to its child).
pub(crate) fn policy_tool(sub: &Agent) -> Tool {
    let spec = tool_spec(sub);
    synthetic_tool(
        &spec.name,
        &spec.description,
        spec.input_schema,
        Approval::Never,
        Effect::Idempotent,
    )
}

/// A tool definition for a call target that is not a tool of the build.
pub(crate) fn synthetic_tool(
    name: &str,
    description: &str,
    input_schema: Value,
    approval: Approval,
    effect: Effect,
) -> Tool {
    Tool {
        name: name.to_owned(),
        source: String::new(),
        description: description.to_owned(),
        input_schema,
        schema_hash: String::new(),
        approval,
        effect,
        timeout_ms: 0,
        output_limit: 0,
        deferred: false,
        env: Vec::new(),
        dynamic: Vec::new(),
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner: Runner::Command { argv: Vec::new() },
    }
}

impl Runtime {
    /// Whether `session` may have child sessions: some loaded build has subagents (its own build
    /// is loaded to know).
    pub(crate) async fn may_have_children(&self, session: &str) -> RuntimeResult<bool> {
        if self.inner.builds.subagents_seen() {
            return Ok(true);
        }
        if let Some(record) = self.inner.store.session(session).await?
            && let Err(e) = self.inner.builds.get(&record.build_hash)
        {
            tracing::debug!(session, error = %e, "cannot load the session's build");
        }
        Ok(self.inner.builds.subagents_seen())
    }

    /// Pending input requests of a session and of every session below it.
    pub(crate) async fn pending_in_tree(
        &self,
        session: &str,
    ) -> RuntimeResult<Vec<InputRequestRecord>> {
        let mut pending = self.inner.store.input_requests(session, true).await?;
        if self.may_have_children(session).await? {
            pending.extend(self.inner.store.descendant_requests(session).await?);
        }
        Ok(pending)
    }

    /// The manifest `path` of the agent a session runs (`""`: the root agent).
    pub(crate) async fn agent_path(&self, record: &SessionRecord) -> RuntimeResult<String> {
        if record.parent_id.is_none() {
            return Ok(String::new());
        }
        Ok(self
            .inner
            .store
            .subagent_link(&record.id)
            .await?
            .map(|l| l.agent_path)
            .unwrap_or_default())
    }

    /// The build view a session runs on: build `hash`, for the session's agent.
    pub(crate) async fn session_build(
        &self,
        hash: &str,
        record: &SessionRecord,
    ) -> RuntimeResult<std::sync::Arc<LoadedBuild>> {
        let path = self.agent_path(record).await?;
        self.inner.builds.agent(hash, &path)
    }

    /// An answer given on `session` for a request of one of its descendants: answers it there,
    /// tells `session`'s stream, and when nothing is pending below `session` any more, lets it go
    /// on. `None` when the request is not a descendant's.
    pub(crate) async fn answer_for_descendant(
        &self,
        session: &str,
        request_id: Option<&str>,
        own_pending: &[InputRequestRecord],
        answer: &crate::engine::turn::seam::Answer<'_>,
    ) -> RuntimeResult<Option<InputRequestRecord>> {
        if !self.may_have_children(session).await? {
            return Ok(None);
        }
        let target = match request_id {
            Some(id) if own_pending.iter().any(|r| r.id == id) => return Ok(None),
            None if !own_pending.is_empty() => return Ok(None),
            _ => {
                let below = self.inner.store.descendant_requests(session).await?;
                match request_id {
                    Some(id) => below.into_iter().find(|r| r.id == id),
                    None if below.len() == 1 => below.into_iter().next(),
                    None => None,
                }
            }
        };
        let Some(target) = target else {
            return Ok(None);
        };
        let again = crate::engine::turn::seam::Answer {
            reason: answer.reason.clone(),
            ..*answer
        };
        let answered =
            Box::pin(self.answer_input_with(&target.session_id, Some(&target.id), again)).await?;
        let still = !self
            .inner
            .store
            .input_requests(session, true)
            .await?
            .is_empty()
            || !self
                .inner
                .store
                .descendant_requests(session)
                .await?
                .is_empty();
        let mut batch = Batch::durable();
        batch.event(
            session,
            ev::APPROVAL_SETTLED,
            ev::approval_settled(&answered, answer.approve, answer.attributes),
        );
        if !still {
            batch.event(
                session,
                ev::INPUT_RESOLVED,
                ev::input_resolved(std::slice::from_ref(&answered)),
            );
        }
        self.commit(batch).await?;
        if !still {
            self.kick(session);
        }
        Ok(Some(answered))
    }
}

/// How a child's turn ended, as the parent call's result.
pub(crate) enum ChildEnd {
    /// The child's answer.
    Answer(String),
    /// Why it did not answer.
    Failed(String),
}

/// Subagents as a feature of the turn: a turn that stops early cancels the children its
/// unsettled calls wait on.
pub(crate) struct Subagents;

#[async_trait]
impl TurnExtension for Subagents {
    fn name(&self) -> &'static str {
        "subagents"
    }

    async fn turn_ended(
        &mut self,
        view: &TurnView<'_>,
        unsettled: &[ToolCallRecord],
        _writes: &mut Batch,
    ) -> RuntimeResult<()> {
        let plans = view.build.manifest.agent.config.strategy == eve_compile::Strategy::Plan;
        let store = view.rt.inner.store.clone();
        for call in unsettled {
            let plan_step = plans && call.name == crate::features::strategy::PLAN_STEP;
            let copy = call.name == eve_compile::AGENT_TOOL
                && offers_agent_tool(&view.build.manifest.agent);
            if view.build.manifest.agent.subagent(&call.name).is_none() && !plan_step && !copy {
                continue;
            }
            if let Some(wait) = store
                .subagent_call(view.id(), view.turn.seq, &call.call_id)
                .await?
                && let Err(e) = Box::pin(view.rt.cancel(&wait.child_id)).await
            {
                tracing::warn!(session = %wait.child_id, error = %e, "cannot cancel the subagent");
            }
        }
        Ok(())
    }
}

/// How a subagent call starts.
pub(crate) enum Start {
    /// Its child already has the message: wait on it.
    Waiting(SubagentCall),
    /// The child is created (or found) and sent the message with these writes (durable), which
    /// mark the call running.
    Send(SubagentCall, Batch),
    /// The call cannot start: a message for the model (bad input, unknown `task_id`).
    Refused(String),
}

/// The first move of a subagent call: reconnect to its child, or make the writes that create
/// (or find) the child and send it the message, with the call marked running.
pub(crate) async fn start(
    view: &TurnView<'_>,
    call: &mut ToolCallRecord,
    sub: &Agent,
) -> RuntimeResult<Start> {
    if let Some(wait) = view
        .rt
        .inner
        .store
        .subagent_call(view.id(), view.turn.seq, &call.call_id)
        .await?
    {
        return Ok(Start::Waiting(wait));
    }
    start_child(view, call, sub).await
}

/// Waits for the child of a subagent call to answer, driving it in this task: `Some((status,
/// output))` settles the call; `None` when the child parked on input (the call stays running
/// and the parent turn parks on the child's requests).
pub(crate) async fn await_child(
    view: &TurnView<'_>,
    wait: &SubagentCall,
    sub: &Agent,
) -> RuntimeResult<Option<(CallStatus, Value)>> {
    let rt = view.rt;
    let mut idle_rounds = 0u32;
    loop {
        if let Some(end) = child_end(rt, wait).await? {
            return Ok(Some(match end {
                ChildEnd::Answer(answer) => (
                    CallStatus::Completed,
                    json!({"task_id": wait.task_id, "answer": answer}),
                ),
                ChildEnd::Failed(error) => (
                    CallStatus::Failed,
                    json!({"task_id": wait.task_id, "error": error}),
                ),
            }));
        }
        let child = wait.child_id.clone();
        let mut drive = Box::pin(rt.drive(&child));
        let mut cancelled = false;
        let outcome = loop {
            tokio::select! {
                o = &mut drive => break o?,
                () = view.cancel.cancelled(), if !cancelled => {
                    // Stop the child through its own cancel, then let its driver finish.
                    cancelled = true;
                    if let Err(e) = Box::pin(rt.cancel(&child)).await {
                        tracing::warn!(session = %child, error = %e, "cannot cancel the subagent");
                    }
                }
            }
        };
        if cancelled {
            return Ok(Some((
                CallStatus::Cancelled,
                json!("The turn was cancelled while the subagent worked; it was cancelled too."),
            )));
        }
        match outcome {
            DriveOutcome::WaitingInput(requests) if !requests.is_empty() => return Ok(None),
            DriveOutcome::Busy { .. } => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => {
                idle_rounds += 1;
                if idle_rounds > 50 {
                    return Ok(Some((
                        CallStatus::Failed,
                        json!(format!(
                            "The subagent `{}` (session {}) did not take the message.",
                            sub.name, wait.child_id
                        )),
                    )));
                }
                if idle_rounds > 2 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// Creates (or finds) the child and sends it the message, with the call marked running, in one
/// durable commit. `Err` is a message for the model (bad input, unknown `task_id`).
pub(crate) async fn start_child(
    view: &TurnView<'_>,
    call: &mut ToolCallRecord,
    sub: &Agent,
) -> RuntimeResult<Start> {
    let turn = view.turn;
    let store = view.rt.inner.store.clone();
    let Some(message) = call
        .input
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
    else {
        return Ok(Start::Refused(format!(
            "`{}` needs a non-empty `message`: what to ask the subagent.",
            sub.name
        )));
    };
    let task = call
        .input
        .get("task_id")
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty());
    let now = now_ms();
    let mut batch = Batch::durable();
    let (child_id, task_id) = match task {
        Some(task) => {
            let Some((parent, origin)) = task.split_once(':') else {
                return Ok(Start::Refused(format!(
                    "`{task}` is not a task_id: use the `task_id` an earlier answer of `{}` \
                     returned, or leave it out to start a new conversation.",
                    sub.name
                )));
            };
            if parent != view.id() {
                return Ok(Start::Refused(format!(
                    "task_id `{task}` belongs to another session; leave it out to start a new \
                     conversation with `{}`.",
                    sub.name
                )));
            }
            let Some(link) = store.subagent_by_token(parent, origin).await? else {
                return Ok(Start::Refused(format!(
                    "There is no conversation with task_id `{task}`; leave it out to start a \
                     new one with `{}`.",
                    sub.name
                )));
            };
            if link.agent_path != sub.path {
                return Ok(Start::Refused(format!(
                    "task_id `{task}` is a conversation with another subagent, not `{}`.",
                    sub.name
                )));
            }
            (link.session_id, task.to_owned())
        }
        None => {
            let child = new_session_id();
            let root_id = match store.subagent_link(view.id()).await? {
                Some(link) => link.root_id,
                None => view.id().to_owned(),
            };
            let link = SubagentLink {
                session_id: child.clone(),
                parent_id: view.id().to_owned(),
                call_id: call.call_id.clone(),
                root_id,
                agent_path: sub.path.clone(),
                created_at: now,
            };
            let task_id = link.task_id();
            // ... with its attributes: the child is reached as its root is.
            let attributes = view.rt.owner_attributes(view.id()).await?;
            if let Some(op) = crate::tenancy::record_owner_attributes(&child, &attributes) {
                batch.push(op);
            }
            batch
                .push(Op::InsertSession(SessionRecord {
                    parent_id: Some(view.id().to_owned()),
                    parent_call_id: Some(call.call_id.clone()),
                    // A child belongs to whoever started its root (the parent's owner).
                    owner: view.session.owner.clone(),
                    ..SessionRecord::new(
                        child.clone(),
                        view.build.hash.clone(),
                        sub.name.clone(),
                        None,
                        now,
                    )
                }))
                .push(Op::Composition(CompositionOp::InsertLink(link)));
            (child, task_id)
        }
    };
    let budget = child_budget(view, &child_id, task.is_some()).await?;
    let inbox_id = format!("msg_{}", ulid::Ulid::new());
    let wait = SubagentCall {
        parent_id: view.id().to_owned(),
        turn_seq: turn.seq,
        call_id: call.call_id.clone(),
        child_id: child_id.clone(),
        inbox_id: inbox_id.clone(),
        task_id,
        budget,
        created_at: now,
    };
    call.status = CallStatus::Running;
    call.attempts = call.attempts.saturating_add(1);
    call.started_at = Some(now);
    batch
        .push(Op::InsertInbox(InboxRecord {
            id: inbox_id,
            session_id: child_id,
            text: message.to_owned(),
            accepted_at: now,
            consumed_turn: None,
            input: None,
        }))
        .push(Op::Composition(CompositionOp::PutSubagentCall(
            wait.clone(),
        )))
        .push(Op::PutToolCall(call.clone()));
    Ok(Start::Send(wait, batch))
}

/// What the child may spend: what remains of this session's budget (its limits and its own
/// inherited budget, less what it and its descendants spent), as caps on the child's totals.
async fn child_budget(view: &TurnView<'_>, child: &str, existing: bool) -> RuntimeResult<Budget> {
    let turn = view.turn;
    let limits = &view.build.manifest.agent.config.limits;
    let own = view.budget.unwrap_or_default();
    let cap_tokens = min_opt(limits.max_tokens, own.max_tokens);
    let cap_cost = min_opt(limits.max_cost_usd, own.max_cost_usd);
    let deadline = min_opt(
        limits.max_turn_seconds.map(|s| {
            turn.started_at
                .saturating_add(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))
        }),
        own.deadline_ms,
    );
    let mut budget = Budget {
        max_tokens: None,
        max_cost_usd: None,
        deadline_ms: deadline,
    };
    if cap_tokens.is_none() && cap_cost.is_none() {
        return Ok(budget);
    }
    let (spent_tokens, spent_cost) = spent(view.rt, view.session, view.build).await?;
    let (child_tokens, child_cost) = if existing {
        let store = &view.rt.inner.store;
        let record = store.session(child).await?;
        let (below, below_cost) = store.descendant_usage(child).await?;
        (
            record
                .as_ref()
                .map(|r| r.usage.total())
                .unwrap_or(0)
                .saturating_add(below.total()),
            record.map(|r| r.cost_usd).unwrap_or(0.0) + below_cost,
        )
    } else {
        (0, 0.0)
    };
    budget.max_tokens =
        cap_tokens.map(|cap| child_tokens.saturating_add(cap.saturating_sub(spent_tokens)));
    budget.max_cost_usd = cap_cost.map(|cap| child_cost + (cap - spent_cost).max(0.0));
    Ok(budget)
}

/// The child turn's end, once the turn that took the message ended.
pub(crate) async fn child_end(
    rt: &Runtime,
    wait: &SubagentCall,
) -> RuntimeResult<Option<ChildEnd>> {
    let store = &rt.inner.store;
    let seq = match store.inbox_turn(&wait.inbox_id).await? {
        None => {
            return Ok(Some(ChildEnd::Failed(
                "the message to the subagent was lost".to_owned(),
            )));
        }
        Some(None) => return Ok(None),
        Some(Some(seq)) => seq,
    };
    let Some(turn) = store.turn(&wait.child_id, seq).await? else {
        return Ok(None);
    };
    Ok(match turn.status {
        TurnStatus::Running | TurnStatus::Waiting => None,
        TurnStatus::Completed => {
            let steps = store.steps(&wait.child_id, seq).await?;
            let answer = steps
                .last()
                .and_then(|s| s.response.get("content"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Some(ChildEnd::Answer(answer))
        }
        TurnStatus::Cancelled => Some(ChildEnd::Failed(
            "the subagent's turn was cancelled".to_owned(),
        )),
        TurnStatus::Failed => {
            let reason = failure_message(rt, &wait.child_id)
                .await
                .or(turn.stop_reason.clone())
                .unwrap_or_else(|| "failed".to_owned());
            Some(ChildEnd::Failed(format!(
                "the subagent's turn failed: {reason}"
            )))
        }
    })
}
