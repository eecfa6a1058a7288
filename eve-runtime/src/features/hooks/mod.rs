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
//! finishing before `eve run` exits) is [`super::hook_delivery`].
//!
//! Hooks run with the tool protocol's process machinery: own process group, timeout, cleared
//! environment plus the hook's `env:` allowlist and the `EVE_*` variables.

use eve_compile::{Agent, Hook, Tool};
use serde_json::{Value, json};

use super::subagents::synthetic_tool;
use super::turn::TurnDriver;
use crate::store::*;
use crate::tools::{ToolContext, ToolResult, run_tool};

/// The blocking event.
pub const TOOL_BEFORE: &str = "tool.before";

pub(super) fn is_observe(hook: &Hook) -> bool {
    hook.events.iter().any(|e| e != TOOL_BEFORE)
}

pub(super) fn observes(hook: &Hook, kind: &str) -> bool {
    hook.events.iter().any(|e| e == "*" || e == kind)
}

/// Whether an agent or one of its subagents has observe hooks.
pub(crate) fn has_observe_hooks(agent: &Agent) -> bool {
    agent.hooks.iter().any(is_observe) || agent.subagents.iter().any(has_observe_hooks)
}

/// A hook as a process tool.
pub(super) fn hook_tool(hook: &Hook) -> Tool {
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

/// What the `tool.before` hooks decided.
pub(super) enum Verdict {
    /// Run, with this input (the model's or a hook's rewrite).
    Allow(Value),
    /// Do not run; the reason is for the model.
    Deny(String),
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

impl TurnDriver<'_> {
    /// Runs the `tool.before` hooks of the agent on a call.
    pub(super) async fn tool_before(
        &self,
        call: &ToolCallRecord,
        workspace: &std::path::Path,
    ) -> Verdict {
        let hooks: Vec<&Hook> = self
            .build
            .manifest
            .agent
            .hooks
            .iter()
            .filter(|h| h.events.iter().any(|e| e == TOOL_BEFORE))
            .collect();
        let mut input = call.input.clone();
        if hooks.is_empty() {
            return Verdict::Allow(input);
        }
        // Fail closed: hooks that cannot run deny the call.
        let agent_dir = match self.build.files() {
            Ok(dir) => dir,
            Err(e) => {
                return Verdict::Deny(format!(
                    "the tool.before hooks cannot run, so the call is denied: {e}"
                ));
            }
        };
        for hook in hooks {
            let ctx = ToolContext {
                session_id: self.session.id.clone(),
                call_id: call.call_id.clone(),
                idempotency_key: call.idempotency_key.clone(),
                workspace: workspace.to_path_buf(),
                agent_dir: agent_dir.clone(),
                env: self.rt.inner.config.env.clone(),
                http: self.rt.inner.http.clone(),
                exec: self.rt.inner.exec.clone(),
                confinement: self.rt.confinement(
                    &self.build.manifest.agent,
                    Some(self.build.manifest.agent.hook_sandbox(hook)),
                    Some(workspace),
                    Some(&agent_dir),
                ),
                network: None,
            };
            let stdin = json!({
                "event": TOOL_BEFORE,
                "session_id": self.session.id,
                "call_id": call.call_id,
                "tool": call.name,
                "input": input,
            });
            let result = run_tool(&hook_tool(hook), &stdin, &ctx, self.cancel.child_token()).await;
            match decide(&hook.name, &result) {
                Ok(None) => {}
                Ok(Some(rewritten)) => {
                    if let Err(errors) = self.validate_input(&call.name, &rewritten) {
                        return Verdict::Deny(format!(
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
                Err(reason) => return Verdict::Deny(reason),
            }
        }
        Verdict::Allow(input)
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
