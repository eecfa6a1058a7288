//! The capability delta: what a build may do that the build before it could not.
//!
//! Activation is the runtime's decision, and a reviewer needs to see what a new build changes
//! in what the agent can reach: a new tool, a tool whose `effect` or `approval` moved, a wider
//! sandbox or network, environment variables newly read, a changed MCP command, a new channel or
//! auth, hooks, subagents, schedules, code that runs on the host, a loosened limit, the model,
//! and the release policy itself (`activation`, `gate`, `rollback`). [`capability_delta`]
//! compares two manifests and lists every such change, each marked widening or not; under
//! `activation: review` a widening delta parks the build until a principal activates it. Pure:
//! no I/O, so the CLI, the runtime and the self-change proposal all compute the same delta.
//!
//! A change can hide where the manifest looks the same: a script tool's file rewritten under an
//! unchanged front matter, a library a host command loads, a hook's body. So the delta compares
//! the build files' digests the manifest records (`files`), not only the manifest's entries.
//!
//! One file per kind of capability, each adding its `Differ` methods: `tools` (tools, the
//! built-ins included, their effect, approval and request), `sandbox` (the agent's `sandbox.yaml`
//! and each process's effective sandbox), `code` (code that runs on the host, and hook bodies,
//! from the runners and the file digests), `hooks`, `limits` (every bound of `limits:` in
//! `agent.yaml` and `sandbox.yaml`, and each process's timeout and output cap), `model`,
//! `connections`, `channels` (and their auth), `policy` (the release policy) and `env`
//! (environment variables the build reads). This file holds the types, the walk over an agent
//! and its subagents (with its schedules), and [`capability_delta`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::*;

mod channels;
mod code;
mod connections;
mod env;
mod hooks;
mod limits;
mod model;
mod policy;
mod sandbox;
mod tools;
mod web;

use tools::{tool_summary, tools_of};

/// What changed in one capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A tool the model may call appeared.
    ToolAdded,
    /// A tool went away.
    ToolRemoved,
    /// A tool's `effect` moved up (`read` < `idempotent` < `write`).
    EffectWidened,
    /// A tool's `effect` moved down.
    EffectNarrowed,
    /// A tool's environment, dynamic-tool events or HTTP request changed; widening when it is
    /// given a variable it was not, defines tools at more events, sends its request to another
    /// origin or with more `${VAR}` values, or (the built-in `memory`) writes a wider scope.
    ToolChanged,
    /// Code that runs on the host changed: the script, command line or interpreter of a
    /// `sandbox: host` tool, dynamic-tool provider or MCP server, or a build file one of them
    /// runs or may load (a script's bytes or mode, a `_lib/` file). Always widening.
    HostCodeChanged,
    /// A hook's body changed (its script's bytes or mode, its command, the events it receives,
    /// its environment, a file it may load), whatever its sandbox: a hook can allow, deny or
    /// rewrite calls. Always widening.
    HookChanged,
    /// A bound was raised or removed: `limits:` of `agent.yaml` (steps, tokens, cost, time,
    /// model calls), `limits:` and defaults of `sandbox.yaml` (memory, processes, file size,
    /// CPU, timeout, output cap), a tool's, hook's or connection's own timeout or output cap.
    LimitLoosened,
    /// A bound was lowered or set.
    LimitTightened,
    /// The model (`model`, `review_model`, a critic's model) changed. Not widening by itself,
    /// but always shown.
    ModelChanged,
    /// A tool's or connection's `approval` asks less (`always` > `once` > `auto` > `never`).
    ApprovalLoosened,
    /// A tool's or connection's `approval` asks more.
    ApprovalTightened,
    /// A process may run unconfined (`host`), or write or read more paths.
    SandboxWidened,
    /// A process may reach destinations it could not.
    NetworkWidened,
    /// An environment variable is newly read (by a tool, hook or connection, or referenced as
    /// `${VAR}`).
    EnvAdded,
    /// An MCP connection appeared.
    ConnectionAdded,
    /// An MCP connection went away.
    ConnectionRemoved,
    /// An MCP connection's command, arguments, URL, headers, environment or tool filters
    /// changed.
    ConnectionChanged,
    /// A channel appeared.
    ChannelAdded,
    /// A channel went away.
    ChannelRemoved,
    /// A channel's kind or settings changed.
    ChannelChanged,
    /// A channel's authentication changed.
    AuthChanged,
    /// A hook appeared.
    HookAdded,
    /// A hook went away.
    HookRemoved,
    /// A subagent appeared.
    SubagentAdded,
    /// A subagent went away.
    SubagentRemoved,
    /// A schedule appeared.
    ScheduleAdded,
    /// A schedule went away.
    ScheduleRemoved,
    /// The release policy asks less: `activation` from `review` to `auto`, a `gate` tag dropped,
    /// `rollback` removed or slower to act.
    PolicyLoosened,
    /// The release policy asks more.
    PolicyTightened,
}

impl ChangeKind {
    /// The snake_case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolAdded => "tool_added",
            Self::ToolRemoved => "tool_removed",
            Self::EffectWidened => "effect_widened",
            Self::EffectNarrowed => "effect_narrowed",
            Self::ToolChanged => "tool_changed",
            Self::HostCodeChanged => "host_code_changed",
            Self::HookChanged => "hook_changed",
            Self::LimitLoosened => "limit_loosened",
            Self::LimitTightened => "limit_tightened",
            Self::ModelChanged => "model_changed",
            Self::ApprovalLoosened => "approval_loosened",
            Self::ApprovalTightened => "approval_tightened",
            Self::SandboxWidened => "sandbox_widened",
            Self::NetworkWidened => "network_widened",
            Self::EnvAdded => "env_added",
            Self::ConnectionAdded => "connection_added",
            Self::ConnectionRemoved => "connection_removed",
            Self::ConnectionChanged => "connection_changed",
            Self::ChannelAdded => "channel_added",
            Self::ChannelRemoved => "channel_removed",
            Self::ChannelChanged => "channel_changed",
            Self::AuthChanged => "auth_changed",
            Self::HookAdded => "hook_added",
            Self::HookRemoved => "hook_removed",
            Self::SubagentAdded => "subagent_added",
            Self::SubagentRemoved => "subagent_removed",
            Self::ScheduleAdded => "schedule_added",
            Self::ScheduleRemoved => "schedule_removed",
            Self::PolicyLoosened => "policy_loosened",
            Self::PolicyTightened => "policy_tightened",
        }
    }
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change of one capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// What kind of change.
    pub kind: ChangeKind,
    /// What changed: a tool, connection, channel, hook, subagent or schedule name (a subagent's
    /// own capabilities are prefixed with its name and `/`: `researcher/search`), an environment
    /// variable, or a setting (`sandbox`, `activation`, …).
    pub subject: String,
    /// The value before, when it had one.
    pub before: Option<String>,
    /// The value after, when it has one.
    pub after: Option<String>,
    /// Whether the build may do something the one before could not.
    pub widening: bool,
}

/// Every capability change between two builds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The changes, in a stable order (by agent, then kind of capability, then name).
    pub changes: Vec<Change>,
}

impl Delta {
    /// Whether some change lets the new build do something the old one could not.
    pub fn widens(&self) -> bool {
        self.changes.iter().any(|c| c.widening)
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The widening changes only.
    pub fn widening(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.widening)
    }

    /// One line per change for a terminal; widening ones start with `!`, the others with a
    /// space: `! tool_added deploy (effect write, approval never)`,
    /// `! approval_loosened deploy: always -> never`.
    pub fn render(&self) -> String {
        if self.changes.is_empty() {
            return "  (no capability changes)\n".to_owned();
        }
        let mut out = String::new();
        for c in &self.changes {
            let mark = if c.widening { '!' } else { ' ' };
            out.push_str(&format!("{mark} {} {}", c.kind, c.subject));
            match (&c.before, &c.after) {
                (Some(b), Some(a)) => out.push_str(&format!(": {b} -> {a}")),
                (None, Some(a)) => out.push_str(&format!(" ({a})")),
                (Some(b), None) => out.push_str(&format!(" (was {b})")),
                (None, None) => {}
            }
            out.push('\n');
        }
        out
    }
}

/// The capability delta of `next` against `prev` (`None`: the first build, where every
/// capability is listed as added).
pub fn capability_delta(prev: Option<&Manifest>, next: &Manifest) -> Delta {
    let mut d = Differ::default();
    d.policy(prev.map(|m| &m.agent.config), &next.agent.config);
    d.agent("", prev.map(|m| &m.agent), &next.agent);
    d.files(prev, next);
    d.env(prev, next);
    Delta { changes: d.changes }
}

/// What a first build (or a new subagent) is compared with: `next`'s settings with the default
/// limits, so a bound set above its default shows.
fn default_config(next: &Agent) -> AgentConfig {
    AgentConfig {
        limits: Limits::default(),
        critic: None,
        ..next.config.clone()
    }
}

/// The changes found so far; each kind of capability's module adds the methods that compare it.
#[derive(Default)]
struct Differ {
    changes: Vec<Change>,
    /// The agent compared now has nothing before it (a first build, a new subagent): settings
    /// are compared with their defaults, and only what widens is listed.
    first: bool,
}

impl Differ {
    fn push(
        &mut self,
        kind: ChangeKind,
        subject: String,
        before: Option<String>,
        after: Option<String>,
        widening: bool,
    ) {
        self.changes.push(Change {
            kind,
            subject,
            before,
            after,
            widening,
        });
    }

    /// One agent (the root, or a subagent under `prefix`), and its subagents in turn.
    fn agent(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let name = |n: &str| format!("{prefix}{n}");
        // Tools.
        let before = prev.map(tools_of).unwrap_or_default();
        let after = tools_of(next);
        for (n, t) in &after {
            match before.get(n) {
                None => self.push(
                    ChangeKind::ToolAdded,
                    name(n),
                    None,
                    Some(tool_summary(t)),
                    true,
                ),
                Some(old) => self.tool_changed(&name(n), old, t),
            }
        }
        for (n, t) in &before {
            if !after.contains_key(n) {
                self.push(
                    ChangeKind::ToolRemoved,
                    name(n),
                    Some(tool_summary(t)),
                    None,
                    false,
                );
            }
        }
        // The agent's own sandbox: the default of its processes.
        let default_sandbox = Sandbox::default();
        let old_sb = prev.map(|a| &a.sandbox).unwrap_or(&default_sandbox);
        self.sandbox(prefix, old_sb, &next.sandbox);
        self.web(prefix, prev.map(|a| &a.config.web), &next.config.web);
        let default_config = default_config(next);
        let old_config = prev.map_or(&default_config, |a| &a.config);
        self.first = prev.is_none();
        self.sandbox_limits(prefix, old_sb, &next.sandbox);
        self.limits(prefix, old_config, &next.config);
        self.first = false;
        if let Some(prev) = prev {
            self.model(prefix, &prev.config, &next.config);
        }
        self.connections(prefix, prev, next);
        self.channels(prefix, prev, next);
        self.hooks(prefix, prev, next);
        // Schedules: a new one runs the agent with no user asking.
        let old_sched: BTreeMap<&str, &Schedule> = prev
            .map(|a| a.schedules.iter().map(|s| (s.name.as_str(), s)).collect())
            .unwrap_or_default();
        let new_sched: BTreeMap<&str, &Schedule> = next
            .schedules
            .iter()
            .map(|s| (s.name.as_str(), s))
            .collect();
        for (n, s) in &new_sched {
            if !old_sched.contains_key(n) {
                self.push(
                    ChangeKind::ScheduleAdded,
                    name(n),
                    None,
                    Some(s.cron.clone()),
                    true,
                );
            }
        }
        for (n, s) in &old_sched {
            if !new_sched.contains_key(n) {
                self.push(
                    ChangeKind::ScheduleRemoved,
                    name(n),
                    Some(s.cron.clone()),
                    None,
                    false,
                );
            }
        }
        // Subagents: each is a tool of this agent, and its own capabilities count.
        let old_subs: BTreeMap<&str, &Agent> = prev
            .map(|a| a.subagents.iter().map(|s| (s.name.as_str(), s)).collect())
            .unwrap_or_default();
        for sub in &next.subagents {
            let sub_prefix = format!("{prefix}{}/", sub.name);
            match old_subs.get(sub.name.as_str()) {
                None => {
                    self.push(
                        ChangeKind::SubagentAdded,
                        name(&sub.name),
                        None,
                        sub.description.clone(),
                        true,
                    );
                    self.agent(&sub_prefix, None, sub);
                }
                Some(old) => self.agent(&sub_prefix, Some(old), sub),
            }
        }
        for (n, _) in old_subs {
            if next.subagent(n).is_none() {
                self.push(ChangeKind::SubagentRemoved, name(n), None, None, false);
            }
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hidden;
