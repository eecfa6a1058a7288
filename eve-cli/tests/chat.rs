//! `eve chat` driven through piped stdin: a message, a tool call whose approval is answered on
//! stdin, `/new`, `/compact`, `/clear`, `/cancel`, `/exit`; in-process, and against a real
//! `eve serve` with a bearer token; `--session` continues a session and answers its parked approval.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::support_dev::{Project, Server};
use super::support_run::wait_output;

const TOKEN: &str = "s3cret-token";

fn project() -> Project {
    let project = Project::new();
    // The tool logs outside the workspace: it runs unconfined.
    project.file("sandbox/sandbox.yaml", "provider: host\n");
    project.tool(
        "greet",
        "description: Greet someone.\napproval: always\nenv: [GREET_LOG]",
        "input=$(cat)\necho \"$input\" >> \"$GREET_LOG\"\necho '{\"hello\":\"world\"}'\n",
    );
    project
}

/// Runs `cmd` with `input` on stdin; returns (code, stdout, stderr).
fn chat(project: &Project, mut cmd: Command, input: &str) -> (Option<i32>, String, String) {
    cmd.env("GREET_LOG", project.path("greet.log"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    (out.code, out.stdout, out.stderr)
}

fn greet_calls(project: &Project) -> Vec<String> {
    std::fs::read_to_string(project.path("greet.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn session_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("session "))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect()
}

const SCRIPT: &str = "hello there\n\
                      /tool greet {\"name\": \"Ada\"}\n\
                      y\n\
                      /tool greet {\"name\": \"Bob\"}\n\
                      n\n\
                      /compact\n\
                      /clear\n\
                      /cancel\n\
                      /new\n\
                      second session\n\
                      /exit\n\
                      never sent\n";

/// `again`: how the chat says to continue (`eve chat`, or `eve chat --url …` for a server).
fn check_transcript(project: &Project, again: &str, code: Option<i32>, stdout: &str, stderr: &str) {
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("You said: hello there\n"), "{stdout}");
    assert!(
        stdout.contains("greet returned: {\"hello\":\"world\"}"),
        "{stdout}"
    );
    assert!(stdout.contains("You said: second session\n"), "{stdout}");
    assert!(!stdout.contains("never sent"), "{stdout}");
    // One line per tool call, the approval question, the results.
    assert!(stderr.contains("→ greet {\"name\":\"Ada\"}"), "{stderr}");
    assert!(stderr.contains("→ greet {\"name\":\"Bob\"}"), "{stderr}");
    assert_eq!(stderr.matches("approve? ").count(), 2, "{stderr}");
    assert!(stderr.contains("← greet: ok"), "{stderr}");
    assert!(stderr.contains("← greet: denied"), "{stderr}");
    assert!(stderr.contains("(context compacted)"), "{stderr}");
    assert!(stderr.contains("(context cleared)"), "{stderr}");
    assert!(stderr.contains("(no turn to cancel)"), "{stderr}");
    // Approved once, denied once: the tool ran once.
    assert_eq!(greet_calls(project), ["{\"name\":\"Ada\"}"]);
    // `/new` started a second session.
    let sessions = session_lines(stderr);
    assert_eq!(sessions.len(), 2, "{stderr}");
    assert_ne!(sessions[0], sessions[1]);
    assert!(
        stderr.contains(&format!("continue with: {again} --session {}", sessions[1])),
        "{stderr}"
    );
    assert_eq!(project.count("SELECT COUNT(*) FROM sessions"), 2);
    let first_turns = project.count(&format!(
        "SELECT turn_count FROM sessions WHERE id='{}'",
        sessions[0]
    ));
    assert_eq!(first_turns, 3);
}

#[test]
fn chat_in_process_through_piped_stdin() {
    let project = project();
    let (code, stdout, stderr) = chat(&project, project.eve(&["chat"]), SCRIPT);
    check_transcript(&project, "eve chat", code, &stdout, &stderr);
}

#[test]
fn chat_against_a_server_with_a_token() {
    let project = project();
    project.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${CHAT_TOKEN}\"]\n",
    );
    project.build();
    let mut serve = project.eve(&["serve", "--port", "0"]);
    serve
        .env("CHAT_TOKEN", TOKEN)
        .env("GREET_LOG", project.path("greet.log"));
    let server = Server::start(serve);
    let url = format!("http://127.0.0.1:{}", server.port);

    // Without the token: refused before anything is sent, said plainly, exit 2.
    let (code, stdout, stderr) = chat(
        &project,
        project.eve(&["chat", "--url", &url]),
        "hello\n/exit\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("HTTP 401"), "{stderr}");
    assert!(
        stderr.contains("it needs a token and none was given"),
        "{stderr}"
    );
    assert!(!stdout.contains("hello"), "{stdout}");

    let (code, stdout, stderr) = chat(
        &project,
        project.eve(&["chat", "--url", &url, "--token", TOKEN]),
        SCRIPT,
    );
    // The same server again; the token is named, not printed.
    let again = format!("eve chat --url {url} --token <TOKEN>");
    check_transcript(&project, &again, code, &stdout, &stderr);
}

#[test]
fn chat_continues_a_session_and_answers_its_parked_approval() {
    let project = project();
    // A first chat leaves the approval unanswered (stdin ends at the question).
    let (code, _, stderr) = chat(&project, project.eve(&["chat"]), "/tool greet {}\n");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("(no answer: the turn stays parked"),
        "{stderr}"
    );
    let id = session_lines(&stderr).remove(0);
    assert!(greet_calls(&project).is_empty());

    let (code, stdout, stderr) = chat(
        &project,
        project.eve(&["chat", "--session", &id]),
        "y\nagain\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("approve? "), "{stderr}");
    assert!(stderr.contains("← greet: ok"), "{stderr}");
    assert!(stdout.contains("greet returned: "), "{stdout}");
    assert!(stdout.contains("You said: again"), "{stdout}");
    assert_eq!(greet_calls(&project), ["{}"]);
    assert_eq!(project.count("SELECT COUNT(*) FROM sessions"), 1);
}

#[test]
fn ctrl_c_cancels_the_running_turn_and_a_second_one_at_the_prompt_exits() {
    use std::io::{BufRead, BufReader};
    let project = project();
    project.tool(
        "slow",
        "description: Takes a while.\neffect: read",
        "cat >/dev/null\nsleep 20\necho '{}'\n",
    );
    let mut child = project
        .eve(&["chat"])
        .env("GREET_LOG", project.path("greet.log"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // stdout and stderr lines, in the order they arrive.
    let (tx, rx) = std::sync::mpsc::channel();
    // Everything seen, for the failure messages.
    let transcript = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for (name, pipe) in [
        (
            "out",
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        ),
        ("err", Box::new(child.stderr.take().unwrap())),
    ] {
        let tx = tx.clone();
        let transcript = transcript.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                transcript.lock().unwrap().push(format!("{name}: {line}"));
                let _ = tx.send(line);
            }
        });
    }
    let seen = || transcript.lock().unwrap().join("\n");
    let wait_for = |needle: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line containing {needle:?} in:\n{}", seen()));
            if line.contains(needle) {
                return line;
            }
        }
    };
    let interrupt = |pid: u32| {
        let status = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    stdin.write_all(b"/tool slow {}\n").unwrap();
    wait_for("→ slow");
    let started = std::time::Instant::now();
    interrupt(child.id());
    wait_for("(turn cancelled)");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the 20 s tool was cut short"
    );
    // Still running: the next line is a message.
    stdin.write_all(b"still here\n").unwrap();
    wait_for("You said: still here");
    // At the prompt the first Ctrl-C only warns. The chat reads lines one at a time, so once the
    // answer to `/help` is out the turn has ended and the chat waits at the prompt (a signal that
    // lands while a turn is still ending cancels nothing, and would not warn).
    stdin.write_all(b"/help\n").unwrap();
    wait_for("/help     this list");
    interrupt(child.id());
    wait_for("press Ctrl-C again");
    assert!(
        child.try_wait().unwrap().is_none(),
        "one Ctrl-C does not exit"
    );
    interrupt(child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "eve chat did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let texts: Vec<String> = {
        let db = project.db();
        let mut stmt = db.prepare("SELECT status FROM turns ORDER BY seq").unwrap();
        stmt.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(texts, ["cancelled", "completed"]);
}
