//! Span shapes and redaction, read back from the local trace store: a settled tool call's span
//! (name, parent, GenAI attributes, its `traceparent`), a model call's, and a secret in a call's
//! input that the spans never carry, with its twin where nothing was learned to redact.

use std::sync::Arc;

use serde_json::json;

use super::config::{Local, Sampling, TelemetryConfig};
use super::local::TraceStore;
use super::{Telemetry, TurnTrace, span_id, trace_id};
use crate::redact::Secrets;
use crate::store::{ApprovalState, CallStatus, ToolCallRecord, now_ms};

const SECRET: &str = "sk-telemetry-test-0123456789";

fn telemetry(dir: &std::path::Path, secrets: Arc<Secrets>) -> Arc<Telemetry> {
    let config = TelemetryConfig {
        service_name: "test".into(),
        otlp: None,
        local: Some(Local {
            path: dir.join("traces.db"),
            max_age: std::time::Duration::from_secs(3600),
            max_bytes: 1 << 30,
            retain: 20,
        }),
        sampling: Sampling::AlwaysOn,
        capture_content: true,
    };
    Telemetry::new(config, secrets).unwrap()
}

fn turn() -> TurnTrace {
    TurnTrace {
        session: "ses_1".into(),
        seq: 0,
        agent: "shop".into(),
        trace_id: trace_id(&["trace", "ses_1", "0"]),
        span_id: span_id(&["turn", "ses_1", "0"]),
        parent: None,
        sampled: true,
        started_at: now_ms(),
        parent_session: None,
    }
}

fn call(input: serde_json::Value) -> ToolCallRecord {
    ToolCallRecord {
        session_id: "ses_1".into(),
        call_id: "call_1".into(),
        turn_seq: 0,
        step_index: 2,
        position: 0,
        kind: "tool-call".into(),
        name: "lookup".into(),
        input,
        idempotency_key: "k".into(),
        effect: "read".into(),
        status: CallStatus::Completed,
        approval: ApprovalState::None,
        output: Some(json!({"ok": true})),
        is_error: false,
        attempts: 1,
        started_at: Some(now_ms() - 5),
        ended_at: Some(now_ms()),
    }
}

fn spans_after(t: &Arc<Telemetry>, dir: &std::path::Path) -> Vec<super::local::StoredSpan> {
    t.flush();
    let store = TraceStore::open_read(&dir.join("traces.db")).unwrap();
    let trace = turn().trace_id.to_string();
    store.spans(&trace).unwrap()
}

#[test]
fn a_tool_call_span_has_the_genai_shape_and_its_steps_parent() {
    let dir = tempfile::tempdir().unwrap();
    let t = telemetry(dir.path(), Arc::new(Secrets::new()));
    let turn = turn();
    t.tool(&turn, &call(json!({"order": "A-1"})));
    let spans = spans_after(&t, dir.path());
    let span = spans
        .iter()
        .find(|s| s.name == "execute_tool lookup")
        .unwrap();
    assert_eq!(span.parent_id, Some(turn.step_span(2).to_string()));
    assert_eq!(span.span_id, turn.call_span("call_1").to_string());
    let a = &span.attributes;
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "lookup");
    assert_eq!(a["gen_ai.tool.call.id"], "call_1");
    assert_eq!(a["eve.tool.effect"], "read");
    assert_eq!(a["eve.tool.outcome"], "completed");
    assert_eq!(a["gen_ai.conversation.id"], "ses_1");
    assert_eq!(span.kind, "internal");
    assert!(span.end_us >= span.start_us);
    // What the tool's process is given points at this very span.
    assert_eq!(
        turn.traceparent_of(turn.call_span("call_1")),
        format!("00-{}-{}-01", span.trace_id, span.span_id)
    );
}

#[test]
fn a_model_call_span_carries_usage_model_and_finish_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let t = telemetry(dir.path(), Arc::new(Secrets::new()));
    let turn = turn();
    let response = crate::model::ModelResponse {
        content: "hi".into(),
        reasoning: None,
        tool_calls: Vec::new(),
        usage: crate::model::Usage {
            input_tokens: 12,
            output_tokens: 3,
            cache_read_tokens: 0,
            estimated: false,
        },
        finish_reason: crate::model::FinishReason::Stop,
    };
    let start = std::time::SystemTime::now();
    t.chat(
        &turn,
        1,
        "openai/gpt-x",
        "gpt-x",
        start,
        None,
        Ok(&response),
    );
    t.chat(
        &turn,
        2,
        "openai/gpt-x",
        "gpt-x",
        start,
        None,
        Err("HTTP 500"),
    );
    let spans = spans_after(&t, dir.path());
    let ok = spans
        .iter()
        .find(|s| s.attributes["eve.step"] == 1)
        .unwrap();
    assert_eq!(ok.name, "chat gpt-x");
    assert_eq!(ok.kind, "client");
    assert_eq!(ok.parent_id, Some(turn.step_span(1).to_string()));
    assert_eq!(ok.attributes["gen_ai.provider.name"], "openai");
    assert_eq!(ok.attributes["gen_ai.request.model"], "gpt-x");
    assert_eq!(ok.attributes["gen_ai.usage.input_tokens"], 12);
    assert_eq!(ok.attributes["gen_ai.usage.output_tokens"], 3);
    assert_eq!(
        ok.attributes["gen_ai.response.finish_reasons"],
        json!(["stop"])
    );
    let failed = spans
        .iter()
        .find(|s| s.attributes["eve.step"] == 2)
        .unwrap();
    assert!(failed.status.starts_with("error"), "{}", failed.status);
    assert_eq!(failed.attributes["error.type"], "model_error");
}

#[test]
fn a_secret_in_a_call_never_reaches_a_span() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = Arc::new(Secrets::new());
    secrets.learn("SHOP_TOKEN", SECRET);
    let t = telemetry(dir.path(), secrets);
    t.tool(&turn(), &call(json!({"token": SECRET})));
    let stored = serde_json::to_string(&spans_after(&t, dir.path())).unwrap();
    assert!(!stored.contains(SECRET), "{stored}");
    assert!(
        stored.contains("${SHOP_TOKEN}"),
        "content was captured: {stored}"
    );
}

#[test]
fn twin_without_the_secret_learned_the_value_would_be_on_the_span() {
    let dir = tempfile::tempdir().unwrap();
    let t = telemetry(dir.path(), Arc::new(Secrets::new()));
    t.tool(&turn(), &call(json!({"token": SECRET})));
    let stored = serde_json::to_string(&spans_after(&t, dir.path())).unwrap();
    assert!(
        stored.contains(SECRET),
        "the attack needs redaction to stop it"
    );
}
