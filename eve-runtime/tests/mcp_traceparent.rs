//! A turn's MCP call over Streamable HTTP carries its call's trace context: a runtime with
//! tracing on (the local trace store in a temporary folder) runs a turn whose model calls the
//! real MCP server's `header` tool (`tests/fixtures/mcp/server.py http`, which answers with the
//! request header it is asked about); the `traceparent` the server saw is the one of the call's
//! `execute_tool` span, in the turn's trace, as the local store holds it. Its twin: the same turn
//! on a runtime without tracing, where the request carries none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::Approval;
use eve_runtime::engine::{DriveOutcome, Runtime};
use eve_runtime::redact::Secrets;
use eve_runtime::store::CallStatus;
use eve_runtime::telemetry::config::{Local, Sampling};
use eve_runtime::telemetry::local::TraceStore;
use eve_runtime::telemetry::{Telemetry, TelemetryConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::composition::{PerAgent, call, root_calls, runtime};
use crate::engine_support::*;

fn python() -> String {
    std::env::var("EVE_TEST_PYTHON").unwrap_or_else(|_| {
        let venv =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python");
        assert!(
            venv.exists(),
            "no Python with `mcp`: run scripts/setup-test-deps.sh (or set EVE_TEST_PYTHON)"
        );
        venv.to_string_lossy().into_owned()
    })
}

/// The fixture server over Streamable HTTP (it wants `X-Api-Key: s3cret`); killed on drop.
async fn http_server() -> (tokio::process::Child, String) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/server.py")
        .to_string_lossy()
        .into_owned();
    let mut child = tokio::process::Command::new(python())
        .args([script.as_str(), "http", "X-Api-Key", "s3cret"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
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
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// One turn calling `srv__header {name: traceparent}`; the header the server saw.
async fn turn(
    p: &TestProject,
    url: &str,
    traced: Option<&std::path::Path>,
) -> (Runtime, String, Value) {
    let mut a = agent();
    a.connections.push(eve_compile::Connection {
        name: "srv".into(),
        source: "connections/srv.yaml".into(),
        transport: eve_compile::Transport::Http {
            url: url.to_owned(),
            headers: [("X-Api-Key".to_owned(), "s3cret".to_owned())].into(),
        },
        tools: Default::default(),
        approval: Approval::Never,
        timeout_ms: 20_000,
        start_timeout_ms: None,
        oauth: None,
        credentials: Default::default(),
    });
    p.write_build(&a, &[]);
    let models = PerAgent::default();
    models.set(
        "*",
        json!([call("srv__header", "h1", json!({"name": "traceparent"})), {"text": "done"}]),
    );
    let rt = runtime(p, &models);
    if let Some(dir) = traced {
        let config = TelemetryConfig {
            service_name: "eve-test".into(),
            otlp: None,
            local: Some(Local {
                path: dir.join("traces.db"),
                max_age: Duration::from_secs(3600),
                max_bytes: 1 << 30,
                retain: 20,
            }),
            sampling: Sampling::AlwaysOn,
            capture_content: false,
        };
        rt.set_telemetry(Telemetry::new(config, Arc::new(Secrets::new())).unwrap());
    }
    let id = rt.create_session(Some("trace it".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Completed, "{calls:?}");
    let output = calls[0].output.clone().unwrap();
    (rt, id, output)
}

fn seen(output: &Value) -> String {
    // The tool's answer, as MCP results map to a call's output.
    output["result"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| output.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_http_call_carries_the_traceparent_of_its_span() {
    let (_server, url) = http_server().await;
    let dir = tempfile::tempdir().unwrap();
    let p = TestProject::new();
    let (rt, id, output) = turn(&p, &url, Some(dir.path())).await;
    let header = seen(&output);
    let telemetry = rt.telemetry().cloned().unwrap();
    tokio::task::spawn_blocking(move || telemetry.flush())
        .await
        .unwrap();
    let store = TraceStore::open_read(&dir.path().join("traces.db")).unwrap();
    let traces = store.list(10, Some(&id)).unwrap();
    let spans: Vec<_> = traces
        .iter()
        .flat_map(|t| store.spans(&t.trace_id).unwrap())
        .collect();
    let span = spans
        .iter()
        .find(|s| s.name == "execute_tool srv__header")
        .unwrap_or_else(|| panic!("no span of the call: {spans:#?}"));
    assert_eq!(
        header,
        format!("00-{}-{}-01", span.trace_id, span.span_id),
        "the server saw the call's own span"
    );
    rt.shutdown().await;

    // The twin: no tracing, no header.
    let q = TestProject::new();
    let (rt, _, output) = turn(&q, &url, None).await;
    assert_eq!(seen(&output), "<missing>", "{output}");
    rt.shutdown().await;
}
