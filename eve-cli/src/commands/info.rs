//! `eve info`: what the agent folder holds, as text or JSON. Exits 1 when there are errors.

use std::fmt::Write as _;
use std::process::ExitCode;

use eve_compile::render::{Style, render_all};
use eve_compile::{Agent, EffectiveSandbox, Provider, Runner, Transport, build};
use serde_json::json;

use crate::cli::InfoArgs;
use crate::project::{locate, source_reader};
use crate::render::{paint, stderr_color, stdout_color};
use crate::sanitize::{errln, neutralise, out, outln};

pub fn run(args: InfoArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let out = build::check(&project)?;
    let errors = out.error_count();
    let code = if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    if args.json {
        let report = json!({
            "ok": errors == 0,
            "project": project.root,
            "agent_dir": project.agent_dir,
            "current_build": build::current_hash(&project.state_dir),
            "manifest": out.manifest,
            "diagnostics": out.diagnostics,
            "tools": tool_report(&out.manifest.agent),
            "hooks": hook_report(&out.manifest.agent),
            "connections": connection_report(&out.manifest.agent),
            "sandbox_limits": sandbox_limits(&out.manifest.agent),
        });
        outln!("{}", crate::sanitize::json_pretty(&report));
        return Ok(code);
    }
    let color = stdout_color();
    let mut text = String::new();
    describe(&mut text, &out.manifest.agent, 0, color);
    describe_limits(&mut text, &out.manifest.agent, color);
    out!("{text}");
    if !out.diagnostics.is_empty() {
        errln!();
        errln!(
            "{}",
            render_all(
                &out.diagnostics,
                &source_reader(&project),
                Style {
                    color: stderr_color()
                }
            )
        );
    }
    Ok(code)
}

/// What this machine enforces per isolated call of `agent` (its `sandbox.yaml` limits), as eve
/// running here with this environment would.
fn sandbox_limits(agent: &Agent) -> eve_runtime::exec::Enforced {
    eve_runtime::exec::enforced(&agent.sandbox.limits, &|name| std::env::var(name).ok())
}

/// The `sandbox limits` section: one line per limit, saying how it is enforced here.
fn describe_limits(out: &mut String, agent: &Agent, color: bool) {
    let e = sandbox_limits(agent);
    let h = |s: &str| paint(color, "1", s);
    let _ = writeln!(
        out,
        "  {}",
        h("sandbox limits per isolated call, on this machine")
    );
    for (name, how) in [
        ("processes", &e.processes),
        ("memory", &e.memory),
        ("uids", &e.uids),
        ("workspace", &e.workspace),
        ("sockets", &e.sockets),
    ] {
        let _ = writeln!(out, "    {name}: {how}");
    }
}

/// `sandbox isolated, network none`, `sandbox host` or `in-process`.
fn sandbox_flag(s: Option<&EffectiveSandbox>) -> String {
    match s {
        None => "in-process".to_owned(),
        Some(s) if s.provider == Provider::Host => "sandbox host".to_owned(),
        Some(s) => format!("sandbox isolated, network {}", s.network.describe()),
    }
}

/// One built-in tool that is on: where it comes from and how it runs.
struct BuiltinRow {
    name: &'static str,
    /// `default` (on by default), `agent.yaml` (named by `default_tools`), or the file of the
    /// authored tool that replaces it.
    from: String,
    replaced: bool,
    effect: eve_compile::Effect,
    /// Its process's sandbox; `None` for a built-in that runs in eve's process.
    sandbox: Option<EffectiveSandbox>,
    approval: eve_compile::Approval,
}

/// The built-ins of `agent` that are on, in the table's order.
fn builtin_rows(agent: &Agent) -> Vec<BuiltinRow> {
    agent
        .config
        .builtins_on()
        .into_iter()
        // `agent` (a copy of the root agent) is offered to the root agent only.
        .filter(|name| *name != eve_compile::AGENT_TOOL || agent.path.is_empty())
        .map(|name| {
            let replaced = agent.replaced_builtin(name);
            BuiltinRow {
                name,
                from: match (replaced, &agent.config.builtins) {
                    (Some(t), _) => t.source.clone(),
                    (None, None) => "default".to_owned(),
                    (None, Some(_)) => "agent.yaml".to_owned(),
                },
                replaced: replaced.is_some(),
                effect: eve_compile::default_tool_effect(name)
                    .unwrap_or(eve_compile::Effect::Write),
                sandbox: (name == "bash").then(|| agent.bash_sandbox()),
                approval: agent
                    .config
                    .approvals
                    .get(name)
                    .copied()
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// One entry per tool of the root agent, the built-ins that run first: its effective sandbox
/// (`null` when it starts no process), network, env allowlist and approval; a built-in also says
/// where it comes from and its effect, and an authored tool that replaces one names it.
fn tool_report(agent: &Agent) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let rows = builtin_rows(agent);
    let web = &agent.config.web;
    for b in rows.iter().filter(|b| !b.replaced) {
        // `web_fetch` runs on the runtime, under the `web:` rules; `web_search` asks its
        // provider, with the key from the environment.
        let search = web.search.as_ref().filter(|_| b.name == "web_search");
        let network = if b.name == "web_fetch" {
            json!(web_network(web))
        } else if let Some(search) = search {
            json!(search.url.as_deref().or(search.provider.default_url()))
        } else {
            json!(b.sandbox.as_ref().map(|s| &s.network))
        };
        let env: Vec<&str> = search
            .and_then(|s| s.key_env.as_deref().or(s.provider.default_key_env()))
            .into_iter()
            .collect();
        let mut entry = json!({
            "name": b.name, "builtin": true, "from": b.from, "effect": b.effect,
            "sandbox": b.sandbox.as_ref().map(|s| s.provider),
            "network": network,
            "env": env, "approval": b.approval,
        });
        if let Some(search) = search {
            entry["provider"] = json!(search.provider.as_str());
        }
        out.push(entry);
    }
    for t in &agent.tools {
        let s = agent.effective_sandbox(t);
        let mut entry = json!({
            "name": t.name, "builtin": false,
            "sandbox": s.as_ref().map(|s| s.provider),
            "network": s.map(|s| s.network),
            "env": t.env, "approval": t.approval,
        });
        if rows.iter().any(|b| b.replaced && b.name == t.name) {
            entry["replaces"] = json!(t.name);
        }
        out.push(entry);
    }
    out
}

/// Where `web_fetch` may go, in words: the public internet or only `web.allow`, with the lists.
fn web_network(web: &eve_compile::Web) -> String {
    let mut out = if web.public {
        "public internet".to_owned()
    } else {
        "only web.allow".to_owned()
    };
    if !web.allow.is_empty() {
        out.push_str(&format!(", allow {}", web.allow.join(" ")));
    }
    if !web.deny.is_empty() {
        out.push_str(&format!(", deny {}", web.deny.join(" ")));
    }
    out
}

fn hook_report(agent: &Agent) -> Vec<serde_json::Value> {
    agent
        .hooks
        .iter()
        .map(|h| {
            let s = agent.hook_sandbox(h);
            json!({"name": h.name, "sandbox": s.provider, "network": s.network, "env": h.env})
        })
        .collect()
}

fn connection_report(agent: &Agent) -> Vec<serde_json::Value> {
    agent
        .connections
        .iter()
        .map(|c| {
            let s = agent.connection_sandbox(c);
            json!({
                "name": c.name, "sandbox": s.as_ref().map(|s| s.provider),
                "network": s.map(|s| s.network), "approval": c.approval,
            })
        })
        .collect()
}

fn describe(out: &mut String, agent: &Agent, depth: usize, color: bool) {
    let ind = "  ".repeat(depth);
    let h = |s: &str| paint(color, "1", s);
    let dim = |s: &str| paint(color, "2", s);
    let _ = writeln!(out, "{ind}{} {}", h("agent"), agent.name);
    if let Some(d) = &agent.description {
        // Descriptions and instructions may be the agent's own (self-change): neutralised.
        let _ = writeln!(out, "{ind}  {}", dim(&neutralise(d)));
    }
    let model = agent
        .config
        .model
        .as_deref()
        .unwrap_or("mock/echo (default)");
    let _ = writeln!(out, "{ind}  model: {model}");
    let first_line = agent.instructions.lines().next().unwrap_or("");
    let _ = writeln!(
        out,
        "{ind}  instructions: {}",
        dim(&neutralise(&truncate(first_line, 70)))
    );
    if !agent.tools.is_empty() {
        let _ = writeln!(out, "{ind}  {} ({})", h("tools"), agent.tools.len());
        for t in &agent.tools {
            let kind = match &t.runner {
                Runner::Script { .. } => "script",
                Runner::Command { .. } => "command",
                Runner::Http(_) => "http",
                Runner::OpenApi(_) => "openapi",
            };
            let mut flags = vec![
                kind.to_owned(),
                format!("effect {:?}", t.effect).to_lowercase(),
            ];
            if t.approval != eve_compile::Approval::Never {
                flags.push(format!("approval {:?}", t.approval).to_lowercase());
            }
            if t.deferred {
                flags.push("deferred".to_owned());
            }
            if !t.dynamic.is_empty() {
                flags.push("dynamic".to_owned());
            }
            flags.push(sandbox_flag(agent.effective_sandbox(t).as_ref()));
            if !t.env.is_empty() {
                flags.push(format!("env {}", t.env.join(",")));
            }
            let _ = writeln!(
                out,
                "{ind}    {}  {}",
                paint(color, "36", &t.name),
                dim(&format!("[{}]", flags.join(", ")))
            );
            if !t.description.is_empty() {
                let _ = writeln!(
                    out,
                    "{ind}      {}",
                    neutralise(&truncate(&t.description, 80))
                );
            }
            let _ = writeln!(out, "{ind}      input: {}", schema_summary(&t.input_schema));
        }
    }
    // The built-in tools the model is offered besides the folder's own.
    let mut builtins = Vec::new();
    for b in builtin_rows(agent) {
        if b.replaced {
            builtins.push(format!(
                "{} {}",
                paint(color, "36", b.name),
                dim(&format!("[replaced by {}]", b.from))
            ));
            continue;
        }
        let mut flags = vec![format!("effect {:?}", b.effect).to_lowercase()];
        flags.push(match &b.sandbox {
            Some(s) => sandbox_flag(Some(s)),
            None if b.name == eve_compile::AGENT_TOOL => "a fresh copy of this agent".to_owned(),
            None if b.name == "web_fetch" => {
                format!("in-process, network {}", web_network(&agent.config.web))
            }
            None if b.name == "web_search" => match &agent.config.web.search {
                Some(search) => {
                    let key = search
                        .key_env
                        .as_deref()
                        .or(search.provider.default_key_env())
                        .map(|k| format!(", key ${k}"))
                        .unwrap_or_default();
                    format!("in-process, {}{key}", search.provider.as_str())
                }
                None => "in-process".to_owned(),
            },
            None if b.name == eve_compile::SLEEP_TOOL => {
                let max = agent
                    .config
                    .limits
                    .max_sleep_seconds
                    .unwrap_or(eve_compile::DEFAULT_MAX_SLEEP_SECONDS);
                format!("in-process, a durable timer, at most {max}s")
            }
            None => "in-process, the session workspace".to_owned(),
        });
        if b.approval != eve_compile::Approval::Never {
            flags.push(format!("approval {:?}", b.approval).to_lowercase());
        }
        if b.from != "default" {
            flags.push(format!("from {}", b.from));
        }
        builtins.push(format!(
            "{} {}",
            paint(color, "36", b.name),
            dim(&format!("[{}]", flags.join(", ")))
        ));
    }
    if agent.config.self_change {
        builtins.push(format!(
            "{} {}",
            paint(color, "36", "propose_change"),
            dim("[a person approves each change]")
        ));
    }
    if !builtins.is_empty() {
        let _ = writeln!(out, "{ind}  {}  {}", h("built-in"), builtins.join("; "));
    }
    if !agent.skills.is_empty() {
        let _ = writeln!(out, "{ind}  {} ({})", h("skills"), agent.skills.len());
        for s in &agent.skills {
            let extra = if s.files.is_empty() {
                String::new()
            } else {
                format!(" (+{} files)", s.files.len())
            };
            let _ = writeln!(
                out,
                "{ind}    {}{}  {}",
                paint(color, "36", &s.name),
                extra,
                dim(&neutralise(&truncate(&s.description, 70)))
            );
        }
    }
    if !agent.schedules.is_empty() {
        let now = chrono::Utc::now();
        let _ = writeln!(out, "{ind}  {} ({})", h("schedules"), agent.schedules.len());
        for s in &agent.schedules {
            let next = eve_compile::cron::next_fire(s, now)
                .map(|t| {
                    format!(
                        "next {} ({} UTC)",
                        in_words(t - now),
                        t.format("%Y-%m-%d %H:%M")
                    )
                })
                .unwrap_or_else(|| "never fires".to_owned());
            let _ = writeln!(
                out,
                "{ind}    {}  \"{}\" {}  {}",
                paint(color, "36", &s.name),
                s.cron,
                s.timezone,
                dim(&next)
            );
        }
    }
    if !agent.hooks.is_empty() {
        let _ = writeln!(out, "{ind}  {} ({})", h("hooks"), agent.hooks.len());
        for hk in &agent.hooks {
            let _ = writeln!(
                out,
                "{ind}    {}  on {}  {}",
                paint(color, "36", &hk.name),
                hk.events.join(", "),
                dim(&format!(
                    "[{}]",
                    sandbox_flag(Some(&agent.hook_sandbox(hk)))
                ))
            );
        }
    }
    if !agent.connections.is_empty() {
        let _ = writeln!(
            out,
            "{ind}  {} ({})",
            h("connections"),
            agent.connections.len()
        );
        for c in &agent.connections {
            let how = match &c.transport {
                Transport::Stdio { command, args, .. } => {
                    format!("stdio: {command} {}", args.join(" "))
                }
                Transport::Http { url, .. } => format!("http: {url}"),
            };
            let flag = agent
                .connection_sandbox(c)
                .map(|s| format!("  [{}]", sandbox_flag(Some(&s))))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{ind}    {}  {}  tools as {}__*{}",
                paint(color, "36", &c.name),
                dim(how.trim()),
                c.name,
                dim(&flag)
            );
        }
    }
    if !agent.channels.is_empty() {
        let _ = writeln!(out, "{ind}  {} ({})", h("channels"), agent.channels.len());
        for c in &agent.channels {
            let _ = writeln!(
                out,
                "{ind}    {}  {}",
                paint(color, "36", &c.name),
                format!("{:?}", c.kind).to_lowercase()
            );
        }
    }
    if !agent.subagents.is_empty() {
        let _ = writeln!(out, "{ind}  {} ({})", h("subagents"), agent.subagents.len());
        for s in &agent.subagents {
            describe(out, s, depth + 2, color);
        }
    }
}

fn schema_summary(schema: &serde_json::Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else {
        return "{}".to_owned();
    };
    if props.is_empty() {
        return "{}".to_owned();
    }
    let fields: Vec<String> = props
        .iter()
        .map(|(k, v)| {
            let ty = v.get("type").map_or_else(
                || "any".to_owned(),
                |t| t.as_str().map_or_else(|| t.to_string(), str::to_owned),
            );
            let opt = if required.contains(&k.as_str()) {
                ""
            } else {
                "?"
            };
            format!("{k}{opt}: {ty}")
        })
        .collect();
    format!("{{ {} }}", fields.join(", "))
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// `in 3 h 20 min`, `in 45 s`, `in 2 days`.
fn in_words(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    if s < 60 {
        format!("in {s} s")
    } else if s < 3600 {
        format!("in {} min", s / 60)
    } else if s < 86_400 {
        let m = (s % 3600) / 60;
        if m == 0 {
            format!("in {} h", s / 3600)
        } else {
            format!("in {} h {m} min", s / 3600)
        }
    } else {
        let days = s / 86_400;
        if days == 1 {
            "in 1 day".to_owned()
        } else {
            format!("in {days} days")
        }
    }
}
