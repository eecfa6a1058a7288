//! One large tool output on a model with a small window, through the real binary and a scripted
//! model server that refuses prompts longer than its window as providers do: the result is cut
//! to its share of the window (head and tail, with a note), the whole output is saved in the
//! session's workspace, and the turn completes.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support_dev::Project;
use crate::support_model::{ModelServer, context_too_long, text_stream, tool_call_stream};
use crate::support_run::wait_output;

const WINDOW: u64 = 32_000;

/// About 600 KB: a head line, 10,000 rows, a tail line.
const DUMP: &str = "cat >/dev/null\nawk 'BEGIN { print \"HEAD-MARKER\"; \
                    for (i = 0; i < 10000; i++) printf \"row %05d %s\\n\", i, \
                    \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; \
                    print \"TAIL-MARKER\" }'\n";

#[test]
fn a_large_tool_output_is_cut_to_the_window_and_kept_whole_in_the_workspace() {
    let p = Project::new();
    p.file(
        "agent.yaml",
        &format!("default_tools: false\ncontext_window: {WINDOW}\n"),
    );
    p.file("sandbox/sandbox.yaml", "provider: host\n");
    p.tool(
        "dump",
        "description: Prints a long report.\neffect: read\ninput:\n  type: object",
        DUMP,
    );
    p.build();
    let server = ModelServer::start(|n, body| {
        // Four characters a token, as a provider's tokenizer roughly counts.
        if body.len() as u64 > WINDOW * 4 {
            return context_too_long(WINDOW);
        }
        if n == 0 {
            tool_call_stream("call_big", "dump", "{}")
        } else {
            text_stream("done", true)
        }
    });
    let mut cmd = p.eve(&["run", "show me the report"]);
    cmd.env("EVE_MODEL", "openai-compatible/test-model")
        .env("EVE_BASE_URL", &server.base)
        .env("EVE_API_KEY", "sk-test")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = wait_output(cmd.spawn().unwrap(), Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "the turn completes: {}", out.stderr);
    assert!(out.stdout.contains("done"), "{}", out.stdout);

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "no overflow, no retry");
    let second: Value = serde_json::from_str(&requests[1]).unwrap();
    let seen = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool result")["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(seen.starts_with("HEAD-MARKER\nrow 00000 "), "the head");
    assert!(seen.ends_with("TAIL-MARKER"), "the tail");
    assert!(
        seen.len() as u64 <= WINDOW / 4 * 4 + 200,
        "a quarter of the window: {} bytes",
        seen.len()
    );
    let note = seen
        .lines()
        .find(|l| l.starts_with("[eve cut "))
        .unwrap_or_else(|| panic!("a note says what was cut"));
    assert!(
        note.contains(".eve/outputs/call_big.txt") && note.contains("32000 tokens"),
        "{note}"
    );

    let session = p
        .db()
        .query_row("SELECT id FROM sessions", [], |r| r.get::<_, String>(0))
        .unwrap();
    let whole = std::fs::read_to_string(
        p.root()
            .join(".eve/sandboxes")
            .join(&session)
            .join(".eve/outputs/call_big.txt"),
    )
    .expect("the whole output is in the workspace");
    assert!(whole.len() > 590_000, "{}", whole.len());
    assert!(whole.starts_with("HEAD-MARKER\n") && whole.ends_with("TAIL-MARKER"));
    assert_eq!(whole.lines().count(), 10_002);
}
