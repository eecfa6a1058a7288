//! The MCP channel (`channels/mcp.yaml`) on the real server on `127.0.0.1:0`, over real SQLite,
//! with the `mock/echo` model and tools as real processes in the sandbox.
//!
//! The official Python `mcp` client drives it end to end (`tests/fixtures/mcp/channel_client.py`):
//! initialize, ping, the tools, a run with a tool call, a follow-up whose approval is surfaced in
//! the state and answered through `agent_update`, cancellation. The attacks are tried with raw
//! JSON-RPC: a stranger (another token) reaching an invocation, a DNS-rebinding page; each has a
//! twin with the protection off (the test-only switches) that sees the attack succeed. Bodies are
//! bounded and bad JSON-RPC gets errors.

use std::sync::Arc;
use std::time::Duration;

use eve_runtime::store::SessionFilter;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

/// The venv's python with the `mcp` package (`scripts/setup-test-deps.sh`), or `EVE_TEST_PYTHON`.
fn python() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("EVE_TEST_PYTHON") {
        return path.into();
    }
    let venv =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python");
    assert!(
        venv.exists(),
        "the MCP channel test needs a Python venv with the `mcp` package at {}: run \
         `scripts/setup-test-deps.sh` (or set EVE_TEST_PYTHON)",
        venv.display()
    );
    venv
}

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

/// The standard agent (`get_weather`, `refund_charge` that needs approval, `slow`) with the MCP
/// channel: bearer tokens for alice and bob, or no authentication.
fn agent(auth: &str) -> AgentDir {
    let agent = AgentDir::standard();
    agent.file("channels/mcp.yaml", auth);
    agent
}

const TOKENS: &str = "auth:\n  type: bearer\n  tokens:\n    - ${ALICE_TOKEN}\n    - ${BOB_TOKEN}\n";

async fn start(
    auth: &str,
    tweak: impl FnOnce(&mut eve_runtime::server::ServerConfig),
) -> TestServer {
    TestServer::start_with(
        agent(auth),
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
        |mut c| {
            tweak(&mut c);
            c
        },
    )
    .await
}

/// Sends one JSON-RPC message to the channel with extra `headers`; the status and the JSON
/// body (the first `data:` of an event stream).
async fn send(
    server: &TestServer,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let mut request = server
        .http
        .post(server.url("/eve/v1/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.body(body).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .next()
            .unwrap_or(Value::String(text.clone()))
    });
    (status, json)
}

async fn rpc(
    server: &TestServer,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    send(server, &headers, body.to_string()).await
}

/// `tools/call`; the result (`isError`, `structuredContent`).
async fn tool(server: &TestServer, token: Option<&str>, name: &str, args: Value) -> Value {
    let (status, body) = rpc(
        server,
        token,
        "tools/call",
        json!({"name": name, "arguments": args}),
    )
    .await;
    assert_eq!(status, 200, "{name}: {body}");
    body["result"].clone()
}

async fn sessions(server: &TestServer) -> usize {
    server
        .runtime
        .sessions(&SessionFilter::default())
        .await
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_mcp_client_drives_the_channel() {
    let server = start(TOKENS, |_| {}).await;
    let url = server.url("/eve/v1/mcp");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/channel_client.py");
    let started = std::time::Instant::now();
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(python())
            .arg(&script)
            .arg(&url)
            .arg(ALICE)
            .output(),
    )
    .await
    .expect("the Python client hung")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stdout}\n{stderr}"
    );
    eprintln!("python mcp client: {:.1}s", started.elapsed().as_secs_f64());
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(
        summary["tools"],
        json!(["agent_start", "agent_get", "agent_update", "agent_cancel"])
    );
    assert_eq!(summary["missing"]["code"], "not_found");
    assert_eq!(summary["request"]["action"]["toolName"], "refund_charge");
    let id = summary["invocation"].as_str().unwrap().to_owned();

    // The invocation is an eve session owned by alice; alice answered its approval.
    let record = server.runtime.session(&id).await.unwrap().unwrap();
    assert_eq!(record.owner.as_deref(), Some("token:ALICE_TOKEN"));
    let request = summary["request"]["requestId"].as_str().unwrap();
    let stored = server
        .runtime
        .store()
        .input_request(request)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status.to_string(), "approved");
    assert_eq!(stored.responder.as_deref(), Some("token:ALICE_TOKEN"));

    // Durable: after a restart the invocation reads the same.
    let agent = server.stop_keeping().await;
    let server =
        TestServer::start_with(agent, &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)], |c| c).await;
    let state = tool(
        &server,
        Some(ALICE),
        "agent_get",
        json!({"invocationId": id}),
    )
    .await;
    assert_eq!(state["structuredContent"]["status"], "completed", "{state}");
    assert_eq!(
        state["structuredContent"]["result"],
        summary["approved"]["result"]
    );
}

/// Alice's invocation is hers: bob gets exactly the answer of an unknown id from every tool,
/// and nothing he sends changes it. The twin turns the ownership check off and bob reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_reaches_no_invocation_of_another() {
    for unchecked in [false, true] {
        let server = start(TOKENS, |c| c.ownership_unchecked_for_tests = unchecked).await;
        let started = tool(
            &server,
            Some(ALICE),
            "agent_start",
            json!({"message": "/tool refund_charge {\"chargeId\":\"c\"}"}),
        )
        .await;
        let id = started["structuredContent"]["invocationId"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut waiting = Value::Null;
        for _ in 0..200 {
            waiting = tool(
                &server,
                Some(ALICE),
                "agent_get",
                json!({"invocationId": id}),
            )
            .await;
            if waiting["structuredContent"]["status"] == "input_required" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let state = &waiting["structuredContent"];
        assert_eq!(state["status"], "input_required", "{waiting}");
        let request = state["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();

        let unknown = tool(
            &server,
            Some(BOB),
            "agent_get",
            json!({"invocationId": "wrun_01NOPE"}),
        )
        .await;
        let stolen = tool(&server, Some(BOB), "agent_get", json!({"invocationId": id})).await;
        if unchecked {
            // The twin: with the check off, bob reads alice's pending refund.
            assert_eq!(
                stolen["structuredContent"]["status"], "input_required",
                "{stolen}"
            );
            server.stop().await;
            continue;
        }
        assert_eq!(
            stolen, unknown,
            "bob must learn nothing, not even that it exists"
        );
        assert_eq!(stolen["isError"], true);
        assert_eq!(stolen["structuredContent"]["error"]["code"], "not_found");
        let answer = json!({"invocationId": id, "responses": [{"requestId": request, "optionId": "approve"}]});
        let approved = tool(&server, Some(BOB), "agent_update", answer).await;
        assert_eq!(
            approved["structuredContent"]["error"]["code"], "not_found",
            "{approved}"
        );
        let followed = tool(
            &server,
            Some(BOB),
            "agent_update",
            json!({"invocationId": id, "message": "hi"}),
        )
        .await;
        assert_eq!(
            followed["structuredContent"]["error"]["code"], "not_found",
            "{followed}"
        );
        let cancelled = tool(
            &server,
            Some(BOB),
            "agent_cancel",
            json!({"invocationId": id}),
        )
        .await;
        assert_eq!(
            cancelled["structuredContent"]["error"]["code"], "not_found",
            "{cancelled}"
        );

        let still = server.runtime.pending_inputs(&id).await.unwrap();
        assert!(
            still.iter().any(|r| r.id == request),
            "bob's answer counted"
        );
        let mine = tool(
            &server,
            Some(ALICE),
            "agent_get",
            json!({"invocationId": id}),
        )
        .await;
        assert_eq!(mine["structuredContent"]["status"], "input_required");
        server.stop().await;
    }
}

/// A page on evil.example.com whose name now resolves to 127.0.0.1 cannot use the channel (no
/// authentication, loopback only): its `Host`, or its `Origin`, gives it away, and the request is
/// refused before anything runs. The twin turns the check off and the page starts a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dns_rebinding_is_refused_before_anything_runs() {
    let start_run = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "agent_start", "arguments": {"message": "hello"}}})
    .to_string();
    for off in [false, true] {
        let server = start("auth: none\n", |c| {
            if let Some(m) = c.mcp.take() {
                let mut m = (*m).clone();
                m.host_check_off_for_tests = off;
                c.mcp = Some(Arc::new(m));
            }
        })
        .await;
        let host = server.base.trim_start_matches("http://").to_owned();
        let own_origin = format!("http://{host}");
        let attacks: [&[(&str, &str)]; 3] = [
            &[
                ("host", "evil.example.com"),
                ("origin", "http://evil.example.com"),
            ],
            &[("host", "evil.example.com:80")],
            &[("host", &host), ("origin", "http://evil.example.com")],
        ];
        for headers in attacks {
            let (status, body) = send(&server, headers, start_run.clone()).await;
            if off {
                assert_eq!(status, 200, "{headers:?}: {body}");
            } else {
                assert_eq!(status, 403, "{headers:?}: {body}");
                assert_eq!(body["jsonrpc"], "2.0");
                assert_eq!(body["error"]["code"], -32000);
            }
        }
        assert_eq!(sessions(&server).await, if off { 3 } else { 0 });
        // The page's own address still works, with or without its same-origin `Origin`.
        let (status, body) = send(
            &server,
            &[("host", &host), ("origin", &own_origin)],
            start_run.clone(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["result"]["structuredContent"]["status"], "working",
            "{body}"
        );
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_are_bounded_and_bad_json_rpc_gets_errors() {
    let server = start(TOKENS, |_| {}).await;
    let alice = format!("Bearer {ALICE}");
    let auth: &[(&str, &str)] = &[("authorization", &alice)];

    // No credentials, or wrong ones: 401 with a challenge, nothing read.
    for token in [None, Some("wrong")] {
        let (status, body) = rpc(&server, token, "tools/list", json!({})).await;
        assert_eq!(status, 401, "{body}");
    }
    // Over 1 MiB: 413.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(1024 * 1024)
    );
    let (status, _) = send(&server, auth, huge).await;
    assert_eq!(status, 413);
    // Not JSON; JSON but not JSON-RPC: a JSON-RPC error, never a crash.
    for bad in ["{not json", "[1,2", "{\"hello\":1}", "42"] {
        let (status, body) = send(&server, auth, bad.to_owned()).await;
        assert!((400..500).contains(&status), "{bad}: {status} {body}");
        assert!(body["error"]["code"].is_i64(), "{bad}: {body}");
    }
    let (_, body) = rpc(&server, Some(ALICE), "no/such/method", json!({})).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let (_, body) = rpc(
        &server,
        Some(ALICE),
        "tools/call",
        json!({"name": "rm_rf", "arguments": {}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    // Fields are bounded before any work starts.
    let big = "y".repeat(64 * 1024 + 1);
    let rejected = tool(&server, Some(ALICE), "agent_start", json!({"message": big})).await;
    assert_eq!(rejected["isError"], true);
    assert_eq!(
        rejected["structuredContent"]["error"]["code"],
        "invalid_input"
    );
    let rejected = tool(
        &server,
        Some(ALICE),
        "agent_start",
        json!({"message": "hi", "extra": 1}),
    )
    .await;
    assert_eq!(
        rejected["structuredContent"]["error"]["code"],
        "invalid_input"
    );
    assert_eq!(sessions(&server).await, 0);
    // Ping and the tools answer.
    let (status, body) = rpc(&server, Some(ALICE), "ping", json!({})).await;
    assert_eq!((status, body["result"].clone()), (200, json!({})), "{body}");
    server.stop().await;
}

/// `allowed_hosts` and `allowed_origins` let a deployment's public name and its browser app in,
/// and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listed_hosts_and_origins_are_served_and_only_those() {
    let file = format!(
        "{TOKENS}allowed_hosts: [agent.example.com]\nallowed_origins: [\"https://app.example.com\"]\n"
    );
    let server = start(&file, |_| {}).await;
    let alice = format!("Bearer {ALICE}");
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let cases: [(&[(&str, &str)], u16); 5] = [
        (&[("host", "agent.example.com")], 200),
        (
            &[
                ("host", "agent.example.com"),
                ("origin", "https://app.example.com"),
            ],
            200,
        ),
        (
            &[
                ("host", "agent.example.com"),
                ("origin", "https://evil.example.com"),
            ],
            403,
        ),
        (&[("host", "agent.example.com.evil.example.com")], 403),
        (&[("host", "other.example.com")], 403),
    ];
    for (headers, want) in cases {
        let mut all = headers.to_vec();
        all.push(("authorization", &alice));
        let (status, body) = send(&server, &all, ping.clone()).await;
        assert_eq!(status, want, "{headers:?}: {body}");
    }
    server.stop().await;
}
