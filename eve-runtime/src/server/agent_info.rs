//! `GET /eve/v1/info`: the agent described as eve's agent-info document (`kind: "eve-agent-info"`,
//! `version: 5`), the shape `Client.info()` of eve's npm client validates strictly, so eve's own
//! tools (its dev TUI's remote probe, `info()` in scripts) read this server as they read eve.
//!
//! eve's document describes JavaScript module bindings; ours maps the agent folder onto it: a
//! markdown file (instructions, skills, markdown tools, schedules) is a `markdown` source; any
//! other file (a script tool, a YAML tool, `agent.yaml`) is a `module` source whose binding points
//! at the file; built-in tools are owned by the framework. Every optional field is left out rather
//! than sent as `null`, and every object carries exactly the keys the schema allows (it rejects
//! unknown ones). Facts eve's document has no place for (effects, sandboxes, env names, channels'
//! kinds) are in this runtime's own description, `GET /eve/v1/agent` (`routes::agent`).
//!
//! Builds do not record their warnings, so `diagnostics.discoveryWarnings` is 0, and
//! `discoveryErrors` is 0 because a build with errors is never served.

use std::path::Path;

use eve_compile::manifest::{Agent, Approval, ChannelKind, Tool, Transport};
use serde_json::{Map, Value, json};

use crate::engine::LoadedBuild;
use crate::tools::BUILTIN_ARGV;

/// The node id of the root agent; a subagent's is `agent/<its folder>`.
const ROOT_NODE: &str = "agent";

/// The agent-info document of `build`, served from a project at `app_root` (the folder holding
/// `agent/`); `dev` for `eve dev` (mode `development`, dev routes on).
pub(crate) fn document(build: &LoadedBuild, app_root: &Path, dev: bool) -> Value {
    let agent = &build.manifest.agent;
    let mut model = Map::new();
    if let Some(id) = agent.config.model.as_deref() {
        let provider = id.split_once('/').map_or(id, |(p, _)| p);
        model.insert("id".into(), json!(id));
        model.insert(
            "routing".into(),
            json!({"kind": "external", "provider": provider}),
        );
        model.insert(
            "endpoint".into(),
            json!({"kind": "external", "provider": provider}),
        );
    } else {
        model.insert("id".into(), json!("unset"));
        model.insert(
            "routing".into(),
            json!({"kind": "external", "provider": "unset"}),
        );
    }
    if let Some(window) = agent.config.context_window {
        model.insert("contextWindowTokens".into(), json!(window));
    }
    if let Some(reasoning) = agent.config.reasoning.as_deref().and_then(reasoning_level) {
        model.insert("reasoning".into(), json!(reasoning));
    }
    let config_path = format!("{}agent.yaml", folder_prefix(&agent.path));
    let mut root = Map::new();
    root.insert("agentRoot".into(), json!(abs(app_root, "agent")));
    root.insert("appRoot".into(), json!(app_root.display().to_string()));
    root.insert("config".into(), module_source(&config_path, app_root));
    if let Some(description) = &agent.description {
        root.insert("description".into(), json!(description));
    }
    root.insert("model".into(), Value::Object(model));
    root.insert("name".into(), json!(agent.name));
    root.insert("nodeId".into(), json!(ROOT_NODE));

    let tools: Vec<Value> = build.tools.iter().map(|t| tool(t, app_root)).collect();
    let skills: Vec<Value> = agent
        .skills
        .iter()
        .map(|s| {
            let mut v = entry(&s.source, &s.name, app_root);
            v.insert("description".into(), json!(s.description));
            if let Some(license) = &s.license {
                v.insert("license".into(), json!(license));
            }
            v.insert("markdown".into(), json!(s.body));
            if let Some(metadata) = s.metadata.as_ref().and_then(string_map) {
                v.insert("metadata".into(), Value::Object(metadata));
            }
            Value::Object(v)
        })
        .collect();
    let instructions_path = format!("{}instructions.md", folder_prefix(&agent.path));
    let mut instructions = entry(&instructions_path, "instructions", app_root);
    instructions.insert("content".into(), json!(agent.instructions));
    instructions.insert("role".into(), json!("system"));
    let schedules: Vec<Value> = agent
        .schedules
        .iter()
        .map(|s| {
            let mut v = entry(&s.source, &s.name, app_root);
            v.insert("cron".into(), json!(s.cron));
            v.insert("hasRun".into(), json!(false));
            v.insert("markdown".into(), json!(s.prompt));
            Value::Object(v)
        })
        .collect();
    let routes: Vec<Value> = agent
        .channels
        .iter()
        .filter(|c| c.kind != ChannelKind::Http)
        .map(|c| {
            let mut v = entry(&c.source, &c.name, app_root);
            v.insert("adapterKind".into(), json!(channel_kind(c.kind)));
            v.insert("method".into(), json!("POST"));
            let path = if c.kind == ChannelKind::Mcp {
                super::channels::MCP_PATH.to_owned()
            } else {
                format!("/eve/v1/channels/{}", c.name)
            };
            v.insert("urlPath".into(), json!(path));
            Value::Object(v)
        })
        .collect();
    let connections: Vec<Value> = agent
        .connections
        .iter()
        .map(|c| {
            let mut v = source(&c.source, app_root);
            v.insert("connectionName".into(), json!(c.name));
            v.insert(
                "description".into(),
                json!(format!("MCP server `{}`", c.name)),
            );
            v.insert("hasApproval".into(), json!(c.approval != Approval::Never));
            v.insert("hasAuthorization".into(), json!(false));
            let (protocol, url, headers) = match &c.transport {
                Transport::Stdio { .. } => ("stdio", String::new(), false),
                Transport::Http { url, headers } => ("http", url.clone(), !headers.is_empty()),
            };
            v.insert("hasHeaders".into(), json!(headers));
            v.insert("protocol".into(), json!(protocol));
            if !c.tools.allow.is_empty() || !c.tools.block.is_empty() {
                v.insert(
                    "toolFilter".into(),
                    json!({"allow": c.tools.allow, "block": c.tools.block}),
                );
            }
            v.insert("url".into(), json!(url));
            Value::Object(v)
        })
        .collect();
    let hooks: Vec<Value> = agent
        .hooks
        .iter()
        .map(|h| {
            let mut v = source(&h.source, app_root);
            v.insert("eventNames".into(), json!(h.events));
            v.insert("slug".into(), json!(h.name));
            Value::Object(v)
        })
        .collect();
    let subagents: Vec<Value> = agent
        .subagents
        .iter()
        .map(|s| subagent(s, ROOT_NODE, app_root))
        .collect();
    let sandbox_path = format!("{}sandbox", folder_prefix(&agent.path));
    let mut sandbox = source(&sandbox_path, app_root);
    sandbox.insert("provider".into(), json!(agent.sandbox.provider.as_str()));
    sandbox.insert("revisionHash".into(), json!(build.hash));

    json!({
        "agent": root,
        "capabilities": {"devRoutes": dev},
        "channels": {"routes": routes, "shadowed": []},
        "composition": {"disabled": [], "shadowed": []},
        "connections": connections,
        "diagnostics": {"discoveryErrors": 0, "discoveryWarnings": 0},
        "hooks": hooks,
        "instructions": {"dynamic": [], "static": [instructions]},
        "kernelEffects": [],
        "kind": "eve-agent-info",
        "memories": [],
        "mode": if dev { "development" } else { "production" },
        "remoteAgents": {"entries": [], "total": 0},
        "sandbox": sandbox,
        "schedules": schedules,
        "skills": {"dynamic": [], "static": skills},
        "subagents": {"local": subagents.clone(), "total": subagents.len()},
        "tools": {"dynamic": [], "static": tools},
        "version": 5,
        "workspace": {"resourceRoot": null, "rootEntries": agent.sandbox.workspace},
    })
}

/// One tool: its source, whether it asks, and its input schema.
fn tool(t: &Tool, app_root: &Path) -> Value {
    let mut v = if t.source == BUILTIN_ARGV {
        let owner = json!({"feature": "builtin-tools", "kind": "framework"});
        let logical = format!("eve/builtin/{}", t.name);
        let mut v = Map::new();
        v.insert(
            "binding".into(),
            json!({
                "backing": {"externalDependencies": [], "kind": "filesystem", "sourcePath": logical},
                "logicalPath": logical,
                "owner": owner,
            }),
        );
        v.insert("logicalPath".into(), json!(logical));
        v.insert("owner".into(), owner);
        v.insert("sourceId".into(), json!(logical));
        v.insert("sourceKind".into(), json!("module"));
        v.insert("name".into(), json!(t.name));
        v
    } else {
        entry(&t.source, &t.name, app_root)
    };
    v.insert("description".into(), json!(t.description));
    v.insert("hasAuth".into(), json!(false));
    // Every tool of this runtime runs here (a script, a command, a request or a built-in).
    v.insert("hasExecute".into(), json!(true));
    v.insert("hasModelOutputProjection".into(), json!(false));
    v.insert("hasOutputSchema".into(), json!(false));
    v.insert("inputSchema".into(), t.input_schema.clone());
    v.insert(
        "requiresApproval".into(),
        json!(t.approval != Approval::Never),
    );
    Value::Object(v)
}

/// A subagent and, as eve does, a count of what it holds.
fn subagent(s: &Agent, parent: &str, app_root: &Path) -> Value {
    let prefix = folder_prefix(&s.path);
    let mut v = entry(&format!("{prefix}instructions.md"), &s.name, app_root);
    if let Some(description) = &s.description {
        v.insert("description".into(), json!(description));
    }
    v.insert(
        "entryPath".into(),
        json!(format!("agent/{prefix}instructions.md")),
    );
    v.insert("nodeId".into(), json!(format!("{ROOT_NODE}/{}", s.path)));
    v.insert("parentNodeId".into(), json!(parent));
    v.insert(
        "rootPath".into(),
        json!(abs(app_root, &format!("agent/{}", s.path))),
    );
    v.insert(
        "summary".into(),
        json!({
            "channels": s.channels.len(),
            "connections": s.connections.len(),
            "hooks": s.hooks.len(),
            "instructions": 1,
            "memories": 0,
            "schedules": s.schedules.len(),
            "skills": s.skills.len(),
            "tools": s.tools.len(),
        }),
    );
    Value::Object(v)
}

/// `"sub/"` for an agent folder `sub`, `""` for the root.
fn folder_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{}/", path.trim_end_matches('/'))
    }
}

/// A named source (eve's `entry`).
fn entry(path: &str, name: &str, app_root: &Path) -> Map<String, Value> {
    let mut v = source(path, app_root);
    v.insert("name".into(), json!(name));
    v
}

/// A file of the agent folder as eve's `source`: markdown, or a module bound to the file.
fn source(path: &str, app_root: &Path) -> Map<String, Value> {
    if path.ends_with(".md") {
        let logical = format!("agent/{path}");
        let mut v = Map::new();
        v.insert("logicalPath".into(), json!(logical));
        v.insert("owner".into(), json!({"kind": "application"}));
        v.insert("sourceId".into(), json!(logical));
        v.insert("sourceKind".into(), json!("markdown"));
        v
    } else {
        match module_source(path, app_root) {
            Value::Object(v) => v,
            _ => Map::new(),
        }
    }
}

/// A non-markdown file as a `module` source with its filesystem binding.
fn module_source(path: &str, app_root: &Path) -> Value {
    let logical = format!("agent/{path}");
    let owner = json!({"kind": "application"});
    json!({
        "binding": {
            "backing": {
                "externalDependencies": [],
                "kind": "filesystem",
                "sourcePath": abs(app_root, &logical),
            },
            "logicalPath": logical,
            "owner": owner,
        },
        "logicalPath": logical,
        "owner": owner,
        "sourceId": logical,
        "sourceKind": "module",
    })
}

fn abs(app_root: &Path, rel: &str) -> String {
    app_root.join(rel).display().to_string()
}

/// eve's reasoning levels; anything else is left out (its schema would drop it anyway).
fn reasoning_level(level: &str) -> Option<&'static str> {
    [
        "provider-default",
        "none",
        "minimal",
        "low",
        "medium",
        "high",
        "xhigh",
    ]
    .into_iter()
    .find(|l| *l == level)
}

/// Skill metadata as eve's `Record<string, string>`: only string values are kept.
fn string_map(metadata: &Value) -> Option<Map<String, Value>> {
    let object = metadata.as_object()?;
    Some(
        object
            .iter()
            .filter(|(_, v)| v.is_string())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

fn channel_kind(kind: ChannelKind) -> &'static str {
    match kind {
        ChannelKind::Http => "http",
        ChannelKind::Slack => "slack",
        ChannelKind::Discord => "discord",
        ChannelKind::Telegram => "telegram",
        ChannelKind::Webhook => "webhook",
        ChannelKind::Mcp => "mcp",
    }
}
