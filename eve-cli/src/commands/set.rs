//! `eve set model [ID] [--reasoning LEVEL]`: the agent's model settings, edited in `agent.yaml`
//! line by line (comments and layout kept: `yaml_edit`), and, without an ID, the models eve
//! knows. Also the pieces `eve init --model` and chat's `/model` share: checking a model id, the
//! catalogue of known models, and where the model in force came from.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};

use eve_runtime::env_vars::EVE_MODEL;
use eve_runtime::model::{prices, windows};

use crate::cli::SetModelArgs;
use crate::project::locate;
use crate::render::{paint, stderr_color};
use crate::sanitize::{errln, outln};
use crate::yaml_edit;

/// The model the runtime uses when nothing names one.
pub(crate) const DEFAULT_MODEL: &str = "mock/echo";

/// The models eve knows by name: the mock model and every model of the built-in price table,
/// each with its context window when eve's table knows it.
pub(crate) fn known_models() -> Vec<(&'static str, Option<u64>)> {
    std::iter::once(DEFAULT_MODEL)
        .chain(prices::BUILTIN_PRICES.iter().map(|(id, ..)| *id))
        .map(|id| (id, windows::known_context_window(id)))
        .collect()
}

/// Checks a model id typed by a person: `provider/name`, a provider eve has, and a value that
/// `agent.yaml` can hold as it is.
pub(crate) fn check_model_id(id: &str) -> anyhow::Result<()> {
    let Some((provider, name)) = id.split_once('/') else {
        anyhow::bail!(
            "`{id}` is not a model id: expected `provider/name`, such as `openai/gpt-4.1` or \
             `mock/echo` (`eve set model` lists the models eve knows)"
        );
    };
    if !eve_compile::manifest::is_known_provider(provider) {
        anyhow::bail!(
            "`{id}`: eve has no model provider `{provider}`; use one of {}",
            eve_compile::manifest::KNOWN_PROVIDERS.join(", ")
        );
    }
    if name.is_empty() || !yaml_edit::plain_scalar(id) {
        anyhow::bail!(
            "`{id}` is not a model id eve can write to agent.yaml (letters, digits and `._-/:@+`)"
        );
    }
    Ok(())
}

/// The model in force and where it came from, for a process given `flag` (`--model`) over
/// `EVE_MODEL` over `agent.yaml` over the default.
pub(crate) fn model_source(flag: Option<&str>, yaml: Option<&str>) -> (String, String) {
    let env = std::env::var(EVE_MODEL)
        .ok()
        .filter(|v| !v.trim().is_empty());
    match (flag.map(str::trim).filter(|f| !f.is_empty()), env, yaml) {
        (Some(f), Some(e), _) if f == e.trim() => (f.to_owned(), EVE_MODEL.to_owned()),
        (Some(f), ..) => (f.to_owned(), "--model".to_owned()),
        (None, Some(e), _) => (e.trim().to_owned(), EVE_MODEL.to_owned()),
        (None, None, Some(y)) => (y.to_owned(), "agent.yaml".to_owned()),
        (None, None, None) => (DEFAULT_MODEL.to_owned(), "default".to_owned()),
    }
}

pub fn model(args: SetModelArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let path = project.agent_dir.join("agent.yaml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let shown = path
        .strip_prefix(&project.root)
        .unwrap_or(&path)
        .display()
        .to_string();
    let (current, source) = model_source(None, yaml_edit::get_top_level(&text, "model").as_deref());
    let reasoning = yaml_edit::get_top_level(&text, "reasoning");
    if args.id.is_none() && args.reasoning.is_none() {
        return list(&current, &source, reasoning.as_deref(), args.json);
    }
    if !project.agent_dir.is_dir() {
        anyhow::bail!(
            "no agent folder at {}: run `eve init` first, or pass -C DIR",
            project.agent_dir.display()
        );
    }
    let edited = edit(&text, args.id.as_deref(), args.reasoning.as_deref())
        .with_context(|| format!("cannot set the model in {shown}"))?;
    if edited != text {
        std::fs::write(&path, &edited)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let color = stderr_color();
    let was = yaml_edit::get_top_level(&text, "model");
    if let Some(id) = &args.id {
        errln!(
            "{} model: {id} in {shown}{}",
            paint(color, "1;32", "Set"),
            was.filter(|w| w != id)
                .map(|w| format!(" (was {w})"))
                .unwrap_or_default()
        );
    }
    if let Some(level) = &args.reasoning {
        errln!(
            "{} reasoning: {level} in {shown}",
            paint(color, "1;32", "Set")
        );
    }
    if let Ok(env) = std::env::var(EVE_MODEL)
        && !env.trim().is_empty()
    {
        errln!(
            "note: {EVE_MODEL}={} is set in this shell and wins over agent.yaml",
            env.trim()
        );
    }
    errln!("Takes effect with the next `eve build` (`eve dev` rebuilds by itself).");
    Ok(ExitCode::SUCCESS)
}

/// `text` with the model and reasoning set (each only when given).
pub(crate) fn edit(
    text: &str,
    id: Option<&str>,
    reasoning: Option<&str>,
) -> anyhow::Result<String> {
    let mut out = text.to_owned();
    if let Some(id) = id {
        check_model_id(id)?;
        out = yaml_edit::set_top_level(&out, "model", id, None)?;
    }
    if let Some(level) = reasoning {
        out = yaml_edit::set_top_level(&out, "reasoning", level, Some("model"))?;
    }
    Ok(out)
}

/// Sets the model settings of the `agent.yaml` at `path` (a freshly scaffolded project).
pub(crate) fn edit_file(
    path: &Path,
    id: Option<&str>,
    reasoning: Option<&str>,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let edited = edit(&text, id, reasoning)?;
    std::fs::write(path, edited).with_context(|| format!("cannot write {}", path.display()))
}

/// The catalogue, with the model in force marked.
pub(crate) fn catalogue_lines(current: &str) -> Vec<String> {
    known_models()
        .into_iter()
        .map(|(id, window)| {
            let mark = if id == current { "*" } else { " " };
            let window = window.map_or_else(String::new, |w| format!("{}K context", w / 1000));
            let price = prices::builtin(id).map_or_else(
                || "offline".to_owned(),
                |p| format!("${}/${} per M tokens", p.input, p.output),
            );
            format!("{mark} {id:<30} {window:<13} {price}")
        })
        .collect()
}

fn list(
    current: &str,
    source: &str,
    reasoning: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        let models: Vec<Value> = known_models()
            .into_iter()
            .map(|(id, window)| {
                let price = prices::builtin(id);
                json!({
                    "id": id,
                    "contextWindow": window,
                    "price": price.map(|p| json!({"input": p.input, "output": p.output})),
                })
            })
            .collect();
        let doc = json!({
            "current": {"model": current, "source": source, "reasoning": reasoning},
            "models": models,
        });
        outln!("{}", crate::sanitize::json_pretty(&doc));
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "model: {current} (from {source}){}",
        reasoning
            .map(|r| format!(", reasoning: {r}"))
            .unwrap_or_default()
    );
    outln!("Known models (any `provider/name` of a known provider works too):");
    for line in catalogue_lines(current) {
        outln!("{line}");
    }
    outln!(
        "Providers: {}",
        eve_compile::manifest::KNOWN_PROVIDERS.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
