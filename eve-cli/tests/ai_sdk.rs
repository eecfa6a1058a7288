//! An AI SDK client against the real `eve serve`: the npm `ai` package's `DefaultChatTransport`
//! (what `useChat` uses) posts to `/eve/v1/chat` and `readUIMessageStream` assembles the reply.
//! Two turns of one chat: text, then a tool call with its output.
//!
//! Needs Node and `target/test-node` from `scripts/setup-test-deps.sh` (which `scripts/test.sh`
//! runs); the test fails saying so when they are missing.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::support_dev::{Project, Server};
use super::support_run::wait_output;

fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-node")
}

#[test]
fn the_ai_sdk_reads_a_full_turn_from_eve_serve() {
    let dir = node_dir();
    assert!(
        dir.join("node_modules/ai/package.json").is_file(),
        "the AI SDK is not installed in {}: run scripts/setup-test-deps.sh first",
        dir.display()
    );
    // The script must sit next to node_modules for `import 'ai'` to resolve.
    let script = dir.join("read-chat.mjs");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ai-sdk/read-chat.mjs"),
        &script,
    )
    .unwrap();

    let project = Project::new();
    project.tool(
        "get_weather",
        "description: Get the weather for a city.\neffect: read\ninput:\n  type: object\n  \
         properties:\n    city: {type: string}\n  required: [city]",
        "cat >/dev/null\necho '{\"city\":\"Paris\",\"sky\":\"clear\"}'\n",
    );
    project.build();
    let server = Server::start(project.eve(&["serve", "--port", "0"]));
    let base = format!("http://127.0.0.1:{}", server.port);

    let child = Command::new("node")
        .arg(&script)
        .args([
            &base,
            "chat-ai-sdk",
            "hello from the AI SDK",
            "/tool get_weather {\"city\": \"Paris\"}",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): install Node 20 or newer"));
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "node failed:\n{}", out.stderr);
    let turns: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(turns.len(), 2, "{}", out.stdout);

    // Turn 1: the assembled assistant message holds the streamed text, complete.
    let first = &turns[0];
    assert_eq!(first["role"], "assistant");
    let texts: Vec<&Value> = first["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .collect();
    assert_eq!(texts.len(), 1, "{first}");
    assert_eq!(texts[0]["text"], "You said: hello from the AI SDK");
    assert_eq!(texts[0]["state"], "done");

    // Turn 2: a tool part with its input and output, then the model's text about it.
    let second = &turns[1];
    let parts = second["parts"].as_array().unwrap();
    let tool = parts
        .iter()
        .find(|p| {
            p["type"] == "tool-get_weather"
                || (p["type"] == "dynamic-tool" && p["toolName"] == "get_weather")
        })
        .unwrap_or_else(|| panic!("no tool part: {second}"));
    assert_eq!(tool["state"], "output-available", "{tool}");
    assert_eq!(tool["input"]["city"], "Paris");
    assert_eq!(tool["output"]["sky"], "clear", "{tool}");
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert!(text.contains("get_weather returned:"), "{second}");

    // Both turns went to one session, derived from the chat id.
    assert_eq!(
        project.count("SELECT COUNT(*) FROM sessions"),
        1,
        "one chat, one session"
    );
    assert_eq!(project.count("SELECT turn_count FROM sessions"), 2);
}
