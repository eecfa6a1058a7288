//! The `host` sandbox: processes run with the server's own authority.
//!
//! Opt-in only (`provider: host` in `sandbox/sandbox.yaml`, or `sandbox: host` on one tool, and MCP
//! stdio servers unless their connection says `sandbox: isolated`); the build and the server's
//! start-up warn about every tool it applies to. The environment is still the tool protocol's
//! allowlist, and the process group is still killed when the call ends.

use super::{ExecError, Guard, Launch, Prepared, Sandbox};

/// Runs processes unconfined.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSandbox;

#[async_trait::async_trait]
impl Sandbox for HostSandbox {
    fn name(&self) -> &'static str {
        "host"
    }

    async fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, ExecError> {
        let mut command = tokio::process::Command::new(launch.program);
        command
            .args(launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(launch.cwd);
        Ok(Prepared {
            command,
            guard: Guard::default(),
            warm: None,
        })
    }
}
