//! Where tool, hook and MCP server processes run and what they may reach: `sandbox.yaml`, what
//! each tool, hook or connection says about its own sandbox, the resource limits and defaults,
//! and how [`Agent`] resolves one process's [`EffectiveSandbox`] from them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Agent, Connection, Hook, Runner, Tool, Transport};

/// Where a tool process runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Confined: the session workspace and a private `/tmp` writable, the system and build files
    /// read-only, its own PID and network namespaces, `limits` applied. (`local`, what older
    /// builds say, reads as this.)
    #[default]
    #[serde(alias = "local")]
    Isolated,
    /// Unconfined, with the server's authority: it can read the server's files and environment.
    Host,
}

impl Provider {
    /// The name as written in `sandbox.yaml` and front matter.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Isolated => "isolated",
            Provider::Host => "host",
        }
    }
}

/// Where an isolated process may connect. Written `none`, `all`, or a list of `host[:port]`,
/// `*.suffix[:port]`, IP literals and `[v6]:port` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No network at all, the host's loopback included.
    #[default]
    None,
    /// Any destination, through eve's egress proxy (never eve's own listeners, loopback,
    /// link-local or metadata addresses unless listed by name).
    All,
    /// Only these destinations, through eve's egress proxy. Entries are checked at build.
    #[serde(untagged)]
    Allow(Vec<String>),
}

impl Network {
    /// Whether `self` lets a process reach somewhere `base` does not.
    pub fn widens(&self, base: &Network) -> bool {
        match (self, base) {
            (Network::None, _) | (_, Network::All) => false,
            (Network::All, _) => true,
            (Network::Allow(list), Network::None) => !list.is_empty(),
            (Network::Allow(list), Network::Allow(allowed)) => {
                list.iter().any(|e| !allowed.contains(e))
            }
        }
    }

    /// A short human form: `none`, `all`, or the entries joined with `,`.
    pub fn describe(&self) -> String {
        match self {
            Network::None => "none".to_owned(),
            Network::All => "all".to_owned(),
            Network::Allow(list) if list.is_empty() => "none".to_owned(),
            Network::Allow(list) => list.join(","),
        }
    }
}

/// Resource limits of every process of an isolated call. Every field has a default that lets
/// ordinary work run (`pip install`, `git clone`, a Python script); see [`SandboxLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxLimits {
    /// Bytes of data memory per process.
    pub memory: u64,
    /// Processes (threads included).
    pub processes: u64,
    /// Largest file a process may write, in bytes.
    pub file_size: u64,
    /// CPU seconds per process.
    pub cpu_seconds: u64,
}

/// Default `limits.memory`: 4 GiB.
pub const DEFAULT_SANDBOX_MEMORY: u64 = 4 << 30;
/// Default `limits.processes`: 1024.
pub const DEFAULT_SANDBOX_PROCESSES: u64 = 1024;
/// Default `limits.file_size`: 8 GiB.
pub const DEFAULT_SANDBOX_FILE_SIZE: u64 = 8 << 30;
/// Default `limits.cpu_seconds`: 600.
pub const DEFAULT_SANDBOX_CPU_SECONDS: u64 = 600;

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory: DEFAULT_SANDBOX_MEMORY,
            processes: DEFAULT_SANDBOX_PROCESSES,
            file_size: DEFAULT_SANDBOX_FILE_SIZE,
            cpu_seconds: DEFAULT_SANDBOX_CPU_SECONDS,
        }
    }
}

/// What one tool, hook or connection says about its own sandbox (`sandbox:` and `network:` in
/// its front matter or file), as written; `None` = not said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxOverride {
    /// `sandbox:` as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// `network:` as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

impl SandboxOverride {
    /// Whether nothing is said.
    pub fn is_empty(&self) -> bool {
        self.provider.is_none() && self.network.is_none()
    }
}

/// Sandbox settings: `sandbox/sandbox.yaml`, and what each tool, hook and connection says about
/// its own sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// `isolated` (the default) or `host` (unconfined, opt-in).
    pub provider: Provider,
    /// Files seeded into every session workspace, relative to the root agent folder.
    pub workspace: Vec<String>,
    /// Default tool timeout in milliseconds.
    pub timeout_ms: u64,
    /// Default output cap in bytes.
    pub output_limit: u64,
    /// Default network of isolated processes.
    #[serde(default)]
    pub network: Network,
    /// Extra read-only paths inside the sandbox, as written (absolute, or `~/…` for the server's
    /// `HOME`).
    #[serde(default)]
    pub read: Vec<String>,
    /// Extra writable paths inside the sandbox, as written (absolute, or `~/…`).
    #[serde(default)]
    pub write: Vec<String>,
    /// Resource limits of isolated processes.
    #[serde(default)]
    pub limits: SandboxLimits,
    /// Tools (by name) whose front matter says `sandbox:` or `network:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, SandboxOverride>,
    /// Hooks (by name) whose front matter says `sandbox:` or `network:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: BTreeMap<String, SandboxOverride>,
    /// Connections (by name) whose file says `sandbox:` or `network:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connections: BTreeMap<String, SandboxOverride>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self {
            provider: Provider::Isolated,
            workspace: Vec::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            network: Network::None,
            read: Vec::new(),
            write: Vec::new(),
            limits: SandboxLimits::default(),
            tools: BTreeMap::new(),
            hooks: BTreeMap::new(),
            connections: BTreeMap::new(),
        }
    }
}

/// Where one process runs and what it may reach: the agent's settings with the tool's, hook's or
/// connection's own applied. Computed by [`Agent::effective_sandbox`] and its siblings, for the
/// runtime and for `eve info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EffectiveSandbox {
    /// `isolated` or `host`.
    pub provider: Provider,
    /// What an isolated process may reach; always [`Network::All`] under `host` (nothing
    /// confines it).
    pub network: Network,
}

impl EffectiveSandbox {
    fn new(provider: Provider, network: Network) -> Self {
        let network = match provider {
            Provider::Host => Network::All,
            Provider::Isolated => network,
        };
        Self { provider, network }
    }
}

/// Default tool timeout: 60 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Default output cap: 1 MiB.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 1024 * 1024;

impl Agent {
    /// The effective sandbox of a tool process: the tool's own `sandbox:`/`network:` over the
    /// agent's `sandbox.yaml` (a script, `run:` or dynamic-tool provider). The built-in `bash` is isolated unless the whole agent is `host`,
    /// with the agent's network. `None` for tools that start no process (HTTP tools, the other
    /// built-ins, subagents, MCP tools: see [`Agent::connection_sandbox`]).
    pub fn effective_sandbox(&self, tool: &Tool) -> Option<EffectiveSandbox> {
        match self.tool(&tool.name) {
            Some(own) => {
                if matches!(own.runner, Runner::Http(_) | Runner::OpenApi(_)) {
                    return None;
                }
                let o = self.sandbox.tools.get(&own.name);
                Some(self.apply(o, self.sandbox.provider))
            }
            None if tool.name == "bash" => Some(self.bash_sandbox()),
            None => None,
        }
    }

    /// The effective sandbox of the built-in `bash` tool (model-written commands).
    pub fn bash_sandbox(&self) -> EffectiveSandbox {
        EffectiveSandbox::new(self.sandbox.provider, self.sandbox.network.clone())
    }

    /// The effective sandbox of a hook script: its own `sandbox:`, else the agent's provider.
    pub fn hook_sandbox(&self, hook: &Hook) -> EffectiveSandbox {
        self.apply(self.sandbox.hooks.get(&hook.name), self.sandbox.provider)
    }

    /// The effective sandbox of an MCP stdio server: `host` unless its connection says
    /// `sandbox: isolated` (whatever the agent's provider); `None` for servers over HTTP (no
    /// process).
    pub fn connection_sandbox(&self, connection: &Connection) -> Option<EffectiveSandbox> {
        if !matches!(connection.transport, Transport::Stdio { .. }) {
            return None;
        }
        let o = self.sandbox.connections.get(&connection.name);
        Some(self.apply(o, Provider::Host))
    }

    fn apply(&self, own: Option<&SandboxOverride>, default: Provider) -> EffectiveSandbox {
        // What the tool, hook or connection says wins, narrowing (`isolated` in a `host` agent)
        // as well as widening.
        let provider = own.and_then(|o| o.provider).unwrap_or(default);
        let network = own
            .and_then(|o| o.network.clone())
            .unwrap_or_else(|| self.sandbox.network.clone());
        EffectiveSandbox::new(provider, network)
    }
}
