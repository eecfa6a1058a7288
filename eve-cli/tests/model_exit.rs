//! `eve run` against a model it cannot use ends naming the setting to change, through the real
//! binary and real HTTP: nothing listening, a host that does not resolve, a refused key, a model
//! the server does not have, a base URL without the API, a stream cut short, and a server that
//! reports no usage under a token limit.

use std::process::Stdio;
use std::time::Duration;

use crate::support_dev::Project;
use crate::support_model::{Answer, ModelServer, cut_stream, text_stream};
use crate::support_run::{Output, wait_output};

fn run(p: &Project, base: &str, args: &[&str]) -> Output {
    let mut cmd = p.eve(args);
    cmd.env("EVE_MODEL", "openai-compatible/test-model")
        .env("EVE_BASE_URL", base)
        .env("EVE_API_KEY", "sk-test")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    wait_output(cmd.spawn().unwrap(), Duration::from_secs(60))
}

fn project(agent_yaml: &str) -> Project {
    let p = Project::new();
    p.file("agent.yaml", agent_yaml);
    p.build();
    p
}

/// `eve run hello` fails, and its last words name `setting`.
fn fails_naming(case: &str, base: &str, setting: &str) {
    let p = project("default_tools: false\n");
    let out = run(&p, base, &["run", "hello"]);
    assert_ne!(out.code, Some(0), "{case}: {}", out.stderr);
    let error = out
        .stderr
        .lines()
        .rfind(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{case}: no error line: {}", out.stderr));
    eprintln!("{case}: {error}");
    assert!(
        error.contains(setting),
        "{case}: the error names {setting}: {error}"
    );
}

#[test]
fn an_unusable_model_ends_eve_run_naming_the_setting_to_change() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let unauthorized = ModelServer::start(|_, _| {
        Answer::Status(
            401,
            serde_json::json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}),
        )
    });
    let no_model = ModelServer::start(|_, _| {
        Answer::Status(
            404,
            serde_json::json!({"error": {"message": "The model `test-model` does not exist"}}),
        )
    });
    let no_api =
        ModelServer::start(|_, _| Answer::Status(404, serde_json::json!({"detail": "Not Found"})));
    let cut = ModelServer::start(|_, _| cut_stream("half an ans"));
    let cases: Vec<(&str, String, &str)> = vec![
        ("nothing listening", closed, "EVE_BASE_URL"),
        (
            "a host that does not resolve",
            "http://no-such-host.invalid/v1".to_owned(),
            "EVE_BASE_URL",
        ),
        ("a refused key", unauthorized.base.clone(), "EVE_API_KEY"),
        ("an unknown model", no_model.base.clone(), "EVE_MODEL"),
        (
            "no API at the base URL",
            no_api.base.clone(),
            "EVE_BASE_URL",
        ),
        ("a stream cut short", cut.base.clone(), "--max-concurrency"),
    ];
    std::thread::scope(|s| {
        for (case, base, setting) in &cases {
            s.spawn(move || fails_naming(case, base, setting));
        }
    });
}

#[test]
fn a_server_that_reports_no_usage_still_meets_the_token_limit_and_says_which() {
    let server = ModelServer::start(|_, _| text_stream("a fine answer", false));
    let p = project("default_tools: false\nlimits:\n  max_tokens: 10\n");
    let first = run(&p, &server.base, &["run", "hello"]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let id = p
        .db()
        .query_row("SELECT id FROM sessions", [], |r| r.get::<_, String>(0))
        .unwrap();
    let used = p.count(&format!(
        "SELECT input_tokens + output_tokens FROM sessions WHERE id = '{id}'"
    ));
    assert!(used > 10, "usage was estimated: {used}");
    let second = run(&p, &server.base, &["run", "--session", &id, "again"]);
    // Over its budget, the session asks to go on (eve's session limit): `eve run` without a
    // terminal pauses and names the limit.
    assert_ne!(second.code, Some(0), "{}", second.stderr);
    let asked = second
        .stderr
        .lines()
        .find(|l| l.contains("token limit (10) per session"))
        .unwrap_or_else(|| panic!("no session-limit line: {}", second.stderr));
    assert!(asked.contains("limits.max_tokens"), "{asked}");
}
