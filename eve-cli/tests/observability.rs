//! Usage, cost and logs through the real binary: `eve run` against a scripted OpenAI-compatible
//! server that reports usage (and one that reports none) prints the usage line with the cost
//! from `agent.yaml` `prices:`; `eve sessions show` gives the turn's and the session's cost;
//! `eve dev` with `EVE_LOG_FORMAT=json` logs JSON lines whose turn lines carry the session, and
//! `eve logs --session` (and `--follow`) reads them back from `.eve/logs/dev.log`; `eve serve`
//! with `EVE_METRICS_ADDR` serves `/metrics` on that address too, without the API's auth.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support_dev::{Project, Server, eventually, http};
use crate::support_model::{ModelServer, text_stream};
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

#[test]
fn the_usage_line_and_sessions_show_give_tokens_and_cost() {
    // The server reports 20 prompt and 5 completion tokens on the first call, nothing after.
    let server = ModelServer::start(|n, _| text_stream("Hi there.", n == 0));
    let p = Project::new();
    p.file(
        "agent.yaml",
        "prices:\n  openai-compatible/test-model: {input: 1000, output: 2000, cached: 100}\n",
    );
    p.build();

    let out = run(&p, &server.base, &["run", "--usage", "hello"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "Hi there.");
    // 20 × $1000 + 5 × $2000 per million tokens.
    assert!(
        out.stderr
            .lines()
            .any(|l| l == "usage: 20 in · 5 out · reported · $0.0300"),
        "{}",
        out.stderr
    );

    // A second turn on a server that reports nothing: estimated, and still priced.
    let out = run(&p, &server.base, &["run", "--usage", "--last", "again"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("usage: "))
        .unwrap_or_else(|| panic!("no usage line: {}", out.stderr));
    assert!(line.contains(" · estimated · $"), "{line}");

    let show = p
        .eve(&["sessions", "show", "--last", "--json"])
        .output()
        .unwrap();
    assert!(show.status.success());
    let report: Value = serde_json::from_slice(&show.stdout).unwrap();
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{report:#}");
    assert_eq!(turns[0]["usage"]["inputTokens"], 20);
    assert_eq!(turns[0]["usage"]["outputTokens"], 5);
    let first = turns[0]["costUsd"].as_f64().unwrap();
    assert!((first - 0.03).abs() < 1e-9, "{first}");
    let second = turns[1]["costUsd"].as_f64().unwrap();
    assert!(second > 0.0);
    let total = report["session"]["costUsd"].as_f64().unwrap();
    assert!((total - (first + second)).abs() < 1e-9, "{report:#}");

    let text = p.eve(&["sessions", "show", "--last"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.lines().any(|l| l == "turn 0: 20 in · 5 out · $0.0300"),
        "{text}"
    );
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.ends_with(&format!("${total:.4}"))),
        "{text}"
    );

    // A model nobody prices has no cost: the line says what is known.
    let p = Project::new();
    p.build();
    let out = run(&p, &server.base, &["run", "--usage", "hello"]);
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("usage: "))
        .unwrap_or_else(|| panic!("no usage line: {}", out.stderr));
    assert!(!line.contains('$'), "{line}");
    // Not a terminal, not asked: no usage line (scripts read `--json`).
    let out = run(&p, &server.base, &["run", "hello"]);
    assert!(!out.stderr.contains("usage: "), "{}", out.stderr);
}

/// The JSON log lines `eve dev` wrote to `.eve/logs/dev.log`, through `eve logs`.
fn logs(p: &Project, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["logs", "--json"];
    all.extend_from_slice(args);
    let out = p.eve(&all).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn session_of(line: &Value) -> Option<&str> {
    line["spans"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "turn")?["session"]
        .as_str()
}

#[test]
fn json_logs_carry_the_session_and_eve_logs_reads_one_sessions_lines() {
    let p = Project::new();
    p.build();
    let mut cmd = p.eve(&["dev", "--port", "0"]);
    cmd.env("EVE_LOG", "warn,eve_runtime::engine=debug")
        .env("EVE_LOG_FORMAT", "json");
    let mut dev = Server::start(cmd);

    let mut ids = Vec::new();
    for message in ["first", "second"] {
        let (status, body) = dev.post("/eve/v1/session", &json!({"message": message}));
        assert_eq!(status, 202, "{body}");
        let id = body["sessionId"].as_str().unwrap().to_owned();
        let events = dev.stream(&id, "");
        assert!(events.iter().any(|e| e["type"] == "turn.completed"));
        ids.push(id);
    }
    // Standard error holds JSON lines, the turn's with its session and turn.
    let line = dev.wait_line(Duration::from_secs(10), |l| l.contains(&ids[0]));
    let parsed: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(session_of(&parsed), Some(ids[0].as_str()), "{parsed}");
    assert!(parsed["spans"][0]["turn"].as_str().is_some(), "{parsed}");

    // The file has every line; `--session` keeps one session's, and only those.
    let all = logs(&p, &[]);
    assert!(all.iter().any(|l| session_of(l) == Some(&ids[0])));
    assert!(all.iter().any(|l| session_of(l) == Some(&ids[1])));
    let first = logs(&p, &["--session", &ids[0]]);
    assert!(!first.is_empty());
    assert!(
        first.iter().all(|l| session_of(l) == Some(ids[0].as_str())),
        "{first:#?}"
    );
    // As text: the session and turn close each line.
    let text = p.eve(&["logs", "-s", &ids[1]]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.lines()
            .all(|l| l.ends_with(&format!("[{} turn_0]", ids[1])))
            && !text.is_empty(),
        "{text}"
    );

    // `--follow` prints what is written after it started.
    let mut follow = p
        .eve(&["logs", "--follow", "--json", "--session", &ids[1]])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (status, _) = dev.post(
        &format!("/eve/v1/session/{}", ids[1]),
        &json!({"message": "third"}),
    );
    assert_eq!(status, 202);
    let mut seen = Vec::new();
    eventually(Duration::from_secs(20), "a line of the new turn", || {
        while let Ok(line) = rx.try_recv() {
            seen.push(serde_json::from_str::<Value>(&line).unwrap());
        }
        seen.iter()
            .any(|l| l["spans"][0]["turn"] == "turn_1")
            .then_some(())
    });
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(seen.iter().all(|l| session_of(l) == Some(ids[1].as_str())));
    dev.kill();

    // Without a log there is nothing to read, and it says where it looked.
    let other = Project::new();
    let out = other.eve(&["logs"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("logs/dev.log"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `EVE_METRICS_ADDR`: `eve serve` answers `GET /metrics` on an address of its own, where a
/// scraper needs no token, and only that there; the API's `/metrics` still wants an operator.
#[test]
fn metrics_on_their_own_address() {
    let p = Project::new();
    p.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${OPS_TOKEN}\"]\n\
         operators:\n  principals: [\"token:OPS_TOKEN\"]\n",
    );
    p.build();
    let mut cmd = p.eve(&["serve", "--port", "0"]);
    cmd.env("OPS_TOKEN", "ops-0123456789")
        .env("EVE_METRICS_ADDR", "127.0.0.1:0");
    let mut serve = Server::start(cmd);
    let line = serve.wait_line(Duration::from_secs(10), |l| {
        l.starts_with("eve metrics on http://")
    });
    let port: u16 = line
        .trim_end_matches("/metrics")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(port, serve.port);

    let (status, body) = http(
        serve.port,
        "POST",
        "/eve/v1/session",
        Some(&json!({"message": "hello"})),
        Some("ops-0123456789"),
    );
    assert_eq!(status, 202, "{body}");
    eventually(Duration::from_secs(20), "the turn counted", || {
        let (status, text) = http(port, "GET", "/metrics", None, None);
        assert_eq!(status, 200, "{text}");
        text.contains("eve_turns_completed_total 1").then_some(())
    });
    // Only /metrics is there: not the API.
    let (status, _) = http(port, "GET", "/eve/v1/health", None, None);
    assert_eq!(status, 404);
    let (status, _) = http(port, "POST", "/eve/v1/session", Some(&json!({})), None);
    assert!(status == 404 || status == 405, "{status}");
    // The API's own /metrics keeps its auth.
    let (status, _) = http(serve.port, "GET", "/metrics", None, None);
    assert_eq!(status, 401);
    let (status, text) = http(serve.port, "GET", "/metrics", None, Some("ops-0123456789"));
    assert_eq!(status, 200, "{text}");
    serve.kill();
}
