//! MCP connections against real MCP servers: `tests/fixtures/mcp/server.py`, written with the Python
//! `mcp` package, run over stdio and over Streamable HTTP on 127.0.0.1.
//!
//! The venv comes from `scripts/setup-test-deps.sh` (`target/test-venv`), or `EVE_TEST_PYTHON` names
//! a python that has `mcp`. Without either, these tests fail and say what to run: they never pass by
//! skipping.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Approval, Connection, ToolFilter, Transport};
use eve_runtime::mcp::{
    self, CALL_TOOL, CallScope, ConnectionState, McpManager, SEARCH_TOOLS, Supervision,
};
use eve_runtime::tools::{EnvLookup, ToolResult};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

mod oauth;
mod oauth_server;
mod oauth_user;
mod openapi_oauth;

/// The python with the `mcp` package.
fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("EVE_TEST_PYTHON") {
        return PathBuf::from(path);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python");
    assert!(
        venv.exists(),
        "the MCP tests need a Python venv with the `mcp` package at {}: run `scripts/setup-test-deps.sh` \
         (or set EVE_TEST_PYTHON to a python that has `mcp`)",
        venv.display()
    );
    venv
}

fn server_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/server.py")
        .to_string_lossy()
        .into_owned()
}

/// An env lookup with `vars` plus the test process's `PATH` and `HOME`.
fn env(vars: &[(&str, &str)]) -> EnvLookup {
    let mut map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    for name in ["PATH", "HOME"] {
        if let Ok(value) = std::env::var(name) {
            map.entry(name.to_owned()).or_insert(value);
        }
    }
    Arc::new(move |name: &str| map.get(name).cloned())
}

fn connection(name: &str, transport: Transport) -> Connection {
    Connection {
        name: name.to_owned(),
        source: format!("connections/{name}.yaml"),
        transport,
        tools: ToolFilter::default(),
        approval: Approval::Never,
        timeout_ms: 0,
        start_timeout_ms: None,
        oauth: None,
        credentials: Default::default(),
    }
}

/// The fixture server over stdio; its `GREETING` comes from `${EVE_TEST_GREETING}`.
fn stdio(name: &str) -> Connection {
    connection(
        name,
        Transport::Stdio {
            command: python().to_string_lossy().into_owned(),
            args: vec![server_script(), "stdio".to_owned()],
            env: BTreeMap::from([("GREETING".to_owned(), "${EVE_TEST_GREETING}".to_owned())]),
        },
    )
}

fn manager(connections: &[Connection]) -> McpManager {
    manager_with(connections, Supervision::default())
}

fn manager_with(connections: &[Connection], supervision: Supervision) -> McpManager {
    McpManager::with_supervision(
        connections,
        env(&[("EVE_TEST_GREETING", "hello"), ("EVE_TEST_KEY", "s3cret")]),
        std::env::temp_dir(),
        supervision,
    )
}

/// Quick restarts, so the supervision tests stay fast.
fn quick() -> Supervision {
    Supervision {
        backoff_base: Duration::from_millis(20),
        liveness_timeout: Duration::from_millis(500),
        ..Supervision::default()
    }
}

async fn call(mcp: &McpManager, name: &str, input: Value) -> ToolResult {
    mcp.call(name, input, CancellationToken::new(), CallScope::default())
        .await
}

fn error(result: &ToolResult) -> String {
    assert!(!result.ok, "expected a failure, got {result:?}");
    result.error.clone().unwrap_or_default()
}

/// The server's pid, through its `pid` tool.
async fn pid(mcp: &McpManager, name: &str) -> u32 {
    let result = call(mcp, name, json!({})).await;
    assert!(result.ok, "{result:?}");
    result.output["result"].as_str().unwrap().parse().unwrap()
}

/// Whether a process exists and is not a zombie.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

async fn eventually_gone(pid: u32) -> bool {
    for _ in 0..200 {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn lists_tools_with_allow_and_block_filters() {
    let mut some = stdio("some");
    some.tools = ToolFilter {
        allow: vec!["e*".into(), "add".into(), "fail".into()],
        block: vec!["echo".into()],
    };
    some.approval = Approval::Always;
    let mcp = manager(&[stdio("all"), some]);
    assert_eq!(
        mcp.status().await[0].state,
        ConnectionState::NotStarted,
        "servers start lazily"
    );

    let tools = mcp.tools().await;
    let names = |connection: &str| {
        let mut names: Vec<&str> = tools
            .iter()
            .filter(|t| t.connection == connection)
            .map(|t| t.name.as_str())
            .collect();
        names.sort_unstable();
        names
    };
    assert_eq!(
        names("all"),
        [
            "all__add",
            "all__crash",
            "all__echo",
            "all__fail",
            "all__freeze",
            "all__getenv",
            "all__header",
            "all__picture",
            "all__pid",
            "all__read_text",
            "all__sleep",
            "all__spawn_child",
            "all__write_text"
        ]
    );
    assert_eq!(names("some"), ["some__add", "some__fail"]);

    let add = tools.iter().find(|t| t.name == "some__add").unwrap();
    assert_eq!(add.remote_name, "add");
    assert_eq!(add.description, "Add two integers.");
    assert_eq!(add.input_schema["type"], "object");
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    assert_eq!(add.approval, Approval::Always);

    let blocked = call(&mcp, "some__echo", json!({"text": "x"})).await;
    assert!(error(&blocked).contains("filters it out"), "{blocked:?}");

    let status = mcp.status().await;
    assert_eq!(status[0].state, ConnectionState::Running);
    assert_eq!(status[1].tools, Some(2));
    mcp.shutdown().await;
}

#[tokio::test]
async fn calls_tools_and_maps_results() {
    let mcp = manager(&[stdio("t")]);

    let echo = call(&mcp, "t__echo", json!({"text": "hi"})).await;
    assert!(echo.ok, "{echo:?}");
    assert_eq!(
        echo.output,
        json!({"result": "hi"}),
        "structured content wins"
    );

    let add = call(&mcp, "t__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(add.output, json!({"result": 5}));

    let greeting = call(&mcp, "t__getenv", json!({"name": "GREETING"})).await;
    assert_eq!(
        greeting.output,
        json!({"result": "hello"}),
        "`${{VAR}}` in env is resolved"
    );
    let leaked = call(&mcp, "t__getenv", json!({"name": "EVE_TEST_KEY"})).await;
    assert_eq!(
        leaked.output,
        json!({"result": "<unset>"}),
        "only named variables reach the server"
    );

    let picture = call(&mcp, "t__picture", json!({})).await;
    assert!(picture.ok);
    // An image is eve's content value: the engine stages its bytes and the model gets the image.
    assert_eq!(
        picture.output,
        json!({"type": "content", "value": [{"type": "file",
            "data": {"type": "data", "data": "iVBORw0KGgowMDAw"}, "mediaType": "image/png"}]})
    );

    let failed = call(&mcp, "t__fail", json!({"message": "boom"})).await;
    assert!(
        error(&failed).contains("boom"),
        "isError → ok: false with the server's text"
    );

    let unknown = call(&mcp, "t__nope", json!({})).await;
    let message = error(&unknown);
    assert!(
        message.contains("has no tool `nope`") && message.contains("t__echo"),
        "{message}"
    );

    let wrong_type = call(&mcp, "t__add", json!({"a": "two", "b": 3})).await;
    assert!(
        !wrong_type.ok,
        "arguments the server rejects fail the call: {wrong_type:?}"
    );

    let bad_input = call(&mcp, "t__echo", json!([1])).await;
    assert!(error(&bad_input).contains("expected a JSON object"));

    let stranger = call(&mcp, "other__echo", json!({})).await;
    assert!(error(&stranger).contains("no MCP connection offers"));
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_connection_that_cannot_start_contributes_no_tools_and_says_why() {
    let mut unset = stdio("unset");
    if let Transport::Stdio { env, .. } = &mut unset.transport {
        env.insert("TOKEN".into(), "${EVE_TEST_NOT_SET}".into());
    }
    let missing = connection(
        "missing",
        Transport::Stdio {
            command: "/nonexistent/mcp-server".into(),
            args: vec![],
            env: BTreeMap::new(),
        },
    );
    let mcp = manager(&[unset, missing, stdio("good")]);

    let tools = mcp.tools().await;
    assert!(!tools.is_empty());
    assert!(tools.iter().all(|t| t.connection == "good"));

    let status = mcp.status().await;
    let unset_error = status[0].last_error.clone().unwrap();
    assert!(
        unset_error.contains("`${EVE_TEST_NOT_SET}` in env TOKEN is not set"),
        "{unset_error}"
    );
    assert!(
        status[1]
            .last_error
            .clone()
            .unwrap()
            .contains("could not start")
    );
    assert_eq!(status[2].state, ConnectionState::Running);

    let result = call(&mcp, "unset__echo", json!({"text": "x"})).await;
    assert!(error(&result).contains("EVE_TEST_NOT_SET"));
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_server_that_never_answers_initialize_is_stopped_at_its_own_start_timeout() {
    let mut silent = connection(
        "silent",
        Transport::Stdio {
            command: "sleep".into(),
            args: vec!["30".into()],
            env: BTreeMap::new(),
        },
    );
    silent.start_timeout_ms = Some(1_000);
    let mcp = manager(&[silent]);
    let started = std::time::Instant::now();
    assert!(mcp.tools().await.is_empty());
    let waited = started.elapsed();
    let status = mcp.status().await;
    let error = status[0].last_error.clone().unwrap();
    assert!(
        error.contains("did not finish starting within 1 s"),
        "{error}"
    );
    // Its own 1 s, not the default (30 s).
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_crashed_server_is_restarted_on_the_next_call() {
    let mcp = manager_with(&[stdio("t")], quick());
    let first = pid(&mcp, "t__pid").await;

    let crashed = call(&mcp, "t__crash", json!({})).await;
    assert!(error(&crashed).contains("exited"), "{crashed:?}");
    assert_ne!(mcp.status().await[0].state, ConnectionState::Running);

    let second = pid(&mcp, "t__pid").await;
    assert_ne!(first, second, "a new server process answers");
    let status = &mcp.status().await[0];
    assert_eq!(status.state, ConnectionState::Running);
    assert_eq!(status.restarts, 1);
    mcp.shutdown().await;
}

#[tokio::test]
async fn timeouts_cancel_the_call_and_restart_a_server_that_stopped_responding() {
    let mut t = stdio("t");
    t.timeout_ms = 500;
    let mcp = manager_with(&[t], quick());
    let first = pid(&mcp, "t__pid").await;

    let started = Instant::now();
    let slow = call(&mcp, "t__sleep", json!({"seconds": 30})).await;
    let message = error(&slow);
    assert!(message.contains("timed out after 500 ms"), "{message}");
    assert!(message.contains("still responding"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not the 30 s sleep"
    );
    assert_eq!(
        pid(&mcp, "t__pid").await,
        first,
        "a responsive server is kept"
    );

    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let cancelled = mcp
        .call(
            "t__sleep",
            json!({"seconds": 30}),
            cancel,
            CallScope::default(),
        )
        .await;
    assert!(error(&cancelled).contains("was cancelled"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancellation does not wait for the call"
    );
    assert_eq!(pid(&mcp, "t__pid").await, first);

    let frozen = call(&mcp, "t__freeze", json!({})).await;
    let message = error(&frozen);
    assert!(message.contains("stopped responding"), "{message}");
    assert!(eventually_gone(first).await, "the frozen server is killed");

    let second = pid(&mcp, "t__pid").await;
    assert_ne!(first, second, "the next call gets a fresh server");
    mcp.shutdown().await;
}

#[tokio::test]
async fn repeated_start_failures_open_the_circuit() {
    let broken = connection(
        "broken",
        Transport::Stdio {
            command: python().to_string_lossy().into_owned(),
            args: vec![
                "-c".into(),
                "import sys; sys.stderr.write('broken on purpose\\n'); sys.exit(3)".into(),
            ],
            env: BTreeMap::new(),
        },
    );
    let mcp = manager_with(
        &[broken],
        Supervision {
            max_restarts: 2,
            ..quick()
        },
    );

    // The first start and two restarts fail, each saying what the server printed.
    for _ in 0..3 {
        let result = call(&mcp, "broken__echo", json!({})).await;
        let message = error(&result);
        assert!(message.contains("failed to start"), "{message}");
        assert!(message.contains("broken on purpose"), "{message}");
    }

    let started = Instant::now();
    let result = call(&mcp, "broken__echo", json!({})).await;
    let message = error(&result);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "an open circuit fails fast"
    );
    assert!(message.contains("is unavailable"), "{message}");
    assert!(
        message.contains("restarted 2 times within 60 s"),
        "{message}"
    );
    assert!(message.contains("broken on purpose"), "says why: {message}");
    assert!(
        message.contains("until") && message.contains("in 60 s"),
        "says when: {message}"
    );

    let status = &mcp.status().await[0];
    assert_eq!(status.state, ConnectionState::CircuitOpen);
    assert!(status.retry_at.is_some());
    assert!(mcp.tools().await.is_empty());
}

#[tokio::test]
async fn shutdown_kills_the_whole_server_process_group() {
    let mcp = manager(&[stdio("t")]);
    let server = pid(&mcp, "t__pid").await;
    let spawned = call(&mcp, "t__spawn_child", json!({})).await;
    let child: u32 = spawned.output["result"].as_str().unwrap().parse().unwrap();
    assert!(running(server) && running(child));

    mcp.shutdown().await;
    assert!(eventually_gone(server).await, "the server is killed");
    assert!(eventually_gone(child).await, "and what it spawned");
    let after = call(&mcp, "t__pid", json!({})).await;
    assert!(error(&after).contains("shut down"));
}

/// The fixture server over Streamable HTTP, requiring `X-Api-Key: s3cret`; killed on drop.
struct HttpServer {
    _child: tokio::process::Child,
    url: String,
}

async fn http_server() -> HttpServer {
    let mut child = tokio::process::Command::new(python())
        .args([server_script().as_str(), "http", "X-Api-Key", "s3cret"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the HTTP MCP server did not print its port")
        .unwrap()
        .unwrap();
    let port = line.strip_prefix("PORT ").unwrap().trim().to_owned();
    // The port is printed once bound; wait until the server also listens on it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the HTTP MCP server never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    HttpServer {
        _child: child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

fn http(name: &str, url: &str, key: &str) -> Connection {
    connection(
        name,
        Transport::Http {
            url: url.to_owned(),
            headers: BTreeMap::from([("X-Api-Key".to_owned(), key.to_owned())]),
        },
    )
}

#[tokio::test]
async fn streamable_http_server_lists_and_calls_with_a_header_from_env() {
    let server = http_server().await;
    let mut web = http("web", &server.url, "${EVE_TEST_KEY}");
    // Short enough to see the call timeout, long enough that a loaded machine still lists.
    web.timeout_ms = 2_000;
    let wrong = http("wrong", &server.url, "not-the-key");
    let mcp = manager_with(&[web, wrong], quick());

    let tools = mcp.tools().await;
    assert!(tools.iter().any(|t| t.name == "web__echo"));
    assert!(
        tools.iter().all(|t| t.connection == "web"),
        "a rejected connection contributes nothing"
    );
    let rejected = mcp.status().await[1].last_error.clone().unwrap();
    assert!(rejected.contains("401"), "{rejected}");

    let add = call(&mcp, "web__add", json!({"a": 20, "b": 22})).await;
    assert_eq!(add.output, json!({"result": 42}), "{add:?}");
    let header = call(&mcp, "web__header", json!({"name": "X-Api-Key"})).await;
    assert_eq!(
        header.output,
        json!({"result": "s3cret"}),
        "the header came from env"
    );

    let failed = call(&mcp, "web__fail", json!({"message": "nope"})).await;
    assert!(error(&failed).contains("nope"));
    let slow = call(&mcp, "web__sleep", json!({"seconds": 30})).await;
    assert!(error(&slow).contains("timed out after 2.0 s"), "{slow:?}");
    mcp.shutdown().await;
}

/// A traced call's `traceparent` (the call's span) reaches the Streamable HTTP server as a
/// request header, per request: the fixture's `header` tool reads it from the request that
/// carried the call. The twin: an untraced call, and one whose value is not a `traceparent`,
/// carry none.
#[tokio::test]
async fn a_traced_call_carries_its_traceparent_header_to_the_http_server() {
    const A: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const B: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let server = http_server().await;
    let mcp = manager_with(&[http("web", &server.url, "${EVE_TEST_KEY}")], quick());
    let asks = || json!({"name": "traceparent"});
    let traced = |tp: Option<&'static str>| {
        let mcp = mcp.clone();
        async move {
            let scope = CallScope {
                principal: None,
                traceparent: tp,
            };
            mcp.call("web__header", asks(), CancellationToken::new(), scope)
                .await
        }
    };
    let first = traced(Some(A)).await;
    assert_eq!(first.output, json!({"result": A}), "{first:?}");
    let second = traced(Some(B)).await;
    assert_eq!(
        second.output,
        json!({"result": B}),
        "each request its own: {second:?}"
    );
    // Through the catalogue's `call_tool`, too.
    let catalogued = mcp
        .call_catalogue(
            CALL_TOOL,
            json!({"name": "web__header", "input": asks()}),
            CancellationToken::new(),
            CallScope {
                principal: None,
                traceparent: Some(A),
            },
        )
        .await
        .unwrap();
    assert_eq!(catalogued.output, json!({"result": A}), "{catalogued:?}");
    // The twins: nothing to carry, and a value that is no traceparent.
    let untraced = call(&mcp, "web__header", asks()).await;
    assert_eq!(
        untraced.output,
        json!({"result": "<missing>"}),
        "{untraced:?}"
    );
    let malformed = traced(Some("00-not-a-trace-01")).await;
    assert_eq!(
        malformed.output,
        json!({"result": "<missing>"}),
        "{malformed:?}"
    );
    mcp.shutdown().await;
}

#[tokio::test]
async fn catalogue_searches_and_calls_tools() {
    let mcp = manager(&[stdio("t")]);

    let found = mcp.search("add integers", 3).await;
    assert_eq!(found[0].name, "t__add");
    assert!(found.len() <= 3);

    let result = mcp
        .call_catalogue(
            SEARCH_TOOLS,
            json!({"query": "echo"}),
            CancellationToken::new(),
            CallScope::default(),
        )
        .await
        .unwrap();
    assert!(result.ok);
    assert_eq!(result.output["tools"][0]["name"], "t__echo");
    assert_eq!(
        result.output["tools"][0]["input_schema"]["properties"]["text"]["type"],
        "string"
    );

    // Clones share the servers, and calls can run on any task.
    let clone = mcp.clone();
    let spawned = tokio::spawn(async move {
        clone
            .call(
                "t__echo",
                json!({"text": "from a task"}),
                CancellationToken::new(),
                CallScope::default(),
            )
            .await
    });
    assert_eq!(
        spawned.await.unwrap().output,
        json!({"result": "from a task"})
    );
    assert_eq!(mcp.status().await[0].restarts, 0);

    let result = mcp
        .call_catalogue(
            CALL_TOOL,
            json!({"name": "t__add", "input": {"a": 2, "b": 3}}),
            CancellationToken::new(),
            CallScope::default(),
        )
        .await
        .unwrap();
    assert_eq!(result.output, json!({"result": 5}));

    assert!(
        mcp.call_catalogue(
            "t__add",
            json!({}),
            CancellationToken::new(),
            CallScope::default()
        )
        .await
        .is_none()
    );
    let specs = mcp::catalogue_tools();
    assert_eq!(specs[0].input_schema["required"], json!(["query"]));
    assert!(mcp::use_catalogue(mcp::CATALOGUE_THRESHOLD + 1));
    mcp.shutdown().await;
}
