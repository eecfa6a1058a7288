//! The opt-in built-in `sleep` (`default_tools: {sleep: true}`): a durable, bounded wait.
//!
//! A call `{seconds}` (eve's input) writes a timer ([`crate::features::tasks::timers`]) in the
//! commit that parks the turn on it ([`Handled::WaitUntil`]): no driver waits, the runtime wakes
//! the turn when the timer is due ([`crate::engine::Runtime::wake_at`]), and a process that
//! stopped meanwhile finds the parked turn again at start-up (or another node of a fleet does)
//! and parks it again until then ([`TurnExtension::parked_until`]). Once due, the call settles
//! with eve's result, `{"waitedSeconds": …}` (how long it slept, at least what was asked), and
//! its timer goes in the same commit, so it settles once.
//!
//! A steering message (the default for a message arriving mid-turn) ends the wait early with
//! eve's text, `Stopped early because a new message arrived.`; cancelling the turn ends it too
//! (the call is cancelled and its timer removed with the turn's end). A wait longer than
//! `limits.max_sleep_seconds` (default [`eve_compile::DEFAULT_MAX_SLEEP_SECONDS`]) is refused
//! with `SLEEP_TOO_LONG`.

use async_trait::async_trait;
use eve_compile::{Agent, Approval, DEFAULT_MAX_SLEEP_SECONDS, Effect, SLEEP_TOOL};
use serde_json::{Value, json};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Builtin, Handled, TurnExtension, TurnView};
use crate::features::tasks::timers::{self, Timer};
use crate::features::turn_input::{MessagePolicy, TurnInput};
use crate::model::ToolSpec;
use crate::store::{Batch, CallStatus, ToolCallRecord, now_ms};

/// The refusal code of a wait longer than the agent allows.
pub const SLEEP_TOO_LONG: &str = "SLEEP_TOO_LONG";
/// eve's text for a wait a new message ended early.
pub const INTERRUPTED: &str = "Stopped early because a new message arrived.";

const DESCRIPTION: &str = "Wait for a specified amount of time before continuing. Use this when a \
     process or condition needs time to change before it is useful to check its progress or \
     status again.";

/// Whether `agent` is offered `sleep`: it is on in `default_tools` and no tool of its own takes
/// the name.
pub(crate) fn enabled(agent: &Agent) -> bool {
    agent.runs_builtin(SLEEP_TOOL)
}

/// The longest wait `agent` allows, in seconds.
pub(crate) fn max_seconds(agent: &Agent) -> u64 {
    agent
        .config
        .limits
        .max_sleep_seconds
        .unwrap_or(DEFAULT_MAX_SLEEP_SECONDS)
}

/// The tool as the model is offered it (eve's input schema).
pub(crate) fn spec(agent: &Agent) -> ToolSpec {
    ToolSpec {
        name: SLEEP_TOOL.to_owned(),
        description: format!(
            "{DESCRIPTION} Waits of up to {} seconds are allowed.",
            max_seconds(agent)
        ),
        input_schema: json!({
            "type": "object",
            "properties": {"seconds": {"type": "number", "exclusiveMinimum": 0,
                "description": "How long to wait, in seconds."}},
            "required": ["seconds"],
            "additionalProperties": false
        }),
    }
}

/// `sleep` as a feature of the turn.
pub(crate) struct Sleep;

#[async_trait]
impl TurnExtension for Sleep {
    fn name(&self) -> &'static str {
        "sleep"
    }

    fn builtins(&self, view: &TurnView<'_>) -> Vec<Builtin> {
        let agent = &view.build.manifest.agent;
        let approval = agent
            .config
            .approvals
            .get(SLEEP_TOOL)
            .copied()
            .unwrap_or(Approval::Never);
        vec![Builtin {
            name: SLEEP_TOOL.to_owned(),
            policy: Some(crate::features::subagents::synthetic_tool(
                SLEEP_TOOL,
                DESCRIPTION,
                spec(agent).input_schema,
                approval,
                eve_compile::default_tool_effect(SLEEP_TOOL).unwrap_or(Effect::Read),
            )),
        }]
    }

    async fn call_builtin(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        let now = now_ms();
        if let Some(timer) = timers::of_call(view.rt, view.id(), &call.call_id).await? {
            let mut writes = Batch::new();
            if timer.due(now) {
                timers::remove(&mut writes, view.id(), &call.call_id);
                return Ok(Handled::Settle {
                    status: CallStatus::Completed,
                    output: json!({"waitedSeconds": waited(&timer, now)}),
                    writes,
                });
            }
            if steering_pending(view).await? {
                timers::remove(&mut writes, view.id(), &call.call_id);
                return Ok(Handled::Settle {
                    status: CallStatus::Completed,
                    output: json!(INTERRUPTED),
                    writes,
                });
            }
            return Ok(Handled::WaitUntil {
                at_ms: timer.due_ms,
                writes,
            });
        }
        let Some(seconds) = call
            .input
            .get("seconds")
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite() && *s > 0.0)
        else {
            return Ok(Handled::settle(
                CallStatus::Failed,
                json!({"code": "INVALID_INPUT",
                       "message": "`seconds` must be a number of seconds greater than 0"}),
            ));
        };
        let max = max_seconds(&view.build.manifest.agent);
        if seconds > max as f64 {
            return Ok(Handled::settle(
                CallStatus::Failed,
                json!({"code": SLEEP_TOO_LONG,
                       "message": format!(
                           "cannot sleep {seconds} seconds: this agent sleeps at most {max} seconds \
                            at a time (limits.max_sleep_seconds). Sleep for less, and again if \
                            you still need to wait.")}),
            ));
        }
        if view.cancel.is_cancelled() {
            return Ok(Handled::settle(
                CallStatus::Cancelled,
                json!("The turn was cancelled before the wait began."),
            ));
        }
        // Whole milliseconds, rounded up: never shorter than asked.
        let millis = (seconds * 1000.0).ceil() as i64;
        let timer = Timer {
            call_id: call.call_id.clone(),
            turn_seq: view.turn.seq,
            kind: SLEEP_TOOL.to_owned(),
            seconds,
            started_at: now,
            due_ms: now.saturating_add(millis),
        };
        let mut writes = Batch::new();
        timers::put(&mut writes, view.id(), &timer)?;
        Ok(Handled::WaitUntil {
            at_ms: timer.due_ms,
            writes,
        })
    }

    async fn parked_until(&self, view: &TurnView<'_>) -> RuntimeResult<Option<i64>> {
        let now = now_ms();
        let mine: Vec<Timer> = timers::read(view.rt, view.id())
            .await?
            .into_iter()
            .filter(|t| t.turn_seq == view.turn.seq && t.kind == SLEEP_TOOL)
            .collect();
        if mine.is_empty() || mine.iter().any(|t| t.due(now)) || steering_pending(view).await? {
            return Ok(None);
        }
        Ok(mine.iter().map(|t| t.due_ms).min())
    }

    async fn turn_ended(
        &mut self,
        view: &TurnView<'_>,
        _unsettled: &[ToolCallRecord],
        writes: &mut Batch,
    ) -> RuntimeResult<()> {
        for timer in timers::read(view.rt, view.id()).await? {
            if timer.kind == SLEEP_TOOL {
                timers::remove(writes, view.id(), &timer.call_id);
            }
        }
        Ok(())
    }
}

/// How long a due timer slept, in seconds (at least what was asked; to the millisecond).
fn waited(timer: &Timer, now: i64) -> f64 {
    let slept = (now - timer.started_at).max(0) as f64 / 1000.0;
    slept.max(timer.seconds)
}

/// Whether a message waits in the session's inbox that steers into the running turn (its own
/// `turnPolicy`, else the agent's).
async fn steering_pending(view: &TurnView<'_>) -> RuntimeResult<bool> {
    let agent_steers =
        view.build.manifest.agent.config.turn_policy == eve_compile::TurnPolicy::Steer;
    let inbox = view.rt.inner.store.pending_inbox(view.id()).await?;
    Ok(inbox.iter().any(|m| {
        let input = m
            .input
            .as_ref()
            .map(TurnInput::from_value)
            .unwrap_or_default();
        match input.turn_policy {
            Some(policy) => policy == MessagePolicy::Steer,
            None => agent_steers,
        }
    }))
}
