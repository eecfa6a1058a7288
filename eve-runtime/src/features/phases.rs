//! Phased budgets (`limits.phases`): a turn moves from `explore` to `execute` to `converge` as it
//! spends its budget, and tools tagged `phase: explore` (front matter, or
//! `limits.phases.explore_tools`) are withdrawn in `converge`, with one sentence to the model.
//!
//! The phase is a pure function of what is journaled: the step index against
//! `max_steps_per_turn`, and the tokens the turn's earlier steps used (their stored responses)
//! against the token budget left when the turn began, whichever is further along. So a resumed
//! turn computes the same phase, and `phase.changed` goes out with the `step.started` commit of
//! the step that changes it, exactly once.

use async_trait::async_trait;
use eve_compile::{Phase, Phases as PhasesConfig};

use crate::engine::RuntimeResult;
use crate::engine::events as ev;
use crate::engine::turn::seam::{GateAt, Shaped, StepStart, TurnExtension, TurnView};
use crate::model::{ModelRequest, ToolSpec};
use crate::store::*;

/// Phased budgets as a feature of the turn: the phase of the current step (computed once per
/// step).
#[derive(Default)]
pub(crate) struct Phases {
    phase: Option<StepPhase>,
}

#[async_trait]
impl TurnExtension for Phases {
    fn name(&self) -> &'static str {
        "phases"
    }

    /// The phase reads the journal between `step.started` and the model call.
    fn lets_hold(&self, _view: &TurnView<'_>) -> bool {
        false
    }

    fn needs_tools_at_start(&self) -> bool {
        true
    }

    async fn step_started(
        &mut self,
        view: &TurnView<'_>,
        start: &mut StepStart,
    ) -> RuntimeResult<()> {
        let turn = view.turn;
        if let Some(phase) = self.step_phase(view).await?
            && phase.previous != Some(phase.phase)
        {
            let withdrawn = self.without_withdrawn(view, view.offered_specs()).1;
            start.with.event(
                view.id(),
                ev::PHASE_CHANGED,
                ev::phase_changed(
                    turn,
                    turn.step_index,
                    phase.previous.map(|p| p.as_str()),
                    phase.phase.as_str(),
                    phase.progress,
                    &withdrawn,
                ),
            );
        }
        Ok(())
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        self.step_phase(view).await?;
        let (tools, withdrawn) = self.without_withdrawn(view, std::mem::take(&mut request.tools));
        request.tools = tools;
        if !withdrawn.is_empty() {
            request.system.push_str("\n\n");
            request.system.push_str(&converge_note(&withdrawn));
        }
        Ok(Shaped::Call)
    }

    async fn gate_call(
        &mut self,
        view: &TurnView<'_>,
        _call: &ToolCallRecord,
        tool: &str,
        at: GateAt,
    ) -> RuntimeResult<Option<String>> {
        if at != GateAt::Offered {
            return Ok(None);
        }
        self.step_phase(view).await?;
        Ok(self.withdrawn(view, tool).then(|| withdrawn_refusal(tool)))
    }
}

/// The phase of one step, and the phase of the step before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepPhase {
    /// The step it was computed for.
    pub(crate) step: u64,
    /// Its phase.
    pub(crate) phase: Phase,
    /// The previous step's phase (`None` at the turn's first step).
    pub(crate) previous: Option<Phase>,
    /// How far along the turn's budget is at this step (0..=1).
    pub(crate) progress: f64,
}

fn phases_config<'v>(view: &'v TurnView<'_>) -> Option<&'v PhasesConfig> {
    view.build.manifest.agent.config.limits.phases.as_ref()
}

impl Phases {
    /// The phase of the turn's current step (`None` without `limits.phases`), computed once per
    /// step from the journal.
    async fn step_phase(&mut self, view: &TurnView<'_>) -> RuntimeResult<Option<StepPhase>> {
        let turn = view.turn;
        let Some(phases) = phases_config(view).cloned() else {
            return Ok(None);
        };
        if let Some(known) = self.phase
            && known.step == turn.step_index
        {
            return Ok(Some(known));
        }
        let max_steps = f64::from(view.build.manifest.agent.config.limits.max_steps_per_turn);
        let token_cap = match (
            view.build.manifest.agent.config.limits.max_tokens,
            view.budget.and_then(|b| b.max_tokens),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Tokens each earlier step of this turn used, from the stored responses.
        let mut per_step: Vec<(u64, u64)> = Vec::new();
        if token_cap.is_some() {
            for step in view.rt.inner.store.steps(view.id(), turn.seq).await? {
                let usage = &step.response["usage"];
                let get = |k: &str| usage[k].as_u64().unwrap_or(0);
                per_step.push((
                    step.step_index,
                    get("inputTokens").saturating_add(get("outputTokens")),
                ));
            }
        }
        let turn_total: u64 = per_step.iter().map(|(_, t)| t).sum();
        let at_turn_start = view.session.usage.total().saturating_sub(turn_total);
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
    fn withdrawn(&self, view: &TurnView<'_>, name: &str) -> bool {
        if !matches!(self.phase, Some(p) if p.phase == Phase::Converge) {
            return false;
        }
        is_explore_tool(view, name)
    }

    /// The offered specs without the tools withdrawn in this phase, and the names withdrawn.
    fn without_withdrawn(
        &self,
        view: &TurnView<'_>,
        specs: Vec<ToolSpec>,
    ) -> (Vec<ToolSpec>, Vec<String>) {
        if !matches!(self.phase, Some(p) if p.phase == Phase::Converge) {
            return (specs, Vec::new());
        }
        let (gone, kept): (Vec<ToolSpec>, Vec<ToolSpec>) = specs
            .into_iter()
            .partition(|s| is_explore_tool(view, &s.name));
        (kept, gone.into_iter().map(|s| s.name).collect())
    }
}

fn is_explore_tool(view: &TurnView<'_>, name: &str) -> bool {
    let tagged = view
        .build
        .tool(name)
        .is_some_and(|t| t.phase == Some(Phase::Explore));
    tagged || phases_config(view).is_some_and(|p| p.explore_tools.iter().any(|t| t == name))
}

/// The sentence that tells the model why tools went away.
fn converge_note(withdrawn: &[String]) -> String {
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
fn withdrawn_refusal(name: &str) -> String {
    format!(
        "`{name}` is an exploration tool and this turn is converging (limits.phases): it was \
         withdrawn and did not run. Finish with what you have."
    )
}
