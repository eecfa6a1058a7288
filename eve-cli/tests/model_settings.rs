//! Model settings from the command line, through the real binary: `eve set model` edits a
//! commented `agent.yaml` byte for byte apart from the changed lines and lists the known models;
//! `eve init --model --reasoning` scaffolds with them; in `eve chat`, `/model` switches the
//! session's model (the next turn's `step.started` names it) and `/info` says where each setting
//! came from, in-process and against `eve serve` over HTTP.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::support_dev::{Project, Server};
use super::support_run::wait_output;

/// A file written by a person: comments above and beside the model, blank lines, nesting.
const COMMENTED: &str = "\
# Agent settings. Every field is optional.
#
# model: provider/name (this comment line mentions `model:` and must stay as it is).
model: mock/echo          # offline while we build
context_window: 64000

limits:
  max_steps_per_turn: 20   # model: not this one
default_tools: false
";

/// `eve ARGS` in `project` with no model variables, so `agent.yaml` speaks.
fn eve(project: &Project, args: &[&str]) -> Command {
    let mut cmd = project.eve(args);
    cmd.env_remove("EVE_MODEL")
        .env_remove("EVE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    cmd
}

fn run(mut cmd: Command) -> (Option<i32>, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn yaml(project: &Project) -> String {
    std::fs::read_to_string(project.path("agent/agent.yaml")).unwrap()
}

#[test]
fn set_model_edits_a_commented_agent_yaml_in_place_and_lists_models() {
    let project = Project::new();
    project.file("agent.yaml", COMMENTED);

    let (code, _, stderr) = run(eve(
        &project,
        &["set", "model", "openai/gpt-4.1", "--reasoning", "high"],
    ));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("Set model: openai/gpt-4.1 in agent/agent.yaml (was mock/echo)"),
        "{stderr}"
    );
    let expected = COMMENTED.replace(
        "model: mock/echo          # offline while we build\n",
        "model: openai/gpt-4.1     # offline while we build\nreasoning: high\n",
    );
    assert_eq!(yaml(&project), expected);
    // The build reads what was written.
    project.build();
    let (code, stdout, stderr) = run(eve(&project, &["info", "--json"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\"openai/gpt-4.1\""), "{stdout}");

    // Back to the first model: the file is the original plus the reasoning line, nothing else.
    let (code, _, stderr) = run(eve(&project, &["set", "model", "mock/echo"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        yaml(&project),
        COMMENTED.replace(
            "# offline while we build\n",
            "# offline while we build\nreasoning: high\n"
        )
    );
    let (code, _, stderr) = run(eve(&project, &["set", "model", "--reasoning", "low"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(yaml(&project).contains("\nreasoning: low\n"));

    // Without an id: the model in force, where it came from, and the catalogue.
    let (code, stdout, stderr) = run(eve(&project, &["set", "model"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("model: mock/echo (from agent.yaml), reasoning: low\n"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("* mock/echo")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  openai/gpt-4.1 ") && l.contains("1047K context")),
        "{stdout}"
    );
    // EVE_MODEL wins, and the listing says so.
    let mut cmd = eve(&project, &["set", "model", "--json"]);
    cmd.env("EVE_MODEL", "anthropic/claude-sonnet-4-5");
    let (code, stdout, stderr) = run(cmd);
    assert_eq!(code, Some(0), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["current"]["model"], "anthropic/claude-sonnet-4-5");
    assert_eq!(doc["current"]["source"], "EVE_MODEL");
    assert_eq!(doc["current"]["reasoning"], "low");
    assert!(
        doc["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "anthropic/claude-sonnet-4-5" && m["price"]["input"] == 3.0)
    );

    // Bad input: a clear error, exit 2, and the file untouched.
    let before = yaml(&project);
    for (args, says) in [
        (vec!["set", "model", "gpt-4.1"], "expected `provider/name`"),
        (
            vec!["set", "model", "openia/gpt-4.1"],
            "no model provider `openia`",
        ),
        (
            vec!["set", "model", "openai/x\nevil: true"],
            "can write to agent.yaml",
        ),
        (
            vec!["set", "model", "mock/echo", "--reasoning", "extreme"],
            "possible values",
        ),
    ] {
        let (code, _, stderr) = run(eve(&project, &args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(yaml(&project), before, "{args:?}");
    }
    // A file it cannot edit line by line is refused, not rewritten.
    project.file("agent.yaml", "{model: mock/echo, default_tools: false}\n");
    let (code, _, stderr) = run(eve(&project, &["set", "model", "openai/gpt-4.1"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("set the value by hand"), "{stderr}");
    assert_eq!(yaml(&project), "{model: mock/echo, default_tools: false}\n");
}

#[test]
fn init_writes_the_model_and_reasoning_into_the_template() {
    let project = Project::new();
    let (code, _, stderr) = run(eve(&project, &["init", "plain"]));
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = run(eve(
        &project,
        &[
            "init",
            "demo",
            "--model",
            "anthropic/claude-sonnet-4-5",
            "--reasoning",
            "medium",
        ],
    ));
    assert_eq!(code, Some(0), "{stderr}");
    let plain = std::fs::read_to_string(project.root().join("plain/agent/agent.yaml")).unwrap();
    let demo = std::fs::read_to_string(project.root().join("demo/agent/agent.yaml")).unwrap();
    assert!(plain.contains("\nmodel: mock/echo\n"), "{plain}");
    assert_eq!(
        demo,
        plain.replace(
            "\nmodel: mock/echo\n",
            "\nmodel: anthropic/claude-sonnet-4-5\nreasoning: medium\n"
        )
    );
    // A model eve does not know: refused before anything is written.
    let (code, _, stderr) = run(eve(&project, &["init", "bad", "--model", "nobody/x"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no model provider `nobody`"), "{stderr}");
    assert!(!project.root().join("bad").exists());
}

/// `eve chat` with `input` on stdin; (code, stdout, stderr).
fn chat(mut cmd: Command, input: &str) -> (Option<i32>, String, String) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    (out.code, out.stdout, out.stderr)
}

fn chat_project() -> Project {
    let project = Project::new();
    project.file(
        "agent.yaml",
        "model: mock/echo\ncontext_window: 64000\nreasoning: low\ndefault_tools: [read_file]\n",
    );
    project.tool("greet", "description: Greet someone.", "echo '{}'\n");
    project
}

#[test]
fn chat_model_switches_the_session_model_and_info_says_where_settings_came_from() {
    let project = chat_project();
    let script = project.path("switched.json");
    // The script plays its steps by the model calls of the session so far: any of them speaks.
    let step = r#"{"text": "the switched model speaks"}"#;
    std::fs::write(&script, format!("[{step}, {step}, {step}]")).unwrap();
    let switched = format!("mock/script:{}", script.display());
    let input = format!(
        "/info\nhello\n/model\n/model openai/gpt-4.1\n/model {switched}\nagain\n/info\n/exit\n"
    );
    let (code, stdout, stderr) = chat(eve(&project, &["chat"]), &input);
    assert_eq!(code, Some(0), "{stderr}");
    // Before the switch, agent.yaml's model answers; after it, the chosen one.
    assert!(stdout.contains("You said: hello"), "{stdout}");
    assert!(stdout.contains("the switched model speaks"), "{stdout}");
    assert!(!stdout.contains("You said: again"), "{stdout}");
    for line in [
        "model:     mock/echo (from agent/agent.yaml)",
        "reasoning: low (from agent/agent.yaml)",
        "window:    64000 tokens (from agent/agent.yaml context_window)",
        "tools:     2 (agent/tools/: greet; built-in, from default_tools in agent/agent.yaml: read_file)",
        "model: mock/echo (from agent/agent.yaml)",
        "* mock/echo",
        // A model without its key is refused, and nothing changes.
        "model `openai/gpt-4.1` cannot be used",
        &format!("(model: {switched} for this session, from its next turn)"),
        &format!("model:     {switched} (from /model in this chat)"),
    ] {
        assert!(stderr.contains(line), "missing {line:?} in:\n{stderr}");
    }
    // The journal agrees: the first turn ran on mock/echo, the second on the chosen model.
    let db = project.db();
    let mut rows = db
        .prepare("SELECT data FROM events WHERE type = 'step.started' ORDER BY session_id, idx")
        .unwrap();
    let models: Vec<String> = rows
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|d| {
            let v: Value = serde_json::from_str(&d.unwrap()).unwrap();
            v["modelId"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(models, vec!["mock/echo".to_owned(), switched.clone()]);

    // Chosen before the first message: checked at once, used from the session's first turn.
    let (code, stdout, stderr) = chat(
        eve(&project, &["chat"]),
        &format!("/model {switched}\nfirst\n/exit\n"),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("the switched model speaks"), "{stdout}");
    assert!(!stdout.contains("You said: first"), "{stdout}");

    // `--model` is named as the source when it is the one in force.
    let (code, _, stderr) = chat(
        eve(&project, &["chat", "--model", "mock/echo"]),
        "/info\n/exit\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("model:     mock/echo (from --model)"),
        "{stderr}"
    );
}

#[test]
fn chat_info_over_http_describes_the_server_and_model_is_its_own() {
    let project = chat_project();
    project.build();
    let server = Server::start(project.eve(&["serve", "--port", "0"]));
    let url = format!("http://127.0.0.1:{}", server.port);
    let (code, stdout, stderr) = chat(
        eve(&project, &["chat", "--url", &url]),
        "/info\n/model mock/echo\nhello\n/exit\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("You said: hello"), "{stdout}");
    for line in [
        &format!("(served by {url})"),
        "model:     mock/echo (from the server's agent/agent.yaml)",
        "reasoning: low (from the server's agent/agent.yaml)",
        "window:    64000 tokens (from the server's agent/agent.yaml)",
        "the server's model answers",
    ] {
        assert!(stderr.contains(line), "missing {line:?} in:\n{stderr}");
    }
    let tools = stderr
        .lines()
        .find(|l| l.starts_with("tools:"))
        .unwrap_or_default();
    assert!(
        tools.contains("greet") && tools.contains("read_file"),
        "{stderr}"
    );
}
