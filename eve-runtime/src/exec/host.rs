//! The `host` sandbox: processes run with the server's own authority.
//!
//! Opt-in only (`provider: host` in `sandbox/sandbox.yaml`, or `sandbox: host` on one tool, and MCP
//! stdio servers unless their connection says `sandbox: isolated`); the build and the server's
//! start-up warn about every tool it applies to. The environment is still the tool protocol's
//! allowlist, and the process group is still killed when the call ends.
//!
//! A host process is the developer's code, but it acts on what the model says, and under `eve run`
//! or `eve chat` eve's terminal is the user's: so it starts in a session of its own (`setsid`
//! before `exec`), with no controlling terminal (`/dev/tty` cannot be opened, it cannot become the
//! terminal's foreground group or read what the user types), and its standard streams default to
//! `/dev/null` until the caller gives it pipes. A program that asks for a password on `/dev/tty`
//! (`ssh`, `sudo`, `gpg`) fails at once instead of taking the user's keystrokes.

use std::process::Stdio;

use process_wrap::tokio::{CommandWrap, CommandWrapper, ProcessSession};

use super::{ExecError, Guard, Launch, Prepared, Sandbox};

/// Runs processes unconfined.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostSandbox;

#[async_trait::async_trait]
impl Sandbox for HostSandbox {
    async fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, ExecError> {
        let mut command = tokio::process::Command::new(launch.program);
        command
            .args(launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(launch.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Registers `setsid` to run in the child before `exec` (the wrapper itself is not used:
        // callers spawn the command as they would any other).
        let unused = CommandWrap::with_new(launch.program, |_| {});
        ProcessSession
            .pre_spawn(&mut command, &unused)
            .map_err(|e| ExecError::Policy(format!("cannot give the process a session: {e}")))?;
        Ok(Prepared {
            command,
            guard: Guard::default(),
            warm: None,
            own_session: true,
            timed: None,
        })
    }
}
