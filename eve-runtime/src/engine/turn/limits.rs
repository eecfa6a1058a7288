//! Turn limits: the step, token, cost and wall-clock limits of `limits:` checked before each step,
//! and the deadline a model or tool call runs against (the turn's own, or what a parent turn left
//! its subagent).

use std::time::Duration;

use super::turn::TurnDriver;
use crate::store::*;

impl TurnDriver<'_> {
    pub(in crate::engine) fn limit_hit(&self, turn: &TurnRecord) -> Option<(&'static str, String)> {
        let limits = &self.build.manifest.agent.config.limits;
        if turn.step_index >= u64::from(limits.max_steps_per_turn) {
            return Some((
                "max_steps_per_turn",
                format!(
                    "the turn reached its step limit ({} model calls; limits.max_steps_per_turn)",
                    limits.max_steps_per_turn
                ),
            ));
        }
        if let Some(max) = limits.max_tokens
            && self.session.usage.total() >= max
        {
            return Some((
                "max_tokens",
                format!(
                    "the session used {} tokens, its limit is {max} (limits.max_tokens)",
                    self.session.usage.total()
                ),
            ));
        }
        if let Some(max) = limits.max_cost_usd
            && self.session.cost_usd >= max
        {
            return Some((
                "max_cost_usd",
                format!(
                    "the session cost ${:.4}, its limit is ${max} (limits.max_cost_usd)",
                    self.session.cost_usd
                ),
            ));
        }
        if let Some(max) = limits.max_turn_seconds {
            let elapsed = now_ms().saturating_sub(turn.started_at);
            if elapsed >= i64::try_from(max.saturating_mul(1000)).unwrap_or(i64::MAX) {
                return Some((
                    "max_turn_seconds",
                    format!("the turn ran for {max} s, its limit (limits.max_turn_seconds)"),
                ));
            }
        }
        None
    }

    pub(in crate::engine) fn deadline(&self, turn: &TurnRecord) -> Option<tokio::time::Instant> {
        let own = self
            .build
            .manifest
            .agent
            .config
            .limits
            .max_turn_seconds
            .map(|max| {
                let elapsed = u64::try_from(now_ms().saturating_sub(turn.started_at)).unwrap_or(0);
                max.saturating_mul(1000).saturating_sub(elapsed)
            });
        let inherited = self
            .budget
            .and_then(|b| b.deadline_ms)
            .map(|d| u64::try_from(d.saturating_sub(now_ms())).unwrap_or(0));
        let left = match (own, inherited) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(tokio::time::Instant::now() + Duration::from_millis(left))
    }
}

pub(super) async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending::<()>().await,
    }
}
