//! Tasks: work that outlives the step that started it (DESIGN §17, eve's task model).
//!
//! A subagent call is a task. Instead of waiting on its child, the call is settled at once with
//! eve's receipt (`Started task <id>. …`) in the same commit that creates (or finds) the child,
//! puts the message in its inbox and writes the task's row ([`table`]), with `task.started` and,
//! for a new child, `agent.started` on the parent's stream. The child runs in the background: each
//! turn run of the parent drives its working children in tasks of their own (a restarted node
//! picks them up the same way, and the start-up resume drives them too).
//!
//! At every step boundary the parent's driver looks at its working tasks: a child whose turn
//! ended settles its task (`task.settled`), and every settled result not yet delivered becomes
//! one `<task_result id tool status>` user message, in the same commit that marks it delivered:
//! exactly once, whatever restarts. Each model request also carries the `[Tasks]` note (what works,
//! what idles) and the system block that explains tasks.
//!
//! When the model answers while tasks work, the turn does not end: `turn.waiting {on: "tasks"}`,
//! and the next step waits ([`TurnExtension::hold`]) until a result arrives, a new message steers
//! in, or the turn is cancelled; a child that parks on an approval parks the parent on it (the
//! root shows the request). The built-ins `task_wait` (one result, or a timeout) and
//! `task_cancel` (stop a task; it never reports back) are offered with subagents.
//!
//! A task's timeout is a durable timer in its row (the subagent's `limits.max_turn_seconds`):
//! whichever node drives the parent when it passes settles the task `timed_out` and cancels the
//! child, once, under the parent's lease. A turn that stops early (cancelled, failed) cancels its
//! working tasks and, through their own turns' ends, their children.

pub(crate) mod table;
pub(crate) mod timers;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eve_compile::{Approval, Effect};
use serde_json::{Value, json};

use self::table::{TASK_CANCEL, TASK_WAIT, TaskRecord};
use crate::engine::events as ev;
use crate::engine::turn::seam::{
    AnswerVerdict, Builtin, Handled, Hold, Shaped, StepStart, Taken, TurnExtension, TurnView,
};
use crate::engine::{Runtime, RuntimeResult};
use crate::features::subagents::{self, ChildEnd};
use crate::model::{Message, ModelRequest, ToolSpec};
use crate::store::*;

/// eve's names of the two built-ins, answered as well (not offered).
const EVE_TASK_WAIT: &str = "eve__task_wait";
const EVE_TASK_CANCEL: &str = "eve__task_cancel";
/// How long one round of a wait sleeps before it looks again.
const POLL: Duration = Duration::from_millis(100);
/// How long a hold waits before it lets the core read the cancel flag again.
const HOLD_ROUND: Duration = Duration::from_secs(1);
/// The longest `task_wait` timeout (seconds).
const MAX_WAIT_SECONDS: u64 = 3_600;

/// Whether `agent` runs tasks: it has subagents it can call.
pub(crate) fn enabled(agent: &eve_compile::Agent) -> bool {
    let reflect = agent.config.strategy == eve_compile::Strategy::Reflect;
    agent
        .subagents
        .iter()
        .any(|s| !(reflect && s.name == "critic"))
}

/// The specs of `task_wait` and `task_cancel`.
pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: TASK_WAIT.to_owned(),
            description: "Call task_wait sparingly, only when you deliberately want to withhold a \
                message from the user while waiting for a task result. Tasks keep running and their \
                results reach you without calling task_wait. If the user should hear from you now, \
                reply instead. Wait silently until any of your tasks has a result, a new message \
                arrives, or timeoutSeconds pass. It returns after the first result, which follows \
                in a <task_result> message; wait again only if you still want to withhold a reply \
                until another result arrives. Waiting never stops a task."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {"timeoutSeconds": {"type": "integer", "minimum": 1,
                    "description": "Optional. Seconds to wait before returning without a result. Omit it to wait for a result or a new message, which is almost always right."}},
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: TASK_CANCEL.to_owned(),
            description: "Stop a task's current work. That work never reports back; if it already \
                had a result, that result is still delivered. An agent stays available: call its \
                tool with its task_id to give it new work."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {"taskId": {"type": "string", "minLength": 1,
                    "description": "The id of the task to stop, copied from its \"Started task\" receipt or the [Tasks] note."}},
                "required": ["taskId"],
                "additionalProperties": false
            }),
        },
    ]
}

/// Tasks as a feature of the turn.
#[derive(Default)]
pub(crate) struct Tasks {
    /// Children this turn run drives in the background: when each drive was started, and
    /// whether it is still going.
    runs: Mutex<HashMap<String, (Instant, tokio::task::JoinHandle<()>)>>,
    /// Requests of children already shown on this session's stream while the turn is held.
    announced: HashSet<String>,
    /// Tasks this turn run started, not yet read back from the table: calls of one step start
    /// their tasks one at a time, each counting the others against the limit.
    started: tokio::sync::Mutex<HashSet<String>>,
}

#[async_trait]
impl TurnExtension for Tasks {
    fn name(&self) -> &'static str {
        "tasks"
    }

    async fn take_call(
        &self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Option<Taken>> {
        let agent = &view.build.manifest.agent;
        let Some(sub) = agent.subagent(&call.name) else {
            return Ok(None);
        };
        if !enabled(agent)
            || (agent.config.strategy == eve_compile::Strategy::Reflect && sub.name == "critic")
        {
            return Ok(None);
        }
        // A call that waits on its child from before tasks reconnects the old way.
        if view
            .rt
            .inner
            .store
            .subagent_call(view.id(), view.turn.seq, &call.call_id)
            .await?
            .is_some()
        {
            return Ok(None);
        }
        let mut started = self.started.lock().await;
        let taken = start(view, call, sub, &started).await?;
        if taken.status == CallStatus::Completed
            && let Some(id) = taken.started.clone()
        {
            started.insert(id);
        }
        Ok(Some(taken.taken))
    }

    async fn prepare_step(
        &mut self,
        view: &TurnView<'_>,
        start: &mut StepStart,
    ) -> RuntimeResult<()> {
        let mut tasks = table::read(view).await?;
        if tasks.is_empty() {
            return Ok(());
        }
        settle_ended(view, &mut tasks, &mut start.before).await?;
        if deliver(view, &mut tasks, &mut start.before)? {
            start.context_replaced = true;
        }
        self.ensure_running(view.rt, &tasks);
        Ok(())
    }

    async fn hold(&mut self, view: &TurnView<'_>) -> RuntimeResult<Hold> {
        if !answered_last(view.context) {
            return Ok(Hold::Go);
        }
        let mut tasks = table::read(view).await?;
        if !tasks.iter().any(|t| t.working) || tasks.iter().any(TaskRecord::undelivered) {
            return Ok(Hold::Go);
        }
        if steers(view)
            && !view
                .rt
                .inner
                .store
                .pending_inbox(view.id())
                .await?
                .is_empty()
        {
            return Ok(Hold::Go);
        }
        let mut writes = Batch::new();
        if settle_ended(view, &mut tasks, &mut writes).await? {
            return Ok(Hold::Wait(writes));
        }
        self.ensure_running(view.rt, &tasks);
        let pending = crate::engine::drive::descendant_pending(view.rt, view.id()).await?;
        if !pending.is_empty() {
            if parks(view.rt, &tasks).await? {
                return Ok(Hold::Park(pending));
            }
            let fresh: Vec<InputRequestRecord> = pending
                .into_iter()
                .filter(|r| self.announced.insert(r.id.clone()))
                .collect();
            if !fresh.is_empty() {
                writes.event(
                    view.id(),
                    ev::INPUT_REQUESTED,
                    ev::input_requested(view.turn, view.turn.step_index, &fresh),
                );
            }
        }
        let until = Instant::now() + HOLD_ROUND;
        wait_round(view, &tasks, Some(until)).await?;
        Ok(Hold::Wait(writes))
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        request.system.push_str("\n\n");
        request.system.push_str(&table::system_block());
        let tasks = table::read(view).await?;
        if let Some(note) = table::note(&tasks) {
            request.messages.push(Message::user(note));
        }
        Ok(Shaped::Call)
    }

    fn builtins(&self, view: &TurnView<'_>) -> Vec<Builtin> {
        if !enabled(&view.build.manifest.agent) {
            return Vec::new();
        }
        [
            (TASK_WAIT, Effect::Read),
            (EVE_TASK_WAIT, Effect::Read),
            (TASK_CANCEL, Effect::Idempotent),
            (EVE_TASK_CANCEL, Effect::Idempotent),
        ]
        .into_iter()
        .map(|(name, effect)| Builtin {
            name: name.to_owned(),
            policy: Some(subagents::synthetic_tool(
                name,
                "",
                json!({"type": "object"}),
                Approval::Never,
                effect,
            )),
        })
        .collect()
    }

    async fn call_builtin(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        match call.name.as_str() {
            TASK_WAIT | EVE_TASK_WAIT => self.task_wait(view, call).await,
            _ => task_cancel(view, call).await,
        }
    }

    async fn final_answer(
        &mut self,
        view: &TurnView<'_>,
        _answer: &str,
    ) -> RuntimeResult<AnswerVerdict> {
        let tasks = table::read(view).await?;
        if tasks.iter().any(|t| t.working || t.undelivered()) {
            return Ok(AnswerVerdict::Hold(vec![(
                ev::TURN_WAITING,
                ev::turn_waiting_on(view.turn, &view.session.usage, "tasks"),
            )]));
        }
        Ok(AnswerVerdict::Accept(Vec::new()))
    }

    async fn turn_ended(
        &mut self,
        view: &TurnView<'_>,
        _unsettled: &[ToolCallRecord],
        writes: &mut Batch,
    ) -> RuntimeResult<()> {
        let reason = if view.cancel.is_cancelled() || view.session.cancel_requested {
            "turn_cancelled"
        } else {
            "turn_ended"
        };
        let tasks = table::read(view).await?;
        for mut task in tasks.into_iter().filter(|t| t.working) {
            stop_child(view.rt, &task, writes).await?;
            task.working = false;
            task.status = Some("cancelled".to_owned());
            task.cancel_reason = Some(reason.to_owned());
            task.delivered = true;
            task.output = Value::Null;
            table::put(writes, view.id(), &task)?;
            writes.event(view.id(), ev::TASK_SETTLED, task.settled_event());
        }
        Ok(())
    }
}

impl Tasks {
    /// Starts a drive of every working task's child that nothing in this turn run drives.
    fn ensure_running(&self, rt: &Runtime, tasks: &[TaskRecord]) {
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        for task in tasks.iter().filter(|t| t.working) {
            let again = match runs.get(&task.child_id) {
                None => true,
                Some((at, handle)) => handle.is_finished() && at.elapsed() >= POLL * 2,
            };
            if again {
                let rt = rt.clone();
                let child = task.child_id.clone();
                let handle = tokio::spawn(async move {
                    if let Err(e) = rt.drive(&child).await {
                        tracing::warn!(session = %child, error = %e, "cannot drive the task's child");
                    }
                });
                runs.insert(task.child_id.clone(), (Instant::now(), handle));
            }
        }
    }

    /// `task_wait`: until a task settles, a new message arrives or the timeout passes. A child
    /// parked on input parks the call (the turn shows the child's request).
    async fn task_wait(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        let seconds = call
            .input
            .get("timeoutSeconds")
            .or_else(|| call.input.get("timeout_seconds"))
            .and_then(Value::as_u64)
            .map(|s| s.clamp(1, MAX_WAIT_SECONDS));
        let began = Instant::now();
        let until = seconds.map(|s| began + Duration::from_secs(s));
        loop {
            let mut tasks = table::read(view).await?;
            let mut writes = Batch::new();
            settle_ended(view, &mut tasks, &mut writes).await?;
            let settled: Vec<&TaskRecord> = tasks.iter().filter(|t| t.undelivered()).collect();
            let working: Vec<&TaskRecord> = tasks.iter().filter(|t| t.working).collect();
            let waited = began.elapsed().as_secs();
            let answer = if !settled.is_empty() || working.is_empty() {
                Some(table::wait_answer(&settled, &working))
            } else if !view
                .rt
                .inner
                .store
                .pending_inbox(view.id())
                .await?
                .is_empty()
            {
                Some(table::wait_interrupted(waited, working.len()))
            } else if until.is_some_and(|u| Instant::now() >= u) {
                Some(table::wait_timed_out(waited, working.len()))
            } else if view.cancel.is_cancelled() {
                return Ok(Handled::settle(
                    CallStatus::Cancelled,
                    json!("The turn was cancelled while waiting."),
                ));
            } else {
                None
            };
            if let Some(text) = answer {
                return Ok(Handled::Settle {
                    status: CallStatus::Completed,
                    output: json!(text),
                    writes,
                });
            }
            self.ensure_running(view.rt, &tasks);
            if !crate::engine::drive::descendant_pending(view.rt, view.id())
                .await?
                .is_empty()
                && parks(view.rt, &tasks).await?
            {
                return Ok(Handled::Wait);
            }
            wait_round(view, &tasks, until).await?;
        }
    }
}

/// Whether the last message of the context is the model's answer without calls (the turn went
/// on only because tasks held it).
fn answered_last(context: &[Message]) -> bool {
    matches!(context.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty())
}

/// Whether new messages steer into the running turn.
fn steers(view: &TurnView<'_>) -> bool {
    view.build.manifest.agent.config.turn_policy == eve_compile::TurnPolicy::Steer
}

/// Whether the turn may park on its children's requests: every working child is parked and no
/// task has a timer that must fire.
async fn parks(rt: &Runtime, tasks: &[TaskRecord]) -> RuntimeResult<bool> {
    for task in tasks.iter().filter(|t| t.working) {
        if task.deadline_ms.is_some() {
            return Ok(false);
        }
        let status = rt
            .inner
            .store
            .session(&task.child_id)
            .await?
            .map(|s| s.status);
        if status == Some(SessionStatus::Running) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Sleeps one round (until `until` at most, or the next task timer, or the turn's cancel).
async fn wait_round(
    view: &TurnView<'_>,
    tasks: &[TaskRecord],
    until: Option<Instant>,
) -> RuntimeResult<()> {
    let mut nap = POLL;
    if let Some(u) = until {
        nap = nap.min(u.saturating_duration_since(Instant::now()));
    }
    if let Some(next) = tasks.iter().filter_map(|t| t.deadline_ms).min() {
        let left = u64::try_from(next.saturating_sub(now_ms())).unwrap_or(0);
        nap = nap.min(Duration::from_millis(left));
    }
    tokio::select! {
        () = view.cancel.cancelled() => {}
        () = tokio::time::sleep(nap) => {}
    }
    Ok(())
}

/// Settles the working tasks whose child's turn ended, or whose timer passed (the child is
/// cancelled): each row and its `task.settled` go into `writes`. Whether any settled.
async fn settle_ended(
    view: &TurnView<'_>,
    tasks: &mut [TaskRecord],
    writes: &mut Batch,
) -> RuntimeResult<bool> {
    let mut any = false;
    for task in tasks.iter_mut().filter(|t| t.working) {
        let wait = SubagentCall {
            parent_id: view.id().to_owned(),
            turn_seq: task.turn_seq,
            call_id: task.call_id.clone(),
            child_id: task.child_id.clone(),
            inbox_id: task.inbox_id.clone(),
            task_id: task.id.clone(),
            budget: Budget::default(),
            created_at: task.started_at,
        };
        let (status, output) = match subagents::child_end(view.rt, &wait).await? {
            Some(ChildEnd::Answer(answer)) => ("completed", json!(answer)),
            Some(ChildEnd::Failed(error)) if error.contains("max_turn_seconds") => {
                ("timed_out", json!(error))
            }
            Some(ChildEnd::Failed(error)) => ("failed", json!(error)),
            None => match task.deadline_ms {
                Some(deadline) if now_ms() >= deadline => {
                    stop_child(view.rt, task, writes).await?;
                    (
                        "timed_out",
                        json!(format!(
                            "It ran past its time limit of {}s and was stopped.",
                            (deadline - task.started_at).max(0) / 1000
                        )),
                    )
                }
                _ => continue,
            },
        };
        task.working = false;
        task.status = Some(status.to_owned());
        task.output = output;
        table::put(writes, view.id(), task)?;
        writes.event(view.id(), ev::TASK_SETTLED, task.settled_event());
        any = true;
    }
    Ok(any)
}

/// Delivers every settled result not yet delivered: one `<task_result>` message, and the rows
/// marked delivered, in `writes`. Whether anything was delivered.
fn deliver(
    view: &TurnView<'_>,
    tasks: &mut [TaskRecord],
    writes: &mut Batch,
) -> RuntimeResult<bool> {
    let due: Vec<usize> = (0..tasks.len())
        .filter(|&i| tasks[i].undelivered())
        .collect();
    if due.is_empty() {
        return Ok(false);
    }
    let text = {
        let refs: Vec<&TaskRecord> = due.iter().map(|&i| &tasks[i]).collect();
        table::results(&refs)
    };
    let mut body = serde_json::to_value(Message::user(text))?;
    view.rt.secrets().redact_json(&mut body);
    writes.push(Op::AppendMessage {
        session_id: view.id().to_owned(),
        turn_seq: Some(view.turn.seq),
        kind: MESSAGE_KIND_MESSAGE.to_owned(),
        body,
    });
    for i in due {
        tasks[i].delivered = true;
        table::put(writes, view.id(), &tasks[i])?;
    }
    Ok(true)
}

/// The `consumed_turn` of a message withdrawn from a child's inbox before any turn took it.
const WITHDRAWN: u64 = i64::MAX as u64;

/// Stops a task's child: its running turn is cancelled (whose end cancels its own tasks in turn),
/// and a message no turn of it took yet is withdrawn from its inbox in `writes`, so no turn starts
/// for work nobody will read.
async fn stop_child(rt: &Runtime, task: &TaskRecord, writes: &mut Batch) -> RuntimeResult<()> {
    if rt.inner.store.inbox_turn(&task.inbox_id).await? == Some(None) {
        writes.push(Op::ConsumeInbox {
            id: task.inbox_id.clone(),
            turn_seq: WITHDRAWN,
        });
    }
    if let Err(e) = Box::pin(rt.cancel(&task.child_id)).await {
        tracing::warn!(session = %task.child_id, error = %e, "cannot cancel the task's child");
    }
    Ok(())
}

/// A subagent call started as a task: the child created (or found) and sent the message, the
/// task's row and its events, settled with eve's receipt; or a coded refusal.
struct Started {
    taken: Taken,
    status: CallStatus,
    /// The task it started (or sent more work).
    started: Option<String>,
}

impl From<Taken> for Started {
    fn from(taken: Taken) -> Self {
        Self {
            status: taken.status,
            taken,
            started: None,
        }
    }
}

async fn start(
    view: &TurnView<'_>,
    call: &ToolCallRecord,
    sub: &eve_compile::Agent,
    started: &HashSet<String>,
) -> RuntimeResult<Started> {
    let tasks = table::read(view).await?;
    let asked = call
        .input
        .get("task_id")
        .or_else(|| call.input.get("taskId"))
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty());
    let existing = asked.and_then(|id| tasks.iter().find(|t| t.id == id));
    let refused = |code: &str, message: String| Taken {
        status: CallStatus::Failed,
        output: table::refusal(code, message),
        writes: Batch::new(),
    };
    if let (Some(id), Some(task)) = (asked, existing)
        && task.name != call.name
    {
        return Ok(refused(
            table::UNKNOWN_TASK,
            format!(
                "No task \"{id}\" is available to {}: it may have ended or belong to another tool. \
                 Start a new one by calling {} without task_id.",
                call.name, call.name
            ),
        )
        .into());
    }
    // Working: what the table says, and what this turn run started that it does not show yet.
    let mut ids: Vec<&str> = tasks
        .iter()
        .filter(|t| t.working)
        .map(|t| t.id.as_str())
        .collect();
    for id in started {
        if !tasks.iter().any(|t| &t.id == id) {
            ids.push(id);
        }
    }
    let was_working = asked.is_some_and(|id| ids.contains(&id));
    let mut call = call.clone();
    let (wait, mut writes) = match subagents::start_child(view, &mut call, sub).await? {
        subagents::Start::Send(wait, writes) => (wait, writes),
        subagents::Start::Waiting(wait) => (wait, Batch::durable()),
        subagents::Start::Refused(message) if asked.is_some() => {
            return Ok(refused(table::UNKNOWN_TASK, message).into());
        }
        subagents::Start::Refused(message) => {
            return Ok(Taken {
                status: CallStatus::Failed,
                output: json!(message),
                writes: Batch::new(),
            }
            .into());
        }
    };
    // An id the session does not have was refused above; a call that would start one task too
    // many is refused here (eve checks in that order).
    if !was_working && ids.len() >= table::MAX_WORKING_TASKS {
        return Ok(Taken {
            status: CallStatus::Failed,
            output: table::too_many(&ids),
            writes: Batch::new(),
        }
        .into());
    }
    let now = now_ms();
    let limit = sub.config.limits.max_turn_seconds;
    let task = TaskRecord {
        id: wait.task_id.clone(),
        kind: "agent".to_owned(),
        name: call.name.clone(),
        call_id: call.call_id.clone(),
        turn_seq: view.turn.seq,
        child_id: wait.child_id.clone(),
        inbox_id: wait.inbox_id.clone(),
        working: true,
        status: None,
        output: Value::Null,
        delivered: false,
        cancel_reason: None,
        deadline_ms: limit
            .map(|s| now.saturating_add(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))),
        started_at: existing.map_or(now, |t| t.started_at),
    };
    table::put(&mut writes, view.id(), &task)?;
    writes.event(
        view.id(),
        ev::TASK_STARTED,
        ev::task_started(view.turn, &call.call_id, &task.id, &task.kind, &task.name),
    );
    if asked.is_none() {
        let mut data = ev::agent_started(
            view.turn,
            &call.call_id,
            &task.id,
            &task.name,
            &task.child_id,
        );
        // eve's `agent.started.data.remote.url`: a remote child's target, as configured.
        if let Some(remote) = &sub.remote {
            data["remote"] = json!({"url": remote.url});
        }
        writes.event(view.id(), ev::AGENT_STARTED, data);
    }
    let text = if was_working {
        table::sent_receipt(&task.id)
    } else {
        table::receipt(&task)
    };
    Ok(Started {
        status: CallStatus::Completed,
        started: Some(task.id.clone()),
        taken: Taken {
            status: CallStatus::Completed,
            output: json!(text),
            writes,
        },
    })
}

/// `task_cancel`: stops a working task (it never reports back; a result it already had is still
/// delivered).
async fn task_cancel(view: &TurnView<'_>, call: &ToolCallRecord) -> RuntimeResult<Handled> {
    let id = call
        .input
        .get("taskId")
        .or_else(|| call.input.get("task_id"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tasks = table::read(view).await?;
    let Some(mut task) = tasks.into_iter().find(|t| t.id == id) else {
        return Ok(Handled::settle(
            CallStatus::Failed,
            table::unknown_cancel(id),
        ));
    };
    let was_working = task.working;
    let mut writes = Batch::new();
    if was_working {
        stop_child(view.rt, &task, &mut writes).await?;
        task.working = false;
        task.status = Some("cancelled".to_owned());
        task.cancel_reason = Some("task_cancel".to_owned());
        task.delivered = true;
        task.output = Value::Null;
        table::put(&mut writes, view.id(), &task)?;
        writes.event(view.id(), ev::TASK_SETTLED, task.settled_event());
    }
    Ok(Handled::Settle {
        status: CallStatus::Completed,
        output: json!(table::cancel_answer(&task, was_working)),
        writes,
    })
}
