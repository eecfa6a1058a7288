//! Support for tests that run the real `eve` binary on a project in a temp folder (the shared
//! [`TestAgent`]): an agent with script tools that log their side effects, the scripted mock
//! model, and reads of the store.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eve_test_support::{TestAgent, lines_of};
use serde_json::Value;

use crate::support_dev::store;

pub const EVE: &str = env!("CARGO_BIN_EXE_eve");

/// A project folder with `agent/` and the side-effect log tools append to.
pub struct RunProject {
    pub agent: TestAgent,
    pub side: PathBuf,
    pub script: String,
}

/// A shell tool that logs `start NAME CALL KEY`, runs `body`, logs `done NAME CALL`.
pub fn logging_tool(front_matter: &str, body: &str) -> String {
    format!(
        "#!/bin/sh\n# ---\n{front_matter}# env: [SIDE_FILE]\n# ---\ninput=$(cat)\n\
         echo \"start $EVE_CALL_ID $EVE_IDEMPOTENCY_KEY\" >> \"$SIDE_FILE\"\n{body}\n\
         echo \"done $EVE_CALL_ID\" >> \"$SIDE_FILE\"\necho '{{\"ok\": true}}'\n"
    )
}

impl RunProject {
    /// An agent with `tools` (`name`, script text) and the mock playing `script`.
    pub fn new(tools: &[(&str, String)], script: Value) -> Self {
        let agent = TestAgent::new();
        std::fs::create_dir_all(agent.path("agent/tools")).unwrap();
        for (name, text) in tools {
            agent.script(&format!("tools/{name}.sh"), text);
        }
        let side = agent.path("side.log");
        // The side-effect log is outside any workspace: these tools run unconfined (the
        // sandbox has its own tests).
        agent.file("sandbox/sandbox.yaml", "provider: host\n");
        Self {
            agent,
            side,
            script: script.to_string(),
        }
    }

    pub fn root(&self) -> &Path {
        self.agent.root()
    }

    /// `eve ARGS` in this project with the scripted mock model.
    pub fn eve(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(EVE);
        cmd.args(args)
            .current_dir(self.root())
            .env_remove("EVE_PROJECT")
            .env_remove("EVE_AGENT")
            .env_remove("EVE_BASE_URL")
            .env_remove("EVE_API_KEY")
            .env("EVE_MODEL", "mock/echo")
            .env("EVE_MOCK_SCRIPT", &self.script)
            .env("SIDE_FILE", &self.side)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `eve ARGS` to completion (with a deadline).
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self
            .eve(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_output(child, Duration::from_secs(30))
    }

    pub fn side_lines(&self) -> Vec<String> {
        lines_of(&self.side)
    }

    pub fn db(&self) -> rusqlite::Connection {
        store(self.root())
    }

    /// The only session's id.
    pub fn session_id(&self) -> Option<String> {
        if !self.root().join(".eve/eve.db").exists() {
            return None;
        }
        self.db()
            .query_row(
                "SELECT id FROM sessions ORDER BY created_at LIMIT 1",
                [],
                |r| r.get(0),
            )
            .ok()
    }

    /// Rows of a one-column query, as strings.
    pub fn strings(&self, sql: &str) -> Vec<String> {
        let db = self.db();
        let mut stmt = db.prepare(sql).unwrap();
        stmt.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

/// What a finished process printed.
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// `--json` events on stdout.
    pub fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    }
}

pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "eve did not finish in {limit:?}; stderr: {}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Output {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// A running `eve` whose stdout lines arrive on a channel.
pub struct Running {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until `ready` holds (checked on every stdout line and every few milliseconds); false
    /// if the process exited or the deadline passed first.
    pub fn wait_for(&mut self, limit: Duration, mut ready: impl FnMut(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if ready(&self.seen) {
                return true;
            }
            match self.lines.recv_timeout(Duration::from_millis(2)) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return ready(&self.seen),
            }
            if Instant::now() > deadline {
                return false;
            }
        }
    }

    /// SIGKILL, and reap it (so its pid is really gone).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether any seen `--json` line is an event of type `kind`.
pub fn saw(lines: &[String], kind: &str) -> bool {
    let needle = format!("\"type\":\"{kind}\"");
    lines.iter().any(|l| l.contains(&needle))
}
