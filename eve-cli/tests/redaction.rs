//! Secrets stay with the runtime: the real `eve serve`, an OpenAI-compatible model server scripted
//! here, and five secrets used where tools and servers can leak them: a failing `http:` tool's URL,
//! an `http:` tool's header echoed back by the server, a script tool's `env:` value printed on
//! stderr, a `run:` command line, an MCP server's `env`, plus the model's key echoed in the model
//! server's error. None of the values may appear in the store (every file under `.eve/`), the
//! session's stream, the server's log or what the model is sent; each shows up as `${NAME}` where it
//! would have been, which shows the test would see a leak.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support_dev::{Project, Server, eventually};

const SECRETS: [(&str, &str); 5] = [
    ("URL_SECRET", "url-secret-8c1f0e9a"),
    ("HEADER_SECRET", "hdr-secret-4b7d22e1"),
    ("ARGV_SECRET", "argv-secret-91ac33f0"),
    ("MCP_SECRET", "mcp-secret-5e6f7a8b"),
    ("OPENAI_API_KEY", "sk-model-key-0d9e8f7a"),
];

/// One HTTP request as the scripted server saw it.
struct Seen {
    path: String,
    head: String,
    body: String,
}

/// Reads one request (head and `Content-Length` body) from `stream`.
fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    Some(Seen {
        path,
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn sse(chunks: &[Value]) -> String {
    let mut body: String = chunks
        .iter()
        .map(|c| {
            let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                "created": 1_700_000_000, "model": "test-model",
                "choices": [{"index": 0, "delta": c, "finish_reason": null}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    let end = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "test-model", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
    body.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
    body
}

/// The model server and the tools' echo endpoint: the first completion calls every tool at once;
/// the second answers 401 with the key it was sent, as providers do. `/echo` answers 502 with the
/// request's headers.
fn serve_scripted(listener: TcpListener, requests: Arc<Mutex<Vec<String>>>) {
    let calls = [
        ("c1", "fetch", "{}"),
        ("c2", "echo_header", "{}"),
        ("c3", "show_env", "{}"),
        ("c4", "argv_secret", "{}"),
        ("c5", "vault__getenv", r#"{"name": "MCP_TOKEN"}"#),
    ];
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let Some(seen) = read_request(&mut stream) else {
            continue;
        };
        let (status, content_type, body) = if seen.path.ends_with("/chat/completions") {
            let n = {
                let mut requests = requests.lock().unwrap();
                requests.push(seen.body.clone());
                requests.len()
            };
            if n == 1 {
                let chunks: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (id, name, args))| {
                        json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                            "function": {"name": name, "arguments": args}}]})
                    })
                    .collect();
                (200, "text/event-stream", sse(&chunks))
            } else {
                let key = seen
                    .head
                    .lines()
                    .find_map(|l| l.strip_prefix("authorization: Bearer "))
                    .or_else(|| {
                        seen.head
                            .lines()
                            .find_map(|l| l.strip_prefix("Authorization: Bearer "))
                    })
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                let error = json!({"error": {"message": format!("Incorrect API key provided: {key}"),
                    "type": "invalid_request_error", "code": "invalid_api_key"}});
                (401, "application/json", error.to_string())
            }
        } else if seen.path.starts_with("/echo") {
            (
                502,
                "text/plain",
                format!("upstream refused:\n{}", seen.head),
            )
        } else {
            (404, "text/plain", "not found".to_owned())
        };
        let reply = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes());
    }
}

/// Every file under `dir`, recursively, as bytes.
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&path, out);
        } else if kind.is_file() {
            out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn secrets_never_reach_the_store_the_stream_the_log_or_the_model() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || serve_scripted(listener, seen));

    let project = Project::new();
    project
        .file("instructions.md", "You are a test agent.\n")
        .file("agent.yaml", "default_tools: false\n")
        .file("sandbox/sandbox.yaml", "provider: host\n")
        .file(
            "tools/fetch.yaml",
            &format!(
                "description: Fetch.\neffect: read\nhttp:\n  url: http://127.0.0.1:{closed}/v1?key=${{URL_SECRET}}\n"
            ),
        )
        .file(
            "tools/echo_header.yaml",
            &format!(
                "description: Echo.\neffect: read\nhttp:\n  url: http://127.0.0.1:{port}/echo\n  headers:\n    X-Api-Key: ${{HEADER_SECRET}}\n"
            ),
        )
        .tool(
            "show_env",
            "description: Prints its token.\neffect: read\nenv: [ARGV_SECRET]",
            "cat >/dev/null\necho \"the token is $ARGV_SECRET\" >&2\nexit 3\n",
        )
        .file(
            "tools/argv_secret.yaml",
            "description: Puts a secret on its command line.\neffect: read\nrun: [echo, \"${ARGV_SECRET}\"]\n",
        )
        .file(
            "connections/vault.yaml",
            &format!(
                "command: sh\nargs: [-c, 'echo \"token $MCP_TOKEN\" >&2; exec \"$0\" \"$@\"', {}, {}]\nenv: {{MCP_TOKEN: \"${{MCP_SECRET}}\"}}\n",
                crate::support_dev::test_python().display(),
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../eve-runtime/tests/fixtures/mcp/server.py")
                    .display()
            ),
        );
    project.build();

    let mut cmd = project.eve(&["serve", "--port", "0"]);
    cmd.env("EVE_MODEL", "openai/test-model")
        .env("EVE_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("EVE_LOG", "eve_runtime=debug");
    for (name, value) in SECRETS {
        cmd.env(name, value);
    }
    let server = Server::start(cmd);

    let (status, body) = server.post("/eve/v1/session", &json!({"message": "use every tool"}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let events = eventually(Duration::from_secs(60), "the turn to fail", || {
        let events = server.stream(&id, "?follow=false");
        events
            .iter()
            .any(|e| e["type"] == "turn.failed")
            .then_some(events)
    });
    let stream = serde_json::to_string(&events).unwrap();
    let log = server.stderr().join("\n");
    server.stop();
    let mut files = Vec::new();
    files_under(&project.root().join(".eve"), &mut files);
    let model = requests.lock().unwrap().clone();
    assert_eq!(model.len(), 2, "two completions: {model:?}");

    for (name, value) in SECRETS {
        assert!(!stream.contains(value), "{name} in the stream: {stream}");
        assert!(!log.contains(value), "{name} in the log:\n{log}");
        for body in &model {
            assert!(!body.contains(value), "{name} sent to the model: {body}");
        }
        for (path, bytes) in &files {
            assert!(!contains(bytes, value), "{name} in {}", path.display());
        }
    }
    // Where each value would have been, its name is: the results, the error and the log held them.
    let results = &model[1];
    for name in ["URL_SECRET", "HEADER_SECRET", "ARGV_SECRET", "MCP_SECRET"] {
        assert!(
            results.contains(&format!("${{{name}}}")),
            "the model saw no redacted {name}: {results}"
        );
    }
    assert!(
        results.contains("the token is ${ARGV_SECRET}"),
        "the script's stderr reached the model redacted: {results}"
    );
    assert!(
        results.contains("would put a secret on a command line"),
        "the `run:` command line with a secret was refused, saying why: {results}"
    );
    assert!(
        stream.contains("Incorrect API key provided: ${OPENAI_API_KEY}"),
        "the model's error is on the stream, redacted: {stream}"
    );
    assert!(log.contains("token ${MCP_SECRET}"), "{log}");
    let read: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "action.result")
        .cloned()
        .collect();
    assert_eq!(read.len(), 5, "every call settled: {read:?}");
}
