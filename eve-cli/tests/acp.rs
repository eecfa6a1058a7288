//! `eve acp` framing: malformed and unexpected frames on stdin get coded JSON-RPC errors (parse
//! error, invalid request, method not found, invalid params, resource not found), never a panic;
//! the connection keeps serving after them; stdout holds nothing but frames; the process ends
//! cleanly when stdin closes. The protocol itself is driven by the official client library in
//! `scripts/test-acp.sh`.

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::support_dev::Project;
use super::support_run::wait_output;

/// Runs `eve acp` in `project` with `input` on stdin (then closed): exit code, stdout frames,
/// stderr.
fn acp(project: &Project, input: &[u8]) -> (Option<i32>, Vec<Value>, String) {
    let mut child = project
        .eve(&["acp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    let frames = out
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}\n{}", out.stderr))
        })
        .collect();
    (out.code, frames, out.stderr)
}

#[test]
fn malformed_frames_get_json_rpc_errors_and_the_connection_goes_on() {
    let project = Project::new();
    project.build();
    let mut input: Vec<u8> = Vec::new();
    let mut line = |s: &[u8]| {
        input.extend_from_slice(s);
        input.push(b'\n');
    };
    line(b"{not json");
    line(b"[]");
    line(b"");
    line(br#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}"#);
    line(br#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"one"}}"#);
    line(br#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":7,"clientCapabilities":{}}}"#);
    line(br#"{"jsonrpc":"2.0","id":4,"method":"session/fly","params":{}}"#);
    line(br#"{"jsonrpc":"2.0","id":5,"method":"session/new","params":{"mcpServers":[]}}"#);
    line(br#"{"jsonrpc":"2.0","id":6,"method":"session/new","params":{"cwd":"rel/dir","mcpServers":[]}}"#);
    line(br#"{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}"#);
    line(br#"{"jsonrpc":"2.0","id":8,"method":"session/load","params":{"sessionId":"nope","cwd":"/tmp","mcpServers":[]}}"#);
    line(br#"{"jsonrpc":"2.0","id":99,"result":{}}"#);
    line(br#"{"jsonrpc":"1.0","id":10,"method":"initialize","params":{}}"#);
    line(br#"{"jsonrpc":"2.0","method":"session/unknown","params":{}}"#);
    line(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}"#);
    line(br#"{"jsonrpc":"2.0","id":11,"method":"session/new","params":"cwd"}"#);
    line(br#"{"jsonrpc":"2.0","id":true,"method":"initialize"}"#);
    line(&[0xff, 0xfe]);
    line(br#"{"jsonrpc":"2.0","id":"last","method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}"#);
    let (code, frames, stderr) = acp(&project, &input);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let mut by_id: HashMap<String, &Value> = HashMap::new();
    let mut unnamed: Vec<i64> = Vec::new();
    for frame in &frames {
        assert_eq!(frame["jsonrpc"], "2.0", "{frame}");
        match &frame["id"] {
            Value::Null => unnamed.push(frame["error"]["code"].as_i64().unwrap()),
            id => {
                by_id.insert(id.to_string().trim_matches('"').to_owned(), frame);
            }
        }
    }
    let code_of = |id: &str| by_id[id]["error"]["code"].as_i64();
    // Not JSON, a batch, a bad id, not UTF-8: answered with id null.
    unnamed.sort_unstable();
    assert_eq!(unnamed, vec![-32700, -32700, -32600, -32600], "{frames:?}");
    assert_eq!(code_of("1"), Some(-32600), "before initialize: {frames:?}");
    assert_eq!(code_of("2"), Some(-32602));
    // A version it does not speak is answered with the one it does.
    assert_eq!(by_id["3"]["result"]["protocolVersion"], 1);
    assert_eq!(
        by_id["3"]["result"]["agentCapabilities"]["loadSession"],
        true
    );
    assert_eq!(code_of("4"), Some(-32601));
    assert_eq!(code_of("5"), Some(-32602));
    assert_eq!(code_of("6"), Some(-32602));
    assert_eq!(code_of("7"), Some(-32002));
    assert_eq!(code_of("8"), Some(-32002));
    assert!(
        !by_id.contains_key("99"),
        "a stray response is not answered"
    );
    assert_eq!(code_of("10"), Some(-32600));
    assert_eq!(code_of("11"), Some(-32600));
    // After all that, the connection still serves.
    assert!(
        by_id["last"]["result"]["sessionId"].as_str().is_some(),
        "{frames:?}"
    );
    // Notifications are never answered: every frame is one of the above.
    assert_eq!(frames.len(), 4 + 11, "{frames:?}");
}

#[test]
fn a_prompt_with_content_it_does_not_take_is_invalid_params() {
    let project = Project::new();
    project.build();
    let mut child = project
        .eve(&["acp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let mut call = |frame: &str| -> Value {
        stdin.write_all(frame.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap()
    };
    call(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#);
    let created = call(
        r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}"#,
    );
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let image = call(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{{"sessionId":"{session}","prompt":[{{"type":"image","data":"AA==","mimeType":"image/png"}}]}}}}"#
    ));
    assert_eq!(image["error"]["code"], -32602, "{image}");
    assert!(
        image["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt[0]"),
        "{image}"
    );
    let empty = call(&format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"{session}","prompt":"hi"}}}}"#
    ));
    assert_eq!(empty["error"]["code"], -32602, "{empty}");
    drop(stdin);
    // Stdin closed: the process ends by itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "eve acp did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}
