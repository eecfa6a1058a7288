//! Hooks: scripts run on events (`hooks/NAME.*` with `events: [...]`).
//!
//! **`tool.before` hooks** run before every tool call, in name order, with
//! `{"event": "tool.before", "session_id", "call_id", "tool", "input"}` on stdin, and answer on
//! stdout `{"decision": "allow"}`, `{"decision": "deny", "reason": "…"}` or
//! `{"decision": "allow", "input": {…}}` (the rewritten input is validated against the tool's schema
//! and journaled as the call's input). They are blocking and fail closed: a hook that exits
//! non-zero, times out or prints anything else denies the call, and the model is told why.
//!
//! **Observe hooks** (any other event type, or `*`) run after the event is stored, at least once,
//! with the event on stdin (`{"id", "index", "sessionId", "type", "data", "meta"}`; the `id` is stable
//! across redeliveries, for de-duplication). Their delivery (cursors, which process delivers,
//! finishing before `eve run` exits) is [`delivery`].
//!
//! Hooks run with the tool protocol's process machinery: own process group, timeout, cleared
//! environment plus the hook's `env:` allowlist and the `EVE_*` variables.

pub mod delivery;

use async_trait::async_trait;
use eve_compile::{Agent, Hook, Tool};
use serde_json::{Value, json};

use super::subagents::synthetic_tool;
use crate::engine::turn::seam::{InputVerdict, TurnExtension, TurnView};
use crate::store::*;
use crate::tools::ToolResult;

/// Whether `agent` has `tool.before` hooks.
pub(crate) fn has_tool_before(agent: &Agent) -> bool {
    agent
        .hooks
        .iter()
        .any(|h| h.events.iter().any(|e| e == TOOL_BEFORE))
}

/// `tool.before` hooks as a feature of the turn.
pub(crate) struct ToolBefore;

#[async_trait]
impl TurnExtension for ToolBefore {
    fn name(&self) -> &'static str {
        "hooks"
    }

    async fn check_input(
        &self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
        input: Value,
        workspace: &std::path::Path,
    ) -> InputVerdict {
        tool_before(view, call, input, workspace).await
    }
}

/// The blocking event.
pub(crate) const TOOL_BEFORE: &str = "tool.before";

pub(crate) fn is_observe(hook: &Hook) -> bool {
    hook.events.iter().any(|e| e != TOOL_BEFORE)
}

pub(crate) fn observes(hook: &Hook, kind: &str) -> bool {
    hook.events.iter().any(|e| e == "*" || e == kind)
}

/// Whether an agent or one of its subagents has observe hooks.
pub(crate) fn has_observe_hooks(agent: &Agent) -> bool {
    agent.hooks.iter().any(is_observe) || agent.subagents.iter().any(has_observe_hooks)
}

/// A hook as a process tool.
pub(crate) fn hook_tool(hook: &Hook) -> Tool {
    let mut tool = synthetic_tool(
        &hook.name,
        "",
        Value::Null,
        eve_compile::Approval::Never,
        eve_compile::Effect::Write,
    );
    tool.runner = hook.runner.clone();
    tool.env = hook.env.clone();
    tool.timeout_ms = hook.timeout_ms;
    tool
}

fn decide(hook: &str, result: &ToolResult) -> Result<Option<Value>, String> {
    if !result.ok {
        return Err(format!(
            "the tool.before hook `{hook}` failed, so the call is denied (hooks fail closed): {}",
            result.error.as_deref().unwrap_or("it failed")
        ));
    }
    let garbage = || {
        let mut shown = result.output.to_string();
        if shown.len() > 200 {
            let mut end = 200;
            while !shown.is_char_boundary(end) {
                end -= 1;
            }
            shown.truncate(end);
            shown.push('…');
        }
        format!(
            "the tool.before hook `{hook}` did not answer {{\"decision\": \"allow\"|\"deny\"}} \
             (it printed {shown}), so the call is denied (hooks fail closed)"
        )
    };
    let Some(decision) = result.output.get("decision").and_then(Value::as_str) else {
        return Err(garbage());
    };
    match decision {
        "allow" => match result.output.get("input") {
            None | Some(Value::Null) => Ok(None),
            Some(input @ Value::Object(_)) => Ok(Some(input.clone())),
            Some(_) => Err(format!(
                "the tool.before hook `{hook}` rewrote the input into something that is not a \
                 JSON object, so the call is denied"
            )),
        },
        "deny" => {
            let reason = result
                .output
                .get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.trim().is_empty())
                .unwrap_or("no reason given");
            Err(format!(
                "A tool.before hook (`{hook}`) denied this call: {reason}"
            ))
        }
        _ => Err(garbage()),
    }
}

/// Runs the `tool.before` hooks of the agent on a call that would run with `input`.
async fn tool_before(
    view: &TurnView<'_>,
    call: &ToolCallRecord,
    input: Value,
    workspace: &std::path::Path,
) -> InputVerdict {
    {
        let hooks: Vec<&Hook> = view
            .build
            .manifest
            .agent
            .hooks
            .iter()
            .filter(|h| h.events.iter().any(|e| e == TOOL_BEFORE))
            .collect();
        let mut input = input;
        if hooks.is_empty() {
            return InputVerdict::Allow(input);
        }
        // Fail closed: hooks that cannot run deny the call.
        let agent_dir = match view.build.files() {
            Ok(dir) => dir,
            Err(e) => {
                return InputVerdict::Deny(format!(
                    "the tool.before hooks cannot run, so the call is denied: {e}"
                ));
            }
        };
        for hook in hooks {
            let ctx = view.tool_context(
                call.call_id.clone(),
                call.idempotency_key.clone(),
                workspace.to_path_buf(),
                agent_dir.clone(),
                Some(view.build.manifest.agent.hook_sandbox(hook)),
            );
            let stdin = json!({
                "event": TOOL_BEFORE,
                "session_id": view.session.id,
                "call_id": call.call_id,
                "tool": call.name,
                "input": input,
            });
            let result = view
                .rt
                .run_tool(&hook_tool(hook), &stdin, &ctx, view.cancel.child_token())
                .await;
            match decide(&hook.name, &result) {
                Ok(None) => {}
                Ok(Some(rewritten)) => {
                    if let Err(errors) = view.validate_input(&call.name, &rewritten) {
                        return InputVerdict::Deny(format!(
                            "the tool.before hook `{}` rewrote the input into one that does not \
                             match the schema of `{}`, so the call is denied:\n{}",
                            hook.name,
                            call.name,
                            errors
                                .iter()
                                .map(|e| format!("- {e}"))
                                .collect::<Vec<_>>()
                                .join("\n")
                        ));
                    }
                    input = rewritten;
                }
                Err(reason) => return InputVerdict::Deny(reason),
            }
        }
        InputVerdict::Allow(input)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn result(ok: bool, output: Value) -> ToolResult {
        if ok {
            return ToolResult::success(output, Duration::ZERO);
        }
        let mut r = ToolResult::failure("exited with code 3", Duration::ZERO);
        r.output = output;
        r
    }

    #[test]
    fn decisions() {
        assert!(matches!(
            decide("h", &result(true, json!({"decision": "allow"}))),
            Ok(None)
        ));
        assert_eq!(
            decide(
                "h",
                &result(true, json!({"decision": "allow", "input": {"a": 1}}))
            ),
            Ok(Some(json!({"a": 1})))
        );
        let deny = decide(
            "h",
            &result(true, json!({"decision": "deny", "reason": "no"})),
        );
        assert!(deny.unwrap_err().contains("denied this call: no"));
        assert!(decide("h", &result(true, json!("garbage"))).is_err());
        assert!(decide("h", &result(true, json!({"decision": "maybe"}))).is_err());
        assert!(decide("h", &result(false, json!({"decision": "allow"}))).is_err());
        assert!(
            decide(
                "h",
                &result(true, json!({"decision": "allow", "input": [1]}))
            )
            .is_err()
        );
    }
}
