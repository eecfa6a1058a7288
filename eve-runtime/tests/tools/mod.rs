//! Tool execution tests with real processes and a real HTTP server on loopback.
//!
//! Each test lays out its own agent folder and workspace in a temp dir and passes the environment
//! through the context's lookup, so nothing here reads or changes the test process's environment
//! beyond `PATH` and `HOME`.

mod builtin;
mod http;
mod process;
pub mod search;
mod validation;
pub mod web;
mod web_search;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eve_compile::{Approval, Effect, Runner, Tool};
use eve_runtime::tools::ToolContext;
use tempfile::TempDir;

/// A temp agent folder (`agent/`) and session workspace (`ws/`, not created yet).
pub struct Fixture {
    pub dir: TempDir,
    pub ctx: ToolContext,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with_env(&[])
    }

    /// A fixture whose env lookup has `vars` plus the test process's `PATH` and `HOME`.
    pub fn with_env(vars: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let agent_dir = dir.path().join("agent");
        std::fs::create_dir_all(agent_dir.join("tools")).unwrap();
        let mut map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        for name in ["PATH", "HOME"] {
            if let Ok(value) = std::env::var(name) {
                map.entry(name.to_owned()).or_insert(value);
            }
        }
        let ctx = ToolContext {
            session_id: "ses_01".into(),
            call_id: "call_01".into(),
            idempotency_key: "ses_01:call_01".into(),
            workspace: dir.path().join("ws"),
            agent_dir,
            env: Arc::new(move |name: &str| map.get(name).cloned()),
            http: Default::default(),
            exec: Default::default(),
            confinement: eve_runtime::exec::Confinement::Host,
            network: None,
            progress: None,
            web: Default::default(),
            traceparent: None,
        };
        Self { dir, ctx }
    }

    /// Writes an executable script under `agent/tools/` and returns its path relative to the agent.
    pub fn script(&self, name: &str, body: &str) -> String {
        let relative = format!("tools/{name}");
        let path = self.ctx.agent_dir.join(&relative);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        relative
    }

    /// A tool running the shell script `body` directly.
    pub fn sh_tool(&self, name: &str, body: &str) -> Tool {
        let path = self.script(&format!("{name}.sh"), &format!("#!/bin/sh\n{body}\n"));
        tool(
            name,
            Runner::Script {
                path,
                interpreter: vec![],
            },
        )
    }

    pub fn workspace(&self) -> &Path {
        &self.ctx.workspace
    }

    pub fn ws_file(&self, name: &str) -> PathBuf {
        self.ctx.workspace.join(name)
    }
}

/// A tool definition with short limits suitable for tests.
pub fn tool(name: &str, runner: Runner) -> Tool {
    Tool {
        name: name.to_owned(),
        source: format!("tools/{name}"),
        description: format!("test tool {name}"),
        input_schema: serde_json::json!({"type": "object"}),
        schema_hash: String::new(),
        approval: Approval::Never,
        effect: Effect::Write,
        timeout_ms: 5_000,
        output_limit: 1024 * 1024,
        deferred: false,
        env: vec![],
        dynamic: vec![],
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner,
    }
}

/// Whether a process is still running (a zombie counts as dead).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X"))
        }
    }
}

/// Waits up to `limit` for a process to die; returns whether it did.
pub async fn dies_within(pid: i32, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !alive(pid)
}
