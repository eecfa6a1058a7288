//! Running one call: its `tool.before` verdict, the process (a build tool, an MCP server's
//! tool, a catalogue call, a dynamic tool's provider) or the subagent it stands for, under the
//! turn's deadline and cancellation, and its result journaled (redacted, fitted to the window,
//! with what the features add).

use std::time::Duration;

use eve_compile::{Effect, Tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::limits::sleep_until_opt;
use super::seam::InputVerdict;
use super::tools::Target;
use super::{TurnDriver, content_for_model, view};
use crate::engine::events as ev;
use crate::engine::{Runtime, RuntimeResult};
use crate::features::subagents;
use crate::model::Message;
use crate::store::*;
use crate::tools::{ToolContext, ToolResult};

impl TurnDriver<'_> {
    /// Runs (or reconnects to) the child session of a subagent call. `None` when the child parked
    /// on input: the call stays running and the parent turn parks on the child's requests.
    async fn run_subagent(
        &self,
        turn: &TurnRecord,
        step: u64,
        mut call: ToolCallRecord,
        sub: &eve_compile::Agent,
    ) -> RuntimeResult<Option<(u64, Message)>> {
        let view = view!(self, turn);
        let wait = match subagents::start(&view, &mut call, sub).await? {
            subagents::Start::Waiting(wait) => wait,
            subagents::Start::Send(wait, writes) => {
                self.rt.commit(writes).await?;
                wait
            }
            subagents::Start::Refused(message) => {
                return self
                    .settle(turn, step, call, CallStatus::Failed, json!(message), None)
                    .await
                    .map(Some);
            }
        };
        match subagents::await_child(&view, &wait, sub).await? {
            Some((status, output)) => self
                .settle(turn, step, call, status, output, None)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    pub(in crate::engine) fn workspace(&self) -> RuntimeResult<std::path::PathBuf> {
        super::workspace_of(self.rt, &self.build, &self.session.id)
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
                .check_input(turn, &resolved.as_called(&call), &workspace)
                .await;
            match verdict {
                InputVerdict::Allow(input) => call.input = resolved.with_input(&call.input, input),
                InputVerdict::Deny(reason) => {
                    return self
                        .settle(turn, step, call, CallStatus::Denied, json!(reason), None)
                        .await
                        .map(Some);
                }
            }
        }
        // A feature may run the call another way (a task started in the background).
        {
            let view = view!(self, turn);
            for feature in &self.features {
                if let Some(taken) = feature.take_call(&view, &call).await? {
                    return self
                        .settle_with(
                            taken.writes,
                            turn,
                            step,
                            call,
                            taken.status,
                            taken.output,
                            None,
                        )
                        .await
                        .map(Some);
                }
            }
        }
        let tool = &resolved.policy;
        if let Target::Subagent(sub) = &resolved.target {
            return self.run_subagent(turn, step, call, sub).await;
        }
        // What the call is given; features add to it (its state) and may hold something (the
        // lock over that state) until the call is settled, before it is marked running.
        let mut input = resolved.run_input(&call.input);
        let mut held = Vec::new();
        if let Target::Build(build_tool) = &resolved.target {
            let view = view!(self, turn);
            for feature in &self.features {
                if let Some(kept) = feature
                    .before_run(&view, &call, build_tool, &mut input)
                    .await?
                {
                    held.push(kept);
                }
            }
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
            Target::Build(tool) if crate::tools::needs_files(tool) => self.build.files(),
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
            Target::Build(tool) => agent.effective_sandbox(tool),
            Target::Dynamic(_, provider) => agent.effective_sandbox(provider),
            _ => None,
        };
        let mut ctx = super::tool_context(
            self.rt,
            &self.build,
            &self.session.id,
            call.call_id.clone(),
            call.idempotency_key.clone(),
            workspace,
            agent_dir,
            effective,
        );
        ctx.traceparent = self
            .rt
            .telemetry()
            .and_then(|t| t.traceparent_for_call(&turn.session_id, turn.seq, &call.call_id));
        ctx.principal = self.session.owner.clone();
        ctx.network = match &resolved.target {
            Target::Build(tool) => agent
                .sandbox
                .tools
                .get(&tool.name)
                .and_then(|own| own.network.clone()),
            _ => None,
        };
        // A script tool's progress lines stream as `action.partial` while it runs.
        let (progress, mut reports) = tokio::sync::mpsc::channel::<String>(32);
        if matches!(resolved.target, Target::Build(_) | Target::Dynamic(..)) {
            ctx.progress = Some(progress);
        } else {
            drop(progress);
        }
        let token = self.cancel.child_token();
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send + '_>> =
            match &resolved.target {
                Target::Build(tool) => {
                    Box::pin(self.rt.run_tool(tool, &input, &ctx, token.clone()))
                }
                Target::Mcp(manager) => {
                    let (manager, name, input, token, traceparent) = (
                        manager.clone(),
                        call.name.clone(),
                        input.clone(),
                        token.clone(),
                        ctx.traceparent.clone(),
                    );
                    // A user-scoped connection acts with the token of the session's principal.
                    let owner = self.session.owner.clone();
                    Box::pin(async move {
                        let scope = crate::mcp::CallScope {
                            principal: owner.as_deref(),
                            traceparent: traceparent.as_deref(),
                        };
                        manager.call(&name, input, token, scope).await
                    })
                }
                Target::Catalogue(manager) => {
                    let (manager, name, input, token, traceparent) = (
                        manager.clone(),
                        call.name.clone(),
                        input.clone(),
                        token.clone(),
                        ctx.traceparent.clone(),
                    );
                    let owner = self.session.owner.clone();
                    Box::pin(async move {
                        let scope = crate::mcp::CallScope {
                            principal: owner.as_deref(),
                            traceparent: traceparent.as_deref(),
                        };
                        manager
                            .call_catalogue(&name, input, token, scope)
                            .await
                            .unwrap_or_else(|| {
                                ToolResult::failure("not a catalogue tool", Duration::ZERO)
                            })
                    })
                }
                Target::Dynamic(record, provider) => Box::pin(run_dynamic(
                    self.rt,
                    record,
                    provider,
                    &input,
                    ctx.clone(),
                    token.clone(),
                )),
                Target::Subagent(_) => Box::pin(async {
                    ToolResult::failure("a subagent call cannot run as a tool", Duration::ZERO)
                }),
            };
        let mut run = run;
        let deadline = self.deadline(turn);
        let work = async {
            tokio::select! {
                r = &mut run => r,
                () = sleep_until_opt(deadline) => { token.cancel(); run.await }
            }
        };
        tokio::pin!(work);
        let result: ToolResult = loop {
            tokio::select! {
                r = &mut work => break r,
                Some(label) = reports.recv() => {
                    let mut partial = Batch::new();
                    partial.event(self.id(), ev::ACTION_PARTIAL, self.partial(turn, step, &call, label));
                    self.rt.commit(partial).await?;
                }
            }
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
        // What a feature takes out of a successful result (state updates) goes with it, or fails
        // the call.
        let mut taken = Batch::new();
        let mut refused = None;
        let mut result = result;
        if result.ok
            && let Target::Build(build_tool) = &resolved.target
        {
            let view = view!(self, turn);
            for feature in &self.features {
                let verdict = feature
                    .after_run(&view, &call, build_tool, &mut result.output, &mut taken)
                    .await?;
                if let Err(why) = verdict {
                    refused = Some(why);
                    break;
                }
            }
        }
        if let Some(why) = refused {
            taken = Batch::new();
            result.ok = false;
            result.error = Some(why);
            result.output = Value::Null;
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
        if result.ok {
            // Images and files a tool returned go to the workspace first; the result keeps
            // references (`tools::content`).
            crate::tools::content::stage_files(&mut output, &ctx.workspace);
        }
        self.rt.secrets().redact_json(&mut output);
        let output = self.fit_output(&call, output, &ctx).await;
        // A refused input is the caller's mistake, not a failure of the tool.
        let mut batch = taken;
        // Progress reported just before the end goes out with the result, before it.
        while let Ok(label) = reports.try_recv() {
            batch.event(
                self.id(),
                ev::ACTION_PARTIAL,
                self.partial(turn, step, &call, label),
            );
        }
        if !result.input_refused {
            let view = view!(self, turn);
            for feature in &self.features {
                feature
                    .call_ran(&view, &tool.name, result.ok, &mut batch)
                    .await?;
            }
        }
        // Refused destinations are events, committed with the result that reports them.
        for refused in &result.refused {
            batch.event(
                self.id(),
                ev::EGRESS_REFUSED,
                ev::egress_refused(turn, step, &call, refused),
            );
        }
        let settled = self
            .settle_with(batch, turn, step, call, status, output, None)
            .await
            .map(Some);
        // The call's result is committed: what the features held for it is let go.
        drop(held);
        settled
    }

    /// The data of one `action.partial` of `call`: its progress `label`, redacted.
    fn partial(&self, turn: &TurnRecord, step: u64, call: &ToolCallRecord, label: String) -> Value {
        let mut label = Value::String(label);
        self.rt.secrets().redact_json(&mut label);
        ev::action_partial(turn, step, call, &label)
    }
}

/// Runs a call of a dynamic tool: its provider script, on the build it was resolved on.
async fn run_dynamic(
    rt: &Runtime,
    record: &DynamicToolRecord,
    provider: &Tool,
    input: &Value,
    mut ctx: ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    ctx.agent_dir = match rt.inner.builds.unpack(&record.build_hash) {
        Ok(dir) => dir,
        Err(e) => return ToolResult::failure(e.to_string(), Duration::ZERO),
    };
    let payload = json!({"tool": record.name, "input": input});
    rt.run_tool(provider, &payload, &ctx, cancel).await
}
