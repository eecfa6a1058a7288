//! Session budgets that ask instead of blocking: eve's session-limit continuation.
//!
//! When a root session has spent its `limits.max_tokens` or `limits.max_cost_usd` (its own model
//! calls and its subagents'), the next step does not start: the turn parks on an input request of
//! kind `session-limit` (eve's shape: Continue or Stop, a deterministic id
//! `<session>:<turn>:limit:<kind>:<used>`, `display: confirmation`), through the same durable
//! path as approvals, so it survives a restart. **Continue** re-anchors each budget to what was
//! spent plus its configured size (one answer buys one whole window, as eve's
//! `bumpSessionRuntimeUsageLimits`) and the same turn goes on; the granted budget is a note
//! (`limits:<session>`), written before the turn moves. **Stop** cancels the turn through the
//! standard cancellation path (`turn.cancelled`, `session.waiting`); the session stays over
//! budget, so its next message asks again.
//!
//! A session nobody can be asked for (one a schedule started) fails instead, with eve's codes:
//! `SESSION_TOKEN_LIMIT_REACHED` for tokens, `SESSION_TOKEN_COST_LIMIT_REACHED` for cost. A
//! subagent's session keeps the core's limits (it spends what its parent passed down).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Hold, TurnExtension, TurnView, spent};
use crate::store::{
    Batch, InputRequestRecord, NoteOp, NoteRecord, Op, RequestStatus, TurnRecord, now_ms,
};

/// The kind of the request a session over budget parks on.
pub const REQUEST_KIND: &str = "session-limit";
/// The tool name eve shows in the request's action.
pub(crate) const TOOL_NAME: &str = "session_limit_continuation";
/// The option that grants a fresh budget.
pub const CONTINUE: &str = "continue";
/// The option that stops the turn.
pub const STOP: &str = "stop";
/// eve's code for a token budget a session could not ask about.
pub(crate) const TOKEN_CODE: &str = "SESSION_TOKEN_LIMIT_REACHED";
/// eve's code for a cost budget a session could not ask about.
pub(crate) const COST_CODE: &str = "SESSION_TOKEN_COST_LIMIT_REACHED";

/// Whether the agent has a session budget to ask about.
pub(crate) fn enabled(agent: &eve_compile::Agent) -> bool {
    let limits = &agent.config.limits;
    limits.max_tokens.is_some() || limits.max_cost_usd.is_some()
}

/// The notes namespace of a session's granted budgets.
pub(crate) fn namespace(session: &str) -> String {
    format!("limits:{session}")
}

const GRANTED: &str = "granted";

/// The budgets in force after the last Continue (none: the configured ones).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Granted {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
}

/// A budget spent.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Violation {
    /// `limits.max_tokens`: tokens (input and output) of the session and its subagents.
    Tokens { limit: u64, used: u64 },
    /// `limits.max_cost_usd`: model cost in US dollars.
    Cost { limit_usd: f64, used_usd: f64 },
}

impl Violation {
    fn kind(self) -> &'static str {
        match self {
            Violation::Tokens { .. } => "tokens",
            Violation::Cost { .. } => "token-cost",
        }
    }

    /// eve's request id: stable for one session, turn and amount spent.
    fn request_id(self, session: &str, turn: u64) -> String {
        let used = match self {
            Violation::Tokens { used, .. } => used.to_string(),
            Violation::Cost { used_usd, .. } => used_usd.to_string(),
        };
        format!("{session}:{turn}:limit:{}:{used}", self.kind())
    }

    /// The action's input, as eve's.
    fn input(self) -> Value {
        match self {
            Violation::Tokens { limit, used } => {
                json!({"kind": "tokens", "limit": limit, "usedTokens": used})
            }
            Violation::Cost {
                limit_usd,
                used_usd,
            } => json!({"kind": "token-cost", "limitUsd": limit_usd, "usedCostUsd": used_usd}),
        }
    }

    /// eve's deterministic prompt.
    fn prompt(self) -> String {
        let what = match self {
            Violation::Tokens { limit, .. } => {
                format!("token limit ({}) per session", compact_count(limit))
            }
            Violation::Cost { limit_usd, .. } => {
                format!("{} model token-cost limit per session", usd(limit_usd))
            }
        };
        format!(
            "This session has hit the {what}. This is a guardrail against defective long-running \
             sessions. If session activity looks fine, just approve to keep going."
        )
    }

    fn code(self) -> &'static str {
        match self {
            Violation::Tokens { .. } => TOKEN_CODE,
            Violation::Cost { .. } => COST_CODE,
        }
    }

    fn message(self) -> String {
        match self {
            Violation::Tokens { limit, used } => format!(
                "The session reached its configured token limit ({used} tokens used, limit \
                 {limit}: limits.max_tokens)."
            ),
            Violation::Cost {
                limit_usd,
                used_usd,
            } => format!(
                "The session reached its configured model token-cost limit (${used_usd:.4} spent, \
                 limit {}: limits.max_cost_usd).",
                usd(limit_usd)
            ),
        }
    }
}

/// `1.5K`, `2M`, as eve writes token counts.
fn compact_count(n: u64) -> String {
    let trim = |x: f64| {
        let s = format!("{x:.1}");
        s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
    };
    if n >= 1_000_000 {
        format!("{}M", trim(n as f64 / 1e6))
    } else if n >= 1_000 {
        format!("{}K", trim(n as f64 / 1e3))
    } else {
        n.to_string()
    }
}

/// `$1.5`, as eve writes a dollar limit (up to six decimals, trailing zeros dropped).
fn usd(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("${s}")
}

/// The budget spent, if one is: tokens first, then cost, each against what was granted last
/// (else the configured size).
fn violation(
    limits: &eve_compile::Limits,
    granted: &Granted,
    tokens: u64,
    cost: f64,
) -> Option<Violation> {
    if let Some(limit) = limits.max_tokens
        && tokens >= granted.tokens.unwrap_or(limit)
    {
        return Some(Violation::Tokens {
            limit,
            used: tokens,
        });
    }
    if let Some(limit_usd) = limits.max_cost_usd
        && cost >= granted.cost_usd.unwrap_or(limit_usd)
    {
        return Some(Violation::Cost {
            limit_usd,
            used_usd: cost,
        });
    }
    None
}

/// The request eve shows for a session-limit record (see `events::input_request`).
pub(crate) fn shown(request: &InputRequestRecord) -> Value {
    let cost = request.action["input"]["kind"] == "token-cost";
    json!({
        "action": request.action,
        "allowFreeform": false,
        "display": "confirmation",
        "kind": REQUEST_KIND,
        "options": [
            {"description": if cost { "Grant a fresh model token-cost budget" }
                            else { "Grant a fresh token budget" },
             "id": CONTINUE, "label": "Approve", "style": "primary"},
            {"description": "Stop now", "id": STOP, "label": "Stop", "style": "danger"},
        ],
        "prompt": request.prompt,
        "requestId": request.id,
    })
}

/// The feature: checks the session's budgets before each step of a root session.
pub(crate) struct SessionLimit;

#[async_trait]
impl TurnExtension for SessionLimit {
    fn name(&self) -> &'static str {
        "session_limit"
    }

    async fn hold(&mut self, view: &TurnView<'_>) -> RuntimeResult<Hold> {
        if view.session.parent_id.is_some() {
            return Ok(Hold::Go);
        }
        let limits = &view.build.manifest.agent.config.limits;
        let store = &view.rt.inner.store;
        let granted = store
            .notes(&namespace(view.id()))
            .await?
            .into_iter()
            .find(|n| n.key == GRANTED)
            .and_then(|n| serde_json::from_str::<Granted>(&n.text).ok())
            .unwrap_or_default();
        let (tokens, cost) = spent(view.rt, view.session, view.build).await?;
        let Some(hit) = violation(limits, &granted, tokens, cost) else {
            return Ok(Hold::Go);
        };
        if view.session.schedule.is_some() {
            // Nobody to ask: eve's failure.
            return Ok(Hold::Fail(hit.code(), hit.message()));
        }
        let id = hit.request_id(view.id(), view.turn.seq);
        match store.input_request(&id).await? {
            Some(asked) if asked.status == RequestStatus::Pending => Ok(Hold::Park(vec![asked])),
            Some(asked) if asked.status == RequestStatus::Approved => {
                // Continue: every budget re-anchored to what was spent plus its size.
                let fresh = Granted {
                    tokens: limits.max_tokens.map(|l| tokens.saturating_add(l)),
                    cost_usd: limits.max_cost_usd.map(|l| cost + l),
                };
                let now = now_ms();
                let mut batch = Batch::new();
                batch.push(Op::Note(NoteOp::Put(NoteRecord {
                    namespace: namespace(view.id()),
                    key: GRANTED.to_owned(),
                    text: serde_json::to_string(&fresh)?,
                    created_at: now,
                    updated_at: now,
                })));
                Ok(Hold::Wait(batch))
            }
            Some(_) => {
                // Stop: the standard cancellation path ends the turn.
                let mut batch = Batch::new();
                batch.push(Op::SetCancel {
                    session_id: view.id().to_owned(),
                    requested: true,
                });
                Ok(Hold::Wait(batch))
            }
            None => {
                let request = record(view.turn, &id, hit);
                let mut batch = Batch::durable();
                batch.push(Op::PutInputRequest(request.clone()));
                Ok(Hold::Ask(vec![request], batch))
            }
        }
    }
}

fn record(turn: &TurnRecord, id: &str, hit: Violation) -> InputRequestRecord {
    InputRequestRecord {
        id: id.to_owned(),
        session_id: turn.session_id.clone(),
        turn_seq: turn.seq,
        step_index: turn.step_index,
        call_id: id.to_owned(),
        tool_name: TOOL_NAME.to_owned(),
        kind: REQUEST_KIND.to_owned(),
        prompt: hit.prompt(),
        action: json!({"callId": id, "input": hit.input(), "kind": "tool-call",
                       "toolName": TOOL_NAME}),
        status: RequestStatus::Pending,
        reason: None,
        created_at: now_ms(),
        answered_at: None,
        responder: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_ids_are_eves() {
        let hit = Violation::Cost {
            limit_usd: 1.5,
            used_usd: 1.75,
        };
        assert_eq!(
            hit.request_id("wrun_1", 2),
            "wrun_1:2:limit:token-cost:1.75"
        );
        assert!(
            hit.prompt()
                .starts_with("This session has hit the $1.5 model token-cost limit per session.")
        );
        let hit = Violation::Tokens {
            limit: 200_000,
            used: 200_100,
        };
        assert!(hit.prompt().contains("token limit (200K) per session"));
        assert_eq!(compact_count(1_500_000), "1.5M");
        assert_eq!(compact_count(999), "999");
    }

    #[test]
    fn a_grant_re_anchors_the_budget() {
        let limits = eve_compile::Limits {
            max_tokens: Some(100),
            ..Default::default()
        };
        let none = Granted::default();
        assert!(violation(&limits, &none, 99, 0.0).is_none());
        assert!(violation(&limits, &none, 120, 0.0).is_some());
        let granted = Granted {
            tokens: Some(220),
            cost_usd: None,
        };
        assert!(violation(&limits, &granted, 120, 0.0).is_none());
        assert!(violation(&limits, &granted, 220, 0.0).is_some());
    }
}
