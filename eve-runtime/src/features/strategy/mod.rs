//! Turn strategies beyond the one tool loop (`strategy: plan | reflect`).
//!
//! **plan**: the turn's first model call is offered one tool, `submit_plan`, and must call it
//! with a plan (steps with ids, descriptions and dependencies). The engine validates it as a DAG
//! (a rejected plan is the call's error, and the model plans once more); the accepted plan is
//! the call's journaled output and a `plan.created` event. From then on the engine, not the
//! model, makes the steps' calls: each model step of the turn is replaced by a journaled
//! response asking for every step whose dependencies are done, as `plan_step` calls that run a
//! child session of this agent (with `strategy: react`) through the subagent machinery, in
//! parallel, on what remains of the turn's budget. A failed step is run once more, then reported.
//! When no step is left to run, a last model call (no tools) answers from the steps' results.
//! Everything the plan does is a journaled call, so a killed process resumes it like any other
//! turn: running steps reconnect to their child sessions.
//!
//! **reflect**: a final answer is reviewed by a critic (`critic:` or the `critic` subagent's
//! instructions and model) in one model call whose verdict is committed with the answer. A
//! verdict other than `ACCEPT` sends the answer back as a user message carrying the objections,
//! at most `max_rounds` times per turn; every review is a `reflect.round` event, and the end a
//! `reflect.completed` event.

use std::collections::{HashMap, HashSet};

use eve_compile::{Agent, Critic, Strategy};
use serde_json::{Value, json};

use async_trait::async_trait;

use crate::engine::RuntimeResult;
use crate::engine::events as ev;
use crate::engine::turn::seam::{AnswerVerdict, Builtin, Handled, Shaped, TurnExtension, TurnView};
use crate::model::{
    FinishReason, Message, ModelRequest, ModelResponse, SideError, ToolCall, ToolChoice, ToolSpec,
    Usage, side_call,
};
use crate::store::*;

/// The tool the planning step calls.
pub(crate) const SUBMIT_PLAN: &str = "submit_plan";
/// The call that runs one step of a plan in a child session.
pub(crate) const PLAN_STEP: &str = "plan_step";
/// Appended to an agent's manifest path for the child sessions that run plan steps.
pub(crate) const WORKER_SUFFIX: &str = "#step";
/// Appended to an agent's manifest path for its critic (which model it uses).
pub(crate) const CRITIC_SUFFIX: &str = "#critic";
/// The prefix of the message that sends an answer back to the model.
pub(crate) const CRITIC_PREFIX: &str = "[eve critic]";
/// Most steps a plan may have.
const MAX_PLAN_STEPS: usize = 12;

/// One step of a validated plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlanStep {
    pub(crate) id: String,
    pub(crate) description: String,
    pub(crate) depends_on: Vec<String>,
}

/// What the next model step of a `plan` turn is.
pub(crate) enum PlanAction {
    /// Ask the model for a plan (`attempt` 0 or 1).
    Plan,
    /// Run these steps (engine-made calls, journaled as the step's response).
    Wave(Vec<ToolCall>),
    /// Answer from the steps' results; `failed` names the steps that failed for good.
    Synthesize { failed: Vec<String> },
    /// The model gave no valid plan twice.
    NoPlan(String),
}

/// The `submit_plan` tool.
pub(crate) fn submit_plan_spec() -> ToolSpec {
    ToolSpec {
        name: SUBMIT_PLAN.to_owned(),
        description: "Submit the plan for this request: the steps that get it done, each with a \
                      short id, what to do, and the ids of the steps whose results it needs. \
                      Steps without dependencies between them run at the same time."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_PLAN_STEPS,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "Short unique id, such as `fetch`."},
                            "description": {"type": "string", "description": "What this step does, with everything it needs to know."},
                            "depends_on": {"type": "array", "items": {"type": "string"},
                                           "description": "Ids of the steps whose results this step needs."}
                        },
                        "required": ["id", "description"]
                    }
                }
            },
            "required": ["steps"]
        }),
    }
}

/// The system prompt's addition for the planning step.
pub(crate) const PLANNING_NOTE: &str = "First make a plan: call `submit_plan` with the steps \
    that get this request done. Each step runs on its own, with the results of the steps it \
    depends on; independent steps run at the same time. You will answer from their results.";

/// The system prompt's addition for the synthesis step.
pub(crate) fn synthesis_note(failed: &[String]) -> String {
    let mut note = "Every step of your plan has run; their results are the `plan_step` results \
                    above. Answer the user's request now from those results."
        .to_owned();
    if !failed.is_empty() {
        note.push_str(&format!(
            " These steps failed even when run again, so say what could not be done: {}.",
            failed
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    note
}

/// Validates a `submit_plan` input: unique non-empty ids, known dependencies, no cycle.
pub(crate) fn validate_plan(input: &Value) -> Result<Vec<PlanStep>, Vec<String>> {
    let mut errors = Vec::new();
    let Some(items) = input.get("steps").and_then(Value::as_array) else {
        return Err(vec!["`steps` must be a list of steps".to_owned()]);
    };
    if items.is_empty() {
        errors.push("the plan has no steps".to_owned());
    }
    if items.len() > MAX_PLAN_STEPS {
        errors.push(format!(
            "the plan has {} steps; at most {MAX_PLAN_STEPS} are allowed",
            items.len()
        ));
    }
    let mut steps = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let id = item
            .get("id")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        let description = item
            .get("description")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if id.is_empty() {
            errors.push(format!("step {} has no `id`", i + 1));
            continue;
        }
        if description.is_empty() {
            errors.push(format!("step `{id}` has no `description`"));
        }
        let depends_on: Vec<String> = item
            .get("depends_on")
            .and_then(Value::as_array)
            .map(|d| {
                d.iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        steps.push(PlanStep {
            id: id.to_owned(),
            description: description.to_owned(),
            depends_on,
        });
    }
    let mut seen = HashSet::new();
    for step in &steps {
        if !seen.insert(step.id.as_str()) {
            errors.push(format!("two steps have the id `{}`", step.id));
        }
    }
    for step in &steps {
        for dep in &step.depends_on {
            if dep == &step.id {
                errors.push(format!("step `{}` depends on itself", step.id));
            } else if !seen.contains(dep.as_str()) {
                errors.push(format!(
                    "step `{}` depends on `{dep}`, which is not a step of the plan",
                    step.id
                ));
            }
        }
    }
    if errors.is_empty() {
        // Kahn's algorithm: whatever never becomes ready is on a cycle.
        let mut done: HashSet<&str> = HashSet::new();
        loop {
            let ready: Vec<&str> = steps
                .iter()
                .filter(|s| !done.contains(s.id.as_str()))
                .filter(|s| s.depends_on.iter().all(|d| done.contains(d.as_str())))
                .map(|s| s.id.as_str())
                .collect();
            if ready.is_empty() {
                break;
            }
            done.extend(ready);
        }
        let cyclic: Vec<&str> = steps
            .iter()
            .map(|s| s.id.as_str())
            .filter(|id| !done.contains(id))
            .collect();
        if !cyclic.is_empty() {
            errors.push(format!(
                "the dependencies form a cycle through {}",
                cyclic
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if errors.is_empty() {
        Ok(steps)
    } else {
        Err(errors)
    }
}

/// A plan as journaled (the `submit_plan` call's output) and shown in `plan.created`.
pub(crate) fn plan_json(steps: &[PlanStep]) -> Value {
    json!({"steps": steps.iter().map(|s| json!({
        "id": s.id, "description": s.description, "depends_on": s.depends_on,
    })).collect::<Vec<_>>()})
}

fn plan_from_json(output: &Value) -> Vec<PlanStep> {
    validate_plan(output).unwrap_or_default()
}

/// The agent a plan step's child session runs: this agent with `strategy: react`.
pub(crate) fn worker_agent(agent: &Agent) -> Agent {
    let mut worker = agent.clone();
    worker.path = format!("{}{WORKER_SUFFIX}", agent.path);
    worker.config.strategy = Strategy::React;
    worker.description = Some(format!("Runs one step of a plan of `{}`.", agent.name));
    worker
}

/// The text of a call's output, as the model saw it.
fn output_text(output: Option<&Value>) -> String {
    match output {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) if o.contains_key("answer") => {
            o["answer"].as_str().unwrap_or_default().to_owned()
        }
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// The `plan` and `reflect` strategies as a feature of the turn.
pub(crate) struct StrategyFeature;

#[async_trait]
impl TurnExtension for StrategyFeature {
    fn name(&self) -> &'static str {
        "strategy"
    }

    /// A plan and a critic read the journal between `step.started` and the model call.
    fn lets_hold(&self, _view: &TurnView<'_>) -> bool {
        false
    }

    fn builtins(&self, view: &TurnView<'_>) -> Vec<Builtin> {
        if !plans(view) {
            return Vec::new();
        }
        vec![Builtin {
            name: SUBMIT_PLAN.to_owned(),
            policy: None,
        }]
    }

    async fn call_builtin(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        let turn = view.turn;
        let (status, output) = match validate_plan(&call.input) {
            Ok(steps) => (CallStatus::Completed, plan_json(&steps)),
            Err(errors) => (
                CallStatus::Failed,
                json!(format!(
                    "The plan was not accepted; submit a corrected one:\n{}",
                    errors
                        .iter()
                        .map(|e| format!("- {e}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )),
            ),
        };
        let (kind, data) = if status == CallStatus::Completed {
            (
                ev::PLAN_CREATED,
                ev::plan_created(turn, turn.step_index, &output),
            )
        } else {
            (
                ev::PLAN_REJECTED,
                ev::plan_rejected(turn, turn.step_index, &output),
            )
        };
        let mut writes = Batch::new();
        writes.event(view.id(), kind, data);
        Ok(Handled::Settle {
            status,
            output,
            writes,
        })
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        if !plans(view) {
            return Ok(Shaped::Call);
        }
        match plan_action(view).await? {
            PlanAction::Plan => {
                request.tools = vec![submit_plan_spec()];
                request.system.push_str("\n\n");
                request.system.push_str(PLANNING_NOTE);
                request.tool_choice = ToolChoice::Tool(SUBMIT_PLAN.to_owned());
            }
            PlanAction::Wave(calls) => return Ok(Shaped::Respond(wave_response(calls))),
            PlanAction::Synthesize { failed } => {
                request.tools = Vec::new();
                request.system.push_str("\n\n");
                request.system.push_str(&synthesis_note(&failed));
            }
            PlanAction::NoPlan(message) => return Ok(Shaped::Fail("plan_failed", message)),
        }
        Ok(Shaped::Call)
    }

    async fn final_answer(
        &mut self,
        view: &TurnView<'_>,
        answer: &str,
    ) -> RuntimeResult<AnswerVerdict> {
        let (turn, step) = (view.turn, view.turn.step_index);
        if let Some((critic, rounds)) = review_due(view).await? {
            let round = rounds + 1;
            return Ok(match review(view, &critic, answer).await? {
                Verdict::Revise(objections) => AnswerVerdict::SendBack {
                    message: send_back(round, &objections),
                    events: vec![(
                        ev::REFLECT_ROUND,
                        ev::reflect_round(turn, step, round, "revise", Some(&objections)),
                    )],
                },
                Verdict::Accept => AnswerVerdict::Accept(vec![
                    (
                        ev::REFLECT_ROUND,
                        ev::reflect_round(turn, step, round, "accept", None),
                    ),
                    (
                        ev::REFLECT_COMPLETED,
                        ev::reflect_completed(turn, step, round, true, answer),
                    ),
                ]),
                Verdict::Error(error) => {
                    tracing::warn!(session = %view.id(), %error, "the critic failed; the answer stands");
                    AnswerVerdict::Accept(vec![
                        (
                            ev::REFLECT_ROUND,
                            ev::reflect_round(turn, step, round, "error", Some(&error)),
                        ),
                        (
                            ev::REFLECT_COMPLETED,
                            ev::reflect_completed(turn, step, round, false, answer),
                        ),
                    ])
                }
            });
        }
        if view.build.manifest.agent.config.strategy == Strategy::Reflect {
            // No review left (`max_rounds` spent, or no step left): the answer is final.
            let rounds = critic_rounds(view).await?.len() as u32;
            return Ok(AnswerVerdict::Accept(vec![(
                ev::REFLECT_COMPLETED,
                ev::reflect_completed(turn, step, rounds, false, answer),
            )]));
        }
        Ok(AnswerVerdict::Accept(Vec::new()))
    }
}

/// Whether this turn plans (`strategy: plan`).
fn plans(view: &TurnView<'_>) -> bool {
    view.build.manifest.agent.config.strategy == Strategy::Plan
}

/// The first user message of the turn: the request a plan or a critic works from.
async fn request_text(view: &TurnView<'_>) -> RuntimeResult<String> {
    let turn = view.turn;
    let rows = view.rt.inner.store.context(view.id()).await?;
    Ok(rows
        .iter()
        .filter(|r| r.turn_seq == Some(turn.seq) && r.body["role"] == "user")
        .find_map(|r| r.body["content"].as_str().map(str::to_owned))
        .unwrap_or_default())
}

/// What the next model step of a `plan` turn is, from the turn's journaled calls.
async fn plan_action(view: &TurnView<'_>) -> RuntimeResult<PlanAction> {
    let turn = view.turn;
    let calls = view.rt.inner.store.tool_calls(view.id(), turn.seq).await?;
    let plans: Vec<&ToolCallRecord> = calls.iter().filter(|c| c.name == SUBMIT_PLAN).collect();
    let Some(accepted) = plans
        .iter()
        .rev()
        .find(|c| c.status == CallStatus::Completed && !c.is_error)
    else {
        if plans.len() >= 2 {
            let last = output_text(plans.last().and_then(|c| c.output.as_ref()));
            return Ok(PlanAction::NoPlan(format!(
                "the model gave no valid plan in two attempts (strategy: plan): {last}"
            )));
        }
        return Ok(PlanAction::Plan);
    };
    let steps = plan_from_json(accepted.output.as_ref().unwrap_or(&Value::Null));
    let mut attempts: HashMap<&str, (usize, Option<String>)> = HashMap::new();
    for call in calls.iter().filter(|c| c.name == PLAN_STEP) {
        let Some(id) = call.input.get("step").and_then(Value::as_str) else {
            continue;
        };
        let entry = attempts.entry(id).or_insert((0, None));
        entry.0 += 1;
        if call.status == CallStatus::Completed && !call.is_error {
            entry.1 = Some(output_text(call.output.as_ref()));
        }
    }
    let done = |id: &str| attempts.get(id).and_then(|(_, r)| r.as_ref());
    let failed_for_good = |id: &str| {
        attempts
            .get(id)
            .is_some_and(|(n, r)| r.is_none() && *n >= 2)
    };
    let request = request_text(view).await?;
    let mut wave = Vec::new();
    for step in &steps {
        if done(&step.id).is_some() || failed_for_good(&step.id) {
            continue;
        }
        if !step.depends_on.iter().all(|d| done(d).is_some()) {
            continue;
        }
        let attempt = attempts.get(step.id.as_str()).map(|(n, _)| *n).unwrap_or(0);
        let mut message = format!(
            "You carry out one step of a plan made for this request:\n\n{request}\n\n\
             Your step (`{}`): {}\n",
            step.id, step.description
        );
        if !step.depends_on.is_empty() {
            message.push_str("\nResults of the steps it depends on:\n");
            for dep in &step.depends_on {
                message.push_str(&format!(
                    "- `{dep}`: {}\n",
                    done(dep).cloned().unwrap_or_default()
                ));
            }
        }
        if attempt > 0 {
            message.push_str("\nAn earlier attempt at this step failed; try again.\n");
        }
        message.push_str("\nDo this step only, and answer with its result.");
        let safe: String = step
            .id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        wave.push(ToolCall {
            id: format!("plan_{}_{safe}_{attempt}", turn.seq),
            name: PLAN_STEP.to_owned(),
            input: json!({"step": step.id, "message": message}),
        });
    }
    if !wave.is_empty() {
        return Ok(PlanAction::Wave(wave));
    }
    let failed = steps
        .iter()
        .filter(|s| done(&s.id).is_none())
        .map(|s| s.id.clone())
        .collect();
    Ok(PlanAction::Synthesize { failed })
}

/// The response a plan's wave is journaled as (the engine's, not the model's).
pub(crate) fn wave_response(calls: Vec<ToolCall>) -> ModelResponse {
    ModelResponse {
        content: String::new(),
        reasoning: None,
        tool_calls: calls,
        usage: Usage::default(),
        finish_reason: FinishReason::ToolCalls,
    }
}

/// The critic's verdict on one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Accept,
    Revise(String),
    /// The review could not be made (the critic's model failed): the answer stands.
    Error(String),
}

/// Reads a critic's reply: `ACCEPT`, or objections (after an optional `REVISE` line).
pub(crate) fn parse_verdict(reply: &str) -> Verdict {
    let text = reply.trim();
    let first = text.lines().next().unwrap_or("").trim();
    let word = first
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_ascii_uppercase();
    if word == "ACCEPT" || word == "ACCEPTED" {
        return Verdict::Accept;
    }
    let objections = if word == "REVISE" {
        text[first.len()..].trim()
    } else {
        text
    };
    if objections.is_empty() {
        return Verdict::Revise("the critic asked for a revision without saying why".to_owned());
    }
    Verdict::Revise(objections.to_owned())
}

const CRITIC_FORMAT: &str = "Reply with the single word ACCEPT when the answer is acceptable. \
    Otherwise reply with REVISE on the first line, then your concrete objections, one per line.";

/// The critic of a `reflect` turn, when the answer may still be reviewed: `(critic, rounds
/// already sent back)`.
async fn review_due(view: &TurnView<'_>) -> RuntimeResult<Option<(Critic, u32)>> {
    let turn = view.turn;
    let config = &view.build.manifest.agent.config;
    if config.strategy != Strategy::Reflect {
        return Ok(None);
    }
    let Some(critic) = config.critic.clone() else {
        return Ok(None);
    };
    let rounds = critic_rounds(view).await?.len() as u32;
    if rounds >= critic.max_rounds
        || turn.step_index + 1 >= u64::from(config.limits.max_steps_per_turn)
    {
        return Ok(None);
    }
    Ok(Some((critic, rounds)))
}

/// The earlier rounds of this turn: each answer sent back and the critic's objections.
async fn critic_rounds(view: &TurnView<'_>) -> RuntimeResult<Vec<(String, String)>> {
    let turn = view.turn;
    let rows = view.rt.inner.store.context(view.id()).await?;
    let mut rounds = Vec::new();
    let mut last_answer = String::new();
    for row in rows.iter().filter(|r| r.turn_seq == Some(turn.seq)) {
        match row.body["role"].as_str() {
            Some("assistant") => {
                if let Some(text) = row.body["content"].as_str()
                    && !text.is_empty()
                {
                    last_answer = text.to_owned();
                }
            }
            Some("user") => {
                if let Some(objections) = row.body["content"]
                    .as_str()
                    .and_then(|c| c.strip_prefix(CRITIC_PREFIX))
                {
                    let objections = objections
                        .split_once("\n\n")
                        .map(|(_, o)| o)
                        .unwrap_or(objections);
                    let objections = objections
                        .rsplit_once("\n\n")
                        .map(|(o, _)| o)
                        .unwrap_or(objections);
                    rounds.push((last_answer.clone(), objections.trim().to_owned()));
                }
            }
            _ => {}
        }
    }
    Ok(rounds)
}

/// One review of `answer` by the critic. Earlier rounds go with it as history, so the critic
/// sees what it objected to before.
async fn review(view: &TurnView<'_>, critic: &Critic, answer: &str) -> RuntimeResult<Verdict> {
    let turn = view.turn;
    let agent = &view.build.manifest.agent;
    let mut critic_agent = agent.clone();
    critic_agent.name = "critic".to_owned();
    critic_agent.path = format!("{}{CRITIC_SUFFIX}", agent.path);
    critic_agent.config.model = critic.model.clone().or_else(|| agent.config.model.clone());
    let model = match view
        .rt
        .inner
        .config
        .models
        .resolve_in(&critic_agent, view.root)
    {
        Ok(m) => m,
        Err(e) => return Ok(Verdict::Error(e.to_string())),
    };
    let request = request_text(view).await?;
    let calls = view.rt.inner.store.tool_calls(view.id(), turn.seq).await?;
    let tools: Vec<String> = calls
        .iter()
        .filter(|c| c.kind != "load-skill")
        .map(|c| format!("- {} ({})", c.name, c.status))
        .collect();
    let brief = |answer: &str| {
        let mut text = format!("The user's request:\n{request}\n\nThe answer:\n{answer}");
        if !tools.is_empty() {
            text.push_str(&format!(
                "\n\nTool calls made for it:\n{}",
                tools.join("\n")
            ));
        }
        text
    };
    let mut messages = Vec::new();
    for (earlier, objections) in critic_rounds(view).await? {
        messages.push(Message::user(brief(&earlier)));
        messages.push(Message::Assistant {
            content: format!("REVISE\n{objections}"),
            reasoning: None,
            tool_calls: Vec::new(),
        });
    }
    messages.push(Message::user(brief(answer)));
    let request = ModelRequest::side(
        &model.model,
        format!("{}\n\n{CRITIC_FORMAT}", critic.instructions.trim()),
        messages,
    );
    let result = match side_call(model.client.as_ref(), &request, Some(view.cancel), None).await {
        Err(SideError::Cancelled) => return Ok(Verdict::Error("cancelled".to_owned())),
        other => other,
    };
    Ok(match result {
        Ok(response) => parse_verdict(&response.content),
        Err(e) => Verdict::Error(e.to_string()),
    })
}

/// The message that sends an answer back with the critic's objections.
pub(crate) fn send_back(round: u32, objections: &str) -> String {
    format!(
        "{CRITIC_PREFIX} A reviewer sent your answer back (round {round}). Its objections:\n\n\
         {objections}\n\nRevise your answer to meet them; use tools if you need to."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(steps: Value) -> Result<Vec<PlanStep>, Vec<String>> {
        validate_plan(&json!({"steps": steps}))
    }

    #[test]
    fn a_dag_is_accepted_and_cycles_and_unknown_dependencies_are_not() {
        let ok = plan(json!([
            {"id": "a", "description": "A"},
            {"id": "b", "description": "B", "depends_on": ["a"]},
            {"id": "c", "description": "C", "depends_on": ["a"]},
            {"id": "d", "description": "D", "depends_on": ["b", "c"]}
        ]))
        .unwrap();
        assert_eq!(ok.len(), 4);
        let cycle = plan(json!([
            {"id": "a", "description": "A", "depends_on": ["b"]},
            {"id": "b", "description": "B", "depends_on": ["a"]}
        ]))
        .unwrap_err();
        assert!(cycle[0].contains("cycle"), "{cycle:?}");
        let unknown =
            plan(json!([{"id": "a", "description": "A", "depends_on": ["z"]}])).unwrap_err();
        assert!(unknown[0].contains("`z`"), "{unknown:?}");
        let dup = plan(json!([{"id": "a", "description": "A"}, {"id": "a", "description": "B"}]))
            .unwrap_err();
        assert!(dup[0].contains("two steps"), "{dup:?}");
        assert!(plan(json!([])).is_err());
        assert!(validate_plan(&json!({"steps": "no"})).is_err());
    }

    #[test]
    fn verdicts_read_accept_and_objections() {
        assert_eq!(parse_verdict("ACCEPT"), Verdict::Accept);
        assert_eq!(parse_verdict(" accept. "), Verdict::Accept);
        assert_eq!(
            parse_verdict("REVISE\n- the date is wrong"),
            Verdict::Revise("- the date is wrong".to_owned())
        );
        assert_eq!(
            parse_verdict("The date is wrong."),
            Verdict::Revise("The date is wrong.".to_owned())
        );
    }
}
