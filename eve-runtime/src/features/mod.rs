//! The features of a turn, each behind the turn core's seam ([`crate::engine::turn::seam`]):
//! one [`TurnExtension`] per feature, made afresh for every turn run from the agent's manifest
//! by [`for_turn`], in the order their hooks are called.
//!
//! | feature | what it does in a turn |
//! | --- | --- |
//! | [`dynamic`] | runs the dynamic tool providers at the start of a turn |
//! | [`lean`] | keeps each request small (old outputs cut, repeated calls folded) |
//! | [`probe`] | the environment probe's block in the system prompt |
//! | [`memory`] | the memory block and the built-in `memory` tool |
//! | [`compaction`] | summarises older messages near a full window, and after an overflow |
//! | [`phases`] | `limits.phases`: withdraws exploration tools as the budget is spent |
//! | [`hollow`] | sends back a final answer that claims work no call did |
//! | [`strategy`] | `plan` (a plan, then its steps as subagents) and `reflect` (a critic) |
//! | [`hooks`] | `tool.before` hooks, and the delivery of events to observe hooks |
//! | [`breakers`] | refuses a tool that keeps failing |
//! | [`questions`] | the built-ins `ask_question` and `no_reply` |
//! | [`selfchange`] | the built-in `propose_change` tool |
//! | [`sleep`] | the built-in `sleep`: a durable, bounded wait on a timer |
//! | [`subagents`] | subagent calls: children, their budgets, their answers |
//! | [`attachments`] | files of messages and tool results: native parts, or a note with the path |
//! | [`tasks`] | subagent calls as background tasks: receipts, results at step boundaries, waits |
//! | [`stubs`] | tool stubs of a session (operators, eval runs): fixed results for named tools |
//! | [`output`] | a message's `outputSchema`: the turn's result satisfies it (`result.completed`) |
//! | [`authorize`] | parks a call of a user-scoped connection until its user has signed in |
//! | [`safety_id`] | a hash of the turn's sender, as the provider's safety identifier |
//! | [`client_context`] | a message's `clientContext`, in every model call of its turn only |
//!
//! What a message asks of its turn ([`turn_input`]) adds the last two, by [`for_input`].

pub mod attachments;
pub mod authorize;
pub mod breakers;
pub mod client_context;
pub mod compaction;
pub mod dynamic;
pub mod hollow;
pub mod hooks;
pub mod lean;
pub mod memory;
pub mod output;
pub mod phases;
pub mod probe;
pub mod questions;
pub mod safety_id;
pub mod selfchange;
pub mod sleep;
pub mod strategy;
pub mod stubs;
pub mod subagents;
pub mod tasks;
pub mod turn_input;

use crate::engine::LoadedBuild;
use crate::engine::turn::seam::TurnExtension;

/// The features of a turn on `build`, in the order their hooks are called: only those the
/// agent uses.
pub(crate) fn for_turn(build: &LoadedBuild) -> Vec<Box<dyn TurnExtension>> {
    let agent = &build.manifest.agent;
    let config = &agent.config;
    let mut features: Vec<Box<dyn TurnExtension>> = Vec::new();
    if agent.remote.is_some() {
        // A remote agent's turns run on the remote: nothing else of a local turn applies.
        features.push(Box::new(subagents::remote::RemoteTurn));
        return features;
    }
    if !build.providers.is_empty() {
        features.push(Box::new(dynamic::DynamicTools));
    }
    features.push(Box::new(lean::Lean));
    if config.probe.is_some() {
        features.push(Box::new(probe::Probe::default()));
    }
    if config.memory.is_some() {
        features.push(Box::new(memory::MemoryFeature::default()));
    }
    features.push(Box::new(compaction::Compaction::default()));
    if tasks::enabled(agent) {
        features.push(Box::new(tasks::Tasks::default()));
    }
    if config.limits.phases.is_some() {
        features.push(Box::new(phases::Phases::default()));
    }
    if config.hollow_check {
        features.push(Box::new(hollow::HollowCheck));
    }
    if config.strategy != eve_compile::Strategy::React {
        features.push(Box::new(strategy::StrategyFeature));
    }
    if hooks::has_tool_before(agent) {
        features.push(Box::new(hooks::ToolBefore));
    }
    features.push(Box::new(breakers::Breakers));
    if questions::enabled(agent) {
        features.push(Box::new(questions::Questions));
    }
    if selfchange::enabled(agent) {
        features.push(Box::new(selfchange::SelfChange));
    }
    if sleep::enabled(agent) {
        features.push(Box::new(sleep::Sleep));
    }
    if build.has_children() {
        features.push(Box::new(subagents::Subagents));
    }
    features.push(Box::new(stubs::Stubs::default()));
    if authorize::enabled(agent) {
        features.push(Box::new(authorize::Authorize));
    }
    features.push(Box::new(safety_id::SafetyId::default()));
    // Last: the files' bytes go on the request as everything else has shaped it.
    features.push(Box::new(attachments::Attachments));
    features
}

/// The features a turn gets from what its message asked (`outputSchema`, `clientContext`), after
/// those of [`for_turn`]: the result is checked once every other feature let the answer stand.
pub(crate) fn for_input(input: &turn_input::TurnInput) -> Vec<Box<dyn TurnExtension>> {
    let mut features: Vec<Box<dyn TurnExtension>> = Vec::new();
    if !input.client_context.is_empty() {
        features.push(Box::new(client_context::ClientContext::new(
            input.client_context.clone(),
        )));
    }
    if let Some(schema) = &input.output_schema {
        features.push(Box::new(output::StructuredOutput::new(schema.clone())));
    }
    features
}
