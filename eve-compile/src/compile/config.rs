//! `agent.yaml`: the model and how it is asked, the built-ins' approvals, compaction and
//! `limits:`, with defaults filled in. Its larger settings have their own modules: `release`
//! (`activation`, `gate`, `rollback`), `behaviours` (`critic`, `limits.phases`, `lean_context`)
//! and `memory` (`memory`, `probe`).

use std::collections::BTreeMap;

use serde_json::Value;

use eve_discover::{AgentDir, Code, Diagnostic};

use super::agent::prefix;
use super::{APPROVALS, Compiler};
use crate::fields::Fields;
use crate::manifest::*;

/// Built-in tools whose approval `agent.yaml` `approvals:` can set: every built-in of
/// [`DEFAULT_TOOL_EFFECTS`] but `agent` (a subagent call, approved as one).
pub const BUILTIN_TOOLS: &[&str] = &[
    "bash",
    "read_file",
    "write_file",
    "glob",
    "grep",
    "web_fetch",
    "web_search",
    "sleep",
];

impl Compiler {
    pub(super) fn config(&mut self, dir: &AgentDir, root: bool) -> (AgentConfig, Option<String>) {
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
            prices: BTreeMap::new(),
            default_tools: true,
            builtins: None,
            approvals: BTreeMap::new(),
            turn_policy: TurnPolicy::Steer,
            hollow_check: false,
            strategy: Default::default(),
            critic: None,
            lean_context: LeanContext::default(),
            activation: Activation::Auto,
            gate: Vec::new(),
            rollback: None,
            self_change: false,
            ask_question: false,
            no_reply: false,
            web: Web::default(),
            retention_ms: None,
            state: BTreeMap::new(),
        };
        config.limits.session_timeout_ms = Some(DEFAULT_SESSION_TIMEOUT_MS);
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
                    "prices",
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
                    "ask_question",
                    "no_reply",
                    "web",
                    "retention",
                    "state",
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
            (config.default_tools, config.builtins) = super::builtins::default_tools(&mut f);
            config.turn_policy = f
                .choice(
                    "turn_policy",
                    &[("queue", TurnPolicy::Queue), ("steer", TurnPolicy::Steer)],
                )
                .unwrap_or_default();
            description = f.string("description");
            config.hollow_check = f.bool("hollow_check").unwrap_or(false);
            // `retention: default` keeps expired sessions; `0` prunes them when they expire.
            match f.raw("retention").cloned() {
                None => {}
                Some(Value::String(s)) if s == "default" => {}
                Some(Value::Number(n)) if n.as_f64() == Some(0.0) => config.retention_ms = Some(0),
                Some(_) => config.retention_ms = f.duration_ms("retention"),
            }
            config.self_change = f.bool("self_change").unwrap_or(false);
            config.ask_question = f.bool("ask_question").unwrap_or(false);
            config.no_reply = f.bool("no_reply").unwrap_or(false);
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
            config.web = self.web_config(file, &parsed.doc, root);
            config.state = self.state_config(file, &parsed.doc);
            if config.web.search.is_none()
                && super::builtins::turned_on(parsed.doc.value.get("default_tools"), WEB_SEARCH)
            {
                self.push(
                    Diagnostic::new(
                        Code::BuiltinUnset,
                        file.path.clone(),
                        "`default_tools` turns on `web_search`, but `web.search` names no \
                         provider: the agent is not offered it"
                            .to_owned(),
                    )
                    .help(
                        "name one in agent.yaml (`web: {search: {provider: brave}}`, or `tavily`, \
                         or `searxng` with its `url`) with its key in the environment, or leave \
                         `web_search` out of `default_tools`",
                    ),
                );
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
            if let Some(Value::Object(prices)) = parsed.doc.value.get("prices") {
                config.prices = self.prices(&file.path, &parsed.doc, prices);
            } else if parsed.doc.value.get("prices").is_some() {
                let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "prices",
                    "`prices` must be a map from model ids to prices".to_owned(),
                    "for example `prices: {openai/gpt-4.1: {input: 2.0, output: 8.0, cached: 0.5}}` \
                     (US dollars per million tokens)",
                );
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
                        "max_sleep_seconds",
                        "session_timeout",
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
                config.limits.max_sleep_seconds = l.u64("max_sleep_seconds").map(|n| n.max(1));
                match l.raw("session_timeout") {
                    None => {}
                    Some(serde_json::Value::Bool(false)) => config.limits.session_timeout_ms = None,
                    Some(_) => {
                        if let Some(ms) = l.duration_ms("session_timeout") {
                            config.limits.session_timeout_ms = Some(ms);
                        }
                    }
                }
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
    /// `prices:`: each model id's `input`, `output` and optional `cached` price per million
    /// tokens, non-negative.
    fn prices(
        &mut self,
        file: &str,
        doc: &crate::yaml::Doc,
        prices: &serde_json::Map<String, Value>,
    ) -> BTreeMap<String, ModelPrice> {
        let mut out = BTreeMap::new();
        for model in prices.keys() {
            let pointer = format!("/prices/{}", model.replace('~', "~0").replace('/', "~1"));
            let mut p = Fields::new(file, doc, &pointer, &mut self.diags);
            p.unknown_keys(&["input", "output", "cached"], "a model's prices");
            let cached = p.f64("cached");
            match (p.f64("input"), p.f64("output")) {
                (Some(input), Some(output))
                    if input >= 0.0 && output >= 0.0 && cached.is_none_or(|c| c >= 0.0) =>
                {
                    out.insert(
                        model.clone(),
                        ModelPrice {
                            input,
                            output,
                            cached,
                        },
                    );
                }
                _ => p.report_at(
                    Code::InvalidField,
                    &pointer,
                    format!(
                        "the prices of `{model}` need non-negative `input` and `output` (and \
                         `cached`, if given)"
                    ),
                    "for example `openai/gpt-4.1: {input: 2.0, output: 8.0, cached: 0.5}` (US \
                     dollars per million tokens)",
                ),
            }
        }
        out
    }
}
