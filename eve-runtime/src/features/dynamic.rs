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

use std::path::PathBuf;

use eve_compile::Tool;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::turn::TurnDriver;
use super::{Runtime, RuntimeResult};
use crate::store::*;
use crate::tools::{ToolContext, ToolResult, run_tool};

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

impl Runtime {
    /// Files of build `hash`: where the scripts of a dynamic tool resolved on it live.
    pub(super) fn build_files(&self, hash: &str) -> RuntimeResult<PathBuf> {
        let dir = self.inner.config.state_dir.join("builds").join(hash);
        crate::engine::build::unpack(hash, &dir)
    }
}

/// Runs a call of a dynamic tool: its provider script, on the build it was resolved on.
pub(super) async fn run_dynamic(
    rt: &Runtime,
    record: &DynamicToolRecord,
    provider: &Tool,
    input: &Value,
    mut ctx: ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    ctx.agent_dir = match rt.build_files(&record.build_hash) {
        Ok(dir) => dir,
        Err(e) => return ToolResult::failure(e.to_string(), std::time::Duration::ZERO),
    };
    let payload = json!({"tool": record.name, "input": input});
    run_tool(provider, &payload, &ctx, cancel).await
}

impl TurnDriver<'_> {
    /// Runs the dynamic tool providers due at the start of this turn (once per turn: a resume does
    /// not run them again) and journals what they define.
    pub(super) async fn resolve_dynamic(&mut self, turn: &TurnRecord) -> RuntimeResult<()> {
        if self.build.providers.is_empty()
            || self
                .rt
                .inner
                .store
                .dynamic_resolved(self.id(), turn.seq)
                .await?
        {
            return Ok(());
        }
        let workspace = self.workspace()?;
        let agent_dir = self.build.files()?;
        let mut providers_done = Vec::new();
        let mut records = Vec::new();
        let mut detail = serde_json::Map::new();
        let now = now_ms();
        for provider in self.build.providers.clone() {
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
                let ctx = ToolContext {
                    session_id: self.session.id.clone(),
                    call_id: format!("dyn_{}_{}", turn.seq, provider.name),
                    idempotency_key: super::turn::idempotency_key(
                        &self.session.id,
                        turn.seq,
                        &format!("dynamic:{}:{event}", provider.name),
                    ),
                    workspace: workspace.clone(),
                    agent_dir: agent_dir.clone(),
                    env: self.rt.inner.config.env.clone(),
                    http: self.rt.inner.http.clone(),
                    exec: self.rt.inner.exec.clone(),
                    confinement: self.rt.confinement(
                        &self.build.manifest.agent,
                        self.build.manifest.agent.effective_sandbox(&provider),
                        Some(&workspace),
                        Some(&agent_dir),
                    ),
                    network: None,
                };
                let input = json!({"event": event, "session_id": self.session.id});
                let result = run_tool(&provider, &input, &ctx, self.cancel.child_token()).await;
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
                if self.build.tool(&name).is_some()
                    || self.build.manifest.agent.subagent(&name).is_some()
                {
                    detail.insert(
                        name.clone(),
                        json!("skipped: a tool or subagent of the agent has this name"),
                    );
                    continue;
                }
                records.retain(|r: &DynamicToolRecord| r.name != name);
                records.push(DynamicToolRecord {
                    session_id: self.session.id.clone(),
                    name,
                    provider: provider.name.clone(),
                    description,
                    input_schema,
                    provider_tool: provider_json.clone(),
                    build_hash: self.build.hash.clone(),
                    turn_seq: turn.seq,
                    resolved_at: now,
                });
            }
        }
        let mut batch = Batch::new();
        batch.push(Op::Composition(CompositionOp::PutDynamicTools {
            session_id: self.session.id.clone(),
            providers: providers_done,
            tools: records,
            turn_seq: turn.seq,
            detail: Value::Object(detail),
        }));
        self.rt.commit(batch).await?;
        self.extra = None;
        Ok(())
    }
}
