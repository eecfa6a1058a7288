//! MCP servers that misbehave, as users bring them: a real stdio server
//! (`tests/fixtures/hostile_mcp/server.py`, standard-library Python) whose tools write bytes that
//! are not UTF-8 to stderr, flood stderr without a newline, print garbage on stdout, answer with a
//! result far over the output cap, or exit in the middle of a call. Each call ends with the answer
//! or a clear error within its timeout, and the connection keeps serving the next call.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Approval, Connection, ToolFilter, Transport};
use eve_runtime::mcp::{McpManager, Supervision};
use eve_runtime::tools::ToolResult;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn hostile(timeout_ms: u64) -> Connection {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_mcp/server.py");
    Connection {
        name: "h".to_owned(),
        source: "connections/h.yaml".to_owned(),
        transport: Transport::Stdio {
            command: "python3".to_owned(),
            args: vec![script.to_string_lossy().into_owned()],
            env: BTreeMap::new(),
        },
        tools: ToolFilter::default(),
        approval: Approval::Never,
        timeout_ms,
        start_timeout_ms: Some(10_000),
        oauth: None,
        credentials: Default::default(),
    }
}

fn manager(timeout_ms: u64) -> McpManager {
    let path = std::env::var("PATH").unwrap_or_default();
    McpManager::with_supervision(
        &[hostile(timeout_ms)],
        Arc::new(move |name: &str| (name == "PATH").then(|| path.clone())),
        std::env::temp_dir(),
        Supervision {
            backoff_base: Duration::from_millis(20),
            liveness_timeout: Duration::from_millis(500),
            ..Supervision::default()
        },
    )
}

async fn call(mcp: &McpManager, tool: &str, input: Value) -> ToolResult {
    mcp.call(
        &format!("h__{tool}"),
        input,
        CancellationToken::new(),
        eve_runtime::mcp::CallScope::default(),
    )
    .await
}

fn text(result: &ToolResult) -> String {
    assert!(result.ok, "the call failed: {result:?}");
    match &result.output {
        Value::String(s) => s.clone(),
        other => other["result"]
            .as_str()
            .map_or_else(|| other.to_string(), str::to_owned),
    }
}

#[tokio::test]
async fn stderr_that_is_not_utf8_is_still_drained_so_the_server_never_blocks() {
    let mcp = manager(5_000);
    // Before the fix the stderr reader stopped at the first bad byte; the ~400 KB after it filled
    // the pipe and the server blocked writing its log until the call timed out.
    for round in 0..3 {
        let started = Instant::now();
        let result = call(&mcp, "babble", json!({})).await;
        assert_eq!(text(&result), "babbled", "round {round}");
        assert!(started.elapsed() < Duration::from_secs(4), "round {round}");
    }
    assert_eq!(text(&call(&mcp, "ok", json!({})).await), "fine");
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_stderr_flood_without_newlines_is_drained_and_its_last_words_are_kept_short() {
    let mcp = manager(20_000);
    let result = call(&mcp, "flood", json!({"mib": 64})).await;
    assert_eq!(text(&result), "flooded");
    // The tail a later error quotes holds a bounded excerpt, not 64 MiB.
    let died = call(&mcp, "die", json!({})).await;
    assert!(!died.ok, "{died:?}");
    let error = died.error.clone().unwrap_or_default();
    assert!(error.len() < 16 * 1024, "{} bytes", error.len());
    assert!(error.contains("exited"), "{error}");
    assert!(error.contains("dying now"), "{error}");
    mcp.shutdown().await;
}

#[tokio::test]
async fn garbage_on_stdout_is_skipped_and_the_answer_still_arrives() {
    let mcp = manager(5_000);
    assert_eq!(
        text(&call(&mcp, "garbage", json!({})).await),
        "after garbage"
    );
    assert_eq!(text(&call(&mcp, "ok", json!({})).await), "fine");
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_huge_result_is_cut_at_the_output_cap_and_says_so() {
    let mcp = manager(10_000);
    let result = call(&mcp, "huge", json!({"bytes": 8 * 1024 * 1024})).await;
    let out = text(&result);
    assert!(out.len() < 2 * 1024 * 1024, "{} bytes", out.len());
    assert!(
        out.contains("[output truncated at"),
        "{}",
        &out[out.len() - 80..]
    );
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_server_that_exits_mid_call_fails_that_call_and_serves_the_next() {
    let mcp = manager(5_000);
    let died = call(&mcp, "die", json!({})).await;
    assert!(!died.ok, "{died:?}");
    let error = died.error.clone().unwrap_or_default();
    assert!(error.contains("exited"), "{error}");
    assert_eq!(text(&call(&mcp, "ok", json!({})).await), "fine");
    mcp.shutdown().await;
}
