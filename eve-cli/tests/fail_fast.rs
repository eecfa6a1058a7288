//! A misconfigured or misbehaving model fails fast and loudly: the commands that run turns refuse
//! to start without what the model needs (naming the variable to set), `eve build` rejects an
//! unknown provider, and a model that answers garbage ends the turn with `turn.failed` on every
//! stream, leaving the session marked failed and usable, and a restart with another model never
//! re-runs the failed prompt.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support_dev::{Project, Server};
use super::support_run::wait_output;

/// An "OpenAI" server on 127.0.0.1:0 that answers every request with a 200 whose body is not a
/// model stream. Returns its base URL and the count of requests it answered.
fn garbling_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 65536];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read(&mut buf);
            counter.fetch_add(1, Ordering::SeqCst);
            let body = "data: {this is not json\n\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (format!("http://127.0.0.1:{port}/v1"), hits)
}

/// `eve ARGS` with the hosted OpenAI model and no key anywhere.
fn keyless(project: &Project, args: &[&str]) -> Command {
    let mut cmd = project.eve(args);
    cmd.env("EVE_MODEL", "openai/gpt-4.1")
        .env_remove("OPENAI_API_KEY")
        .env_remove("EVE_API_KEY")
        .env_remove("EVE_BASE_URL");
    cmd
}

fn run_to_end(mut cmd: Command) -> super::support_run::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(20))
}

#[test]
fn commands_that_run_turns_refuse_a_model_without_its_key() {
    let project = Project::new();
    project.build();
    for args in [
        &["run", "hello"][..],
        &["serve", "--port", "0"][..],
        &["chat"][..],
        &["dev", "--port", "0"][..],
    ] {
        let started = Instant::now();
        let out = run_to_end(keyless(&project, args));
        assert_ne!(out.code, Some(0), "eve {args:?} started: {}", out.stderr);
        assert!(
            out.stderr.contains("OPENAI_API_KEY") && out.stderr.contains("openai/gpt-4.1"),
            "eve {args:?} must name the model and the variable to set: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("EVE_MODEL=openai/gpt-4.1"),
            "and where the model came from: {}",
            out.stderr
        );
        assert!(started.elapsed() < Duration::from_secs(10), "eve {args:?}");
    }
    // Nothing was accepted that could never be answered.
    assert!(
        !project.root().join(".eve/eve.db").exists()
            || project.count("SELECT COUNT(*) FROM inbox") == 0
    );

    // `--model` names the model for this process: over agent.yaml and EVE_MODEL, said as such.
    let out = run_to_end(keyless(
        &project,
        &["run", "--model", "anthropic/claude-x", "hi"],
    ));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("(--model anthropic/claude-x)")
            && out.stderr.contains("ANTHROPIC_API_KEY"),
        "{}",
        out.stderr
    );
    let out = run_to_end(keyless(&project, &["run", "-m", "mock/echo", "hello"]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("You said: hello"), "{}", out.stdout);

    // A base URL pointing elsewhere (a local proxy, a self-hosted server) needs no key.
    let (base, _) = garbling_server();
    let mut cmd = keyless(&project, &["serve", "--port", "0"]);
    cmd.env("EVE_BASE_URL", &base);
    let server = Server::start(cmd);
    assert_eq!(server.get("/eve/v1/health").0, 200);
    server.kill();
}

#[test]
fn eve_build_rejects_an_unknown_provider() {
    let project = Project::new();
    project.file("agent.yaml", "model: foo/bar\n");
    let out = run_to_end(project.eve(&["build"]));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("E090"), "{}", out.stderr);
    assert!(out.stderr.contains("`foo`"), "{}", out.stderr);
    assert!(out.stderr.contains("agent/agent.yaml"), "{}", out.stderr);
    assert!(out.stderr.contains("openai-compatible"), "{}", out.stderr);

    let out = run_to_end(project.eve(&["build", "--json"]));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stdout.contains("\"E090\""), "{}", out.stdout);
}

fn failed_event(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "turn.failed")
        .unwrap_or_else(|| panic!("no turn.failed: {events:?}"))
}

#[test]
fn a_garbling_model_fails_the_turn_on_every_stream_and_the_session_stays_usable() {
    let project = Project::new();
    project.build();
    let (base, hits) = garbling_server();
    let broken = |args: &[&str]| {
        let mut cmd = project.eve(args);
        cmd.env("EVE_MODEL", "openai/gpt-4.1")
            .env("EVE_BASE_URL", &base)
            .env("EVE_API_KEY", "sk-test");
        cmd
    };

    // `eve run --json`: the turn ends with turn.failed carrying the error, and the run says so.
    let started = Instant::now();
    let out = run_to_end(broken(&["run", "--json", "hello"]));
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed = failed_event(&events);
    let message = failed["data"].to_string();
    assert!(message.contains("model"), "{failed}");
    assert_eq!(events.last().unwrap()["type"], "session.waiting");
    assert!(
        hits.load(Ordering::SeqCst) >= 1,
        "the model server was called"
    );

    // `eve sessions list` shows it failed, not running.
    let list = run_to_end(project.eve(&["sessions", "list", "--json"]));
    let sessions: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(sessions[0]["status"], "failed", "{sessions}");
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let table = run_to_end(project.eve(&["sessions", "list"]));
    assert!(table.stdout.contains("failed"), "{}", table.stdout);

    // `eve serve`: NDJSON and SSE followers both see turn.failed, and the follow ends.
    let server = Server::start(broken(&["serve", "--port", "0"]));
    let from = project.count(&format!(
        "SELECT event_count FROM sessions WHERE id = '{id}'"
    ));
    let (status, body) = server.post(
        &format!("/eve/v1/session/{id}"),
        &json!({"message": "again"}),
    );
    assert_eq!(status, 202, "{body}");
    assert!(body["deliveryId"].is_string(), "{body}");
    let ndjson = server.stream(&id, &format!("?startIndex={from}"));
    let failed = failed_event(&ndjson);
    assert_eq!(
        failed["meta"]["deliveryIds"],
        json!([body["deliveryId"]]),
        "the failure belongs to the message that was sent"
    );
    assert_eq!(ndjson.last().unwrap()["type"], "session.waiting");
    let (_, sse) = super::support_dev::response(
        {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            write!(
                s,
                "GET /eve/v1/session/{id}/stream?startIndex={from}&follow=false HTTP/1.1\r\n\
                 Host: 127.0.0.1\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            s
        },
        Vec::new(),
    );
    assert!(sse.contains("\"type\":\"turn.failed\""), "{sse}");
    // The AI SDK stream: an `error` chunk carrying the model's error, then the end.
    let (status, ui) = super::support_dev::http(
        server.port,
        "POST",
        "/eve/v1/chat",
        Some(&json!({"id": "chat-broken", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
        ]})),
        None,
    );
    assert_eq!(status, 200, "{ui}");
    let error = ui
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|c| c["type"] == "error")
        .unwrap_or_else(|| panic!("no error chunk: {ui}"));
    assert!(
        error["errorText"].as_str().unwrap().contains("model"),
        "{error}"
    );
    assert!(ui.contains("[DONE]"), "{ui}");
    server.kill();

    // `eve chat`: the failure is printed and the prompt comes back (`/exit` is read and obeyed).
    let mut cmd = broken(&["chat"]);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\n/exit\n")
        .unwrap();
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("turn failed:"), "{all}");
    let chats = project.count("SELECT COUNT(*) FROM sessions");
    let list = run_to_end(project.eve(&["sessions", "list", "--json"]));
    let sessions: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len() as i64, chats);
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "failed"),
        "{sessions}"
    );
    let turns_sql = format!("SELECT turn_count FROM sessions WHERE id = '{id}'");
    let turns = project.count(&turns_sql);

    // Restarting with a working model re-runs nothing: the failed prompts stay failed, and the
    // next message gets its own answer.
    let server = Server::start(project.eve(&["serve", "--port", "0"]));
    let from = project.count(&format!(
        "SELECT event_count FROM sessions WHERE id = '{id}'"
    ));
    let (status, _) = server.post(
        &format!("/eve/v1/session/{id}"),
        &json!({"message": "third"}),
    );
    assert_eq!(status, 202);
    let events = server.stream(&id, &format!("?startIndex={from}"));
    let received: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.received")
        .collect();
    assert_eq!(received.len(), 1, "{events:?}");
    assert_eq!(received[0]["data"]["message"], "third");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "message.completed" && e["data"]["message"] == "You said: third"),
        "{events:?}"
    );
    assert_eq!(project.count(&turns_sql), turns + 1);
    server.kill();
    let list = run_to_end(project.eve(&["sessions", "show", &id, "--json"]));
    let shown: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(shown["session"]["status"], "idle", "{shown}");
}

#[test]
fn a_model_switched_under_eve_dev_to_one_without_its_key_fails_the_turn_and_says_what_to_set() {
    let project = Project::new();
    project.file("agent.yaml", "model: mock/echo\n");
    let mut cmd = project.eve(&["dev", "--port", "0"]);
    cmd.env_remove("EVE_MODEL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("EVE_API_KEY");
    let mut dev = Server::start(cmd);
    dev.wait_line(Duration::from_secs(20), |l| l.starts_with("built in "));

    // The edit passes the build (the provider is known); the key is missing only at run time.
    let mark = dev.stderr().len();
    project.file("agent.yaml", "model: openai/gpt-4.1\n");
    dev.wait_line_after(mark, Duration::from_secs(20), |l| {
        l.starts_with("rebuilt in ")
    });
    let started = Instant::now();
    let (status, body) = dev.post("/eve/v1/session", &json!({"message": "hello"}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap();
    let events = dev.stream(id, "");
    assert!(started.elapsed() < Duration::from_secs(10));
    let failed = failed_event(&events);
    let text = failed["data"].to_string();
    assert!(text.contains("OPENAI_API_KEY"), "{failed}");
    assert_eq!(events.last().unwrap()["type"], "session.waiting");
    dev.kill();
    let shown = run_to_end(project.eve(&["sessions", "show", id, "--json"]));
    let shown: Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(shown["session"]["status"], "failed", "{shown}");
}

/// A project whose first step calls `slow` (a `read` tool that sleeps the first time it runs, so
/// the run can be killed inside it), then answers.
fn crashable() -> super::support_run::RunProject {
    let slow = super::support_run::logging_tool(
        "# description: Slow the first time.\n# effect: read\n",
        "[ -f \"$SIDE_FILE.once\" ] || { touch \"$SIDE_FILE.once\"; sleep 30; }",
    );
    super::support_run::RunProject::new(
        &[("slow", slow)],
        json!([
            {"tool_calls": [{"name": "slow", "input": {}}]},
            {"text": "done"}
        ]),
    )
}

/// Runs `eve run --json PROMPT` and SIGKILLs it once the slow tool runs; returns the session id.
fn crash_in_tool(p: &super::support_run::RunProject, prompt: &str) -> String {
    let mut run = super::support_run::Running::spawn(p.eve(&["run", "--json", prompt]));
    let side = p.side.clone();
    assert!(run.wait_for(Duration::from_secs(20), |_| {
        std::fs::read_to_string(&side).is_ok_and(|s| s.contains("start "))
            && std::path::Path::new(&format!("{}.once", side.display())).exists()
    }));
    run.kill();
    p.strings("SELECT id FROM sessions ORDER BY created_at DESC LIMIT 1")
        .remove(0)
}

#[test]
fn a_turn_resumed_on_another_model_fails_unless_the_switch_is_allowed() {
    let p = crashable();
    p.agent.file("agent.yaml", "model: mock/echo\n");
    let build = p.run(&["build"]);
    assert_eq!(build.code, Some(0), "{}", build.stderr);
    let id = crash_in_tool(&p, "go");

    // Resumed by a process with another model: the turn fails saying so, nothing runs.
    let mut cmd = p.eve(&["run", "--json", "--session", &id]);
    cmd.env("EVE_MODEL", "mock/other");
    let out = run_to_end(cmd);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    let events: Vec<Value> = out.events();
    let failed = failed_event(&events);
    assert_eq!(failed["data"]["error"]["code"], "model_changed", "{failed}");
    let text = failed["data"]["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("mock/echo") && text.contains("mock/other"),
        "{text}"
    );
    assert!(text.contains("EVE_ALLOW_MODEL_SWITCH=1"), "{text}");
    assert!(
        !events.iter().any(|e| e["type"] == "message.completed"),
        "the old prompt was not answered on the new model: {events:?}"
    );
    assert_eq!(
        p.strings(&format!(
            "SELECT status FROM turns WHERE session_id = '{id}'"
        )),
        ["failed"]
    );

    // With the switch allowed, the resumed turn says so and completes on the new model.
    std::fs::remove_file(format!("{}.once", p.side.display())).unwrap();
    let id = crash_in_tool(&p, "again");
    let mut cmd = p.eve(&["run", "--json", "--session", &id]);
    cmd.env("EVE_MODEL", "mock/other")
        .env("EVE_ALLOW_MODEL_SWITCH", "1");
    let out = run_to_end(cmd);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let events = out.events();
    let switched = events
        .iter()
        .find(|e| e["type"] == "turn.model_switched")
        .unwrap_or_else(|| panic!("no turn.model_switched: {events:?}"));
    assert_eq!(switched["data"]["from"], "mock/echo");
    assert_eq!(switched["data"]["to"], "mock/other");
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "{events:?}"
    );
}
