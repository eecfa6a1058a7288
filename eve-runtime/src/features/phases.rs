//! Phased budgets (`limits.phases`): a turn moves from `explore` to `execute` to `converge` as it
//! spends its budget, and tools tagged `phase: explore` (front matter, or
//! `limits.phases.explore_tools`) are withdrawn in `converge`, with one sentence to the model.
//!
//! The phase is a pure function of what is journaled: the step index against
//! `max_steps_per_turn`, and the tokens the turn's earlier steps used (their stored responses)
//! against the token budget left when the turn began, whichever is further along. So a resumed
//! turn computes the same phase, and `phase.changed` goes out with the `step.started` commit of
//! the step that changes it, exactly once.

use eve_compile::{Phase, Phases};

use super::RuntimeResult;
use super::turn::TurnDriver;
use crate::model::ToolSpec;
use crate::store::*;

/// The phase of one step, and the phase of the step before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StepPhase {
    /// The step it was computed for.
    pub step: u64,
    /// Its phase.
    pub phase: Phase,
    /// The previous step's phase (`None` at the turn's first step).
    pub previous: Option<Phase>,
    /// How far along the turn's budget is at this step (0..=1).
    pub progress: f64,
}

impl TurnDriver<'_> {
    fn phases_config(&self) -> Option<&Phases> {
        self.build.manifest.agent.config.limits.phases.as_ref()
    }

    /// The phase of the turn's current step (`None` without `limits.phases`), computed once per
    /// step from the journal.
    pub(in crate::engine) async fn step_phase(
        &mut self,
        turn: &TurnRecord,
    ) -> RuntimeResult<Option<StepPhase>> {
        let Some(phases) = self.phases_config().cloned() else {
            return Ok(None);
        };
        if let Some(known) = self.phase
            && known.step == turn.step_index
        {
            return Ok(Some(known));
        }
        let max_steps = f64::from(self.build.manifest.agent.config.limits.max_steps_per_turn);
        let token_cap = match (
            self.build.manifest.agent.config.limits.max_tokens,
            self.budget.and_then(|b| b.max_tokens),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Tokens each earlier step of this turn used, from the stored responses.
        let mut per_step: Vec<(u64, u64)> = Vec::new();
        if token_cap.is_some() {
            for step in self.rt.inner.store.steps(self.id(), turn.seq).await? {
                let usage = &step.response["usage"];
                let get = |k: &str| usage[k].as_u64().unwrap_or(0);
                per_step.push((
                    step.step_index,
                    get("inputTokens").saturating_add(get("outputTokens")),
                ));
            }
        }
        let turn_total: u64 = per_step.iter().map(|(_, t)| t).sum();
        let at_turn_start = self.session.usage.total().saturating_sub(turn_total);
        let progress_at = |step: u64| -> f64 {
            let by_steps = step as f64 / max_steps.max(1.0);
            let by_tokens = match token_cap {
                Some(cap) => {
                    let budget = cap.saturating_sub(at_turn_start).max(1) as f64;
                    let before: u64 = per_step
                        .iter()
                        .filter(|(i, _)| *i < step)
                        .map(|(_, t)| t)
                        .sum();
                    before as f64 / budget
                }
                None => 0.0,
            };
            by_steps.max(by_tokens).min(1.0)
        };
        let progress = progress_at(turn.step_index);
        let computed = StepPhase {
            step: turn.step_index,
            phase: phases.at(progress),
            previous: turn
                .step_index
                .checked_sub(1)
                .map(|prev| phases.at(progress_at(prev))),
            progress,
        };
        self.phase = Some(computed);
        Ok(Some(computed))
    }

    /// Whether `name` is withdrawn at this step (tagged `explore`, and the turn is converging).
    pub(in crate::engine) fn withdrawn(&self, name: &str) -> bool {
        if !matches!(self.phase, Some(p) if p.phase == Phase::Converge) {
            return false;
        }
        self.is_explore_tool(name)
    }

    fn is_explore_tool(&self, name: &str) -> bool {
        let tagged = self
            .build
            .tool(name)
            .is_some_and(|t| t.phase == Some(Phase::Explore));
        tagged
            || self
                .phases_config()
                .is_some_and(|p| p.explore_tools.iter().any(|t| t == name))
    }

    /// The offered specs without the tools withdrawn in this phase, and the names withdrawn.
    pub(in crate::engine) fn without_withdrawn(
        &self,
        specs: Vec<ToolSpec>,
    ) -> (Vec<ToolSpec>, Vec<String>) {
        if !matches!(self.phase, Some(p) if p.phase == Phase::Converge) {
            return (specs, Vec::new());
        }
        let (gone, kept): (Vec<ToolSpec>, Vec<ToolSpec>) = specs
            .into_iter()
            .partition(|s| self.is_explore_tool(&s.name));
        (kept, gone.into_iter().map(|s| s.name).collect())
    }

    /// The names withdrawn at this step, for `phase.changed`.
    pub(in crate::engine) fn withdrawn_names(&self) -> Vec<String> {
        self.without_withdrawn(self.offered_specs()).1
    }
}

/// The sentence that tells the model why tools went away.
pub(super) fn converge_note(withdrawn: &[String]) -> String {
    format!(
        "This turn has used most of its budget and is now converging: the exploration tools ({}) \
         are withdrawn, so finish the task with what you have learned and give your answer.",
        withdrawn
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The refusal a call of a withdrawn tool gets.
pub(super) fn withdrawn_refusal(name: &str) -> String {
    format!(
        "`{name}` is an exploration tool and this turn is converging (limits.phases): it was \
         withdrawn and did not run. Finish with what you have."
    )
}
