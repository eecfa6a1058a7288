//! The capability delta: what a build may do that the build before it could not.
//!
//! Activation is the runtime's decision, and a reviewer needs to see what a new build changes
//! in what the agent can reach: a new tool, a tool whose `effect` or `approval` moved, a wider
//! sandbox or network, environment variables newly read, a changed MCP command, a new channel or
//! auth, hooks, subagents, schedules, and the release policy itself (`activation`, `gate`,
//! `rollback`). [`capability_delta`] compares two manifests and lists every such change, each
//! marked widening or not; under `activation: review` a widening delta parks the build until a
//! principal activates it. Pure: no I/O, so the CLI, the runtime and the self-change proposal
//! all compute the same delta.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::manifest::*;

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
    /// A tool's or connection's `approval` asks less (`always` > `once` > `auto` > `never`).
    ApprovalLoosened,
    /// A tool's or connection's `approval` asks more.
    ApprovalTightened,
    /// A process may run unconfined (`host`), write or read more paths, or use more resources.
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
    d.env(prev, next);
    Delta { changes: d.changes }
}

#[derive(Default)]
struct Differ {
    changes: Vec<Change>,
}

/// Rank of an effect: higher does more to the world.
fn effect_rank(e: Effect) -> u8 {
    match e {
        Effect::Read => 0,
        Effect::Idempotent => 1,
        Effect::Write => 2,
    }
}

fn effect_name(e: Effect) -> &'static str {
    match e {
        Effect::Read => "read",
        Effect::Idempotent => "idempotent",
        Effect::Write => "write",
    }
}

/// Rank of an approval: higher asks a human more.
fn approval_rank(a: Approval) -> u8 {
    match a {
        Approval::Never => 0,
        Approval::Auto => 1,
        Approval::Once => 2,
        Approval::Always => 3,
    }
}

fn approval_name(a: Approval) -> &'static str {
    match a {
        Approval::Never => "never",
        Approval::Auto => "auto",
        Approval::Once => "once",
        Approval::Always => "always",
    }
}

/// What the delta compares of one tool.
struct ToolView {
    effect: Effect,
    approval: Approval,
    sandbox: Option<EffectiveSandbox>,
}

/// Built-in tools offered with `default_tools: true`, with the effect the runtime gives them.
const DEFAULT_TOOLS: &[(&str, Effect)] = &[
    ("bash", Effect::Write),
    ("read_file", Effect::Read),
    ("write_file", Effect::Write),
];

fn tools_of(agent: &Agent) -> BTreeMap<String, ToolView> {
    let mut out = BTreeMap::new();
    for t in &agent.tools {
        out.insert(
            t.name.clone(),
            ToolView {
                effect: t.effect,
                approval: t.approval,
                sandbox: agent.effective_sandbox(t),
            },
        );
    }
    if agent.config.default_tools {
        for (name, effect) in DEFAULT_TOOLS {
            if out.contains_key(*name) {
                continue;
            }
            let sandbox = (*name == "bash").then(|| agent.bash_sandbox());
            out.insert(
                (*name).to_owned(),
                ToolView {
                    effect: *effect,
                    approval: agent
                        .config
                        .approvals
                        .get(*name)
                        .copied()
                        .unwrap_or_default(),
                    sandbox,
                },
            );
        }
    }
    out
}

fn describe_sandbox(s: &EffectiveSandbox) -> String {
    format!("{}, network {}", s.provider.as_str(), s.network.describe())
}

fn tool_summary(t: &ToolView) -> String {
    let mut s = format!(
        "effect {}, approval {}",
        effect_name(t.effect),
        approval_name(t.approval)
    );
    if let Some(sb) = &t.sandbox {
        s.push_str(&format!(", {}", describe_sandbox(sb)));
    }
    s
}

fn transport_summary(t: &Transport) -> String {
    match t {
        Transport::Stdio { command, args, .. } => {
            let mut s = command.clone();
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        }
        Transport::Http { url, .. } => url.clone(),
    }
}

fn auth_summary(a: &Auth) -> String {
    match a {
        Auth::None => "none".to_owned(),
        Auth::Bearer { tokens } => format!("bearer ({} token(s))", tokens.len()),
        Auth::Basic { username, .. } => format!("basic ({username})"),
        Auth::Jwt { issuer, .. } => match issuer {
            Some(iss) => format!("jwt (issuer {iss})"),
            None => "jwt".to_owned(),
        },
    }
}

/// Whether `next` accepts a credential `prev` did not (or checks less).
fn auth_widens(prev: &Auth, next: &Auth) -> bool {
    match (prev, next) {
        (_, Auth::None) => !matches!(prev, Auth::None),
        (Auth::Bearer { tokens: a }, Auth::Bearer { tokens: b }) => {
            b.iter().any(|t| !a.contains(t))
        }
        (
            Auth::Jwt {
                secret: s1,
                issuer: i1,
                audience: a1,
                require_exp: e1,
            },
            Auth::Jwt {
                secret: s2,
                issuer: i2,
                audience: a2,
                require_exp: e2,
            },
        ) => {
            s1 != s2
                || (i1.is_some() && i2.is_none())
                || (a1.is_some() && a2.is_none())
                || (*e1 && !*e2)
                || (i1.is_some() && i1 != i2)
                || (a1.is_some() && a1 != a2)
        }
        (Auth::None, _) => false,
        // Another kind of credential, or another user or password: someone new may get in.
        _ => prev != next,
    }
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

    fn policy(&mut self, prev: Option<&AgentConfig>, next: &AgentConfig) {
        let Some(prev) = prev else {
            if next.activation != Activation::Auto {
                self.push(
                    ChangeKind::PolicyTightened,
                    "activation".to_owned(),
                    None,
                    Some(next.activation.as_str().to_owned()),
                    false,
                );
            }
            if !next.gate.is_empty() {
                self.push(
                    ChangeKind::PolicyTightened,
                    "gate".to_owned(),
                    None,
                    Some(next.gate.join(", ")),
                    false,
                );
            }
            if let Some(r) = next.rollback {
                self.push(
                    ChangeKind::PolicyTightened,
                    "rollback".to_owned(),
                    None,
                    Some(rollback_summary(&r)),
                    false,
                );
            }
            return;
        };
        if prev.activation != next.activation {
            let loosened = next.activation < prev.activation;
            self.push(
                if loosened {
                    ChangeKind::PolicyLoosened
                } else {
                    ChangeKind::PolicyTightened
                },
                "activation".to_owned(),
                Some(prev.activation.as_str().to_owned()),
                Some(next.activation.as_str().to_owned()),
                loosened,
            );
        }
        if prev.gate != next.gate {
            let dropped = prev.gate.iter().any(|t| !next.gate.contains(t));
            let show = |g: &[String]| {
                if g.is_empty() {
                    "none".to_owned()
                } else {
                    g.join(", ")
                }
            };
            self.push(
                if dropped {
                    ChangeKind::PolicyLoosened
                } else {
                    ChangeKind::PolicyTightened
                },
                "gate".to_owned(),
                Some(show(&prev.gate)),
                Some(show(&next.gate)),
                dropped,
            );
        }
        if prev.rollback != next.rollback {
            let loosened = match (prev.rollback, next.rollback) {
                (Some(_), None) => true,
                (None, _) => false,
                // More failures needed, or fewer counted (a shorter window), act later.
                (Some(a), Some(b)) => b.failures > a.failures || b.window_ms < a.window_ms,
            };
            let show = |r: Option<RollbackPolicy>| {
                r.map(|r| rollback_summary(&r))
                    .unwrap_or_else(|| "none".to_owned())
            };
            self.push(
                if loosened {
                    ChangeKind::PolicyLoosened
                } else {
                    ChangeKind::PolicyTightened
                },
                "rollback".to_owned(),
                Some(show(prev.rollback)),
                Some(show(next.rollback)),
                loosened,
            );
        }
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

    fn tool_changed(&mut self, subject: &str, old: &ToolView, new: &ToolView) {
        if old.effect != new.effect {
            let widened = effect_rank(new.effect) > effect_rank(old.effect);
            self.push(
                if widened {
                    ChangeKind::EffectWidened
                } else {
                    ChangeKind::EffectNarrowed
                },
                subject.to_owned(),
                Some(effect_name(old.effect).to_owned()),
                Some(effect_name(new.effect).to_owned()),
                widened,
            );
        }
        self.approval(subject, old.approval, new.approval);
        self.process_sandbox(subject, old.sandbox.as_ref(), new.sandbox.as_ref());
    }

    fn approval(&mut self, subject: &str, old: Approval, new: Approval) {
        if old == new {
            return;
        }
        let loosened = approval_rank(new) < approval_rank(old);
        self.push(
            if loosened {
                ChangeKind::ApprovalLoosened
            } else {
                ChangeKind::ApprovalTightened
            },
            subject.to_owned(),
            Some(approval_name(old).to_owned()),
            Some(approval_name(new).to_owned()),
            loosened,
        );
    }

    /// The effective sandbox of one process (tool, hook, connection) before and after.
    fn process_sandbox(
        &mut self,
        subject: &str,
        old: Option<&EffectiveSandbox>,
        new: Option<&EffectiveSandbox>,
    ) {
        let (Some(old), Some(new)) = (old, new) else {
            return;
        };
        if old.provider == Provider::Isolated && new.provider == Provider::Host {
            self.push(
                ChangeKind::SandboxWidened,
                subject.to_owned(),
                Some(old.provider.as_str().to_owned()),
                Some(new.provider.as_str().to_owned()),
                true,
            );
        } else if new.network.widens(&old.network) {
            self.push(
                ChangeKind::NetworkWidened,
                subject.to_owned(),
                Some(old.network.describe()),
                Some(new.network.describe()),
                true,
            );
        }
    }

    /// `sandbox.yaml` of one agent (a first build is compared with the defaults).
    fn sandbox(&mut self, prefix: &str, old: &Sandbox, new: &Sandbox) {
        let subject = format!("{prefix}sandbox");
        if old.provider == Provider::Isolated && new.provider == Provider::Host {
            self.push(
                ChangeKind::SandboxWidened,
                subject.clone(),
                Some(old.provider.as_str().to_owned()),
                Some(new.provider.as_str().to_owned()),
                true,
            );
        }
        if new.network.widens(&old.network) {
            self.push(
                ChangeKind::NetworkWidened,
                subject.clone(),
                Some(old.network.describe()),
                Some(new.network.describe()),
                true,
            );
        }
        for (what, a, b) in [
            ("write", &old.write, &new.write),
            ("read", &old.read, &new.read),
        ] {
            for path in b.iter().filter(|p| !a.contains(p)) {
                self.push(
                    ChangeKind::SandboxWidened,
                    format!("{subject}.{what}"),
                    None,
                    Some(path.clone()),
                    true,
                );
            }
        }
        let limits = [
            ("memory", old.limits.memory, new.limits.memory),
            ("processes", old.limits.processes, new.limits.processes),
            ("file_size", old.limits.file_size, new.limits.file_size),
            (
                "cpu_seconds",
                old.limits.cpu_seconds,
                new.limits.cpu_seconds,
            ),
        ];
        for (what, a, b) in limits {
            if b > a {
                self.push(
                    ChangeKind::SandboxWidened,
                    format!("{subject}.limits.{what}"),
                    Some(a.to_string()),
                    Some(b.to_string()),
                    true,
                );
            }
        }
    }

    fn connections(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let old: BTreeMap<&str, &Connection> = prev
            .map(|a| a.connections.iter().map(|c| (c.name.as_str(), c)).collect())
            .unwrap_or_default();
        for c in &next.connections {
            let subject = format!("{prefix}{}", c.name);
            let Some(o) = old.get(c.name.as_str()) else {
                let mut after = transport_summary(&c.transport);
                after.push_str(&format!(", approval {}", approval_name(c.approval)));
                if let Some(sb) = next.connection_sandbox(c) {
                    after.push_str(&format!(", {}", describe_sandbox(&sb)));
                }
                self.push(
                    ChangeKind::ConnectionAdded,
                    subject,
                    None,
                    Some(after),
                    true,
                );
                continue;
            };
            let (a, b) = (
                transport_summary(&o.transport),
                transport_summary(&c.transport),
            );
            if o.transport != c.transport {
                let what = if a == b {
                    // Same command or URL: its environment or headers changed.
                    match &c.transport {
                        Transport::Stdio { env, .. } => format!(
                            "{b} (env {})",
                            env.keys().cloned().collect::<Vec<_>>().join(",")
                        ),
                        Transport::Http { headers, .. } => format!(
                            "{b} (headers {})",
                            headers.keys().cloned().collect::<Vec<_>>().join(",")
                        ),
                    }
                } else {
                    b.clone()
                };
                self.push(
                    ChangeKind::ConnectionChanged,
                    subject.clone(),
                    Some(a),
                    Some(what),
                    true,
                );
            }
            if o.tools != c.tools {
                // More tools let through: `allow` emptied or grown, `block` shrunk.
                let widened = (!o.tools.allow.is_empty()
                    && (c.tools.allow.is_empty()
                        || c.tools.allow.iter().any(|t| !o.tools.allow.contains(t))))
                    || o.tools.block.iter().any(|t| !c.tools.block.contains(t));
                let show = |f: &ToolFilter| {
                    format!(
                        "allow [{}], block [{}]",
                        f.allow.join(","),
                        f.block.join(",")
                    )
                };
                self.push(
                    ChangeKind::ConnectionChanged,
                    format!("{subject}.tools"),
                    Some(show(&o.tools)),
                    Some(show(&c.tools)),
                    widened,
                );
            }
            self.approval(&subject, o.approval, c.approval);
            if let Some(prev) = prev {
                let old_sb = prev.connection_sandbox(o);
                let new_sb = next.connection_sandbox(c);
                self.process_sandbox(&subject, old_sb.as_ref(), new_sb.as_ref());
            }
        }
        for (n, c) in old {
            if !next.connections.iter().any(|x| x.name == n) {
                self.push(
                    ChangeKind::ConnectionRemoved,
                    format!("{prefix}{n}"),
                    Some(transport_summary(&c.transport)),
                    None,
                    false,
                );
            }
        }
    }

    fn channels(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let old: BTreeMap<&str, &Channel> = prev
            .map(|a| a.channels.iter().map(|c| (c.name.as_str(), c)).collect())
            .unwrap_or_default();
        let kind = |c: &Channel| {
            serde_json::to_value(c.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        for c in &next.channels {
            let subject = format!("{prefix}{}", c.name);
            let Some(o) = old.get(c.name.as_str()) else {
                self.push(
                    ChangeKind::ChannelAdded,
                    subject,
                    None,
                    Some(format!("{}, auth {}", kind(c), auth_summary(&c.auth))),
                    true,
                );
                continue;
            };
            if o.kind != c.kind || o.settings != c.settings {
                let changed: Vec<&str> = o
                    .settings
                    .keys()
                    .chain(c.settings.keys())
                    .filter(|k| o.settings.get(*k) != c.settings.get(*k))
                    .map(String::as_str)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                self.push(
                    ChangeKind::ChannelChanged,
                    subject.clone(),
                    Some(kind(o)),
                    Some(if changed.is_empty() {
                        kind(c)
                    } else {
                        format!("{} (changed: {})", kind(c), changed.join(", "))
                    }),
                    true,
                );
            }
            if o.auth != c.auth {
                self.push(
                    ChangeKind::AuthChanged,
                    subject,
                    Some(auth_summary(&o.auth)),
                    Some(auth_summary(&c.auth)),
                    auth_widens(&o.auth, &c.auth),
                );
            }
        }
        for (n, c) in old {
            if !next.channels.iter().any(|x| x.name == n) {
                self.push(
                    ChangeKind::ChannelRemoved,
                    format!("{prefix}{n}"),
                    Some(kind(c)),
                    None,
                    false,
                );
            }
        }
    }

    fn hooks(&mut self, prefix: &str, prev: Option<&Agent>, next: &Agent) {
        let old: BTreeMap<&str, &Hook> = prev
            .map(|a| a.hooks.iter().map(|h| (h.name.as_str(), h)).collect())
            .unwrap_or_default();
        for h in &next.hooks {
            let subject = format!("{prefix}{}", h.name);
            match old.get(h.name.as_str()) {
                None => self.push(
                    ChangeKind::HookAdded,
                    subject,
                    None,
                    Some(format!(
                        "{}, {}",
                        h.events.join(","),
                        describe_sandbox(&next.hook_sandbox(h))
                    )),
                    true,
                ),
                Some(o) => {
                    if let Some(prev) = prev {
                        let (a, b) = (prev.hook_sandbox(o), next.hook_sandbox(h));
                        self.process_sandbox(&subject, Some(&a), Some(&b));
                    }
                }
            }
        }
        for (n, h) in old {
            if !next.hooks.iter().any(|x| x.name == n) {
                // A `tool.before` hook guards calls: removing it lets through what it denied.
                let guard = h.events.iter().any(|e| e == "tool.before" || e == "*");
                self.push(
                    ChangeKind::HookRemoved,
                    format!("{prefix}{n}"),
                    Some(h.events.join(",")),
                    None,
                    guard,
                );
            }
        }
    }

    /// Environment variables the whole build reads: `env:` of tools and hooks, the environment
    /// of connections, and every `${VAR}` reference anywhere in the manifest.
    fn env(&mut self, prev: Option<&Manifest>, next: &Manifest) {
        let old = prev.map(env_names).unwrap_or_default();
        for name in env_names(next) {
            if !old.contains(&name) {
                self.push(ChangeKind::EnvAdded, name, None, None, true);
            }
        }
    }
}

fn rollback_summary(r: &RollbackPolicy) -> String {
    format!("{} failures in {}", r.failures, duration(r.window_ms))
}

/// `90000` → `90s`, `600000` → `10m`, `3600000` → `1h`.
fn duration(ms: u64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

fn env_names(m: &Manifest) -> BTreeSet<String> {
    fn walk(a: &Agent, out: &mut BTreeSet<String>) {
        for t in &a.tools {
            out.extend(t.env.iter().cloned());
        }
        for h in &a.hooks {
            out.extend(h.env.iter().cloned());
        }
        for c in &a.connections {
            if let Transport::Stdio { env, .. } = &c.transport {
                out.extend(env.keys().cloned());
            }
        }
        for s in &a.subagents {
            walk(s, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(&m.agent, &mut out);
    // `${VAR}` references anywhere (connection settings, channel auth, HTTP tools).
    if let Ok(text) = serde_json::to_string(&m.agent) {
        let mut rest = text.as_str();
        while let Some(i) = rest.find("${") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find('}') else { break };
            let name = &rest[..end];
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(tools: Vec<Tool>) -> Manifest {
        let json = serde_json::json!({
            "version": 1,
            "eve_version": "0",
            "agent": {
                "name": "a", "path": "", "instructions": "",
                "config": {
                    "compaction": {"enabled": true, "threshold": 0.8},
                    "limits": {"max_steps_per_turn": 50},
                    "default_tools": false,
                    "turn_policy": "queue"
                },
                "tools": [], "skills": [], "subagents": [], "schedules": [], "hooks": [],
                "connections": [], "channels": [],
                "sandbox": {"provider": "isolated", "workspace": [], "timeout_ms": 1, "output_limit": 1}
            }
        });
        let mut m: Manifest = serde_json::from_value(json).unwrap();
        m.agent.tools = tools;
        m
    }

    fn tool(name: &str, effect: Effect, approval: Approval) -> Tool {
        Tool {
            name: name.to_owned(),
            source: format!("tools/{name}.sh"),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            schema_hash: String::new(),
            approval,
            effect,
            timeout_ms: 1,
            output_limit: 1,
            deferred: false,
            env: Vec::new(),
            dynamic: Vec::new(),
            phase: None,
            runner: Runner::Command {
                argv: vec!["true".to_owned()],
            },
        }
    }

    #[test]
    fn same_manifest_has_no_delta() {
        let m = manifest(vec![tool("x", Effect::Read, Approval::Never)]);
        let d = capability_delta(Some(&m), &m);
        assert!(d.is_empty(), "{d:?}");
        assert!(!d.widens());
    }

    #[test]
    fn added_write_tool_and_loosened_approval_widen() {
        let a = manifest(vec![tool("x", Effect::Read, Approval::Always)]);
        let b = manifest(vec![
            tool("x", Effect::Read, Approval::Never),
            tool("y", Effect::Write, Approval::Never),
        ]);
        let d = capability_delta(Some(&a), &b);
        let kinds: Vec<_> = d
            .changes
            .iter()
            .map(|c| (c.kind, c.subject.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (ChangeKind::ApprovalLoosened, "x"),
                (ChangeKind::ToolAdded, "y")
            ]
        );
        assert!(d.changes.iter().all(|c| c.widening));
        // Back again: nothing widens.
        let back = capability_delta(Some(&b), &a);
        assert!(!back.widens(), "{back:?}");
        assert!(back.render().contains("tool_removed y"));
        assert!(d.render().starts_with("! "));
    }

    #[test]
    fn effect_order_and_first_build() {
        let a = manifest(vec![tool("x", Effect::Read, Approval::Never)]);
        let b = manifest(vec![tool("x", Effect::Idempotent, Approval::Never)]);
        let d = capability_delta(Some(&a), &b);
        assert_eq!(d.changes[0].kind, ChangeKind::EffectWidened);
        let d = capability_delta(Some(&b), &a);
        assert_eq!(d.changes[0].kind, ChangeKind::EffectNarrowed);
        assert!(!d.widens());
        let first = capability_delta(None, &a);
        assert_eq!(first.changes[0].kind, ChangeKind::ToolAdded);
        assert!(first.widens());
    }

    #[test]
    fn network_policy_and_subagents() {
        let a = manifest(vec![]);
        let mut b = a.clone();
        b.agent.sandbox.network = Network::Allow(vec!["api.example.com".to_owned()]);
        b.agent.config.activation = Activation::Review;
        let d = capability_delta(Some(&a), &b);
        assert!(
            d.changes
                .iter()
                .any(|c| c.kind == ChangeKind::NetworkWidened && c.widening)
        );
        assert!(
            d.changes
                .iter()
                .any(|c| c.kind == ChangeKind::PolicyTightened && !c.widening)
        );
        // Loosening the policy is itself a widening.
        let d = capability_delta(Some(&b), &a);
        assert!(
            d.changes
                .iter()
                .any(|c| c.kind == ChangeKind::PolicyLoosened && c.widening)
        );
        let mut c = a.clone();
        let mut sub = manifest(vec![tool("deep", Effect::Write, Approval::Never)]).agent;
        sub.name = "helper".to_owned();
        c.agent.subagents.push(sub);
        let d = capability_delta(Some(&a), &c);
        let subjects: Vec<_> = d.changes.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(subjects, ["helper", "helper/deep"]);
    }
}
