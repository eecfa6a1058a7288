//! What a tool name stands for in a turn: a tool of the build, a subagent, an MCP tool (or the
//! MCP catalogue), or a dynamic tool journaled with the session.
//!
//! The build's tools and subagents are known from the manifest; MCP tools come from the agent's
//! connections (listed once per turn run, servers started on first use) and dynamic tools from the
//! store. Each target carries a *policy* — a tool definition whose `approval` and `effect` the
//! engine applies exactly as for the build's own tools (approval, resume, circuit breakers).

use std::collections::HashMap;

use eve_compile::{Approval, Effect, Tool};
use serde_json::Value;

use super::super::{Runtime, RuntimeResult};
use super::TurnDriver;
use super::subagents::{policy_tool, synthetic_tool};
use crate::mcp::{CALL_TOOL, McpManager, McpTool, SEARCH_TOOLS, catalogue_tools, use_catalogue};
use crate::model::ToolSpec;
use crate::store::DynamicToolRecord;
use crate::tools::Validators;

/// What runs a call.
#[derive(Clone)]
pub(super) enum Target {
    /// A tool of the build (script, `run:`, HTTP, built-in).
    Build(Tool),
    /// A subagent: the call runs a child session.
    Subagent(eve_compile::Agent),
    /// An MCP tool.
    Mcp(McpManager),
    /// `search_tools` / `call_tool` over the MCP tools.
    Catalogue(McpManager),
    /// A dynamic tool and its provider script.
    Dynamic(Box<DynamicToolRecord>, Box<Tool>),
}

/// A resolved call target with its policy.
#[derive(Clone)]
pub(super) struct Resolved {
    /// Approval and effect (and name, description, schema) as the engine applies them.
    pub policy: Tool,
    /// What runs.
    pub target: Target,
}

/// Tools of a turn run beyond the build's: MCP and dynamic ones.
#[derive(Default)]
pub(super) struct Extra {
    specs: Vec<ToolSpec>,
    mcp: Option<McpManager>,
    mcp_tools: HashMap<String, McpTool>,
    catalogue: bool,
    dynamic: HashMap<String, (DynamicToolRecord, Tool)>,
    validators: Option<Validators>,
}

impl Runtime {
    /// The MCP manager of an agent's connections (one per distinct set of connections, shared by
    /// every session and build using it); `None` when the agent has none.
    pub(crate) fn mcp_manager(&self, build: &super::super::LoadedBuild) -> Option<McpManager> {
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
                    McpManager::new(connections, self.inner.config.env.clone(), workdir)
                })
                .clone(),
        )
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

impl TurnDriver<'_> {
    /// Loads the MCP and dynamic tools of this turn run (once; again after dynamic tools change).
    pub(super) async fn ensure_extra(&mut self) -> RuntimeResult<()> {
        if self.extra.is_some() {
            return Ok(());
        }
        let mut extra = Extra::default();
        let mut validators: Vec<(String, Value)> = Vec::new();
        if let Some(manager) = self.rt.mcp_manager(&self.build) {
            let tools = manager.tools().await;
            extra.catalogue = use_catalogue(tools.len());
            if extra.catalogue {
                for spec in catalogue_tools() {
                    validators.push((spec.name.clone(), spec.input_schema.clone()));
                    extra.specs.push(spec);
                }
            }
            for tool in tools {
                if self.build.tool(&tool.name).is_some() {
                    continue;
                }
                if !extra.catalogue {
                    validators.push((tool.name.clone(), tool.input_schema.clone()));
                    extra.specs.push(tool.spec());
                }
                extra.mcp_tools.insert(tool.name.clone(), tool);
            }
            extra.mcp = Some(manager);
        }
        for record in self.rt.inner.store.dynamic_tools(self.id()).await? {
            if self.build.tool(&record.name).is_some()
                || self.build.manifest.agent.subagent(&record.name).is_some()
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

    /// Every tool spec offered to the model this step.
    pub(super) fn offered_specs(&self) -> Vec<ToolSpec> {
        let mut specs = self.build.specs.clone();
        if let Some(extra) = &self.extra {
            specs.extend(extra.specs.iter().cloned());
        }
        specs
    }

    /// What `name` stands for (with `input` for `call_tool`, whose policy is the named tool's).
    pub(super) fn target(&self, name: &str, input: &Value) -> Option<Resolved> {
        if let Some(tool) = self.build.tool(name) {
            return Some(Resolved {
                policy: tool.clone(),
                target: Target::Build(tool.clone()),
            });
        }
        if let Some(sub) = self.build.manifest.agent.subagent(name) {
            return Some(Resolved {
                policy: policy_tool(sub),
                target: Target::Subagent(sub.clone()),
            });
        }
        let extra = self.extra.as_ref()?;
        if let (Some(tool), Some(manager)) = (extra.mcp_tools.get(name), &extra.mcp) {
            return Some(Resolved {
                policy: mcp_policy(tool),
                target: Target::Mcp(manager.clone()),
            });
        }
        if extra.catalogue
            && let Some(manager) = &extra.mcp
        {
            if name == SEARCH_TOOLS {
                return Some(Resolved {
                    policy: synthetic_tool(name, "", Value::Null, Approval::Never, Effect::Read),
                    target: Target::Catalogue(manager.clone()),
                });
            }
            if name == CALL_TOOL {
                let named = input
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let mut policy = match extra.mcp_tools.get(named) {
                    Some(tool) => mcp_policy(tool),
                    None => synthetic_tool(name, "", Value::Null, Approval::Never, Effect::Read),
                };
                policy.name = name.to_owned();
                return Some(Resolved {
                    policy,
                    target: Target::Catalogue(manager.clone()),
                });
            }
        }
        if let Some((record, provider)) = extra.dynamic.get(name) {
            let mut policy = provider.clone();
            policy.name = record.name.clone();
            policy.description = record.description.clone();
            policy.input_schema = record.input_schema.clone();
            policy.dynamic = Vec::new();
            return Some(Resolved {
                policy,
                target: Target::Dynamic(Box::new(record.clone()), Box::new(provider.clone())),
            });
        }
        None
    }

    /// Validates a call's input against the schema of whatever `name` stands for.
    pub(super) fn validate_input(&self, name: &str, input: &Value) -> Result<(), Vec<String>> {
        if self.build.validators.contains(name) {
            return self.build.validators.validate(name, input);
        }
        match self.extra.as_ref().and_then(|e| e.validators.as_ref()) {
            Some(v) if v.contains(name) => v.validate(name, input),
            // MCP tools behind `call_tool` are checked by their server.
            _ => Ok(()),
        }
    }
}
