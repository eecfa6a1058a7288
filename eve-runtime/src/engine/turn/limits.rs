//! Turn limits: the step, token, cost and wall-clock limits of `limits:` checked before each step,
//! and the deadline a model or tool call runs against (the turn's own, or what a parent turn left
//! its subagent).

use std::time::Duration;

use super::TurnDriver;
use super::seam::{min_opt, spent};
use std::sync::Arc;

use crate::engine::{LoadedBuild, ResolvedModel, Runtime, RuntimeResult};
use crate::store::*;

impl TurnDriver<'_> {
    pub(super) fn limit_hit(&self, turn: &TurnRecord) -> Option<(&'static str, String)> {
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
        // A root session's budgets ask a principal before they stop it
        // (`crate::features::session_limit`); a subagent's stop it here.
        let child = self.session.parent_id.is_some();
        if let Some(max) = limits.max_tokens
            && child
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
            && child
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

    pub(super) fn deadline(&self, turn: &TurnRecord) -> Option<tokio::time::Instant> {
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

impl TurnDriver<'_> {
    /// The model's context window (see [`context_window`]).
    pub(super) async fn context_window(&self) -> Option<u64> {
        context_window(self.rt, &self.build, &self.model).await
    }

    /// An inherited budget (a subagent's, with what its own descendants spent) is used up. A root
    /// session's own budgets are `crate::features::session_limit`'s.
    pub(super) async fn budget_hit(&self) -> RuntimeResult<Option<(&'static str, String)>> {
        let limits = &self.build.manifest.agent.config.limits;
        let own = self.budget.unwrap_or_default();
        if self.budget.is_none() {
            return Ok(None);
        }
        let cap_tokens = min_opt(limits.max_tokens, own.max_tokens);
        let cap_cost = min_opt(limits.max_cost_usd, own.max_cost_usd);
        if cap_tokens.is_some() || cap_cost.is_some() {
            let (tokens, cost) = spent(self.rt, &self.session, &self.build).await?;
            if let Some(max) = cap_tokens
                && tokens >= max
            {
                return Ok(Some((
                    "max_tokens",
                    format!(
                        "the session and its subagents used {tokens} tokens, the budget is {max} \
                         (limits.max_tokens, inherited from the parent for a subagent)"
                    ),
                )));
            }
            if let Some(max) = cap_cost
                && cost >= max
            {
                return Ok(Some((
                    "max_cost_usd",
                    format!(
                        "the session and its subagents cost ${cost:.4}, the budget is ${max:.4} \
                         (limits.max_cost_usd, inherited from the parent for a subagent)"
                    ),
                )));
            }
        }
        if let Some(deadline) = own.deadline_ms
            && now_ms() >= deadline
        {
            return Ok(Some((
                "max_turn_seconds",
                "the parent's turn ran out of wall-clock time (limits.max_turn_seconds), so this \
                 subagent's did too"
                    .to_owned(),
            )));
        }
        Ok(None)
    }
}

/// The model's context window: `agent.yaml` `context_window`, else the model client's (a
/// provider's answer is asked once per runtime). `None` when nobody knows it.
pub(super) async fn context_window(
    rt: &Runtime,
    build: &LoadedBuild,
    model: &ResolvedModel,
) -> Option<u64> {
    match build
        .manifest
        .agent
        .config
        .context_window
        .or(model.context_window)
    {
        Some(w) => Some(w),
        None => provider_window(rt, model).await,
    }
}

/// The context window the provider reports for `model`, asked once per runtime and client (the
/// cache is the runtime's `windows`, so two runtimes in one process never share an answer). A
/// provider that does not say is asked again after [`UNKNOWN_WINDOW_KEPT`], not at every turn.
pub(in crate::engine) async fn provider_window(rt: &Runtime, model: &ResolvedModel) -> Option<u64> {
    let key = format!("{}@{:p}", model.model_id, Arc::as_ptr(&model.client));
    let cache = &rt.inner.windows;
    let known = cache.lock().ok().and_then(|c| c.get(&key).copied());
    if let Some((window, at)) = known
        && (window.is_some() || at.elapsed() < UNKNOWN_WINDOW_KEPT)
    {
        return window;
    }
    let window = model.client.context_window(&model.model).await;
    if let Ok(mut c) = cache.lock() {
        c.insert(key, (window, std::time::Instant::now()));
    }
    window
}

/// How long "the provider does not say" stands before the provider is asked again.
const UNKNOWN_WINDOW_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending::<()>().await,
    }
}
