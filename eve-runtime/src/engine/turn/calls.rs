//! Tool dispatch: settling the calls a step asked for. Each call is decided (skill load, a
//! built-in tool of a feature, refused by a feature's gate, unknown tool, denied, interrupted,
//! invalid input, needs approval, or run), the runnable ones run in parallel in the session
//! workspace ([`super::run`]), and each result is journaled with its message and `action.result`.

use eve_compile::{Approval, Effect, Tool};
use serde_json::{Value, json};

use super::seam::{AskAs, GateAt, Handled, InputVerdict};
use super::{TurnDriver, TurnEnd, view};
use crate::engine::RuntimeResult;
use crate::engine::drive::{descendant_pending, pending_for_turn};
use crate::engine::events as ev;
use crate::engine::observe::TurnWork;
use crate::model::Message;
use crate::store::*;

/// What to do with one unsettled call.
enum Decision {
    Settle(CallStatus, Value),
    Run,
    /// Ask a principal, with the input the call is shown and run with (a `tool.before` hook may
    /// have rewritten it).
    Ask(String, Option<Value>),
    /// Ask the reviewer of an `approval: auto` tool, with the input the hooks let through.
    Review(Option<Value>),
    /// A call of a feature's built-in tool (the index of the feature in the turn's list).
    Builtin(usize),
    /// A call a feature answered instead of the tool (a stub).
    Answered(Handled),
    Wait,
}

impl TurnDriver<'_> {
    async fn decide(
        &mut self,
        turn: &TurnRecord,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Decision> {
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
        if let Some(index) = self.builtin(turn, &call.name) {
            return Ok(Decision::Builtin(index));
        }
        {
            let view = view!(self, turn);
            for feature in &mut self.features {
                if let Some(handled) = feature.answer_call(&view, call).await? {
                    return Ok(Decision::Answered(handled));
                }
            }
        }
        {
            let view = view!(self, turn);
            for feature in &mut self.features {
                if let Some(refusal) = feature
                    .gate_call(&view, call, &call.name, GateAt::Offered)
                    .await?
                {
                    return Ok(Decision::Settle(CallStatus::Failed, json!(refusal)));
                }
            }
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
        {
            let view = view!(self, turn);
            for feature in &mut self.features {
                if let Some(refusal) = feature
                    .gate_call(&view, call, &tool.name, GateAt::Run)
                    .await?
                {
                    return Ok(Decision::Settle(CallStatus::Failed, json!(refusal)));
                }
            }
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
                    .check_input(turn, &resolved.as_called(call), &workspace)
                    .await
                {
                    InputVerdict::Deny(reason) => {
                        Decision::Settle(CallStatus::Denied, json!(reason))
                    }
                    InputVerdict::Allow(input) if auto => {
                        Decision::Review(Some(resolved.with_input(&call.input, input)))
                    }
                    InputVerdict::Allow(input) => {
                        let input = resolved.with_input(&call.input, input);
                        Decision::Ask(self.approval_prompt(&tool, &input), Some(input))
                    }
                },
            );
        }
        Ok(Decision::Run)
    }

    /// The feature answering `name` when it is a built-in tool of this turn (the table is made
    /// from the features once per turn run).
    fn builtin(&mut self, turn: &TurnRecord, name: &str) -> Option<usize> {
        self.builtin_table(turn).get(name).map(|(index, _)| *index)
    }

    /// The turn's built-in tools: name, the feature answering it, its policy.
    fn builtin_table(
        &mut self,
        turn: &TurnRecord,
    ) -> &std::collections::HashMap<String, (usize, Option<Tool>)> {
        if self.builtins.is_none() {
            let view = view!(self, turn);
            let mut table = std::collections::HashMap::new();
            for (index, feature) in self.features.iter().enumerate() {
                for builtin in feature.builtins(&view) {
                    table.entry(builtin.name).or_insert((index, builtin.policy));
                }
            }
            self.builtins = Some(table);
        }
        self.builtins.get_or_insert_with(Default::default)
    }

    /// The policy a call of `name` is journaled and approved under: a built-in tool's, else the
    /// tool it resolves to.
    pub(super) fn policy_of(
        &mut self,
        turn: &TurnRecord,
        name: &str,
        input: &Value,
    ) -> Option<Tool> {
        if let Some((_, policy)) = self.builtin_table(turn).get(name) {
            return policy.clone();
        }
        self.target(name, input).map(|t| t.policy)
    }

    /// The features' verdict on a call before it is reviewed, asked about or run (`tool.before`
    /// hooks): each sees the input the one before let through.
    pub(super) async fn check_input(
        &self,
        turn: &TurnRecord,
        call: &ToolCallRecord,
        workspace: &std::path::Path,
    ) -> InputVerdict {
        let view = view!(self, turn);
        let mut input = call.input.clone();
        for feature in &self.features {
            match feature.check_input(&view, call, input, workspace).await {
                InputVerdict::Allow(next) => input = next,
                deny => return deny,
            }
        }
        InputVerdict::Allow(input)
    }

    /// Settles every unsettled call of the turn. Returns `Some` when the turn parks or ends.
    pub(in crate::engine) async fn settle_calls(
        &mut self,
        turn: &mut TurnRecord,
    ) -> RuntimeResult<Option<TurnEnd>> {
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
        let mut asks: Vec<(ToolCallRecord, String, Option<AskAs>)> = Vec::new();
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
        // Calls waiting on a durable timer: the earliest due time, and the timers' rows.
        let mut timer: Option<i64> = None;
        let mut timer_writes = Batch::new();
        let mut reviews: Vec<ToolCallRecord> = Vec::new();
        for call in calls {
            let decision = match self.decide(turn, &call).await? {
                Decision::Builtin(index) => {
                    let view = view!(self, &*turn);
                    Decision::Answered(self.features[index].call_builtin(&view, &call).await?)
                }
                other => other,
            };
            match decision {
                Decision::Settle(status, output) => {
                    if call.kind == "load-skill" && status == CallStatus::Completed {
                        let name = call.input["name"].as_str().unwrap_or_default().to_owned();
                        if !self.session.loaded_skills.contains(&name) {
                            self.session.loaded_skills.push(name);
                        }
                    }
                    let mut batch = Batch::new();
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
                    asks.push((call, prompt, None));
                }
                Decision::Review(input) => {
                    let mut call = call;
                    if let Some(input) = input {
                        call.input = input;
                    }
                    reviews.push(call);
                }
                // A built-in tool's call was answered above.
                Decision::Builtin(_) => {}
                Decision::Answered(handled) => match handled {
                    Handled::Settle {
                        status,
                        output,
                        mut writes,
                    } => {
                        let message =
                            self.settle_into(&mut writes, turn, step, call, status, output, None)?;
                        inline.push((writes, message));
                    }
                    Handled::Ask { prompt, request } => asks.push((call, prompt, request)),
                    Handled::Wait => waits = true,
                    Handled::WaitUntil { at_ms, writes } => {
                        waits = true;
                        timer = Some(timer.map_or(at_ms, |t: i64| t.min(at_ms)));
                        timer_writes.ops.extend(writes.ops);
                    }
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
            descendant_pending(self.rt, &turn.session_id).await?
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
        if !pending.is_empty() || timer.is_some() {
            // Parks on a principal's answer (`turn.waiting {on: "input"}`), or on a timer: the
            // call stays running on the stream, and no driver waits for it.
            batch.ops.extend(timer_writes.ops);
            // A sign-in was announced by its own `authorization.required`.
            let asked: Vec<InputRequestRecord> = pending
                .iter()
                .filter(|r| r.kind != crate::mcp::oauth::user::REQUEST_KIND)
                .cloned()
                .collect();
            if !asked.is_empty() {
                batch.event(
                    self.id(),
                    ev::INPUT_REQUESTED,
                    ev::input_requested(turn, step, &asked),
                );
            }
            if was_tools {
                turn.step_index += 1;
                turn.step_started = false;
            }
            turn.phase = TurnPhase::Waiting;
            turn.status = TurnStatus::Waiting;
            self.session.status = SessionStatus::Waiting;
            if !pending.is_empty() {
                batch.event(
                    self.id(),
                    ev::TURN_WAITING,
                    ev::turn_waiting(turn, &self.session.usage),
                );
            }
            batch
                .push(Op::PutTurn(turn.clone()))
                .push(Op::UpdateSession(self.session.clone()));
            let batch = self.with_held(batch);
            self.rt.commit(batch).await?;
            if let Some(at) = timer {
                self.rt.wake_at(self.id(), at);
            }
            return Ok(Some(TurnEnd::Parked(pending)));
        }
        if self.ends_turn(turn, &batch).await? {
            // A call of a tool with `ends_turn` succeeded: the turn ends here, with no reply.
            if !was_tools && turn.step_started {
                // The step a resumed turn started settles without a model call.
                batch.event(
                    self.id(),
                    ev::STEP_COMPLETED,
                    ev::step_completed(
                        turn,
                        turn.step_index,
                        "tool-calls",
                        ev::step_usage(&Default::default()),
                    ),
                );
            }
            if was_tools {
                turn.step_index += 1;
            }
            turn.step_started = false;
            turn.phase = TurnPhase::Done;
            turn.status = TurnStatus::Completed;
            turn.ended_at = Some(now_ms());
            self.session.status = SessionStatus::Idle;
            batch
                .event(self.id(), ev::TURN_COMPLETED, ev::turn_completed(turn))
                .event(
                    self.id(),
                    ev::SESSION_WAITING,
                    ev::session_waiting(&self.session.id, &self.session.usage),
                )
                .push(Op::PutTurn(turn.clone()))
                .push(Op::UpdateSession(self.session.clone()));
            let batch = self.with_held(batch);
            self.rt.commit(batch).await?;
            self.context = None;
            return Ok(Some(TurnEnd::Finished));
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

    /// Whether the calls of the turn's last model step are settled and one of them, of a tool
    /// with `ends_turn` (or the built-in `no_reply`), succeeded. Read from the stored calls, so a
    /// turn resumed after a crash decides the same.
    /// `pending` holds writes not committed yet (calls settled without running go out with the
    /// step's last commit): they count as stored.
    async fn ends_turn(&mut self, turn: &TurnRecord, pending: &Batch) -> RuntimeResult<bool> {
        let agent = &self.build.manifest.agent;
        if !agent.config.no_reply && !self.build.tools.iter().any(|t| t.ends_turn) {
            return Ok(false);
        }
        let mut calls = self.rt.inner.store.tool_calls(self.id(), turn.seq).await?;
        let unsent = self
            .held
            .iter()
            .flat_map(|b| b.ops.iter())
            .chain(pending.ops.iter());
        for op in unsent {
            if let Op::PutToolCall(call) = op {
                match calls.iter_mut().find(|c| c.call_id == call.call_id) {
                    Some(stored) => *stored = call.clone(),
                    None => calls.push(call.clone()),
                }
            }
        }
        let Some(last) = calls.iter().map(|c| c.step_index).max() else {
            return Ok(false);
        };
        let last: Vec<&ToolCallRecord> = calls.iter().filter(|c| c.step_index == last).collect();
        if last.iter().any(|c| !c.status.is_terminal()) {
            return Ok(false);
        }
        for call in last {
            if call.status == CallStatus::Completed
                && call.kind != "load-skill"
                && self
                    .policy_of(turn, &call.name, &call.input)
                    .is_some_and(|t| t.ends_turn)
            {
                return Ok(true);
            }
        }
        Ok(false)
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
    pub(super) async fn settle_with(
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
        self.rt.observe_work(TurnWork::ToolSettled {
            session: &turn.session_id,
            seq: turn.seq,
            call: &call,
        });
        let (content, attachments) = crate::tools::content::for_model(&output);
        let message = Message::Tool {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            content,
            is_error: call.is_error,
            attachments,
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
