//! `eve eval`: every expectation kind passing and failing (with the failure message asserted),
//! coded diagnostics for malformed cases, selection, JSON and JUnit (parsed), `--url` against a
//! running server, and `eve init && eve eval` passing offline for every template.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const EVE: &str = env!("CARGO_BIN_EXE_eve");

fn eve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(EVE);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_MOCK_SCRIPT")
        .env_remove("EVE_BASE_URL")
        .env_remove("EVE_JUDGE_MODEL")
        .env_remove("EVE_JUDGE_MOCK_SCRIPT")
        .env("EVE_MODEL", "mock/echo")
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// An agent with a read tool, a tool that needs approval, a skill, and `evals/` from `cases`.
fn project(cases: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("agent");
    std::fs::create_dir_all(a.join("tools")).unwrap();
    std::fs::create_dir_all(a.join("skills")).unwrap();
    std::fs::write(a.join("instructions.md"), "You are a test agent.\n").unwrap();
    std::fs::write(
        a.join("agent.yaml"),
        "default_tools: false\nlimits:\n  price_per_million: {input: 10000, output: 10000}\n",
    )
    .unwrap();
    let weather = "#!/bin/sh\n# ---\n# description: Weather of a city.\n# effect: read\n# input:\n#   type: object\n#   properties:\n#     city: {type: string}\n# ---\necho '{\"condition\": \"Sunny\", \"temperatureC\": 22}'\n";
    let delete = "#!/bin/sh\n# ---\n# description: Delete a file.\n# approval: always\n# ---\necho deleted\n";
    for (name, body) in [("weather.sh", weather), ("delete.sh", delete)] {
        let p = a.join("tools").join(name);
        std::fs::write(&p, body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        a.join("skills/haiku.md"),
        "---\ndescription: How to write a haiku.\n---\nThree lines.\n",
    )
    .unwrap();
    for (path, body) in cases {
        let p = dir.path().join("evals").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    dir
}

const KINDS: &str = r#"
- id: called-ok
  messages: ["weather in Paris?"]
  mock:
    - {tool_calls: [{name: weather, input: {city: Paris, units: metric}}]}
    - {text: "It is sunny in Paris, 22 °C."}
  expect:
    called_tool: {name: weather, input: {city: Paris}, count: 1}
    not_called: delete
    text: {contains: sunny, not_contains: rain, regex: '\d+ °C'}
    approval_requested: false
    max_steps: 2
    max_cost_usd: 100
    max_seconds: 60
- id: called-wrong-input
  messages: ["weather in Paris?"]
  mock:
    - {tool_calls: [{name: weather, input: {city: Oslo}}]}
    - {text: "done"}
  expect:
    called_tool: {name: weather, input: {city: Paris}}
- id: called-count
  messages: ["weather twice"]
  mock:
    - {tool_calls: [{name: weather, input: {city: Paris}}, {name: weather, input: {city: Rome}}]}
    - {text: "done"}
  expect:
    called_tool: {name: weather, count: 1}
- id: not-called
  messages: ["weather?"]
  mock:
    - {tool_calls: [{name: weather, input: {city: Lima}}]}
    - {text: "done"}
  expect:
    not_called: [weather]
- id: skill-ok
  messages: ["a poem"]
  mock:
    - {tool_calls: [{name: load_skill, input: {name: haiku}}]}
    - {text: "three lines"}
  expect:
    loaded_skill: haiku
- id: skill-missing
  messages: ["a poem"]
  mock:
    - {text: "no skill"}
  expect:
    loaded_skill: haiku
- id: text-contains
  messages: ["hi"]
  mock: [{text: "It is raining."}]
  expect:
    text: {contains: sunny}
- id: text-not-contains
  messages: ["hi"]
  mock: [{text: "It is raining."}]
  expect:
    text: {not_contains: raining}
- id: text-regex
  messages: ["hi"]
  mock: [{text: "no number here"}]
  expect:
    text: {regex: '\d+ °C'}
- id: approval-ok
  messages: ["delete it", {approve: true}]
  mock:
    - {tool_calls: [{name: delete, input: {path: a.txt}}]}
    - {text: "Deleted."}
  expect:
    approval_requested: delete
    called_tool: delete
    text: Deleted
- id: approval-missing
  messages: ["weather?"]
  mock:
    - {tool_calls: [{name: weather, input: {city: Paris}}]}
    - {text: "done"}
  expect:
    approval_requested: true
- id: approval-unwanted
  messages: ["delete it", {approve: false, reason: "not today"}]
  mock:
    - {tool_calls: [{name: delete}]}
    - {text: "Not deleted."}
  expect:
    approval_requested: false
- id: unanswered-approval
  messages: ["delete it", "and then?"]
  mock:
    - {tool_calls: [{name: delete}]}
- id: steps
  messages: ["go"]
  mock:
    - {tool_calls: [{name: weather, input: {city: A}}]}
    - {tool_calls: [{name: weather, input: {city: B}}]}
    - {text: "done"}
  expect:
    max_steps: 2
- id: cost
  messages: ["go"]
  mock: [{text: "done", usage: {input_tokens: 1000, output_tokens: 1000}}]
  expect:
    max_cost_usd: 1
- id: seconds
  messages: ["go"]
  mock: [{text: "a slow answer of many words", delay_ms: 200}]
  expect:
    max_seconds: 0.3
- id: command-ok
  messages: ["go"]
  mock: [{text: "done"}]
  expect:
    command:
      run: [sh, check.sh]
      files: {check.sh: "test -f check.sh && echo fine"}
- id: command-fails
  messages: ["go"]
  mock: [{text: "done"}]
  expect:
    command:
      run: "echo the answer is wrong >&2; exit 3"
- id: turn-fails
  messages: ["go"]
  mock: [{error: "the model is down"}]
- id: judge-ok
  messages: ["be polite"]
  mock: [{text: "Thank you for asking."}]
  expect:
    judge: {rubric: "The agent is polite.", threshold: 0.7}
- id: judge-low
  messages: ["be polite"]
  mock: [{text: "Go away."}]
  expect:
    judge: {rubric: "The agent is polite.", threshold: 0.95}
- id: two-turns
  messages: ["first", "second"]
  mock:
    - {text: "one"}
    - {text: "two"}
  expect:
    text: {contains: [one, two]}
    max_steps: 2
"#;

fn by_id<'a>(results: &'a Value, id: &str) -> &'a Value {
    results["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == format!("kinds/{id}"))
        .unwrap_or_else(|| panic!("no case {id} in {results}"))
}

fn first_failure(results: &Value, id: &str) -> String {
    let c = by_id(results, id);
    assert_eq!(c["result"], "failed", "{id}: {c}");
    let f = &c["failures"][0];
    format!(
        "{}: expected {}; {}",
        f["expectation"].as_str().unwrap(),
        f["expected"].as_str().unwrap(),
        f["actual"].as_str().unwrap()
    )
}

#[test]
fn every_expectation_kind_passes_and_fails_with_what_happened() {
    let dir = project(&[("kinds.yaml", KINDS)]);
    let judge = r#"[{"text": "{\"score\": 0.8, \"reason\": \"polite enough\"}"}]"#;
    let out = eve(
        dir.path(),
        &["eval", "--json", "--max-concurrency", "4"],
        &[
            ("EVE_JUDGE_MODEL", "mock/judge"),
            ("EVE_JUDGE_MOCK_SCRIPT", judge),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    for id in [
        "called-ok",
        "skill-ok",
        "approval-ok",
        "command-ok",
        "judge-ok",
        "two-turns",
    ] {
        let c = by_id(&r, id);
        assert_eq!(c["result"], "passed", "{id}: {c}");
    }
    assert_eq!(by_id(&r, "judge-ok")["judge_score"], 0.8);
    assert_eq!(by_id(&r, "called-ok")["steps"], 2);
    assert!(by_id(&r, "called-ok")["tokens"].as_u64().unwrap() > 0);
    let expect = [
        (
            "called-wrong-input",
            r#"called_tool: expected a call to `weather` with input containing {"city":"Paris"}; 0 matched; the tools called, in order: weather {"city":"Oslo"}"#,
        ),
        (
            "called-count",
            r#"called_tool: expected exactly 1 call(s) to `weather`; 2 matched; the tools called, in order: weather {"city":"Paris"}, weather {"city":"Rome"}"#,
        ),
        (
            "not-called",
            r#"not_called: expected no call to `weather`; it was called 1 time(s); the tools called, in order: weather {"city":"Lima"}"#,
        ),
        (
            "skill-missing",
            "loaded_skill: expected skill `haiku` to be loaded; no skill was loaded",
        ),
        (
            "text-contains",
            r#"text.contains: expected the reply to contain "sunny"; the reply was "It is raining.""#,
        ),
        (
            "text-not-contains",
            r#"text.not_contains: expected the reply not to contain "raining"; the reply was "It is raining.""#,
        ),
        (
            "text-regex",
            r#"text.regex: expected the reply to match /\d+ °C/; the reply was "no number here""#,
        ),
        (
            "approval-missing",
            r#"approval_requested: expected an approval to be requested; none was; the tools called, in order: weather {"city":"Paris"}"#,
        ),
        (
            "approval-unwanted",
            "approval_requested: expected no approval to be requested; approval was requested for: delete",
        ),
        (
            "unanswered-approval",
            "messages: expected an answer (`{approve: true}` or `{approve: false}`) before the next message; the turn was waiting for approval of delete; the rest of the case was not sent",
        ),
        (
            "steps",
            "max_steps: expected at most 2 step(s); the case took 3 steps",
        ),
        (
            "cost",
            "max_cost_usd: expected a cost of at most $1; the case cost $20.0000",
        ),
        (
            "seconds",
            "max_seconds: expected the case to finish within 0.3 s; it was still running and was stopped",
        ),
        (
            "command-fails",
            "command: expected the scorer `sh -c echo the answer is wrong >&2; exit 3` to exit 0; it exited 3: the answer is wrong",
        ),
        (
            "turn-fails",
            "turn: expected every turn to complete; a turn failed with model_error: ",
        ),
        (
            "judge-low",
            "judge: expected a score of at least 0.95 for: The agent is polite.; the judge gave 0.8: polite enough",
        ),
    ];
    for (id, want) in expect {
        let got = first_failure(&r, id);
        assert!(got.starts_with(want), "{id}:\n got  {got}\n want {want}");
    }
    assert!(first_failure(&r, "turn-fails").contains("the model is down"));
    // The denied call reached the model as denied, and no tool ran.
    let unwanted = by_id(&r, "approval-unwanted");
    assert_eq!(unwanted["calls"][0]["name"], "delete");
    assert_eq!(r["total"], 22);
    assert_eq!(r["passed"], 6);
    assert_eq!(r["failed"], 16);
    // The table says the same, with the first failure of each case.
    let table = eve(
        dir.path(),
        &["eval", "kinds/text-regex", "kinds/called-ok"],
        &[],
    );
    assert_eq!(table.status.code(), Some(1), "{}", text(&table));
    let t = String::from_utf8_lossy(&table.stdout);
    assert!(t.contains("case"), "{t}");
    assert!(t.contains("kinds/called-ok"), "{t}");
    assert!(t.contains("pass"), "{t}");
    assert!(t.contains("FAIL"), "{t}");
    assert!(t.contains("text.regex: expected the reply to match"), "{t}");
    assert!(t.contains("1/2 passed"), "{t}");
}

#[test]
fn malformed_cases_are_all_reported_with_file_and_line_and_exit_2() {
    let bad = "- messages: []\n  expect: {called_tool: {input: {a: 1}}}\n- id: x\n  messages: [hi]\n  expect:\n    text: {regex: '(('}\n    judge: {threshold: 2}\n    max_steps: many\n- id: x\n  messages: [hi]\n  mock: [{say: hi}]\n  exepct: {}\n";
    let dir = project(&[
        ("bad.yaml", bad),
        ("sub/shape.yaml", "just a string\n"),
        ("syntax.yaml", "- messages: [unclosed\n"),
        ("notes.json", "{}"),
    ]);
    let out = eve(dir.path(), &["eval"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    for want in [
        "E101",
        "E102",
        "E103",
        "E104",
        "E100",
        "E010",
        "W100",
        "W002",
        "E011",
        "evals/bad.yaml:1",
        "evals/bad.yaml:6",
        "evals/bad.yaml:9",
        "evals/bad.yaml:11",
        "evals/sub/shape.yaml:1",
        "evals/syntax.yaml",
        "evals/notes.json",
        "`called_tool` needs the tool's `name`",
        "is not a regular expression",
        "unknown mock step field `say`",
        "case id `bad/x` is also used at evals/bad.yaml:3",
        "did you mean `expect`?",
        "the eval cases have",
    ] {
        assert!(t.contains(want), "missing {want:?} in:\n{t}");
    }
}

#[test]
fn selection_list_and_unknown_ids() {
    let cases =
        "- id: a\n  tags: [smoke]\n  messages: [hi]\n- id: b\n  tags: [slow]\n  messages: [hi]\n";
    let dir = project(&[("one.yaml", cases), ("two.yaml", "messages: hello\n")]);
    let list = eve(dir.path(), &["eval", "--list"], &[]);
    assert!(list.status.success(), "{}", text(&list));
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        "one/a  [smoke]\none/b  [slow]\ntwo\n"
    );
    let tagged = eve(dir.path(), &["eval", "--list", "--tag", "slow"], &[]);
    assert_eq!(String::from_utf8_lossy(&tagged.stdout), "one/b  [slow]\n");
    let excluded = eve(
        dir.path(),
        &["eval", "--list", "one", "--exclude-tag", "slow"],
        &[],
    );
    assert_eq!(
        String::from_utf8_lossy(&excluded.stdout),
        "one/a  [smoke]\n"
    );
    let run = eve(dir.path(), &["eval", "one", "--json"], &[]);
    assert!(run.status.success(), "{}", text(&run));
    let r: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(r["passed"], 2);
    let unknown = eve(dir.path(), &["eval", "nope"], &[]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown).contains("no eval case `nope`"),
        "{}",
        text(&unknown)
    );
    let none = eve(
        tempfile::tempdir().unwrap().path(),
        &["eval", "-C", dir.path().join("agent").to_str().unwrap()],
        &[],
    );
    assert_eq!(none.status.code(), Some(2), "{}", text(&none));
}

#[test]
fn a_judged_case_without_a_judge_model_stops_the_suite() {
    let dir = project(&[(
        "j.yaml",
        "messages: [hi]\nmock: [{text: hello}]\nexpect:\n  judge: be polite\n",
    )]);
    let out = eve(dir.path(), &["eval"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("no judge model is set"),
        "{}",
        text(&out)
    );
}

#[test]
fn url_runs_the_cases_on_a_running_server() {
    let cases = "- id: tool\n  messages: ['/tool weather {\"city\": \"Paris\"}']\n  expect:\n    called_tool: {name: weather, input: {city: Paris}}\n    text: {contains: Sunny}\n- id: approve\n  messages: ['/tool delete {}', {approve: true}]\n  expect:\n    approval_requested: delete\n    text: deleted\n- id: wrong\n  messages: [hello]\n  expect:\n    text: {contains: goodbye}\n";
    let dir = project(&[("remote.yaml", cases)]);
    let build = eve(dir.path(), &["build"], &[]);
    assert!(build.status.success(), "{}", text(&build));
    let server = crate::serve::Server::start(dir.path(), &["serve", "--port", "0"], &[]);
    let url = format!("http://127.0.0.1:{}", server.port);
    let out = eve(dir.path(), &["eval", "--url", &url, "--json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let result = |id: &str| {
        r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == format!("remote/{id}"))
            .unwrap()
            .clone()
    };
    assert_eq!(result("tool")["result"], "passed", "{r}");
    assert_eq!(result("approve")["result"], "passed", "{r}");
    let wrong = result("wrong");
    assert_eq!(wrong["failures"][0]["expectation"], "text.contains");
    assert_eq!(
        wrong["failures"][0]["actual"],
        r#"the reply was "You said: hello""#
    );
    drop(server);
}

#[test]
fn every_template_passes_its_evals_offline_with_valid_junit() {
    for template in ["default", "coding", "support", "scheduled"] {
        let tmp = tempfile::tempdir().unwrap();
        let init = eve(tmp.path(), &["init", "demo", "--template", template], &[]);
        assert!(init.status.success(), "{template}: {}", text(&init));
        let demo = tmp.path().join("demo");
        let out = eve(&demo, &["eval", "--junit", "junit.xml", "--json"], &[]);
        assert_eq!(out.status.code(), Some(0), "{template}: {}", text(&out));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let total = r["total"].as_u64().unwrap();
        assert!(total >= 1, "{template}: {r}");
        assert_eq!(r["passed"].as_u64().unwrap(), total, "{template}: {r}");
        let xml = std::fs::read_to_string(demo.join("junit.xml")).unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        let suites: Vec<_> = root.children().filter(|n| n.is_element()).collect();
        assert_eq!(suites.len(), 1);
        let suite = suites[0];
        assert_eq!(suite.tag_name().name(), "testsuite");
        assert_eq!(suite.attribute("tests"), Some(total.to_string().as_str()));
        assert_eq!(suite.attribute("failures"), Some("0"));
        assert_eq!(suite.attribute("errors"), Some("0"));
        assert!(suite.attribute("time").unwrap().parse::<f64>().is_ok());
        let cases: Vec<_> = suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len() as u64, total);
        for c in &cases {
            assert!(c.attribute("name").is_some_and(|n| !n.is_empty()));
            assert!(c.attribute("classname").is_some());
            assert!(c.attribute("time").unwrap().parse::<f64>().is_ok());
            assert!(
                !c.children()
                    .any(|n| n.has_tag_name("failure") || n.has_tag_name("error"))
            );
        }
    }
}

#[test]
fn a_failing_case_is_a_junit_failure_with_the_expectation() {
    let dir = project(&[(
        "f.yaml",
        "- id: bad\n  messages: [hi]\n  mock: [{text: \"It rains <hard> & long\"}]\n  expect: {text: {contains: sunny}}\n- id: good\n  messages: [hi]\n",
    )]);
    let out = eve(dir.path(), &["eval", "--junit", "j.xml"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let xml = std::fs::read_to_string(dir.path().join("j.xml")).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("tests"), Some("2"));
    assert_eq!(suite.attribute("failures"), Some("1"));
    let bad = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("f/bad"))
        .unwrap();
    let failure = bad.children().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(failure.attribute("type"), Some("text.contains"));
    assert!(
        failure
            .text()
            .unwrap()
            .contains("the reply was \"It rains <hard> & long\""),
        "{xml}"
    );
}

/// A scripted OpenAI-compatible server on 127.0.0.1:0: every chat completion streams `answer`;
/// the request bodies are kept for the test to read.
fn judge_server(answer: &str) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": answer}}]});
    let done = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let body = format!("data: {chunk}\n\ndata: {done}\n\ndata: [DONE]\n\n");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut buf = vec![0u8; length];
            reader.read_exact(&mut buf).unwrap();
            kept.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf).into_owned());
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

#[test]
fn the_judge_is_a_real_model_over_http() {
    let cases = "- id: kind\n  messages: [hello]\n  mock: [{text: \"Thank you, happy to help.\"}]\n  expect:\n    judge: {rubric: \"Thanks the user.\", threshold: 0.5}\n- id: strict\n  messages: [hello]\n  mock: [{text: \"Thank you, happy to help.\"}]\n  expect:\n    judge: {rubric: \"Thanks the user.\", threshold: 0.9}\n";
    let dir = project(&[("judged.yaml", cases)]);
    let (port, seen) =
        judge_server("```json\n{\"score\": 0.75, \"reason\": \"it thanks the user\"}\n```");
    let base = format!("http://127.0.0.1:{port}/v1");
    let out = eve(
        dir.path(),
        &[
            "eval",
            "--json",
            "--judge-model",
            "openai-compatible/grader",
        ],
        &[("EVE_JUDGE_BASE_URL", &base)],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let case = |id: &str| {
        r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == format!("judged/{id}"))
            .unwrap()
            .clone()
    };
    assert_eq!(case("kind")["result"], "passed", "{r}");
    assert_eq!(case("kind")["judge_score"], 0.75);
    assert_eq!(
        case("strict")["failures"][0]["actual"],
        "the judge gave 0.75: it thanks the user"
    );
    let bodies = seen.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2);
    let sent: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(sent["model"], "grader");
    let all = sent["messages"].to_string();
    assert!(all.contains("Thanks the user."), "{all}");
    assert!(all.contains("USER: hello"), "{all}");
    assert!(all.contains("AGENT: Thank you, happy to help."), "{all}");
}

/// All cases of a run share one store and runtime, but not what they write: two cases adding a
/// note to the agent-wide memory scope each get the first note id (the other's note is not
/// there), and a file one case writes is not in the next case's workspace. Run one at a time,
/// so the second case starts after the first one wrote everything.
#[test]
fn cases_on_one_store_do_not_see_each_others_memory_or_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("agent");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("instructions.md"), "You are a test agent.\n").unwrap();
    std::fs::write(
        a.join("agent.yaml"),
        "memory:\n  scopes: [agent, session]\n",
    )
    .unwrap();
    let case = |id: &str, other: &str| {
        format!(
            "- id: {id}\n  messages:\n    - '/tool read_file {{\"path\": \"shared.txt\"}}'\n    - '/tool memory {{\"action\": \"add\", \"scope\": \"agent\", \"text\": \"the colour is {id}\"}}'\n    - '/tool write_file {{\"path\": \"shared.txt\", \"content\": \"written by {id}\"}}'\n  expect:\n    text:\n      contains: ['read_file returned', 'Saved as n1 in agent memory', 'write_file returned']\n      not_contains: ['written by {other}', 'n2']\n    command:\n      run: 'test \"$(cat shared.txt)\" = \"written by {id}\"'\n"
        )
    };
    let cases = format!("{}{}", case("first", "second"), case("second", "first"));
    std::fs::create_dir_all(dir.path().join("evals")).unwrap();
    std::fs::write(dir.path().join("evals/apart.yaml"), cases).unwrap();
    let out = eve(
        dir.path(),
        &["eval", "--max-concurrency", "1", "--json"],
        &[],
    );
    let r: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!(r["passed"], 2, "{r}");
    let sessions: Vec<&str> = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["session"].as_str().unwrap())
        .collect();
    assert_ne!(sessions[0], sessions[1], "{r}");
}
