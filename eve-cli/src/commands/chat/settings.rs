//! Chat's `/model` and `/info`: the model a chat's sessions run on, switched per session, and a
//! summary of the agent, its model, context window, reasoning and tools with where each setting
//! came from.
//!
//! `/model ID` in an in-process chat chooses the model of the chat's current session tree (its
//! subagents' sessions too, as `--model` does): [`SessionModels`] is the runtime's model provider
//! here and answers for that session's root with the chosen model, every other session with the
//! process's. A turn already running finishes on its model; the next turn uses the new one. With
//! `--url` the server's model answers: `/model` says so, and `/info` reads the server's
//! `GET /eve/v1/info`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;

use eve_compile::{Agent, Project};
use eve_runtime::engine::{ModelProvider, ResolvedModel, SettingsModelProvider};
use eve_runtime::model::{ModelError, windows};
use serde_json::Value;

use super::super::model_env;
use super::super::set::{catalogue_lines, check_model_id, model_source};

/// The model provider of an in-process chat: the process's models, and per root session the
/// model `/model` chose.
pub(crate) struct SessionModels {
    base: SettingsModelProvider,
    /// `--model`, as given.
    flag: Option<String>,
    /// Root session id → the chosen model and its provider.
    chosen: Mutex<HashMap<String, (String, Arc<SettingsModelProvider>)>>,
}

impl SessionModels {
    pub(crate) fn new(flag: Option<&str>) -> Self {
        Self {
            base: SettingsModelProvider::new(model_env(flag)),
            flag: flag.map(str::to_owned),
            chosen: Mutex::new(HashMap::new()),
        }
    }

    /// Checks that `id` can be used by `agent` (a known provider, its key present): its
    /// provider, or why not.
    pub(crate) fn check(
        &self,
        id: &str,
        agent: &Agent,
    ) -> anyhow::Result<Arc<SettingsModelProvider>> {
        check_model_id(id)?;
        let provider = SettingsModelProvider::new(model_env(Some(id)));
        provider
            .settings(agent)
            .and_then(|s| s.validate())
            .map_err(|e| anyhow::anyhow!("model `{id}` cannot be used: {e}"))?;
        Ok(Arc::new(provider))
    }

    /// Checks `id` ([`SessionModels::check`]) and makes it the model of the session tree rooted
    /// at `session`.
    pub(crate) fn choose(&self, session: &str, id: &str, agent: &Agent) -> anyhow::Result<()> {
        let provider = self.check(id, agent)?;
        if let Ok(mut chosen) = self.chosen.lock() {
            chosen.insert(session.to_owned(), (id.to_owned(), provider));
        }
        Ok(())
    }

    /// The model chosen for `session`, if any.
    fn chosen(&self, session: &str) -> Option<(String, Arc<SettingsModelProvider>)> {
        self.chosen.lock().ok()?.get(session).cloned()
    }
}

impl ModelProvider for SessionModels {
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError> {
        self.base.resolve(agent)
    }

    fn resolve_in(&self, agent: &Agent, root: &str) -> Result<ResolvedModel, ModelError> {
        match self.chosen(root) {
            Some((_, provider)) => provider.resolve(agent),
            None => self.base.resolve(agent),
        }
    }
}

/// The root agent of the project's current build.
pub(crate) fn current_agent(project: &Project) -> anyhow::Result<Agent> {
    let hash = eve_compile::build::current_hash(&project.state_dir)
        .context("no build yet: run `eve build`")?;
    Ok(eve_compile::build::load(&project.state_dir, &hash)?
        .manifest
        .agent)
}

/// `/model` without an id: the model in force for `session` and where it came from, then the
/// catalogue.
pub(crate) fn model_lines(
    models: &SessionModels,
    agent: &Agent,
    session: Option<&str>,
) -> Vec<String> {
    let (id, source) = in_force(models, agent, session);
    let mut lines = vec![format!("model: {id} (from {source})")];
    lines.extend(catalogue_lines(&id));
    lines.push("/model PROVIDER/NAME switches this session's model".to_owned());
    lines
}

/// The model in force for `session` and a phrase naming where it came from.
fn in_force(models: &SessionModels, agent: &Agent, session: Option<&str>) -> (String, String) {
    if let Some((id, _)) = session.and_then(|s| models.chosen(s)) {
        return (id, "/model in this chat".to_owned());
    }
    let (id, source) = model_source(models.flag.as_deref(), agent.config.model.as_deref());
    let source = match source.as_str() {
        "agent.yaml" => "agent/agent.yaml".to_owned(),
        "default" => "eve's default".to_owned(),
        other => other.to_owned(),
    };
    (id, source)
}

/// `/info` of an in-process chat.
pub(crate) async fn local_info(
    models: &SessionModels,
    agent: &Agent,
    session: Option<&str>,
) -> Vec<String> {
    let (id, source) = in_force(models, agent, session);
    let mut lines = vec![
        format!(
            "agent:     {}{}",
            agent.name,
            agent
                .description
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
        format!(
            "session:   {}",
            session.unwrap_or("(none yet: it starts with your next message)")
        ),
        format!("model:     {id} (from {source})"),
    ];
    lines.push(match &agent.config.reasoning {
        Some(r) => format!("reasoning: {r} (from agent/agent.yaml)"),
        None => "reasoning: the provider's default (not set in agent/agent.yaml)".to_owned(),
    });
    let window = match agent.config.context_window {
        Some(w) => format!("{w} tokens (from agent/agent.yaml context_window)"),
        None => {
            let resolved = match session {
                Some(s) => models.resolve_in(agent, s),
                None => models.resolve(agent),
            };
            let asked = match &resolved {
                Ok(r) => r.client.context_window(&r.model).await,
                Err(_) => None,
            };
            let table = windows::known_context_window(&id);
            match asked.or(table) {
                Some(w) if Some(w) == table => {
                    format!("{w} tokens (from eve's table of known models)")
                }
                Some(w) => format!("{w} tokens (from the provider)"),
                None => "unknown (set context_window in agent/agent.yaml to compact long sessions)"
                    .to_owned(),
            }
        }
    };
    lines.push(format!("window:    {window}"));
    let authored: Vec<&str> = agent.tools.iter().map(|t| t.name.as_str()).collect();
    let builtins = agent.config.builtins_on();
    lines.push(format!(
        "tools:     {} (agent/tools/: {}; built-in, from default_tools in agent/agent.yaml: {})",
        authored.len() + builtins.len(),
        list(&authored),
        list(&builtins)
    ));
    if !agent.connections.is_empty() {
        let names: Vec<&str> = agent.connections.iter().map(|c| c.name.as_str()).collect();
        lines.push(format!(
            "           and the tools of MCP connections {} (agent/connections/)",
            names.join(", ")
        ));
    }
    lines
}

/// `/info` of a chat with a server: its agent-info document.
pub(crate) fn remote_info(info: &Value, base: &str, session: Option<&str>) -> Vec<String> {
    let agent = &info["agent"];
    let model = &agent["model"];
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let tools: Vec<String> = info["tools"]["static"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| text(&t["name"]))
        .collect();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    vec![
        format!("agent:     {} (served by {base})", text(&agent["name"])),
        format!(
            "session:   {}",
            session.unwrap_or("(none yet: it starts with your next message)")
        ),
        format!(
            "model:     {} (from the server's agent/agent.yaml)",
            text(&model["id"])
        ),
        format!(
            "reasoning: {}",
            model["reasoning"]
                .as_str()
                .map_or("the provider's default".to_owned(), |r| format!(
                    "{r} (from the server's agent/agent.yaml)"
                ))
        ),
        format!(
            "window:    {}",
            model["contextWindowTokens"].as_u64().map_or(
                "not set in the server's agent/agent.yaml".to_owned(),
                |w| format!("{w} tokens (from the server's agent/agent.yaml)")
            )
        ),
        format!("tools:     {} ({})", tools.len(), list(&tools)),
    ]
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
