//! What a tool name stands for in a turn: a tool of the build, a subagent, an MCP tool, the
//! catalogue (`search_tools`/`call_tool`), or a dynamic tool journaled with the session.
//!
//! The build's tools and subagents are known from the manifest; MCP tools come from the agent's
//! connections (listed once per turn run, servers started on first use) and dynamic tools from the
//! store. Each target carries a *policy* — a tool definition whose `approval` and `effect` the
//! engine applies exactly as for the build's own tools (approval, resume, circuit breakers).
//!
//! The catalogue is offered when the build has deferred tools (not offered, named in the system
//! prompt) or when MCP connections offer too many tools to send every schema. `call_tool` naming a
//! tool resolves to that tool: its policy, its breaker, its hooks and its input (`input.input`), so
//! a call through the catalogue is the named tool's call in all but name.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::{Approval, Effect, Tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::TurnDriver;
use super::seam::TurnView;
use crate::engine::{LoadedBuild, Runtime, RuntimeResult};
use crate::features::subagents::{policy_tool, synthetic_tool};
use crate::mcp::{
    CALL_TOOL, CatalogueEntry, Catalogued, McpManager, McpTool, SEARCH_TOOLS, catalogue_tools_for,
    search_catalogue, use_catalogue,
};
use crate::model::{Message, ToolSpec};
use crate::store::{DynamicToolRecord, ToolCallRecord};
use crate::tools::{ToolResult, Validators};

/// What runs a call.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // one per call, short-lived: a subagent's Agent is not worth a Box
pub(super) enum Target {
    /// A tool of the build (script, `run:`, HTTP, built-in).
    Build(Tool),
    /// A subagent: the call runs a child session.
    Subagent(eve_compile::Agent),
    /// An MCP tool.
    Mcp(McpManager),
    /// `search_tools`, or `call_tool` naming a catalogued MCP tool (or no tool at all).
    Catalogue(Catalogue),
    /// A dynamic tool and its provider script.
    Dynamic(Box<DynamicToolRecord>, Box<Tool>),
}

/// A resolved call target with its policy.
#[derive(Clone)]
pub(super) struct Resolved {
    /// Approval and effect (and name, description, schema) as the engine applies them.
    pub(crate) policy: Tool,
    /// What runs.
    pub(crate) target: Target,
    /// Called as `call_tool {name, input}`: the policy is the named tool's, whose input is
    /// `input.input`.
    pub(crate) via_call_tool: bool,
}

impl Resolved {
    fn new(policy: Tool, target: Target) -> Self {
        Self {
            policy,
            target,
            via_call_tool: false,
        }
    }

    /// The call as the named tool's own (what `tool.before` hooks see): a `call_tool` call becomes
    /// a call of the tool it names, with its inner input.
    pub(super) fn as_called<'a>(&self, call: &'a ToolCallRecord) -> Cow<'a, ToolCallRecord> {
        if !self.via_call_tool {
            return Cow::Borrowed(call);
        }
        let mut named = call.clone();
        named.name = self.policy.name.clone();
        named.input = inner_input(&call.input);
        Cow::Owned(named)
    }

    /// The call's input with `input` (for the named tool, as a hook rewrote it) put back.
    pub(super) fn with_input(&self, call_input: &Value, input: Value) -> Value {
        if !self.via_call_tool {
            return input;
        }
        let mut outer = call_input.clone();
        if let Some(fields) = outer.as_object_mut() {
            fields.insert("input".to_owned(), input);
        }
        outer
    }

    /// The input the target runs with: a build tool called through `call_tool` gets the inner
    /// input; the catalogue itself takes the whole `call_tool` input.
    pub(super) fn run_input(&self, call_input: &Value) -> Value {
        match &self.target {
            Target::Build(_) if self.via_call_tool => inner_input(call_input),
            _ => call_input.clone(),
        }
    }
}

/// The input `call_tool` passes on (`{}` when it gives none).
fn inner_input(call_input: &Value) -> Value {
    call_input
        .get("input")
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// What `search_tools` searches and `call_tool` reaches beyond the build's tools.
#[derive(Clone)]
pub(super) struct Catalogue {
    /// The build's deferred tools.
    deferred: Arc<Vec<CatalogueEntry>>,
    /// The MCP connections, when their tools are catalogued rather than offered.
    mcp: Option<McpManager>,
}

impl Catalogue {
    /// Runs `search_tools`, or `call_tool` of a catalogued MCP tool; `None` when `name` is neither.
    /// (`call_tool` of a build tool never comes here: it resolves to [`Target::Build`].)
    pub(super) async fn call_catalogue(
        &self,
        name: &str,
        input: Value,
        cancel: CancellationToken,
        scope: crate::mcp::CallScope<'_>,
    ) -> Option<ToolResult> {
        match name {
            SEARCH_TOOLS => {
                let mut entries = self.deferred.as_ref().clone();
                if let Some(manager) = &self.mcp {
                    entries.extend(manager.entries_for(scope.principal).await);
                }
                Some(search_catalogue(entries, &input))
            }
            CALL_TOOL => {
                let named = input.get("name").and_then(Value::as_str).unwrap_or("");
                match &self.mcp {
                    Some(manager) if named.contains("__") => {
                        manager.call_catalogue(name, input, cancel, scope).await
                    }
                    _ => Some(ToolResult::failure(
                        format!(
                            "There is no tool named `{named}` to call: find tools and their \
                             exact names with `{SEARCH_TOOLS}`."
                        ),
                        Duration::ZERO,
                    )),
                }
            }
            _ => None,
        }
    }
}

/// Tools of a turn run beyond the build's: MCP and dynamic ones.
#[derive(Default)]
pub(super) struct Extra {
    specs: Vec<ToolSpec>,
    mcp: Option<McpManager>,
    mcp_tools: HashMap<String, McpTool>,
    catalogue: Option<Catalogue>,
    dynamic: HashMap<String, (DynamicToolRecord, Tool)>,
    validators: Option<Validators>,
}

impl Runtime {
    /// The MCP manager of an agent's connections (one per distinct set of connections, shared by
    /// every session and build using it); `None` when the agent has none.
    pub(crate) fn mcp_manager(&self, build: &super::LoadedBuild) -> Option<McpManager> {
        let connections = &build.manifest.agent.connections;
        if connections.is_empty() {
            return None;
        }
        let key = serde_json::to_string(connections).unwrap_or_default();
        if let Some(manager) = self.inner.mcp.lock().ok()?.get(&key) {
            return Some(manager.clone());
        }
        // Stdio servers run in the build's files (`_mcp/server.py`, …).
        let workdir = build.files().unwrap_or_else(|e| {
            tracing::error!(build = %build.hash, error = %e, "the MCP servers have no files to run in");
            build.dir.join(eve_compile::pack::FILES)
        });
        let mut managers = self.inner.mcp.lock().ok()?;
        Some(
            managers
                .entry(key)
                .or_insert_with(|| {
                    let agent = &build.manifest.agent;
                    let confinements = connections
                        .iter()
                        .map(|c| {
                            let confinement = self.confinement(
                                agent,
                                agent.connection_sandbox(c),
                                None,
                                Some(&workdir),
                            );
                            (c.name.clone(), confinement)
                        })
                        .collect();
                    McpManager::with_exec(
                        connections,
                        self.inner.config.env.clone(),
                        workdir.clone(),
                        self.inner.exec.clone(),
                        confinements,
                        Some(self.inner.store.clone()),
                    )
                })
                .clone(),
        )
    }

    /// The MCP connections of the current build that are down (failed to start, exited, or
    /// circuit open), with why: what a terminal says after a turn, so a user learns it where
    /// they are and not only from the model's reply.
    /// Each is `(name, source file, why)`.
    pub async fn connections_down(&self) -> Vec<(String, String, String)> {
        let Ok(build) = self.inner.builds.current() else {
            return Vec::new();
        };
        let Some(manager) = self.mcp_manager(&build) else {
            return Vec::new();
        };
        let source = |name: &str| {
            build
                .manifest
                .agent
                .connections
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.source.clone())
                .unwrap_or_default()
        };
        manager
            .status()
            .await
            .into_iter()
            .filter(|s| {
                matches!(
                    s.state,
                    crate::mcp::ConnectionState::Stopped | crate::mcp::ConnectionState::CircuitOpen
                )
            })
            .filter_map(|s| {
                let source = source(&s.name);
                Some((s.name, source, s.last_error?))
            })
            .collect()
    }

    /// Stops every MCP server this runtime started.
    pub async fn shutdown(&self) {
        let managers: Vec<McpManager> = match self.inner.mcp.lock() {
            Ok(mut m) => m.drain().map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        for manager in managers {
            manager.shutdown().await;
        }
    }
}

fn mcp_policy(tool: &McpTool) -> Tool {
    synthetic_tool(
        &tool.name,
        &tool.description,
        tool.input_schema.clone(),
        tool.approval,
        if tool.read_only {
            Effect::Read
        } else {
            Effect::Write
        },
    )
}

impl TurnView<'_> {
    /// Every tool spec offered to the model this step (before any feature shapes the request).
    pub(crate) fn offered_specs(&self) -> Vec<ToolSpec> {
        offered(self.build, self.extra, Some(self.context))
    }

    /// Validates a call's input against the schema of whatever `name` stands for.
    pub(crate) fn validate_input(&self, name: &str, input: &Value) -> Result<(), Vec<String>> {
        validate(self.build, self.extra, name, input)
    }
}

/// The tool a call in the context ran: the named tool for `call_tool`.
fn called_name(name: &str, input: &serde_json::Value) -> String {
    if name == CALL_TOOL
        && let Some(named) = input.get("name").and_then(|v| v.as_str())
    {
        return named.to_owned();
    }
    name.to_owned()
}

/// How often each tool was called in `context`.
fn use_counts(context: &[Message]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for message in context {
        if let Message::Assistant { tool_calls, .. } = message {
            for call in tool_calls {
                *counts
                    .entry(called_name(&call.name, &call.input))
                    .or_insert(0) += 1;
            }
        }
    }
    counts
}

/// The specs kept inline: every spec `catalogued` says no to, plus the `keep` most used of the
/// others, in their original order.
fn inline_specs(
    specs: Vec<ToolSpec>,
    keep: usize,
    counts: &HashMap<String, usize>,
    catalogued: impl Fn(&str) -> bool,
) -> Vec<ToolSpec> {
    let mut ranked: Vec<(usize, usize)> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| catalogued(&s.name))
        .map(|(i, s)| (i, counts.get(&s.name).copied().unwrap_or(0)))
        .collect();
    // Most used first; the sort is stable, so ties keep the build's order.
    ranked.sort_by_key(|r| std::cmp::Reverse(r.1));
    let kept: Vec<usize> = ranked.iter().take(keep).map(|(i, _)| *i).collect();
    specs
        .into_iter()
        .enumerate()
        .filter(|(i, s)| !catalogued(&s.name) || kept.contains(i))
        .map(|(_, s)| s)
        .collect()
}

/// Every tool spec offered to the model: the build's (the most used inline when the catalogue
/// is automatic), then the turn's MCP, catalogue and dynamic tools.
fn offered(
    build: &LoadedBuild,
    extra: Option<&Extra>,
    context: Option<&[Message]>,
) -> Vec<ToolSpec> {
    let mut specs = build.specs.clone();
    if build.auto_catalogue {
        let counts = context.map(use_counts).unwrap_or_default();
        let keep = build.manifest.agent.config.lean_context.keep_inline as usize;
        specs = inline_specs(specs, keep, &counts, |name| build.tool(name).is_some());
    }
    if let Some(extra) = extra {
        specs.extend(extra.specs.iter().cloned());
    }
    specs
}

/// Validates a call's input against the schema of whatever `name` stands for; for `call_tool`
/// naming a build tool, the inner input against that tool's schema too.
fn validate(
    build: &LoadedBuild,
    extra: Option<&Extra>,
    name: &str,
    input: &Value,
) -> Result<(), Vec<String>> {
    if build.validators.contains(name) {
        return build.validators.validate(name, input);
    }
    match extra.and_then(|e| e.validators.as_ref()) {
        Some(v) if v.contains(name) => v.validate(name, input)?,
        // MCP tools behind `call_tool` are checked by their server.
        _ => return Ok(()),
    }
    let named = input.get("name").and_then(Value::as_str).unwrap_or("");
    if name == CALL_TOOL && build.tool(named).is_some() {
        return build
            .validators
            .validate(named, &inner_input(input))
            .map_err(|errors| {
                errors
                    .into_iter()
                    .map(|e| format!("`{named}` {e}"))
                    .collect()
            });
    }
    Ok(())
}

impl TurnDriver<'_> {
    /// Loads the MCP and dynamic tools of this turn run (once; again after dynamic tools change).
    pub(super) async fn ensure_extra(&mut self) -> RuntimeResult<()> {
        if self.extra.is_some() {
            return Ok(());
        }
        let mut extra = Extra::default();
        let mut validators: Vec<(String, Value)> = Vec::new();
        let auto = self.build.auto_catalogue;
        let mut deferred: Vec<CatalogueEntry> = self
            .build
            .tools
            .iter()
            .filter(|t| auto || t.deferred)
            .map(|t| CatalogueEntry {
                name: t.name.clone(),
                alias: String::new(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
                skill: false,
            })
            .collect();
        let deferred_tools = !deferred.is_empty();
        let skills_before = deferred.len();
        deferred.extend(
            self.build
                .manifest
                .agent
                .skills
                .iter()
                .filter(|s| s.deferred)
                .map(|s| CatalogueEntry::skill(&s.name, &s.description)),
        );
        let deferred_skills = deferred.len() > skills_before;
        let mut catalogue_mcp = None;
        if let Some(manager) = self.rt.mcp_manager(&self.build) {
            let tools = manager.tools_for(self.session.owner.as_deref()).await;
            let catalogued = use_catalogue(tools.len());
            if catalogued {
                catalogue_mcp = Some(manager.clone());
            }
            for tool in tools {
                if self.build.tool(&tool.name).is_some() {
                    continue;
                }
                if !catalogued {
                    validators.push((tool.name.clone(), tool.input_schema.clone()));
                    extra.specs.push(tool.spec());
                }
                extra.mcp_tools.insert(tool.name.clone(), tool);
            }
            extra.mcp = Some(manager);
        }
        if !deferred.is_empty() || catalogue_mcp.is_some() {
            let what = Catalogued {
                deferred: deferred_tools,
                mcp: catalogue_mcp.is_some(),
                all_tools: auto,
                skills: deferred_skills,
            };
            for (i, spec) in catalogue_tools_for(what).into_iter().enumerate() {
                validators.push((spec.name.clone(), spec.input_schema.clone()));
                extra.specs.insert(i, spec);
            }
            extra.catalogue = Some(Catalogue {
                deferred: Arc::new(deferred),
                mcp: catalogue_mcp,
            });
        }
        let records = match self.dynamic_tools.take() {
            Some(records) => records,
            None => self.rt.inner.store.dynamic_tools(self.id()).await?,
        };
        for record in records {
            if self.build.tool(&record.name).is_some()
                || self.build.manifest.agent.subagent(&record.name).is_some()
                || (record.name == eve_compile::AGENT_TOOL
                    && crate::features::subagents::offers_agent_tool(&self.build.manifest.agent))
                || extra.mcp_tools.contains_key(&record.name)
            {
                continue;
            }
            let provider: Tool = match serde_json::from_value(record.provider_tool.clone()) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(tool = %record.name, error = %e, "unreadable dynamic tool");
                    continue;
                }
            };
            validators.push((record.name.clone(), record.input_schema.clone()));
            extra.specs.push(ToolSpec {
                name: record.name.clone(),
                description: record.description.clone(),
                input_schema: record.input_schema.clone(),
            });
            extra
                .dynamic
                .insert(record.name.clone(), (record, provider));
        }
        if !validators.is_empty() {
            let mut v = Validators::new(&[]);
            for (name, schema) in &validators {
                v.insert(name, schema);
            }
            extra.validators = Some(v);
        }
        self.extra = Some(extra);
        Ok(())
    }

    /// Why there is no tool `name`, for the model: when it names a tool of an MCP connection of
    /// this agent (`CONNECTION__tool`) that is not available, the connection's state and its
    /// last error (a server that failed to start is down, not a tool that does not exist).
    pub(super) async fn unknown_tool(&self, name: &str) -> String {
        let connection = name.split_once("__").map(|(c, _)| c).filter(|c| {
            self.build
                .manifest
                .agent
                .connections
                .iter()
                .any(|k| k.name == *c)
        });
        let status = match (connection, self.extra.as_ref().and_then(|e| e.mcp.as_ref())) {
            (Some(c), Some(mcp)) => mcp.status().await.into_iter().find(|s| s.name == c),
            _ => None,
        };
        match (connection, status) {
            (Some(c), Some(s)) if s.state != crate::mcp::ConnectionState::Running => format!(
                "The MCP connection `{c}` is down ({}{}), so `{name}` cannot be called now; \
                 tell the user, or go on without it.",
                serde_json::to_value(s.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "not running".to_owned()),
                s.last_error.map(|e| format!(": {e}")).unwrap_or_default()
            ),
            (Some(c), _) => format!(
                "The MCP connection `{c}` offers no tool `{name}`. Use one of the tools offered."
            ),
            (None, _) => format!("There is no tool named `{name}`. Use one of the tools offered."),
        }
    }

    /// What `name` stands for (with `input` for `call_tool`, whose policy is the named tool's).
    pub(super) fn target(&self, name: &str, input: &Value) -> Option<Resolved> {
        if let Some(tool) = self.build.tool(name) {
            return Some(Resolved::new(tool.clone(), Target::Build(tool.clone())));
        }
        if name == crate::features::strategy::PLAN_STEP
            && self.build.manifest.agent.config.strategy == eve_compile::Strategy::Plan
        {
            let worker = crate::features::strategy::worker_agent(&self.build.manifest.agent);
            return Some(Resolved::new(
                policy_tool(&worker),
                Target::Subagent(worker),
            ));
        }
        if let Some(sub) = self.build.manifest.agent.subagent(name) {
            return Some(Resolved::new(
                policy_tool(sub),
                Target::Subagent(sub.clone()),
            ));
        }
        if name == eve_compile::AGENT_TOOL
            && crate::features::subagents::offers_agent_tool(&self.build.manifest.agent)
        {
            let copy = crate::features::subagents::root_copy(&self.build.manifest.agent);
            return Some(Resolved::new(policy_tool(&copy), Target::Subagent(copy)));
        }
        let extra = self.extra.as_ref()?;
        if let (Some(tool), Some(manager)) = (extra.mcp_tools.get(name), &extra.mcp) {
            return Some(Resolved::new(
                mcp_policy(tool),
                Target::Mcp(manager.clone()),
            ));
        }
        if let Some(catalogue) = &extra.catalogue {
            let catalogue_call = || {
                Resolved::new(
                    synthetic_tool(name, "", Value::Null, Approval::Never, Effect::Read),
                    Target::Catalogue(catalogue.clone()),
                )
            };
            if name == SEARCH_TOOLS {
                return Some(catalogue_call());
            }
            if name == CALL_TOOL {
                let named = input
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                // A tool of the build (deferred, typically): run as if called by its name.
                if let Some(tool) = self.build.tool(named) {
                    return Some(Resolved {
                        policy: tool.clone(),
                        target: Target::Build(tool.clone()),
                        via_call_tool: true,
                    });
                }
                // A catalogued MCP tool: its connection's approval, its own breaker.
                if catalogue.mcp.is_some()
                    && let Some(tool) = extra.mcp_tools.get(named)
                {
                    return Some(Resolved {
                        policy: mcp_policy(tool),
                        target: Target::Catalogue(catalogue.clone()),
                        via_call_tool: true,
                    });
                }
                return Some(catalogue_call());
            }
        }
        if let Some((record, provider)) = extra.dynamic.get(name) {
            let mut policy = provider.clone();
            policy.name = record.name.clone();
            policy.description = record.description.clone();
            policy.input_schema = record.input_schema.clone();
            policy.dynamic = Vec::new();
            return Some(Resolved::new(
                policy,
                Target::Dynamic(Box::new(record.clone()), Box::new(provider.clone())),
            ));
        }
        None
    }

    /// Validates a call's input against the schema of whatever `name` stands for.
    pub(super) fn validate_input(&self, name: &str, input: &Value) -> Result<(), Vec<String>> {
        validate(&self.build, self.extra.as_ref(), name, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_used_tools_stay_inline_in_build_order() {
        let spec = |n: &str| ToolSpec {
            name: n.into(),
            description: String::new(),
            input_schema: json!({}),
        };
        let specs = vec![
            spec("a"),
            spec("b"),
            spec("c"),
            spec("d"),
            spec("load_skill"),
        ];
        let context = vec![
            Message::calling(&[
                ("1", "c", json!({})),
                ("2", CALL_TOOL, json!({"name": "d"})),
            ]),
            Message::calling(&[("3", "d", json!({}))]),
        ];
        let kept = inline_specs(specs, 2, &use_counts(&context), |n| n != "load_skill");
        let names: Vec<&str> = kept.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["c", "d", "load_skill"]);
    }
}
