//! Escape attempts on what a tool process can see: the user's terminal, and the folders its
//! environment would add to its view. Through real sessions, each attack tried where it must
//! fail and, as its twin, where it succeeds.
//!
//! The terminal. Under `eve run` or `eve chat`, eve's terminal is the user's: a command could
//! print a fake "approval granted" line on it through `/dev/tty`, make itself its foreground
//! process group, or read what the user types. The test process has no terminal, so
//! [`tools_cannot_reach_the_terminal_eve_runs_in`] re-runs [`under_a_terminal`] in a process that
//! makes a fresh pseudo-terminal its controlling terminal and its stdin (what `eve chat` has),
//! once with warm sandboxes and once cold. There, `bash` under `isolated` and under `host`, and
//! host and isolated processes spawned the way MCP servers and eval scorers are, reach nothing of
//! it; the same script as a plain child of that process reaches all of it.
//!
//! The view. With `<project>/node_modules/.bin` (what `npm run` puts on `PATH`), a folder inside
//! `.eve/` and `~/.config/composer/vendor/bin` beside `~/.config/gh/hosts.yml` on `PATH`, an
//! isolated `bash` reads neither the store, the agent folder nor the gh token, and still runs the
//! composer tool; under `provider: host` the same command reads them all.

use std::io::{Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_compile::{Provider, Sandbox as SandboxSettings};
use eve_runtime::engine::{
    BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::exec::{ExecConfig, Executor, Launch};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{SqliteStore, Store};
use serde_json::{Value, json};

use crate::engine_support::{TestProject, agent, run_prompt};

/// Set in the environment of the re-run: [`under_a_terminal`] does its work only then.
const UNDER_TERMINAL: &str = "EVE_RUNTIME_TEST_UNDER_TERMINAL";
/// What the user typed, waiting in the terminal's input.
const TYPED: &str = "typed-by-the-user";
/// The fake line the attack prints on the terminal.
const FAKE: &str = "APPROVAL GRANTED BY ADMIN";

/// The attack, in Python (it needs `ioctl`), as one `python3 -c` argument (no single quote);
/// prints one line `REPORT {json}` with what each attempt gave.
const ATTACK: &str = r#"
import errno, fcntl, json, os, termios
report = {}
def attempt(name, fn):
    try:
        got = fn()
        report[name] = "ok" if got is None else got
    except OSError as e:
        report[name] = errno.errorcode.get(e.errno, str(e.errno))
def fake_line():
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    os.write(fd, b"\x1b[2K\rAPPROVAL GRANTED BY ADMIN\r\n")
    os.close(fd)
attempt("open /dev/tty", fake_line)
with open("/proc/self/stat") as f:
    stat = f.read()
report["tty_nr"] = int(stat[stat.rindex(")") + 2:].split()[4])
report["terminals"] = [fd for fd in range(256) if os.isatty(fd)]
for fd in (0, 1, 2):
    attempt(f"tcsetpgrp {fd}", lambda fd=fd: os.tcsetpgrp(fd, os.getpgrp()))
attempt("read stdin", lambda: os.read(0, 200).decode(errors="replace"))
attempt("setsid", lambda: os.setsid() and None)
for fd in (0, 1, 2):
    attempt(f"TIOCSCTTY {fd}", lambda fd=fd: fcntl.ioctl(fd, termios.TIOCSCTTY, 0) and None)
attempt("open /dev/tty after setsid", fake_line)
print("REPORT " + json.dumps(report), flush=True)
"#;

fn attack_command() -> String {
    format!("python3 -c '{ATTACK}'")
}

/// The report in `text` (a tool's output).
fn report_in(label: &str, text: &str) -> Value {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("REPORT "))
        .unwrap_or_else(|| panic!("{label}: no report in {text:?}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn tools_cannot_reach_the_terminal_eve_runs_in() {
    let name = "escape_view::under_a_terminal";
    for pool in ["2", "0"] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                name,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(UNDER_TERMINAL, "1")
            .env("EVE_SANDBOX_POOL", pool)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "EVE_SANDBOX_POOL={pool}: the run under a terminal failed ({}):\n{text}",
            out.status
        );
        assert!(
            text.contains("1 passed"),
            "EVE_SANDBOX_POOL={pool}: the test under a terminal did not run:\n{text}"
        );
    }
}

/// A pseudo-terminal that is this process's controlling terminal and stdin, and what arrived on
/// it. Its master is never closed (that would hang the terminal up, and the kernel would end
/// this process, the session's leader, with `SIGHUP`).
struct Terminal {
    master: ManuallyDrop<std::fs::File>,
    slave: ManuallyDrop<OwnedFd>,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    fn take() -> Terminal {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        nix::unistd::setsid().expect("the re-run is not a process group leader");
        let master =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap()
            .into();
        rustix::process::ioctl_tiocsctty(&slave).unwrap();
        // What `eve chat` has: the terminal as its stdin, and as its controlling terminal.
        nix::unistd::dup2_stdin(&slave).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/tty")
            .expect("the pseudo-terminal is the controlling terminal");
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let seen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            master: ManuallyDrop::new(master),
            slave: ManuallyDrop::new(slave),
            screen,
        }
    }

    fn type_line(&mut self) {
        self.master
            .write_all(format!("{TYPED}\n").as_bytes())
            .unwrap();
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until everything written to the terminal so far has been recorded.
    async fn settle(&self, label: &str) {
        let marker = format!("[settled after {label}]");
        let mut out = std::fs::File::from(self.slave.try_clone().unwrap());
        out.write_all(marker.as_bytes()).unwrap();
        for _ in 0..500 {
            if self.screen().contains(&marker) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "the terminal's output was not recorded: {:?}",
            self.screen()
        );
    }
}

async fn assert_reached_nothing(label: &str, r: &Value, term: &Terminal) {
    let refused = |key: &str, want: &[&str]| {
        let got = r[key].as_str().unwrap_or_default();
        assert!(want.contains(&got), "{label}: {key} gave {got}: {r}");
    };
    refused("open /dev/tty", &["ENOENT", "ENXIO"]);
    refused("open /dev/tty after setsid", &["ENOENT", "ENXIO"]);
    assert_eq!(r["tty_nr"], 0, "{label}: has a controlling terminal: {r}");
    assert_eq!(r["terminals"], json!([]), "{label}: holds a terminal: {r}");
    for fd in 0..3 {
        refused(&format!("tcsetpgrp {fd}"), &["ENOTTY"]);
        refused(&format!("TIOCSCTTY {fd}"), &["ENOTTY"]);
    }
    assert_eq!(r["read stdin"], "", "{label}: read the user's input: {r}");
    term.settle(label).await;
    assert!(
        !term.screen().contains(FAKE),
        "{label}: the fake line reached the terminal: {:?}",
        term.screen()
    );
}

/// What the model was shown for the one `bash` call of a session under `provider`.
async fn bash(provider: Provider, command: &str) -> String {
    let p = TestProject::new();
    let mut a = agent();
    a.config.default_tools = true;
    a.sandbox.provider = provider;
    p.write_build(&a, &[]);
    let rt = p.runtime(json!([
        {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "done"}
    ]));
    let (id, _) = run_prompt(&rt, "go").await;
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    let call = calls.first().expect("the model's call was journaled");
    match &call.output {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// A process prepared by the execution seam (`isolated`, or `host`) and spawned as MCP servers
/// (in a process group of its own, unless the process starts its own session) and eval scorers
/// (the command as it is) spawn it, with pipes for its three streams; returns both outputs.
async fn spawned_like_mcp_and_eval(exec: &Executor, isolated: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), std::env::var(k).ok()?)))
        .collect();
    let args = vec!["-c".to_owned(), ATTACK.to_owned()];
    let effective = eve_compile::EffectiveSandbox {
        provider: if isolated {
            Provider::Isolated
        } else {
            Provider::Host
        },
        network: eve_compile::Network::None,
    };
    let settings = SandboxSettings::default();
    let confinement =
        Executor::confinement(Some(&effective), &settings, Some(dir.path()), None, None);
    let mut outputs = Vec::new();
    for like_mcp in [true, false] {
        let launch = Launch {
            program: "python3",
            args: &args,
            env: &env,
            cwd: dir.path(),
            confinement: &confinement,
        };
        let mut prepared = exec.prepare(&launch).await.unwrap();
        if like_mcp && !prepared.starts_own_session() {
            prepared.command.process_group(0);
        }
        let out = prepared
            .command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .unwrap();
        outputs.push(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    outputs
}

#[tokio::test]
#[ignore = "run under a terminal by tools_cannot_reach_the_terminal_eve_runs_in"]
async fn under_a_terminal() {
    if std::env::var_os(UNDER_TERMINAL).is_none() {
        return;
    }
    let mut term = Terminal::take();
    term.type_line();

    for provider in [Provider::Isolated, Provider::Host] {
        let label = format!("bash under {provider:?}");
        let text = bash(provider, &attack_command()).await;
        assert_reached_nothing(&label, &report_in(&label, &text), &term).await;
    }
    let run_dir = tempfile::tempdir().unwrap();
    let exec = Executor::new(ExecConfig::from_env(
        PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        run_dir.path().to_path_buf(),
        &|_| None,
    ));
    for isolated in [false, true] {
        let outputs = spawned_like_mcp_and_eval(&exec, isolated).await;
        for (text, how) in outputs.iter().zip(["like an MCP server", "like a scorer"]) {
            let label = format!(
                "{} process spawned {how}",
                if isolated { "an isolated" } else { "a host" }
            );
            assert_reached_nothing(&label, &report_in(&label, text), &term).await;
        }
    }

    // The same attack as a plain child of this process reaches the terminal.
    let out = Command::new("python3")
        .args(["-c", ATTACK])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let r = report_in("plain child", &String::from_utf8_lossy(&out.stdout));
    assert_eq!(r["open /dev/tty"], "ok", "plain child: {r}");
    assert_ne!(r["tty_nr"], 0, "plain child: {r}");
    assert_eq!(r["tcsetpgrp 0"], "ok", "plain child: {r}");
    assert!(
        r["read stdin"].as_str().unwrap_or_default().contains(TYPED),
        "plain child: {r}"
    );
    term.settle("the plain child").await;
    assert!(
        term.screen().contains(FAKE),
        "the plain child's fake line must reach the terminal: {:?}",
        term.screen()
    );
}

/// A runtime on `p` whose tools get `path_var` as `PATH` and `home` as `HOME`.
fn runtime_with_path(p: &TestProject, steps: Value, path_var: &str, home: &Path) -> Runtime {
    let steps = load_script(&steps.to_string()).unwrap();
    let model = ResolvedModel {
        client: Arc::new(MockClient::from_steps(steps)),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
    let path_var = path_var.to_owned();
    let home = home.display().to_string();
    Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(store) as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| match name {
            "PATH" => Some(path_var.clone()),
            "HOME" => Some(home.clone()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

fn plant(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// What `cat` of the store, the agent folder, the gh token and the three `PATH` folders' tools
/// gave under `provider`, with the left-out entries the runtime reported.
async fn read_through_path(provider: Provider) -> (String, Vec<String>) {
    let p = TestProject::new();
    let home = tempfile::tempdir().unwrap();
    let project = p.state_dir.parent().unwrap().to_path_buf();
    let h = home.path();
    plant(&project.join("agent/instructions.md"), "AGENT-SOURCE");
    plant(&project.join("node_modules/.bin/tool"), "NODE-BIN-TOOL");
    plant(&p.state_dir.join("tools/bin/tool"), "EVE-BIN-TOOL");
    plant(&h.join(".config/gh/hosts.yml"), "GH-TOKEN");
    plant(&h.join(".config/composer/vendor/bin/tool"), "COMPOSER-TOOL");
    let path_var = format!(
        "{}:{}:{}:/usr/local/bin:/usr/bin:/bin",
        project.join("node_modules/.bin").display(),
        h.join(".config/composer/vendor/bin").display(),
        p.state_dir.join("tools/bin").display(),
    );
    let mut a = agent();
    a.config.default_tools = true;
    a.sandbox.provider = provider;
    p.write_build(&a, &[]);
    let command = [
        p.state_dir.join("eve.db"),
        project.join("agent/instructions.md"),
        h.join(".config/gh/hosts.yml"),
        project.join("node_modules/.bin/tool"),
        p.state_dir.join("tools/bin/tool"),
        h.join(".config/composer/vendor/bin/tool"),
    ]
    .iter()
    .map(|f| format!("head -c 15 '{}'; echo", f.display()))
    .collect::<Vec<_>>()
    .join("; ");
    let rt = runtime_with_path(
        &p,
        json!([
            {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
            {"text": "done"}
        ]),
        &path_var,
        h,
    );
    let left: Vec<String> = rt
        .sandbox_report()
        .await
        .map(|r| r.left_out.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let (id, _) = run_prompt(&rt, "go").await;
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    let text = match &calls.first().expect("the call was journaled").output {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    (text, left)
}

#[tokio::test]
async fn path_entries_do_not_bring_the_project_the_state_or_credentials_into_view() {
    let (iso, left) = read_through_path(Provider::Isolated).await;
    for secret in [
        "SQLite format",
        "AGENT-SOURCE",
        "GH-TOKEN",
        "NODE-BIN-TOOL",
        "EVE-BIN-TOOL",
    ] {
        assert!(!iso.contains(secret), "isolated read {secret}: {iso}");
    }
    assert!(
        iso.contains("COMPOSER-TOOL"),
        "the one folder an allowed entry adds is readable: {iso}"
    );
    // Said once at start: each left-out entry and why.
    assert_eq!(left.len(), 2, "{left:#?}");
    assert!(
        left[0].contains("node_modules/.bin: it lies inside the project"),
        "{left:#?}"
    );
    assert!(
        left[1].contains("tools/bin: it lies inside eve's state folder"),
        "{left:#?}"
    );

    let (host, _) = read_through_path(Provider::Host).await;
    for secret in [
        "SQLite format",
        "AGENT-SOURCE",
        "GH-TOKEN",
        "NODE-BIN-TOOL",
        "EVE-BIN-TOOL",
        "COMPOSER-TOOL",
    ] {
        assert!(
            host.contains(secret),
            "the host run must read {secret}: {host}"
        );
    }
}
