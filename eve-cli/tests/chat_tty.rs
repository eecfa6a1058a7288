//! `eve chat` on a real terminal: tmux runs it in a pseudo-terminal, `send-keys` types and
//! `capture-pane` reads the screen. The up arrow recalls earlier lines (also in a new chat: the
//! history is kept in `.eve/chat_history`), Ctrl-U empties the line, a spinner turns while a
//! tool runs, an approval is asked once and a deny asks for the reason the model is told, and an
//! unknown `/word` is caught. Also, without a terminal: an unreachable `--url` and a refused token
//! end `eve chat` with exit code 2 and a message that says which.

use std::process::Command;
use std::time::Duration;

use super::support_dev::{EVE, Project, Server};
use super::support_run::{Output, wait_output};
use eve_test_support::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// A tmux server of its own (`-L`), with one window running a command.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    pub(crate) fn start(project: &Project, command: &str) -> Self {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        // A server of its own each time: a killed one may still be going away.
        let socket = format!(
            "eve-chat-{}-{}-{}",
            std::process::id(),
            project.root().file_name().unwrap().to_string_lossy(),
            STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let tmux = Self { socket };
        let out = tmux
            .cmd()
            .args(["new-session", "-d", "-s", "chat", "-x", "110", "-y", "40"])
            .arg(command)
            .output()
            .expect(
                "tmux must be installed for the terminal tests of eve chat (apt-get install tmux)",
            );
        assert!(
            out.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    pub(crate) fn cmd(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.socket, "-f", "/dev/null"]);
        cmd
    }

    /// Keys by tmux name (`Enter`, `Up`, `C-u`, `C-d`).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "chat"])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Text typed as it is.
    pub(crate) fn text(&self, text: &str) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "chat", "-l", text])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub(crate) fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-J", "-t", "chat", "-S", "-200"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A format of the pane (`#{pane_title}`), as tmux expands it.
    pub(crate) fn query(&self, format: &str) -> String {
        let out = self
            .cmd()
            .args(["display-message", "-p", "-t", "chat", format])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// tmux's paste buffers (what programs wrote to the clipboard with OSC 52), listed.
    pub(crate) fn buffers(&self) -> String {
        let out = self.cmd().arg("list-buffers").output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen satisfies `check`; returns it.
    pub(crate) fn wait(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        eventually(WAIT, what, || {
            let screen = self.screen();
            check(&screen).then_some(screen)
        })
    }

    /// Waits for `text` on the screen.
    pub(crate) fn wait_for(&self, text: &str) -> String {
        self.wait(&format!("`{text}` on the screen"), |s| s.contains(text))
    }

    /// The last line with text on it (the prompt and what is typed there).
    fn last_line(&self) -> String {
        self.screen()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .to_owned()
    }

    fn wait_last_line(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        eventually(WAIT, what, || {
            let line = self.last_line();
            check(&line).then_some(line)
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

fn project() -> Project {
    let project = Project::new();
    // The tools read a gate outside the workspace: they run unconfined.
    project.file("sandbox/sandbox.yaml", "provider: host\n");
    project.tool(
        "greet",
        "description: Greet someone.\napproval: always",
        "cat >/dev/null\necho '{\"hello\":\"world\"}'\n",
    );
    project.tool(
        "slow",
        "description: Waits for its gate.\neffect: read\nenv: [GATE]",
        "cat >/dev/null\nwhile [ ! -f \"$GATE\" ]; do sleep 0.05; done\necho opened\n",
    );
    project.build();
    project
}

/// The shell command tmux runs: `eve chat` in the project with the mock model.
fn chat_command(project: &Project, args: &str) -> String {
    format!(
        "cd '{}' && env -u EVE_PROJECT -u EVE_URL -u EVE_TOKEN -u EVE_MOCK_SCRIPT \
         EVE_MODEL=mock/echo NO_COLOR=1 GATE='{}' TERM=xterm '{EVE}' chat {args}; \
         echo \"exited $?\"; sleep 600",
        project.root().display(),
        project.path("gate").display()
    )
}

#[test]
fn chat_terminal_history_ctrl_u_and_persistence() {
    let project = project();
    let tmux = Tmux::start(&project, &chat_command(&project, ""));
    tmux.wait_for("you> ");

    tmux.text("hello one");
    tmux.keys(&["Enter"]);
    tmux.wait_for("agent: You said: hello one");
    tmux.wait_last_line("the prompt again", |l| l.trim_end() == "you>");

    // Ctrl-U empties the line: nothing of it is sent.
    tmux.text("garbage that is never sent");
    tmux.wait_last_line("the typed text", |l| l.contains("garbage"));
    tmux.keys(&["C-u"]);
    tmux.wait_last_line("an empty prompt after Ctrl-U", |l| l.trim_end() == "you>");
    tmux.text("second");
    tmux.keys(&["Enter"]);
    tmux.wait_for("agent: You said: second");
    assert!(
        !tmux.screen().contains("You said: garbage"),
        "{}",
        tmux.screen()
    );

    // Up, up: the first line again, sent again.
    tmux.wait_last_line("the prompt again", |l| l.trim_end() == "you>");
    tmux.keys(&["Up"]);
    tmux.wait_last_line("the last line recalled", |l| l.ends_with("you> second"));
    tmux.keys(&["Up"]);
    tmux.wait_last_line("the first line recalled", |l| l.ends_with("you> hello one"));
    tmux.keys(&["Enter"]);
    tmux.wait("the first line answered twice", |s| {
        s.matches("agent: You said: hello one").count() == 2
    });

    // Ctrl-D leaves; the history is in the project.
    tmux.wait_last_line("the prompt again", |l| l.trim_end() == "you>");
    tmux.keys(&["C-d"]);
    tmux.wait_for("exited 0");
    let history = std::fs::read_to_string(project.path(".eve/chat_history")).unwrap();
    assert!(history.contains("hello one"), "{history}");
    assert!(history.contains("second"), "{history}");
    assert!(!history.contains("garbage"), "{history}");
    drop(tmux);

    // A new chat in the same project recalls it.
    let tmux = Tmux::start(&project, &chat_command(&project, ""));
    tmux.wait_for("you> ");
    tmux.keys(&["Up"]);
    tmux.wait_last_line("history from the last chat", |l| {
        l.ends_with("you> hello one")
    });
}

#[test]
fn chat_terminal_spinner_deny_with_reason_and_unknown_commands() {
    let project = project();
    let tmux = Tmux::start(&project, &chat_command(&project, ""));
    tmux.wait_for("you> ");

    // A tool that runs until its gate opens: the spinner says so, and counts.
    tmux.text("/tool slow {}");
    tmux.keys(&["Enter"]);
    let spinning = tmux.wait_for("running slow…");
    assert!(spinning.contains("→ slow {}"), "{spinning}");
    std::fs::write(project.path("gate"), "open").unwrap();
    let done = tmux.wait_for("agent: slow returned: opened");
    // The spinner line was erased: it is not left on the screen.
    assert!(!done.contains("running slow…"), "{done}");

    // An approval: the call once, then the question; `n` asks for the reason.
    tmux.wait_last_line("the prompt again", |l| l.trim_end() == "you>");
    tmux.text("/tool greet {\"name\": \"Ada\"}");
    tmux.keys(&["Enter"]);
    let asked = tmux.wait_for("approve?");
    assert_eq!(
        asked.matches("{\"name\":\"Ada\"}").count(),
        1,
        "the input is shown once: {asked}"
    );
    tmux.text("n");
    tmux.keys(&["Enter"]);
    tmux.wait_for("reason for the model");
    tmux.text("too risky today");
    tmux.keys(&["Enter"]);
    tmux.wait_for("← greet: denied");
    tmux.wait_for("Reason: too risky today");

    // An unknown command is caught here; `//` sends the line with one slash.
    tmux.wait_last_line("the prompt again", |l| l.trim_end() == "you>");
    tmux.text("/frobnicate now");
    tmux.keys(&["Enter"]);
    tmux.wait_for("unknown command /frobnicate");
    assert!(!tmux.screen().contains("You said: /frobnicate"));
    tmux.text("//frobnicate now");
    tmux.keys(&["Enter"]);
    tmux.wait_for("agent: You said: /frobnicate now");

    // The reason reached the store with the denial.
    tmux.keys(&["C-d"]);
    tmux.wait_for("exited 0");
    let reason: String = project
        .db()
        .query_row(
            "SELECT reason FROM input_requests WHERE tool_name = 'greet'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(reason, "too risky today");
}

fn run(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, WAIT)
}

#[test]
fn chat_url_unreachable_or_token_refused_exits_2() {
    let project = project();
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = run(project.eve(&["chat", "--url", &url]));
    let stderr = &out.stderr;
    assert_eq!(out.code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach {url}")) && stderr.contains("--url"),
        "{stderr}"
    );

    project.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${CHAT_TOKEN}\"]\n",
    );
    project.build();
    let mut serve = project.eve(&["serve", "--port", "0"]);
    serve.env("CHAT_TOKEN", "right-token");
    let server = Server::start(serve);
    let url = format!("http://127.0.0.1:{}", server.port);
    let out = run(project.eve(&["chat", "--url", &url, "--token", "wrong-token"]));
    let stderr = &out.stderr;
    assert_eq!(out.code, Some(2), "{stderr}");
    assert!(
        stderr.contains("refused the credentials (HTTP 401)"),
        "{stderr}"
    );
    assert!(stderr.contains("the token was not accepted"), "{stderr}");
    assert!(stderr.contains("--token"), "{stderr}");
    assert!(
        !stderr.contains("wrong-token"),
        "the token is not echoed: {stderr}"
    );
    // Without a token the refusal is said at once, and says what is missing.
    let out = run(project.eve(&["chat", "--url", &url]));
    assert!(
        out.stderr.contains("it needs a token and none was given"),
        "{}",
        out.stderr
    );
    // The right token gets a chat.
    let mut cmd = project.eve(&["chat", "--url", &url, "--token", "right-token"]);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hi there\n/exit\n")
        .unwrap();
    let out = wait_output(child, WAIT);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("You said: hi there"), "{}", out.stdout);
}
