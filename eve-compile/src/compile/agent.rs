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
        self.check_tool_choice(&agent, dir);
        self.check_self_change_name(&agent);
        agent
    }

    /// With `self_change: true` the name `propose_change` is the built-in's: a tool of the agent
    /// cannot take it (it would shadow the governed tool).
    fn check_self_change_name(&mut self, agent: &Agent) {
        if !agent.config.self_change {
            return;
        }
        if let Some(tool) = agent.tools.iter().find(|t| t.name == "propose_change") {
            self.push(
                Diagnostic::new(
                    Code::ReservedName,
                    tool.source.clone(),
                    "`propose_change` is reserved by eve: with `self_change: true` it is the \
                     built-in tool that proposes changes to the agent",
                )
                .help("rename the tool's file"),
            );
        }
    }

    /// `tool_choice: NAME` must name a tool the agent is offered: a typo would otherwise force
    /// nothing, silently (eve only forces a tool that is offered).
    fn check_tool_choice(&mut self, agent: &Agent, dir: &AgentDir) {
        let Some(choice) = agent.config.tool_choice.as_deref().map(str::trim) else {
            return;
        };
        if ["", "auto", "required", "any", "none"].contains(&choice) {
            return;
        }
        let mut names: Vec<&str> = agent.tools.iter().map(|t| t.name.as_str()).collect();
        names.extend(agent.subagents.iter().map(|s| s.name.as_str()));
        if agent.config.default_tools {
            names.extend(BUILTIN_TOOLS);
        }
        if !agent.skills.is_empty() {
            names.push("load_skill");
        }
        if agent.config.memory.is_some() {
            names.push("memory");
        }
        // An MCP tool (`CONNECTION__tool`) is known only once its server runs.
        let mcp = choice
            .split_once("__")
            .is_some_and(|(c, _)| agent.connections.iter().any(|k| k.name == c));
        if mcp || names.contains(&choice) {
            return;
        }
        let path = format!("{}agent.yaml", prefix(&dir.path));
        let mut d = Diagnostic::new(
            Code::InvalidField,
            path,
            format!("`tool_choice` is `{choice}`, which is not a tool of this agent"),
        )
        .help(match crate::fields::closest(choice, &names) {
            Some(c) => format!("did you mean `{c}`? (or use `auto`, `required` or `none`)"),
            None => format!(
                "use `auto`, `required`, `none`, or one of: {}",
                names.join(", ")
            ),
        });
        if let Some(line) = dir.config.as_ref().and_then(|f| {
            f.text
                .lines()
                .position(|l| l.trim_start().starts_with("tool_choice"))
        }) {
            d = d.at(u32::try_from(line + 1).unwrap_or(1), 1);
        }
        self.push(d);
    }

    fn config(&mut self, dir: &AgentDir, root: bool) -> (AgentConfig, Option<String>) {
        let mut config = AgentConfig {
            model: None,
            reasoning: None,
            context_window: None,
            tool_choice: None,
            review_model: None,
            memory: None,
            probe: None,
            compaction: Compaction::default(),
            limits: Limits::default(),
            default_tools: true,
            approvals: BTreeMap::new(),
            turn_policy: TurnPolicy::Queue,
            hollow_check: false,
            strategy: Default::default(),
            critic: None,
            lean_context: LeanContext::default(),
            activation: Activation::Auto,
            gate: Vec::new(),
            rollback: None,
            self_change: false,
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
                    "review_model",
                    "memory",
                    "probe",
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
                    "activation",
                    "gate",
                    "rollback",
                    "self_change",
                ],
                "agent.yaml",
            );
            config.model = f.string("model");
            config.review_model = f.string("review_model");
            for (key, value) in [
                ("model", &config.model),
                ("review_model", &config.review_model),
            ] {
                check_model(&mut f, key, value.as_deref());
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
            config.self_change = f.bool("self_change").unwrap_or(false);
            if config.self_change && !root {
                f.report(
                    Code::InvalidField,
                    "self_change",
                    "`self_change` is set in a subagent's agent.yaml; only the root agent may \
                     propose changes (to the whole `agent/` folder)"
                        .to_owned(),
                    "remove `self_change` here and set `self_change: true` in the root `agent/agent.yaml`",
                );
                config.self_change = false;
            }
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
            self.release_policy(&mut config, file, &parsed.doc, root);
            config.memory = self.memory_config(file, &parsed.doc);
            config.probe = self.probe_config(file, &parsed.doc);
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
                        "review_seconds",
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
                config.limits.review_seconds = l.u64("review_seconds").map(|n| n.max(1));
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

    /// `activation:`, `gate:` and `rollback:`: how a new build becomes the active release. They
    /// belong to the project, so a subagent's are refused.
    fn release_policy(
        &mut self,
        config: &mut AgentConfig,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
        root: bool,
    ) {
        let present: Vec<&str> = ["activation", "gate", "rollback"]
            .into_iter()
            .filter(|k| doc.value.get(*k).is_some())
            .collect();
        if present.is_empty() {
            return;
        }
        let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
        if !root {
            for key in present {
                f.report(
                    Code::InvalidField,
                    key,
                    format!(
                        "`{key}` is set in a subagent; releases are decided for the whole project"
                    ),
                    "move it to the root agent's agent.yaml",
                );
            }
            return;
        }
        config.activation = f
            .choice(
                "activation",
                &[("auto", Activation::Auto), ("review", Activation::Review)],
            )
            .unwrap_or_default();
        if let Some(tags) = f.string_list("gate") {
            let mut gate: Vec<String> = Vec::new();
            for tag in tags {
                let tag = tag.trim().to_owned();
                if tag.is_empty() || tag.chars().any(char::is_whitespace) {
                    f.report(
                        Code::InvalidField,
                        "gate",
                        format!("`gate` has the tag `{tag}`; a tag is one word"),
                        "list eval tags, such as `gate: [smoke, safety]`",
                    );
                } else if !gate.contains(&tag) {
                    gate.push(tag);
                }
            }
            gate.sort();
            config.gate = gate;
        }
        match doc.value.get("rollback") {
            None | Some(Value::Null) => {}
            Some(Value::Object(_)) => {
                let mut r = Fields::new(&file.path, doc, "/rollback", &mut self.diags);
                r.unknown_keys(&["failures", "window"], "rollback");
                let failures = r.u64("failures");
                let window = r.duration_ms("window");
                match (failures, window) {
                    (Some(n), Some(window_ms)) if n >= 1 => {
                        config.rollback = Some(RollbackPolicy {
                            failures: u32::try_from(n).unwrap_or(u32::MAX),
                            window_ms,
                        });
                    }
                    (Some(0), _) => r.report(
                        Code::InvalidField,
                        "failures",
                        "`rollback.failures` is 0; a rollback needs at least one failed turn"
                            .to_owned(),
                        "for example `rollback: {failures: 3, window: 10m}`",
                    ),
                    (None, _) if r.raw("failures").is_none() => r.report_at(
                        Code::InvalidField,
                        "/rollback",
                        "`rollback` has no `failures`".to_owned(),
                        "for example `rollback: {failures: 3, window: 10m}`",
                    ),
                    (_, None) if r.raw("window").is_none() => r.report_at(
                        Code::InvalidField,
                        "/rollback",
                        "`rollback` has no `window`".to_owned(),
                        "for example `rollback: {failures: 3, window: 10m}`",
                    ),
                    // A bad value was reported where it was read.
                    _ => {}
                }
            }
            Some(other) => f.report(
                Code::InvalidField,
                "rollback",
                format!(
                    "`rollback` must be a mapping, found {}",
                    crate::fields::kind(other)
                ),
                "for example `rollback: {failures: 3, window: 10m}`",
            ),
        }
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

/// Reports a `provider/name` model field (`model`, `review_model`) that is malformed or names a
/// provider eve does not have.
fn check_model(f: &mut Fields<'_>, key: &str, model: Option<&str>) {
    let Some(m) = model else { return };
    match m.split_once('/') {
        None => f.report(
            Code::InvalidField,
            key,
            format!("`{key}` is `{m}`; expected `provider/name`"),
            "for example `openai/gpt-4.1`, `anthropic/claude-sonnet-4-5` or `mock/echo`",
        ),
        Some((provider, _)) if !crate::manifest::is_known_provider(provider) => f.report(
            Code::UnknownProvider,
            key,
            format!("`{key}` is `{m}`: eve has no model provider `{provider}`"),
            &format!(
                "{}use one of {}; any other OpenAI-compatible server is \
                 `openai-compatible/NAME` with EVE_BASE_URL",
                crate::fields::closest(provider, &crate::manifest::KNOWN_PROVIDERS)
                    .map(|p| format!("did you mean `{p}`? "))
                    .unwrap_or_default(),
                crate::manifest::KNOWN_PROVIDERS
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(_) => {}
    }
}

impl Compiler {
    /// `memory: true`, or `memory: {scopes, max_chars, save_at}`.
    fn memory_config(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
    ) -> Option<Memory> {
        let default = Memory {
            scopes: vec![MemoryScope::Agent],
            max_chars: 4000,
            save_at: 0.75,
        };
        match doc.value.get("memory")? {
            Value::Bool(true) => Some(default),
            Value::Bool(false) | Value::Null => None,
            Value::Object(_) => {
                let mut m = Fields::new(&file.path, doc, "/memory", &mut self.diags);
                m.unknown_keys(&["scopes", "max_chars", "save_at"], "memory");
                let mut memory = default;
                if let Some(scopes) = m.string_list("scopes") {
                    let mut parsed = Vec::new();
                    for scope in scopes {
                        match scope.as_str() {
                            "agent" => parsed.push(MemoryScope::Agent),
                            "user" => parsed.push(MemoryScope::User),
                            "session" => parsed.push(MemoryScope::Session),
                            other => m.report(
                                Code::InvalidField,
                                "scopes",
                                format!("`scopes` has `{other}`, which is not a memory scope"),
                                "use `agent`, `user` or `session`",
                            ),
                        }
                    }
                    parsed.sort();
                    parsed.dedup();
                    if parsed.is_empty() {
                        m.report(
                            Code::InvalidField,
                            "scopes",
                            "`scopes` names no memory scope".to_owned(),
                            "list at least one of `agent`, `user`, `session`",
                        );
                    } else {
                        memory.scopes = parsed;
                    }
                }
                if let Some(n) = m.u64("max_chars") {
                    memory.max_chars = n.max(100);
                }
                if let Some(t) = m.f64("save_at") {
                    if t > 0.0 && t < 1.0 {
                        memory.save_at = t;
                    } else {
                        m.report(
                            Code::InvalidField,
                            "save_at",
                            format!("`save_at` is {t}; it is a fraction of the context window"),
                            "use a number between 0 and 1, such as 0.75",
                        );
                    }
                }
                Some(memory)
            }
            other => {
                let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "memory",
                    format!(
                        "`memory` must be true, false or a mapping, found {}",
                        crate::fields::kind(other)
                    ),
                    "write `memory: true`, or a mapping with `scopes:`, `max_chars:` and `save_at:`",
                );
                None
            }
        }
    }

    /// `probe: true`, or `probe: {programs, listing}`.
    fn probe_config(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
    ) -> Option<Probe> {
        let default = Probe {
            programs: DEFAULT_PROBE_PROGRAMS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            listing: true,
        };
        match doc.value.get("probe")? {
            Value::Bool(true) => Some(default),
            Value::Bool(false) | Value::Null => None,
            Value::Object(_) => {
                let mut p = Fields::new(&file.path, doc, "/probe", &mut self.diags);
                p.unknown_keys(&["programs", "listing"], "probe");
                let mut probe = default;
                if let Some(programs) = p.string_list("programs") {
                    let bad: Vec<&String> = programs
                        .iter()
                        .filter(|name| {
                            name.is_empty()
                                || !name
                                    .chars()
                                    .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
                        })
                        .collect();
                    if let Some(name) = bad.first() {
                        p.report(
                            Code::InvalidField,
                            "programs",
                            format!("`programs` has `{name}`, which is not a program name"),
                            "list names looked up on PATH, such as `git` or `python3`",
                        );
                    } else {
                        probe.programs = programs;
                    }
                }
                if let Some(listing) = p.bool("listing") {
                    probe.listing = listing;
                }
                Some(probe)
            }
            other => {
                let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "probe",
                    format!(
                        "`probe` must be true, false or a mapping, found {}",
                        crate::fields::kind(other)
                    ),
                    "write `probe: true`, or a mapping with `programs:` and `listing:`",
                );
                None
            }
        }
    }
}
