//! Durable tool state (eve's `defineState`): the named JSON slots `agent.yaml` declares under
//! `state:`, kept per session, read and updated by the agent's script and `run:` tools.
//!
//! The envelope (docs/tools.md, "State"): a tool's stdin is its input object with one more key,
//! `"$state"`, holding every declared slot's current value (its `initial` until first written).
//! A tool updates slots by printing a JSON object with a `"$state"` object of the slots it
//! replaces; that key is taken out of the result before anything keeps or shows it. An update
//! is applied only when the call succeeds, and is written in the commit that settles the call
//! (the seam's batch), so it is journaled with the call: a call interrupted before it settled
//! has written nothing, and is re-run (when its effect allows) on the state it saw the first
//! time; a settled call is never run again, so its update is never applied twice.
//!
//! Calls that use state run one at a time within a session (a lock held from reading the state
//! to the commit that settles the call), so each sees the updates of the one before, as eve's
//! `update(fn)` applies in order. State belongs to one session: the store keeps it under the
//! session's id (`state:<session>` notes), a subagent's session has its own, and no tool
//! names the session it reads: the runtime does.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use eve_compile::{Runner, STATE_KEY, StateSlot, Tool};
use serde_json::{Map, Value};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Held, TurnExtension, TurnView};
use crate::store::{Batch, NoteOp, NoteRecord, Op, ToolCallRecord, now_ms};

/// Whether the agent declares state.
pub(crate) fn enabled(agent: &eve_compile::Agent) -> bool {
    !agent.config.state.is_empty()
}

impl crate::engine::Runtime {
    /// Tests only: this runtime keeps tool state per agent, shared by every session of it, as if
    /// the store were not keyed by session (the protection off), so a test can show one session
    /// reading another's state. No setting reaches it.
    #[doc(hidden)]
    pub fn set_tool_state_shared_for_tests(&self, on: bool) {
        self.inner
            .tool_state_shared
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The notes namespace that holds the state of `view`'s session.
fn namespace(view: &TurnView<'_>) -> String {
    if view
        .rt
        .inner
        .tool_state_shared
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return format!("state:agent:{}", view.session.agent_name);
    }
    namespace_of(&view.session.id)
}

/// The notes namespace that holds the tool state of `session`.
pub(crate) fn namespace_of(session: &str) -> String {
    format!("state:{session}")
}

/// The key of a result that carries `$state` beside a value that is not an object.
const RESULT_KEY: &str = "$result";

/// Whether `tool` runs as a process that reads stdin (a script or a `run:` command).
fn is_process(tool: &Tool) -> bool {
    matches!(tool.runner, Runner::Script { .. } | Runner::Command { .. })
}

/// The current value of every slot of `slots` for `view`'s session.
pub(crate) async fn current(
    view: &TurnView<'_>,
    slots: &BTreeMap<String, StateSlot>,
) -> RuntimeResult<Map<String, Value>> {
    let stored = view.rt.inner.store.notes(&namespace(view)).await?;
    let mut state = Map::new();
    for (name, slot) in slots {
        let value = match stored.iter().find(|n| &n.key == name) {
            // A stored value that does not parse is a damaged read: an error, never the initial.
            Some(note) => serde_json::from_str(&note.text)?,
            None => slot.initial.clone(),
        };
        state.insert(name.clone(), value);
    }
    Ok(state)
}

/// The writes of the updates a tool's result carries, or why they cannot be applied.
pub(crate) fn updates(
    namespace: &str,
    slots: &BTreeMap<String, StateSlot>,
    carried: Value,
) -> Result<Vec<Op>, String> {
    let Value::Object(carried) = carried else {
        return Err(format!(
            "the tool's `{STATE_KEY}` must be an object of state slot names and their new values"
        ));
    };
    let now = now_ms();
    let mut ops = Vec::new();
    for (name, value) in carried {
        let Some(slot) = slots.get(&name) else {
            let known: Vec<&str> = slots.keys().map(String::as_str).collect();
            return Err(format!(
                "the tool updated state slot `{name}`, which agent.yaml `state:` does not \
                 declare (declared: {}); no state was changed",
                known.join(", ")
            ));
        };
        let text = value.to_string();
        if text.len() as u64 > slot.max_bytes {
            return Err(format!(
                "state_too_large: the new value of state slot `{name}` is {} bytes of JSON, over \
                 its cap of {} bytes (`max_bytes`); no state was changed",
                text.len(),
                slot.max_bytes
            ));
        }
        ops.push(Op::Note(NoteOp::Put(NoteRecord {
            namespace: namespace.to_owned(),
            key: name,
            text,
            created_at: now,
            updated_at: now,
        })));
    }
    Ok(ops)
}

/// The state of a turn's tools: the lock that orders the calls that use it.
#[derive(Default)]
pub(crate) struct ToolState {
    lock: Arc<tokio::sync::Mutex<()>>,
}

#[async_trait]
impl TurnExtension for ToolState {
    fn name(&self) -> &'static str {
        "state"
    }

    async fn before_run(
        &self,
        view: &TurnView<'_>,
        _call: &ToolCallRecord,
        tool: &Tool,
        stdin: &mut Value,
    ) -> RuntimeResult<Option<Held>> {
        let slots = &view.build.manifest.agent.config.state;
        let Value::Object(fields) = stdin else {
            return Ok(None);
        };
        if slots.is_empty() || !is_process(tool) {
            return Ok(None);
        }
        let guard = self.lock.clone().lock_owned().await;
        let state = current(view, slots).await?;
        fields.insert(STATE_KEY.to_owned(), Value::Object(state));
        Ok(Some(Box::new(guard)))
    }

    async fn after_run(
        &self,
        view: &TurnView<'_>,
        _call: &ToolCallRecord,
        tool: &Tool,
        output: &mut Value,
        writes: &mut Batch,
    ) -> RuntimeResult<Result<(), String>> {
        let slots = &view.build.manifest.agent.config.state;
        if slots.is_empty() || !is_process(tool) {
            return Ok(Ok(()));
        }
        let Some(carried) = output.as_object_mut().and_then(|o| o.remove(STATE_KEY)) else {
            return Ok(Ok(()));
        };
        // `{"$result": VALUE, "$state": …}`: a result that is not an object, with state.
        if let Some(result) = output
            .as_object_mut()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.remove(RESULT_KEY))
        {
            *output = result;
        }
        match updates(&namespace(view), slots, carried) {
            Ok(ops) => {
                for op in ops {
                    writes.push(op);
                }
                Ok(Ok(()))
            }
            Err(why) => Ok(Err(why)),
        }
    }
}
