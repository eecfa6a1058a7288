//! The judge: a model that grades a case's conversation against its rubric.
//!
//! The judge is configured apart from the agent's model, so an agent on a small local model can be
//! graded by a strong one: `judge.model` in the case, else `--judge-model`/`EVE_JUDGE_MODEL`; its
//! endpoint and key come from `EVE_JUDGE_BASE_URL` and `EVE_JUDGE_API_KEY` (else the provider's
//! own key variable), and a `mock/…` judge plays `EVE_JUDGE_MOCK_SCRIPT`. It is asked for JSON
//! `{"score": 0..1, "reason": "…"}`, and the case passes when the score reaches the threshold.

use anyhow::{Context, bail};
use eve_compile::evals::{EvalCase, JudgeExpect};
use eve_runtime::env_vars::{
    EVE_API_KEY, EVE_BASE_URL, EVE_JUDGE_API_KEY, EVE_JUDGE_BASE_URL, EVE_JUDGE_MOCK_SCRIPT,
    EVE_MOCK_SCRIPT, EVE_MODEL,
};
use eve_runtime::model::{Message, ModelRequest, ModelSettings, ToolChoice, client};
use serde_json::Value;

const SYSTEM: &str = "You grade the work of an AI agent. You are given a rubric and the \
conversation between a user and the agent, with the agent's tool calls and their results. \
Decide how well the agent's behaviour meets the rubric. Answer with one JSON object and \
nothing else: {\"score\": a number from 0 (fails the rubric) to 1 (fully meets it), \
\"reason\": \"one sentence\"}.";

fn settings(model: &str) -> anyhow::Result<ModelSettings> {
    let env = |k: &str| -> Option<String> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        match k {
            EVE_MODEL => None,
            EVE_BASE_URL => var(EVE_JUDGE_BASE_URL),
            EVE_API_KEY => var(EVE_JUDGE_API_KEY),
            EVE_MOCK_SCRIPT => var(EVE_JUDGE_MOCK_SCRIPT),
            other => var(other),
        }
    };
    let s = ModelSettings::resolve(Some(model), &env)?;
    s.validate()?;
    Ok(s)
}

/// Checks before anything runs that every judged case has a usable judge.
pub fn check_config(cases: &[EvalCase], default: Option<&str>) -> anyhow::Result<()> {
    for case in cases {
        let Some(j) = &case.expect.judge else {
            continue;
        };
        let Some(model) = j.model.as_deref().or(default) else {
            bail!(
                "case `{}` ({}:{}) has `expect.judge`, but no judge model is set: pass \
                 `--judge-model provider/name` or set EVE_JUDGE_MODEL (see docs/evals.md)",
                case.id,
                case.file,
                case.line
            );
        };
        settings(model).with_context(|| {
            format!(
                "the judge model `{model}` of case `{}` cannot be used",
                case.id
            )
        })?;
    }
    Ok(())
}

/// Asks the judge; returns its score and reason.
pub async fn grade(
    judge: &JudgeExpect,
    default: Option<&str>,
    transcript: &str,
) -> anyhow::Result<(f64, String)> {
    let model = judge
        .model
        .as_deref()
        .or(default)
        .context("no judge model is set")?;
    let settings = settings(model)?;
    let client = client(&settings)?;
    let request = ModelRequest {
        model: settings.model.clone(),
        system: SYSTEM.to_owned(),
        messages: vec![Message::user(format!(
            "Rubric:\n{}\n\nConversation:\n{transcript}\n\nAnswer with the JSON object only.",
            judge.rubric
        ))],
        tools: Vec::new(),
        reasoning: None,
        max_output_tokens: Some(400),
        tool_choice: ToolChoice::Auto,
        // A grader should grade the same transcript the same way.
        temperature: Some(0.0),
        output_schema: None,
        safety_identifier: None,
    };
    let response = client
        .stream(&request, &mut |_: eve_runtime::model::ModelEvent| {})
        .await?;
    parse(&response.content)
}

/// Reads `{"score", "reason"}` out of the judge's answer (a fenced or wordy answer included).
pub fn parse(answer: &str) -> anyhow::Result<(f64, String)> {
    let start = answer.find('{');
    let end = answer.rfind('}');
    let value: Option<Value> = match (start, end) {
        (Some(s), Some(e)) if s < e => serde_json::from_str(&answer[s..=e]).ok(),
        _ => None,
    };
    let Some(v) = value else {
        bail!(
            "the judge's answer is not a JSON object with `score`: {:?}",
            eve_compile::evals::check::short(answer, 200)
        );
    };
    let score = match &v["score"] {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|s: &f64| s.is_finite())
    .with_context(|| format!("the judge's answer has no numeric `score`: {v}"))?;
    let reason = v["reason"]
        .as_str()
        .unwrap_or("(no reason given)")
        .to_owned();
    Ok((score.clamp(0.0, 1.0), reason))
}

/// The conversation as the judge reads it.
pub fn transcript(events: &[(String, Value)]) -> String {
    let mut out = String::new();
    for (kind, data) in events {
        match kind.as_str() {
            "message.received" => {
                out.push_str(&format!(
                    "USER: {}\n",
                    data["message"].as_str().unwrap_or_default()
                ));
            }
            "message.completed" => {
                let m = data["message"].as_str().unwrap_or_default();
                if !m.is_empty() {
                    out.push_str(&format!("AGENT: {m}\n"));
                }
            }
            "actions.requested" => {
                for a in data["actions"].as_array().into_iter().flatten() {
                    let name = a["toolName"].as_str().or_else(|| a["name"].as_str());
                    out.push_str(&format!(
                        "AGENT CALLS {}: {}\n",
                        name.unwrap_or("?"),
                        a["input"]
                    ));
                }
            }
            "action.result" => {
                let r = &data["result"];
                let text = match &r["output"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push_str(&format!(
                    "TOOL RESULT: {}\n",
                    eve_compile::evals::check::short(&text, 2000)
                ));
            }
            _ => {}
        }
    }
    out
}
