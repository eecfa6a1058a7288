//! Dynamic tools: script tools with `dynamic: [session.started, turn.started]` define tools at run
//! time.
//!
//! Before the first step of a turn, each provider whose events include `turn.started` (or, in a
//! session's first turn, `session.started`) runs with `{"event", "session_id"}` on stdin and prints
//! a map `{NAME: {description, input_schema}}`. The definitions are journaled with the session in
//! one commit, together with the provider's own definition and the build it came from, so a resumed
//! session — also one that moved to a build without the provider — keeps the tools it was offered
//! and can still call them: a call runs the provider script of the build it was resolved on, with
//! `{"tool": NAME, "input": …}`. A provider that fails or prints something else than such a map
//! contributes nothing (and keeps what it defined before); nothing here panics on its output.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{StepStart, TurnExtension, TurnView, idempotency_key};
use crate::store::*;

/// Dynamic tools as a feature of the turn: the providers run once at a turn's first step.
pub(crate) struct DynamicTools;

#[async_trait]
impl TurnExtension for DynamicTools {
    fn name(&self) -> &'static str {
        "dynamic"
    }

    async fn prepare_step(
        &mut self,
        view: &TurnView<'_>,
        start: &mut StepStart,
    ) -> RuntimeResult<()> {
        if view.turn.step_index == 0 {
            resolve(view, start).await?;
        }
        Ok(())
    }
}

/// A definition a provider printed: name, description, input schema.
type Definition = (String, String, Value);

/// Longest name of a tool.
const MAX_NAME: usize = 64;

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() <= MAX_NAME
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__")
        && !eve_compile::RESERVED_TOOL_NAMES.contains(&name)
}

/// Reads a provider's output: `{NAME: {description, input_schema}}`. Returns the definitions and
/// a sentence per one that was skipped.
pub(super) fn parse_definitions(output: &Value) -> Result<(Vec<Definition>, Vec<String>), String> {
    let Value::Object(map) = output else {
        return Err(format!(
            "expected a JSON object `{{\"NAME\": {{\"description\", \"input_schema\"}}}}`, got {}",
            truncate(&output.to_string())
        ));
    };
    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    for (name, def) in map {
        if !valid_name(name) {
            skipped.push(format!("`{}`: not a valid tool name", truncate(name)));
            continue;
        }
        let description = def
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut schema = def
            .get("input_schema")
            .or_else(|| def.get("input"))
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        let Value::Object(fields) = &mut schema else {
            skipped.push(format!("`{name}`: input_schema is not an object"));
            continue;
        };
        fields
            .entry("type")
            .or_insert_with(|| Value::String("object".to_owned()));
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            skipped.push(format!("`{name}`: input_schema must have type object"));
            continue;
        }
        if let Err(e) = jsonschema::validator_for(&schema) {
            skipped.push(format!("`{name}`: invalid input_schema: {e}"));
            continue;
        }
        tools.push((name.clone(), description, schema));
    }
    Ok((tools, skipped))
}

fn truncate(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() {
        format!("{}…", &text[..end])
    } else {
        text.to_owned()
    }
}

/// Runs the dynamic tool providers due at the start of this turn (once per turn: a resume does
/// not run them again); what they define goes out before the step starts.
async fn resolve(view: &TurnView<'_>, start: &mut StepStart) -> RuntimeResult<()> {
    let turn = view.turn;
    {
        if view.build.providers.is_empty()
            || view
                .rt
                .inner
                .store
                .dynamic_resolved(view.id(), turn.seq)
                .await?
        {
            return Ok(());
        }
        let workspace = view.workspace()?;
        let agent_dir = view.build.files()?;
        let mut providers_done = Vec::new();
        let mut records = Vec::new();
        let mut detail = serde_json::Map::new();
        let now = now_ms();
        for provider in view.build.providers.clone() {
            let mut events = Vec::new();
            if turn.seq == 0 && provider.dynamic.iter().any(|e| e == "session.started") {
                events.push("session.started");
            }
            if provider.dynamic.iter().any(|e| e == "turn.started") {
                events.push("turn.started");
            }
            let mut defined: Vec<Definition> = Vec::new();
            let mut ok = false;
            for event in events {
                let ctx = view.tool_context(
                    format!("dyn_{}_{}", turn.seq, provider.name),
                    idempotency_key(
                        view.id(),
                        turn.seq,
                        &format!("dynamic:{}:{event}", provider.name),
                    ),
                    workspace.clone(),
                    agent_dir.clone(),
                    view.build.manifest.agent.effective_sandbox(&provider),
                );
                let input = json!({"event": event, "session_id": view.id()});
                let result = view
                    .rt
                    .run_tool(&provider, &input, &ctx, view.cancel.child_token())
                    .await;
                if !result.ok {
                    let error = result.error.unwrap_or_else(|| "failed".to_owned());
                    tracing::warn!(provider = %provider.name, %error, "a dynamic tool script failed");
                    detail.insert(provider.name.clone(), json!(error));
                    continue;
                }
                match parse_definitions(&result.output) {
                    Ok((tools, skipped)) => {
                        ok = true;
                        if !skipped.is_empty() {
                            detail.insert(provider.name.clone(), json!(skipped));
                        }
                        for tool in tools {
                            defined.retain(|(n, _, _)| *n != tool.0);
                            defined.push(tool);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(provider = %provider.name, %error, "a dynamic tool script printed no tool map");
                        detail.insert(provider.name.clone(), json!(error));
                    }
                }
            }
            if !ok {
                continue;
            }
            providers_done.push(provider.name.clone());
            let provider_json = serde_json::to_value(&provider)?;
            for (name, description, input_schema) in defined {
                if view.build.tool(&name).is_some()
                    || view.build.manifest.agent.subagent(&name).is_some()
                {
                    detail.insert(
                        name.clone(),
                        json!("skipped: a tool or subagent of the agent has this name"),
                    );
                    continue;
                }
                records.retain(|r: &DynamicToolRecord| r.name != name);
                records.push(DynamicToolRecord {
                    session_id: view.id().to_owned(),
                    name,
                    provider: provider.name.clone(),
                    description,
                    input_schema,
                    provider_tool: provider_json.clone(),
                    build_hash: view.build.hash.clone(),
                    turn_seq: turn.seq,
                    resolved_at: now,
                });
            }
        }
        start
            .before
            .push(Op::Composition(CompositionOp::PutDynamicTools {
                session_id: view.id().to_owned(),
                providers: providers_done,
                tools: records,
                turn_seq: turn.seq,
                detail: Value::Object(detail),
            }));
        start.tools_changed = true;
        Ok(())
    }
}
