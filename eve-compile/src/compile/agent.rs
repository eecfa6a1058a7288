//! An agent folder as a whole: the walk that compiles each of its parts and its subagents in
//! turn, `instructions.md`, and the checks that need the whole agent (`tool_choice` names one of
//! its tools; no tool takes `propose_change` under `self_change: true`). `agent.yaml` is read in
//! `config`.

use eve_discover::{AgentDir, Code, Diagnostic};

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    pub(super) fn agent(&mut self, dir: &AgentDir, name: &str, root: bool) -> Agent {
        // TypeScript and JavaScript modules are read by one Node process, before the parts.
        self.evaluate_modules(dir);
        let (mut config, description) = self.config(dir, root);
        self.module_agent(dir, &mut config);
        self.module_states(&mut config);
        let instructions = self.instructions(dir);
        let mut sandbox = self.sandbox(dir);
        let (tools, overrides) = self.tools(dir, &sandbox);
        self.module_builtins(&mut config);
        sandbox.tools = overrides;
        let skills = self.skills(&dir.skills);
        let mut subagents = Vec::new();
        for sub in &dir.subagents {
            self.check_name(&sub.name, &format!("{}/", sub.agent.path), "subagent");
            subagents.push(self.agent(&sub.agent, &sub.name, false));
        }
        for named in &dir.remote_subagents {
            self.check_name(&named.name, &named.file.path, "subagent");
            if let Some(remote) = self.remote_agent(named, &dir.path) {
                subagents.push(remote);
            }
        }
        subagents.sort_by(|a, b| a.name.cmp(&b.name));
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
        let mut tools = tools;
        let mut openapi_tools = Vec::new();
        for c in &dir.connections {
            // An OpenAPI connection's operations are tools of the agent.
            if let Some(found) = self.openapi_connection(c, &dir.path, &sandbox) {
                openapi_tools.extend(found);
                continue;
            }
            if let Some((conn, o)) = self.connection(c) {
                if !o.is_empty() {
                    sandbox.connections.insert(conn.name.clone(), o);
                }
                connections.push(conn);
            }
        }
        if !openapi_tools.is_empty() {
            tools.extend(openapi_tools);
            tools.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let channels = dir
            .channels
            .iter()
            .filter_map(|c| self.channel(c))
            .collect();
        self.collisions(dir, &subagents, &connections);
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
            remote: None,
        };
        self.sandbox_warnings(&agent, dir);
        self.check_tool_choice(&agent, dir);
        self.check_self_change_name(&agent);
        self.check_builtins(&agent);
        self.check_state_key(&agent);
        agent
    }

    /// With `self_change: true` the name `propose_change` is the built-in's: a tool of the agent
    /// cannot take it (it would shadow the governed tool); so are `ask_question` and `no_reply`
    /// when the agent opts in to them.
    fn check_self_change_name(&mut self, agent: &Agent) {
        if let Some(tool) = agent
            .tools
            .iter()
            .find(|t| agent.config.self_change && t.name == "propose_change")
        {
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
        // The same for the opted-in built-ins `ask_question` and `no_reply`.
        for (name, on, what) in [
            (
                "ask_question",
                agent.config.ask_question,
                "with `ask_question: true` it is the built-in tool that asks the user a question",
            ),
            (
                "no_reply",
                agent.config.no_reply,
                "with `no_reply: true` it is the built-in tool that ends the turn without a reply",
            ),
        ] {
            if let Some(tool) = agent.tools.iter().find(|t| on && t.name == name) {
                self.push(
                    Diagnostic::new(
                        Code::ReservedName,
                        tool.source.clone(),
                        format!("`{name}` is reserved by eve: {what}"),
                    )
                    .help("rename the tool's file, or leave the built-in off in agent.yaml"),
                );
            }
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
        names.extend(agent.config.builtins_on());
        if !agent.skills.is_empty() {
            names.push("load_skill");
        }
        if agent.config.memory.is_some() {
            names.push("memory");
        }
        if agent.config.ask_question {
            names.push("ask_question");
        }
        if agent.config.no_reply {
            names.push("no_reply");
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

    /// The system prompt: `instructions.md` (or an `instructions.ts` module), then the entries of
    /// `instructions/` (`.md` files and `defineInstructions` modules) in file-name order,
    /// separated by blank lines.
    fn instructions(&mut self, dir: &AgentDir) -> String {
        let root_module = Self::instructions_module(dir).cloned();
        if let (Some(md), Some(module)) = (&dir.instructions, &root_module) {
            self.push(
                Diagnostic::new(
                    Code::NameCollision,
                    module.path.clone(),
                    format!("both {} and {} exist", md.path, module.path),
                )
                .help("keep one of them: the root instructions are one file"),
            );
        }
        if dir.instructions.is_none() && dir.instructions_dir.is_empty() && root_module.is_none() {
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
                .help("create instructions.md with the system prompt (or `.md` files in instructions/)"),
            );
            return String::new();
        }
        let mut parts = Vec::new();
        let root = dir.instructions.as_ref().or(root_module.as_ref());
        for file in root.into_iter().chain(&dir.instructions_dir) {
            if super::modules::is_module(file) {
                if let Some(text) = self.module_instructions(file) {
                    if text.trim().is_empty() {
                        self.push(
                            Diagnostic::new(
                                Code::EmptyInstructions,
                                file.path.clone(),
                                "the instructions module's `content` is empty",
                            )
                            .help("write the system prompt in `content`"),
                        );
                    } else {
                        parts.push(text.trim().to_owned());
                    }
                }
                continue;
            }
            let Some(parsed) = self.markdown_file(file) else {
                continue;
            };
            let name = file.path.rsplit('/').next().unwrap_or("instructions.md");
            let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
            f.unknown_keys(&["description", "title"], &format!("{name} front matter"));
            let body = parsed.body.trim().to_owned();
            if body.is_empty() {
                self.push(
                    Diagnostic::new(
                        Code::EmptyInstructions,
                        file.path.clone(),
                        format!("{name} is empty"),
                    )
                    .help("write the system prompt: who the agent is and how it should work"),
                );
            } else {
                parts.push(body);
            }
        }
        parts.join("\n\n")
    }
}

/// The agent folder's path with a trailing `/` (empty for the root): what its files' paths start
/// with.
pub(super) fn prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    }
}
