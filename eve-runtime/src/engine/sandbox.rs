//! What the current build asks of the sandbox, for the warnings a starting server prints.
//!
//! A server says at start which tools run unconfined (`sandbox: host`), what the sandbox enforces
//! per call on this machine (and what it cannot), when the kernel refuses isolation, exactly what
//! it refused and which tools will therefore fail (eve never runs a tool that needs isolation
//! unconfined in silence), when the kernel cannot open paths beneath a workspace handle
//! (`openat2`) so the file tools will refuse, and which `PATH` entries are left out of an isolated
//! process's view.

use eve_compile::{Agent, EffectiveSandbox, Provider};

use super::Runtime;

/// The sandbox needs of the current build, and whether this machine meets them.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxReport {
    /// Tools, hooks and MCP servers that run unconfined (`host`), by name.
    pub unconfined: Vec<String>,
    /// Tools, hooks and MCP servers that need the isolated sandbox, by name.
    pub isolated: Vec<String>,
    /// `None` when isolation works here (or nothing needs it); otherwise what the kernel refused.
    pub isolation_error: Option<String>,
    /// `None` when the file tools (`read_file`, `write_file`) can run here (or none is offered);
    /// otherwise why they will refuse (the kernel lacks `openat2`).
    pub file_tools_error: Option<String>,
    /// The `PATH` entries left out of an isolated process's view, and why (empty when nothing
    /// needs isolation).
    pub left_out: Vec<eve_sandbox::isolate::LeftOut>,
    /// What this machine enforces per isolated call (uids, cgroups, the workspace quota, socket
    /// families), with the agent's limits; `None` when nothing needs isolation.
    pub enforced: Option<crate::exec::Enforced>,
}

impl Runtime {
    /// The sandbox report of the current build (`None` without a build). Probes isolation when
    /// something needs it.
    pub async fn sandbox_report(&self) -> Option<SandboxReport> {
        let build = self.inner.builds.current().ok()?;
        let mut report = SandboxReport {
            unconfined: Vec::new(),
            isolated: Vec::new(),
            isolation_error: None,
            file_tools_error: None,
            left_out: Vec::new(),
            enforced: None,
        };
        collect(&build.manifest.agent, "", &mut report);
        if offers_file_tools(&build.manifest.agent) {
            report.file_tools_error = crate::tools::beneath::refusal(&*self.inner.config.env);
        }
        if !report.isolated.is_empty() {
            report.isolation_error = self.inner.exec.isolation().await.err();
            if report.isolation_error.is_none() {
                // The first tool call then finds a warm box instead of waiting for one.
                self.inner.exec.start_pool().await;
            }
            report.left_out = self.view_left_out();
            report.enforced = Some(
                self.inner
                    .exec
                    .enforced(&build.manifest.agent.sandbox.limits),
            );
        }
        Some(report)
    }

    /// The `PATH` entries left out of the view of an isolated process started now (its `PATH`
    /// and `HOME` are the runtime's environment's), and why. Said once: the log does not repeat
    /// them when a tool runs.
    pub fn view_left_out(&self) -> Vec<eve_sandbox::isolate::LeftOut> {
        let env = &self.inner.config.env;
        let path = env(crate::env_vars::PATH).unwrap_or_default();
        let home = env(crate::env_vars::HOME)
            .map(std::path::PathBuf::from)
            .filter(|h| h.is_absolute() && h != std::path::Path::new("/"));
        self.inner.exec.view_left_out(&path, home.as_deref())
    }
}

/// Whether the agent or one of its subagents offers the built-in file tools.
fn offers_file_tools(agent: &Agent) -> bool {
    ["read_file", "write_file", "glob", "grep"]
        .iter()
        .any(|n| agent.runs_builtin(n))
        || agent.subagents.iter().any(offers_file_tools)
}

fn collect(agent: &Agent, prefix: &str, report: &mut SandboxReport) {
    let mut note = |name: String, sandbox: Option<EffectiveSandbox>| match sandbox {
        Some(s) if s.provider == Provider::Host => report.unconfined.push(name),
        Some(_) => report.isolated.push(name),
        None => {}
    };
    if agent.runs_builtin("bash") {
        note(format!("{prefix}bash"), Some(agent.bash_sandbox()));
    }
    for tool in &agent.tools {
        note(
            format!("{prefix}{}", tool.name),
            agent.effective_sandbox(tool),
        );
    }
    for hook in &agent.hooks {
        note(
            format!("{prefix}hook {}", hook.name),
            Some(agent.hook_sandbox(hook)),
        );
    }
    for connection in &agent.connections {
        note(
            format!("{prefix}connection {}", connection.name),
            agent.connection_sandbox(connection),
        );
    }
    for sub in &agent.subagents {
        collect(sub, &format!("{prefix}{}/", sub.name), report);
    }
}
