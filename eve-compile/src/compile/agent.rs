//! An agent folder as a whole: `agent.yaml` (model, limits, compaction, approvals of built-ins),
//! `instructions.md`, and the walk that compiles each of its parts and its subagents in turn.

use std::collections::BTreeMap;

use serde_json::Value;

use eve_discover::{AgentDir, Code, Diagnostic};

use super::{APPROVALS, Compiler};
use crate::fields::Fields;
use crate::manifest::*;

/// Built-in tools whose approval `agent.yaml` `approvals:` can set.
pub const BUILTIN_TOOLS: &[&str] = &["bash", "read_file", "write_file"];

impl Compiler {
    pub(super) fn agent(&mut self, dir: &AgentDir, name: &str, root: bool) -> Agent {
        let (config, description) = self.config(dir, root);
        let instructions = self.instructions(dir);
        let mut sandbox = self.sandbox(dir);
        let (tools, overrides) = self.tools(dir, &sandbox);
        sandbox.tools = overrides;
        let skills = self.skills(&dir.skills);
        let mut subagents = Vec::new();
        for sub in &dir.subagents {
            self.check_name(&sub.name, &format!("{}/", sub.agent.path), "subagent");
            subagents.push(self.agent(&sub.agent, &sub.name, false));
        }
        let schedules = dir
            .schedules
            .iter()
            .filter_map(|s| self.schedule(s))
            .collect();
        let mut hooks = Vec::new();
        for (hook, o) in dir.hooks.iter().filter_map(|h| self.hook(h)) {
            if !o.is_empty() {
                sandbox.hooks.insert(hook.name.clone(), o);
            }
            hooks.push(hook);
        }
        let mut connections: Vec<Connection> = Vec::new();
        for (conn, o) in dir.connections.iter().filter_map(|c| self.connection(c)) {
            if !o.is_empty() {
                sandbox.connections.insert(conn.name.clone(), o);
            }
            connections.push(conn);
        }
        let channels = dir
            .channels
            .iter()
            .filter_map(|c| self.channel(c))
            .collect();
        self.collisions(dir, &subagents, &connections);
        let mut config = config;
        if config.strategy == Strategy::Reflect && config.critic.is_none() {
            // A `critic` subagent folder is the critic: its instructions and model.
            config.critic = Some(match subagents.iter().find(|s| s.name == "critic") {
                Some(critic) => Critic {
                    model: critic.config.model.clone(),
                    instructions: critic.instructions.clone(),
                    max_rounds: 2,
                },
                None => Critic {
                    model: None,
                    instructions: DEFAULT_CRITIC_INSTRUCTIONS.to_owned(),
                    max_rounds: 2,
                },
            });
        }
        let agent = Agent {
            name: name.to_owned(),
            path: dir.path.clone(),
            description,
            instructions,
            config,
            tools,
            skills,
            subagents,
            schedules,
            hooks,
            connections,
            channels,
            sandbox,
        };
        self.sandbox_warnings(&agent, dir);
        agent
    }

    fn config(&mut self, dir: &AgentDir, root: bool) -> (AgentConfig, Option<String>) {
        let mut config = AgentConfig {
            model: None,
            reasoning: None,
            context_window: None,
            tool_choice: None,
            compaction: Compaction::default(),
            limits: Limits::default(),
            default_tools: true,
            approvals: BTreeMap::new(),
            turn_policy: TurnPolicy::Queue,
            hollow_check: false,
            strategy: Default::default(),
            critic: None,
            lean_context: LeanContext::default(),
        };
        let mut description = None;
        let config_path = format!("{}agent.yaml", prefix(&dir.path));
        if let Some(file) = &dir.config
            && let Some(parsed) = self.yaml_file(file)
        {
            let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
            f.unknown_keys(
                &[
                    "model",
                    "reasoning",
                    "context_window",
                    "tool_choice",
                    "compaction",
                    "limits",
                    "default_tools",
                    "turn_policy",
                    "approvals",
                    "description",
                    "name",
                    "hollow_check",
                    "lean_context",
                    "strategy",
                    "critic",
                ],
                "agent.yaml",
            );
            config.model = f.string("model");
            if let Some(m) = &config.model
                && !m.contains('/')
            {
                f.report(
                    Code::InvalidField,
                    "model",
                    format!("`model` is `{m}`; expected `provider/name`"),
                    "for example `openai/gpt-4.1`, `anthropic/claude-sonnet-4-5` or `mock/echo`",
                );
            } else if let Some(m) = &config.model
                && let Some((provider, _)) = m.split_once('/')
                && !crate::manifest::is_known_provider(provider)
            {
                f.report(
                    Code::UnknownProvider,
                    "model",
                    format!("`model` is `{m}`: eve has no model provider `{provider}`"),
                    &format!(
                        "use one of {}; any other OpenAI-compatible server is \
                         `openai-compatible/NAME` with EVE_BASE_URL",
                        crate::manifest::KNOWN_PROVIDERS
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            config.reasoning = f
                .choice(
                    "reasoning",
                    &[("low", "low"), ("medium", "medium"), ("high", "high")],
                )
                .map(str::to_owned);
            config.context_window = f.u64("context_window");
            config.tool_choice = f.string("tool_choice");
            config.default_tools = f.bool("default_tools").unwrap_or(true);
            config.turn_policy = f
                .choice(
                    "turn_policy",
                    &[("queue", TurnPolicy::Queue), ("steer", TurnPolicy::Steer)],
                )
                .unwrap_or_default();
            description = f.string("description");
            config.hollow_check = f.bool("hollow_check").unwrap_or(false);
            config.strategy = f
                .choice(
                    "strategy",
                    &[
                        ("react", Strategy::React),
                        ("plan", Strategy::Plan),
                        ("reflect", Strategy::Reflect),
                    ],
                )
                .unwrap_or_default();
            match f.raw("compaction").cloned() {
                Some(Value::Bool(b)) => config.compaction.enabled = b,
                Some(Value::Object(_)) => {
                    let mut c =
                        Fields::new(&file.path, &parsed.doc, "/compaction", &mut self.diags);
                    c.unknown_keys(&["enabled", "threshold"], "compaction");
                    if let Some(b) = c.bool("enabled") {
                        config.compaction.enabled = b;
                    }
                    if let Some(t) = c.f64("threshold") {
                        if t > 0.0 && t <= 1.0 {
                            config.compaction.threshold = t;
                        } else {
                            c.report(
                                Code::InvalidField,
                                "threshold",
                                format!(
                                    "`threshold` is {t}; it is a fraction of the context window"
                                ),
                                "use a number above 0 and at most 1, such as 0.8",
                            );
                        }
                    }
                }
                Some(other) => {
                    let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
                    f.report(
                        Code::InvalidField,
                        "compaction",
                        format!(
                            "`compaction` must be true, false or a mapping, found {}",
                            crate::fields::kind(&other)
                        ),
                        "write `compaction: false`, or a mapping with `enabled:` and `threshold:`",
                    );
                }
                None => {}
            }
            if parsed.doc.value.get("critic").is_some() {
                config.critic = self.critic(&file.path, &parsed.doc, config.strategy);
            }
            if parsed.doc.value.get("lean_context").is_some() {
                config.lean_context = self.lean_context(&file.path, &parsed.doc);
            }
            if parsed.doc.value.get("approvals").is_some() {
                let mut a = Fields::new(&file.path, &parsed.doc, "/approvals", &mut self.diags);
                for tool in BUILTIN_TOOLS {
                    if let Some(policy) = a.choice(tool, APPROVALS) {
                        config.approvals.insert((*tool).to_owned(), policy);
                    }
                }
                a.unknown_keys(BUILTIN_TOOLS, "approvals (built-in tool names)");
            }
            if parsed.doc.value.get("limits").is_some() {
                let mut l = Fields::new(&file.path, &parsed.doc, "/limits", &mut self.diags);
                l.unknown_keys(
                    &[
                        "max_steps_per_turn",
                        "max_tokens",
                        "max_cost_usd",
                        "max_turn_seconds",
                        "price_per_million",
                        "model_call_seconds",
                        "model_idle_seconds",
                        "model_response_bytes",
                        "phases",
                    ],
                    "limits",
                );
                if let Some(n) = l.u64("max_steps_per_turn") {
                    config.limits.max_steps_per_turn = u32::try_from(n).unwrap_or(u32::MAX).max(1);
                }
                config.limits.max_tokens = l.u64("max_tokens");
                config.limits.max_cost_usd = l.f64("max_cost_usd");
                config.limits.max_turn_seconds = l.u64("max_turn_seconds");
                config.limits.model_call_seconds = l.u64("model_call_seconds").map(|n| n.max(1));
                config.limits.model_idle_seconds = l.u64("model_idle_seconds").map(|n| n.max(1));
                config.limits.model_response_bytes =
                    l.u64("model_response_bytes").map(|n| n.max(1024));
                if parsed.doc.value.pointer("/limits/phases").is_some() {
                    config.limits.phases = self.phases(&file.path, &parsed.doc);
                }
                if parsed
                    .doc
                    .value
                    .pointer("/limits/price_per_million")
                    .is_some()
                {
                    let mut p = Fields::new(
                        &file.path,
                        &parsed.doc,
                        "/limits/price_per_million",
                        &mut self.diags,
                    );
                    p.unknown_keys(&["input", "output"], "price_per_million");
                    match (p.f64("input"), p.f64("output")) {
                        (Some(input), Some(output)) if input >= 0.0 && output >= 0.0 => {
                            config.limits.price_per_million = Some(Price { input, output });
                        }
                        _ => p.report_at(
                            Code::InvalidField,
                            "/limits/price_per_million",
                            "`price_per_million` needs non-negative `input` and `output` prices"
                                .to_owned(),
                            "for example `price_per_million: {input: 2.0, output: 8.0}` (US dollars per million tokens)",
                        ),
                    }
                }
            }
        }
        if !root && description.as_deref().is_none_or(|d| d.trim().is_empty()) {
            self.push(
                Diagnostic::new(
                    Code::MissingDescription,
                    config_path,
                    "subagent has no `description`",
                )
                .help("add `description: <what this subagent does>` to its agent.yaml: the parent model sees it as the tool's description"),
            );
        }
        (config, description)
    }

    /// `critic: {model?, instructions?, max_rounds?}` of `strategy: reflect`.
    fn critic(&mut self, path: &str, doc: &crate::yaml::Doc, strategy: Strategy) -> Option<Critic> {
        let mut c = Fields::new(path, doc, "/critic", &mut self.diags);
        if !doc.value.get("critic").is_some_and(Value::is_object) {
            c.report_at(
                Code::InvalidField,
                "/critic",
                "`critic` must be a mapping".to_owned(),
                "for example `critic: {model: openai/gpt-4.1-mini, instructions: \"Check the facts.\", max_rounds: 2}`",
            );
            return None;
        }
        c.unknown_keys(&["model", "instructions", "max_rounds"], "critic");
        if strategy != Strategy::Reflect {
            c.report_at(
                Code::InvalidField,
                "/critic",
                format!(
                    "`critic` is set but `strategy` is `{}`: only `strategy: reflect` uses a critic",
                    strategy.as_str()
                ),
                "add `strategy: reflect`, or remove `critic`",
            );
        }
        let model = c.string("model");
        if let Some(m) = &model
            && !m.contains('/')
        {
            c.report(
                Code::InvalidField,
                "model",
                format!("`critic.model` is `{m}`; expected `provider/name`"),
                "for example `openai/gpt-4.1-mini` or `mock/echo`",
            );
        }
        let instructions = c
            .string("instructions")
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_CRITIC_INSTRUCTIONS.to_owned());
        let mut max_rounds = 2;
        if let Some(n) = c.u64("max_rounds") {
            if (1..=10).contains(&n) {
                max_rounds = n as u32;
            } else {
                c.report(
                    Code::InvalidField,
                    "max_rounds",
                    format!("`critic.max_rounds` is {n}; it is between 1 and 10"),
                    "use a small number of review rounds, such as 2",
                );
            }
        }
        Some(Critic {
            model,
            instructions,
            max_rounds,
        })
    }

    /// `limits.phases: {explore, execute, converge, explore_tools?}`: three shares of the turn's
    /// budget, each in 0..=1, adding up to 1.
    fn phases(&mut self, path: &str, doc: &crate::yaml::Doc) -> Option<Phases> {
        let mut p = Fields::new(path, doc, "/limits/phases", &mut self.diags);
        if !doc
            .value
            .pointer("/limits/phases")
            .is_some_and(Value::is_object)
        {
            p.report_at(
                Code::InvalidField,
                "/limits/phases",
                "`limits.phases` must be a mapping of shares".to_owned(),
                "for example `phases: {explore: 0.25, execute: 0.5, converge: 0.25}`",
            );
            return None;
        }
        p.unknown_keys(
            &["explore", "execute", "converge", "explore_tools"],
            "limits.phases",
        );
        let mut shares = [0.0; 3];
        let mut ok = true;
        for (slot, key) in shares.iter_mut().zip(["explore", "execute", "converge"]) {
            match p.f64(key) {
                Some(v) if (0.0..=1.0).contains(&v) => *slot = v,
                Some(v) => {
                    p.report(
                        Code::InvalidField,
                        key,
                        format!("`limits.phases.{key}` is {v}; a share is between 0 and 1"),
                        "give each phase a fraction of the turn's budget, such as 0.25",
                    );
                    ok = false;
                }
                None if p.has(key) => ok = false,
                None => {
                    p.report_at(
                        Code::InvalidField,
                        "/limits/phases",
                        format!("`limits.phases` has no `{key}` share"),
                        "give all three shares: `{explore: 0.25, execute: 0.5, converge: 0.25}`",
                    );
                    ok = false;
                }
            }
        }
        let explore_tools = p.string_list("explore_tools").unwrap_or_default();
        if !ok {
            return None;
        }
        let sum: f64 = shares.iter().sum();
        if (sum - 1.0).abs() > 1e-6 {
            p.report_at(
                Code::InvalidField,
                "/limits/phases",
                format!("the shares of `limits.phases` add up to {sum}, not 1"),
                "make explore + execute + converge = 1, such as 0.25 + 0.5 + 0.25",
            );
            return None;
        }
        Some(Phases {
            explore: shares[0],
            execute: shares[1],
            converge: shares[2],
            explore_tools,
        })
    }

    /// `lean_context: {max_inline_tools, keep_inline, cut_lines}` (or `false`: all off).
    fn lean_context(&mut self, path: &str, doc: &crate::yaml::Doc) -> LeanContext {
        let mut lean = LeanContext::default();
        match doc.value.get("lean_context") {
            Some(Value::Bool(false)) => {
                lean.max_inline_tools = 0;
                lean.cut_lines = 0;
                return lean;
            }
            Some(Value::Bool(true)) => return lean,
            Some(Value::Object(_)) => {}
            other => {
                let found = other.map(crate::fields::kind).unwrap_or_default();
                let mut f = Fields::new(path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "lean_context",
                    format!("`lean_context` must be true, false or a mapping, found {found}"),
                    "write a mapping such as `lean_context: {max_inline_tools: 30, keep_inline: 8, cut_lines: 40}`",
                );
                return lean;
            }
        }
        let mut l = Fields::new(path, doc, "/lean_context", &mut self.diags);
        l.unknown_keys(
            &["max_inline_tools", "keep_inline", "cut_lines"],
            "lean_context",
        );
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(n) = l.u64("max_inline_tools") {
            lean.max_inline_tools = clamp(n);
        }
        if let Some(n) = l.u64("keep_inline") {
            lean.keep_inline = clamp(n);
        }
        if let Some(n) = l.u64("cut_lines") {
            if n > 0 && n < 4 {
                l.report(
                    Code::InvalidField,
                    "cut_lines",
                    format!("`lean_context.cut_lines` is {n}; an output is cut to a head and a tail, so it needs at least 4 lines"),
                    "use 0 to keep outputs whole, or 4 or more (default 40)",
                );
            } else {
                lean.cut_lines = clamp(n);
            }
        }
        if lean.max_inline_tools > 0 && lean.keep_inline > lean.max_inline_tools {
            l.report(
                Code::InvalidField,
                "keep_inline",
                format!(
                    "`lean_context.keep_inline` ({}) is more than `max_inline_tools` ({})",
                    lean.keep_inline, lean.max_inline_tools
                ),
                "keep fewer tools inline than the count that turns the catalogue on",
            );
            lean.keep_inline = lean.max_inline_tools;
        }
        lean
    }

    fn instructions(&mut self, dir: &AgentDir) -> String {
        let Some(file) = &dir.instructions else {
            let what = if dir.path.is_empty() {
                "the agent"
            } else {
                "this subagent"
            };
            self.push(
                Diagnostic::new(
                    Code::MissingInstructions,
                    format!("{}instructions.md", prefix(&dir.path)),
                    format!("{what} has no instructions.md"),
                )
                .help("create instructions.md with the system prompt"),
            );
            return String::new();
        };
        let Some(parsed) = self.markdown_file(file) else {
            return String::new();
        };
        let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(&["description", "title"], "instructions.md front matter");
        let body = parsed.body.trim().to_owned();
        if body.is_empty() {
            self.push(
                Diagnostic::new(
                    Code::EmptyInstructions,
                    file.path.clone(),
                    "instructions.md is empty",
                )
                .help("write the system prompt: who the agent is and how it should work"),
            );
        }
        body
    }
}

fn prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    }
}
