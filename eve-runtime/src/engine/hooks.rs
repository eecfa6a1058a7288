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
//! across redeliveries, for de-duplication). Delivery is tracked durably by a cursor per hook per
//! session: exit 0 acknowledges the event and moves the cursor past it; anything else leaves it
//! there, and the event is delivered again (after a backoff, or after a restart).
//!
//! Hooks run with the tool protocol's process machinery: own process group, timeout, cleared
//! environment plus the hook's `env:` allowlist and the `EVE_*` variables.

use std::time::Duration;

use eve_compile::{Agent, Hook, Tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::subagents::synthetic_tool;
use super::turn::TurnDriver;
use super::{Runtime, RuntimeResult};
use crate::store::*;
use crate::tools::{ToolContext, ToolResult, run_tool};

/// The blocking event.
pub const TOOL_BEFORE: &str = "tool.before";

fn is_observe(hook: &Hook) -> bool {
    hook.events.iter().any(|e| e != TOOL_BEFORE)
}

fn observes(hook: &Hook, kind: &str) -> bool {
    hook.events.iter().any(|e| e == "*" || e == kind)
}

/// Whether an agent or one of its subagents has observe hooks.
pub(crate) fn has_observe_hooks(agent: &Agent) -> bool {
    agent.hooks.iter().any(is_observe) || agent.subagents.iter().any(has_observe_hooks)
}

/// A hook as a process tool.
fn hook_tool(hook: &Hook) -> Tool {
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

impl Runtime {
    /// Events were stored: start (or nudge) delivery to observe hooks of their sessions.
    pub(crate) fn notify_hooks(&self, events: &[StoredEvent]) {
        if events.is_empty() || !self.inner.builds.observe_hooks_seen() {
            return;
        }
        let mut sessions: Vec<&str> = events.iter().map(|e| e.session_id.as_str()).collect();
        sessions.dedup();
        for session in sessions {
            self.spawn_delivery(session);
        }
    }

    /// Redelivers what observe hooks did not acknowledge before this process started.
    pub(crate) async fn resume_hooks(&self) -> RuntimeResult<()> {
        if let Err(e) = self.inner.builds.current() {
            tracing::debug!(error = %e, "no current build to look for hooks in");
        }
        if !self.inner.builds.observe_hooks_seen() {
            return Ok(());
        }
        for session in self.inner.store.sessions_behind_hooks().await? {
            self.spawn_delivery(&session);
        }
        Ok(())
    }

    fn spawn_delivery(&self, session: &str) {
        {
            let Ok(mut workers) = self.inner.hook_workers.lock() else {
                return;
            };
            if let Some(dirty) = workers.get_mut(session) {
                *dirty = true;
                return;
            }
            workers.insert(session.to_owned(), false);
        }
        let rt = self.clone();
        let session = session.to_owned();
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let delivered = match rt.deliver(&session).await {
                    Ok(all) => all,
                    Err(e) => {
                        tracing::warn!(session, error = %e, "hook delivery failed");
                        false
                    }
                };
                if delivered {
                    failures = 0;
                } else {
                    failures = failures.saturating_add(1);
                    let backoff = Duration::from_millis(200u64 << failures.min(8));
                    tokio::time::sleep(backoff.min(Duration::from_secs(30))).await;
                }
                let Ok(mut workers) = rt.inner.hook_workers.lock() else {
                    return;
                };
                let again = !delivered || workers.get(&session).copied().unwrap_or(false);
                if again {
                    workers.insert(session.clone(), false);
                    continue;
                }
                workers.remove(&session);
                return;
            }
        });
    }

    /// Delivers every unacknowledged event of a session to its observe hooks; `false` when a hook
    /// did not acknowledge one (it is delivered again later).
    async fn deliver(&self, session: &str) -> RuntimeResult<bool> {
        let store = self.inner.store.clone();
        let Some(record) = store.session(session).await? else {
            return Ok(true);
        };
        let build = self.session_build(&record.build_hash, &record).await?;
        let hooks: Vec<Hook> = build
            .manifest
            .agent
            .hooks
            .iter()
            .filter(|h| is_observe(h))
            .cloned()
            .collect();
        if hooks.is_empty() {
            return Ok(true);
        }
        let cursors = store.hook_cursors(session).await?;
        let workspace = self.inner.config.state_dir.join("sandboxes").join(session);
        let agent_dir = build.files()?;
        let mut all = true;
        for hook in hooks {
            let start = cursors
                .iter()
                .find(|(name, _)| *name == hook.name)
                .map(|(_, next)| *next)
                .unwrap_or(0);
            let mut next = start;
            'events: loop {
                let events = store.events(session, next, 64).await?;
                if events.is_empty() {
                    break;
                }
                for event in events {
                    if observes(&hook, &event.kind) {
                        let mut stdin = event.to_wire();
                        stdin["id"] = json!(event.id);
                        stdin["index"] = json!(event.index);
                        stdin["sessionId"] = json!(session);
                        let ctx = ToolContext {
                            session_id: session.to_owned(),
                            call_id: event.id.clone(),
                            idempotency_key: event.id.clone(),
                            workspace: workspace.clone(),
                            agent_dir: agent_dir.clone(),
                            env: self.inner.config.env.clone(),
                            http: self.inner.http.clone(),
                            exec: self.inner.exec.clone(),
                            confinement: self.confinement(
                                &build.manifest.agent,
                                Some(build.manifest.agent.hook_sandbox(&hook)),
                                Some(&workspace),
                                Some(&agent_dir),
                            ),
                            network: None,
                        };
                        let result =
                            run_tool(&hook_tool(&hook), &stdin, &ctx, CancellationToken::new())
                                .await;
                        if !result.ok {
                            tracing::warn!(
                                session,
                                hook = %hook.name,
                                event = %event.id,
                                error = result.error.as_deref().unwrap_or(""),
                                "an observe hook did not acknowledge an event; it will be delivered again"
                            );
                            all = false;
                            break 'events;
                        }
                        // Acknowledged: never delivered again.
                        self.save_cursor(session, &hook.name, event.index + 1)
                            .await?;
                    }
                    next = event.index + 1;
                }
                self.save_cursor(session, &hook.name, next).await?;
            }
        }
        Ok(all)
    }

    async fn save_cursor(&self, session: &str, hook: &str, next: u64) -> RuntimeResult<()> {
        let mut batch = Batch::new();
        batch.push(Op::Composition(CompositionOp::HookCursor {
            session_id: session.to_owned(),
            hook: hook.to_owned(),
            delivered: next,
        }));
        self.inner.store.commit(batch).await?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
