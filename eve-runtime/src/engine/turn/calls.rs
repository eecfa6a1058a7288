//! Tool dispatch: settling the calls a step asked for. Each call is decided (skill load, unknown
//! tool, denied, interrupted, invalid input, breaker open, needs approval, or run), the runnable
//! ones run in parallel in the session workspace against their target (build tool, MCP, dynamic
//! tool, subagent), and each result is journaled with its message and `action.result`.

use std::time::Duration;

use eve_compile::{Approval, Effect};
use serde_json::{Value, json};

use super::{TurnDriver, TurnEnd, content_for_model};
use crate::engine::drive::pending_for_turn;
use crate::engine::events as ev;
use crate::engine::limits::sleep_until_opt;
use crate::engine::{
    RuntimeError, RuntimeResult, dynamic, hooks, phases, review, selfchange, strategy, subagents,
    targets,
};
use crate::model::Message;
use crate::store::*;
use crate::tools::{ToolContext, ToolResult, prepare_workspace};

/// What to do with one unsettled call.
enum Decision {
    Settle(CallStatus, Value),
    Run,
    /// Ask a principal, with the input the call is shown and run with (a `tool.before` hook may
    /// have rewritten it).
    Ask(String, Option<Value>),
    /// Ask the reviewer of an `approval: auto` tool, with the input the hooks let through.
    Review(Option<Value>),
    /// A call of the built-in `memory` tool: settled in-process with its note writes.
    Memory,
    /// A call of the built-in `propose_change` tool: staged, applied or dropped (`selfchange`).
    Change,
    Wait,
}

impl TurnDriver<'_> {
    async fn decide(&mut self, call: &ToolCallRecord) -> RuntimeResult<Decision> {
        if call.kind == "load-skill" {
            let name = call.input.get("name").and_then(Value::as_str).unwrap_or("");
            return Ok(match self.build.manifest.agent.skill(name) {
                Some(skill) => {
                    Decision::Settle(CallStatus::Completed, json!(self.build.skill_text(skill)))
                }
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
        if self.is_memory_call(&call.name) {
            return Ok(Decision::Memory);
        }
        if self.is_change_call(&call.name) {
            return Ok(match call.approval {
                ApprovalState::Pending => Decision::Wait,
                _ => Decision::Change,
            });
        }
        if call.name == strategy::SUBMIT_PLAN && self.plans() {
            return Ok(match strategy::validate_plan(&call.input) {
                Ok(steps) => Decision::Settle(CallStatus::Completed, strategy::plan_json(&steps)),
                Err(errors) => Decision::Settle(
                    CallStatus::Failed,
                    json!(format!(
                        "The plan was not accepted; submit a corrected one:\n{}",
                        errors
                            .iter()
                            .map(|e| format!("- {e}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )),
                ),
            });
        }
        if self.withdrawn(&call.name) {
            return Ok(Decision::Settle(
                CallStatus::Failed,
                json!(phases::withdrawn_refusal(&call.name)),
            ));
        }
        let Some(tool) = self.target(&call.name, &call.input).map(|t| t.policy) else {
            return Ok(Decision::Settle(
                CallStatus::Failed,
                json!(self.unknown_tool(&call.name).await),
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
            ApprovalState::None | ApprovalState::Approved | ApprovalState::Reviewed => {}
        }
        if call.status == CallStatus::Running {
            // It was running when its process died.
            if tool.effect != Effect::Write {
                return Ok(Decision::Run);
            }
            if tool.approval != Approval::Never && call.approval != ApprovalState::Pending {
                return Ok(Decision::Ask(
                    format!(
                        "Approve {} again? A previous attempt was interrupted and its outcome is \
                         unknown.",
                        call.name
                    ),
                    None,
                ));
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
        let auto = tool.approval == Approval::Auto && call.approval == ApprovalState::None;
        if auto || (call.approval == ApprovalState::None && self.needs_approval(&tool)) {
            // One order of gates for every call: input validation, `tool.before` hooks, the
            // reviewer (`approval: auto`), then a principal. A call a hook denies never reaches
            // a reviewer or a human, and both judge the input the hook let through. (The hooks
            // of a call that is reviewed or asked run here, once; `run_call` runs them for calls
            // nobody is asked about.)
            let Some(resolved) = self.target(&call.name, &call.input) else {
                return Ok(Decision::Run);
            };
            let workspace = self.workspace()?;
            return Ok(
                match self
                    .tool_before(&resolved.as_called(call), &workspace)
                    .await
                {
                    hooks::Verdict::Deny(reason) => {
                        Decision::Settle(CallStatus::Denied, json!(reason))
                    }
                    hooks::Verdict::Allow(input) if auto => {
                        Decision::Review(Some(resolved.with_input(&call.input, input)))
                    }
                    hooks::Verdict::Allow(input) => Decision::Ask(
                        format!("Approve {}?", tool.name),
                        Some(resolved.with_input(&call.input, input)),
                    ),
                },
            );
        }
        Ok(Decision::Run)
    }

    /// Asks the reviewer about each `approval: auto` call in `reviews`. A call judged safe is
    /// journaled `reviewed` with its verdict, then joins `to_run`; any other joins `asks`, and its
    /// verdict is returned to be committed with the approval requests.
    async fn review_calls(
        &mut self,
        turn: &mut TurnRecord,
        step: u64,
        reviews: Vec<ToolCallRecord>,
        to_run: &mut Vec<ToolCallRecord>,
        asks: &mut Vec<(ToolCallRecord, String)>,
    ) -> RuntimeResult<Batch> {
        let mut asked = Batch::new();
        for mut call in reviews {
            let Some(resolved) = self.target(&call.name, &call.input) else {
                continue;
            };
            let input = resolved.as_called(&call).input.clone();
            let (verdict, data) = self
                .review_call(turn, &call.call_id, &resolved.policy, &input)
                .await;
            let data = ev::approval_reviewed(turn, step, data);
            if let review::Verdict::Safe(_) = verdict {
                call.approval = ApprovalState::Reviewed;
                let mut batch = Batch::new();
                batch
                    .event(self.id(), ev::APPROVAL_REVIEWED, data)
                    .push(Op::PutToolCall(call.clone()))
                    .push(Op::UpdateSession(self.session.clone()))
                    .push(Op::PutTurn(turn.clone()));
                self.rt.commit(batch).await?;
                to_run.push(call);
            } else {
                asked.event(self.id(), ev::APPROVAL_REVIEWED, data);
                asks.push((call, verdict.prompt(&resolved.policy.name)));
            }
        }
        if !asked.is_empty() {
            asked
                .push(Op::UpdateSession(self.session.clone()))
                .push(Op::PutTurn(turn.clone()));
        }
        Ok(asked)
    }

    /// Settles every unsettled call of the turn. Returns `Some` when the turn parks or ends.
    pub(in crate::engine) async fn settle_calls(
        &mut self,
        turn: &mut TurnRecord,
    ) -> RuntimeResult<Option<TurnEnd>> {
        self.ensure_extra().await?;
        self.step_phase(turn).await?;
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
        // Calls settled without running (skill loads, refusals), each with its own batch: they
        // are committed one by one below, or with the step's last commit when nothing runs,
        // nothing is asked and nothing waits (then they are the step's only results).
        let mut inline: Vec<(Batch, Message)> = Vec::new();
        let mut waits = false;
        let mut reviews: Vec<ToolCallRecord> = Vec::new();
        for call in calls {
            match self.decide(&call).await? {
                Decision::Settle(status, output) => {
                    if call.kind == "load-skill" && status == CallStatus::Completed {
                        let name = call.input["name"].as_str().unwrap_or_default().to_owned();
                        if !self.session.loaded_skills.contains(&name) {
                            self.session.loaded_skills.push(name);
                        }
                    }
                    let mut batch = Batch::new();
                    if call.name == strategy::SUBMIT_PLAN && self.plans() {
                        let (kind, data) = if status == CallStatus::Completed {
                            (ev::PLAN_CREATED, ev::plan_created(turn, step, &output))
                        } else {
                            (ev::PLAN_REJECTED, ev::plan_rejected(turn, step, &output))
                        };
                        batch.event(self.id(), kind, data);
                    }
                    let message =
                        self.settle_into(&mut batch, turn, step, call, status, output, None)?;
                    inline.push((batch, message));
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
                Decision::Ask(prompt, input) => {
                    let mut call = call;
                    if let Some(input) = input {
                        call.input = input;
                    }
                    asks.push((call, prompt));
                }
                Decision::Review(input) => {
                    let mut call = call;
                    if let Some(input) = input {
                        call.input = input;
                    }
                    reviews.push(call);
                }
                Decision::Memory => {
                    let (ok, output, mut batch) = self.memory_call(turn, &call.input).await?;
                    let status = if ok {
                        CallStatus::Completed
                    } else {
                        CallStatus::Failed
                    };
                    let message = self.settle_into(
                        &mut batch,
                        turn,
                        step,
                        call,
                        status,
                        json!(output),
                        None,
                    )?;
                    inline.push((batch, message));
                }
                Decision::Change => match self.change_call(&call).await? {
                    selfchange::ChangeStep::Settle(status, output, mut batch) => {
                        let message =
                            self.settle_into(&mut batch, turn, step, call, status, output, None)?;
                        inline.push((batch, message));
                    }
                    selfchange::ChangeStep::Ask(prompt) => asks.push((call, prompt)),
                },
                Decision::Wait => waits = true,
            }
        }
        let reviewed = self
            .review_calls(turn, step, reviews, &mut to_run, &mut asks)
            .await?;
        let alone = to_run.is_empty() && asks.is_empty() && once_approved.is_empty() && !waits;
        if !alone {
            // A journal held back goes out before anything runs or is asked.
            self.flush_held().await?;
        }
        let mut batch = Batch::new();
        if alone {
            for (settle, message) in inline {
                batch.ops.extend(settle.ops);
                if let Some(context) = self.context.as_mut() {
                    context.push(message);
                }
            }
        } else {
            for (settle, message) in inline {
                let committed = self.rt.commit(settle).await?;
                settled.push((
                    committed.message_seqs.first().copied().unwrap_or(0),
                    message,
                ));
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
            // A session continued from another node finds the files its steps wrote there.
            let fence = self.rt.fence_of(self.id());
            (self.rt.inner.workspaces)
                .restore_if_behind(self.id(), fence)
                .await?;
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
            let fence = self.rt.fence_of(self.id());
            if let Err(message) = self
                .rt
                .inner
                .workspaces
                .checkpoint(self.id(), fence)
                .await?
            {
                return self
                    .end_failed(turn.clone(), "workspace_too_large", &message, None)
                    .await
                    .map(Some);
            }
        }
        settled.sort_by_key(|(seq, _)| *seq);
        if let Some(context) = self.context.as_mut() {
            context.extend(settled.into_iter().map(|(_, m)| m));
        }
        if !asks.is_empty() {
            self.request_approvals(turn, step, asks, reviewed).await?;
        }
        let pending = if alone {
            // Nothing was asked and no call waits on an answer, so the turn has no pending
            // request of its own (a request and its call's approval change together).
            subagents::descendant_pending(self.rt, &turn.session_id).await?
        } else {
            pending_for_turn(self.rt, turn).await?
        };
        if parked && pending.is_empty() {
            // The child's request was answered meanwhile: settle the call again.
            return Ok(None);
        }
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
            let batch = self.with_held(batch);
            self.rt.commit(batch).await?;
            return Ok(Some(TurnEnd::Parked(pending)));
        }
        if was_tools {
            turn.step_index += 1;
            turn.step_started = false;
        }
        turn.phase = TurnPhase::Model;
        batch.push(Op::PutTurn(turn.clone()));
        // The next step starts by reading the session's cancel flag (another process may have
        // set it): the read goes out with this commit (in its transaction, on SQLite).
        let batch = self.with_held(batch);
        let (_, fresh) = self.rt.commit_reading(batch, &self.session.id).await?;
        self.next_cancel = Some(fresh.map(|s| s.cancel_requested));
        Ok(None)
    }

    pub(in crate::engine) fn workspace(&self) -> RuntimeResult<std::path::PathBuf> {
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

    pub(in crate::engine) async fn run_call(
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
        // picked up again was already allowed, with its journaled input; a call a principal was
        // asked about passed them before it was asked, in `decide`).
        if call.status == CallStatus::Pending && call.approval == ApprovalState::None {
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
        let agent = &self.build.manifest.agent;
        let effective = match &resolved.target {
            targets::Target::Build(tool) => agent.effective_sandbox(tool),
            targets::Target::Dynamic(_, provider) => agent.effective_sandbox(provider),
            _ => None,
        };
        let confinement = self
            .rt
            .confinement(agent, effective, Some(&workspace), Some(&agent_dir));
        let ctx = ToolContext {
            session_id: self.session.id.clone(),
            call_id: call.call_id.clone(),
            idempotency_key: call.idempotency_key.clone(),
            workspace,
            agent_dir,
            env: self.rt.inner.config.env.clone(),
            http: self.rt.inner.http.clone(),
            exec: self.rt.inner.exec.clone(),
            confinement,
            network: match &resolved.target {
                targets::Target::Build(tool) => agent
                    .sandbox
                    .tools
                    .get(&tool.name)
                    .and_then(|own| own.network.clone()),
                _ => None,
            },
        };
        let token = self.cancel.child_token();
        let input = resolved.run_input(&call.input);
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send + '_>> =
            match &resolved.target {
                targets::Target::Build(tool) => {
                    Box::pin(self.rt.run_tool(tool, &input, &ctx, token.clone()))
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
        // Redacted before anything keeps it, then fitted to the model's window (the whole
        // output saved in the workspace when it is cut).
        let mut output = output;
        self.rt.secrets().redact_json(&mut output);
        let output = self.fit_output(&call, output, &ctx).await;
        // A refused input is the caller's mistake, not a failure of the tool.
        let breakers = if result.input_refused {
            Vec::new()
        } else {
            self.breaker_outcome(&tool.name, result.ok).await?
        };
        // Refused destinations are events, committed with the result that reports them.
        let mut batch = Batch::new();
        for b in breakers {
            batch.push(Op::PutBreaker(b));
        }
        for refused in &result.refused {
            batch.event(
                self.id(),
                ev::EGRESS_REFUSED,
                ev::egress_refused(turn, step, &call, refused),
            );
        }
        self.settle_with(batch, turn, step, call, status, output, None)
            .await
            .map(Some)
    }

    /// Records a call's result, its message and its `action.result` in one commit.
    pub(in crate::engine) async fn settle(
        &self,
        turn: &TurnRecord,
        step: u64,
        call: ToolCallRecord,
        status: CallStatus,
        output: Value,
        breaker: Option<BreakerRecord>,
    ) -> RuntimeResult<(u64, Message)> {
        self.settle_with(Batch::new(), turn, step, call, status, output, breaker)
            .await
    }

    /// [`Self::settle`], committing `batch`'s operations first in the same commit.
    #[allow(clippy::too_many_arguments)]
    async fn settle_with(
        &self,
        mut batch: Batch,
        turn: &TurnRecord,
        step: u64,
        call: ToolCallRecord,
        status: CallStatus,
        output: Value,
        breaker: Option<BreakerRecord>,
    ) -> RuntimeResult<(u64, Message)> {
        let message = self.settle_into(&mut batch, turn, step, call, status, output, breaker)?;
        let committed = self.rt.commit(batch).await?;
        let seq = committed.message_seqs.first().copied().unwrap_or(0);
        Ok((seq, message))
    }

    /// Adds what [`Self::settle`] commits to `batch`; returns the call's message.
    #[allow(clippy::too_many_arguments)]
    fn settle_into(
        &self,
        batch: &mut Batch,
        turn: &TurnRecord,
        step: u64,
        mut call: ToolCallRecord,
        status: CallStatus,
        mut output: Value,
        breaker: Option<BreakerRecord>,
    ) -> RuntimeResult<Message> {
        // A result is redacted before the model or anything else sees it.
        self.rt.secrets().redact_json(&mut output);
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
        Ok(message)
    }
}
