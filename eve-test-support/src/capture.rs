//! Compares our event streams with the captured eve 0.80.1 streams.
//!
//! Loads `stream*.ndjson` from `../shared/reference/eve-0.80.1/` when that folder is beside the
//! repository, else from the copy in `eve-runtime/tests/fixtures/eve-0.80.1/`. Two streams match
//! when, after folding runs of delta events (their count depends on how a model chunks its text),
//! they have the same event types in the same order and every event's data has the same key set,
//! recursively (tool inputs and outputs excepted: they are the tools' own). The known differences
//! are listed here, each with its reason, so the test fails on any other.
//!
//! Used by the runtime's server tests and by `eve-cli`'s tests of `eve serve`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

/// Keys eve sends that we do not, as `(event type, dotted path)`.
/// - `trace`: eve's OpenTelemetry span of the session and turn; eve here has no tracing exporter,
///   so there is no span to name.
pub const MISSING_OK: &[(&str, &str)] = &[("session.started", "trace"), ("turn.started", "trace")];

/// Keys we send that eve does not.
/// - `runtime.buildHash`: the build the session started on (sessions are pinned to builds).
/// - `resolutions[].responderPrincipalId`: who answered each request (as in `approval.settled`).
pub const EXTRA_OK: &[(&str, &str)] = &[
    ("session.started", "runtime.buildHash"),
    ("input.resolved", "resolutions[].responderPrincipalId"),
    ("turn.completed", "usage"),
    ("turn.completed", "usage.cacheReadTokens"),
    ("turn.completed", "usage.cacheWriteTokens"),
    ("turn.completed", "usage.inputTokens"),
    ("turn.completed", "usage.outputTokens"),
];

/// Event types whose consecutive runs are folded into one.
const DELTAS: &[&str] = &[
    "message.appended",
    "reasoning.appended",
    "action.input.appended",
];

/// Keys whose values are not compared (tool-specific payloads).
const OPAQUE: &[&str] = &["input", "output", "trace"];

fn capture_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = manifest.join("../../shared/reference/eve-0.80.1");
    if shared.join("stream1.ndjson").is_file() {
        return shared;
    }
    manifest.join("../eve-runtime/tests/fixtures/eve-0.80.1")
}

/// The events of a capture file (lines that are JSON objects; the HTTP head is skipped).
pub fn capture(name: &str) -> Vec<Value> {
    let path = capture_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read capture {}: {e}", path.display()));
    parse_ndjson(&text)
}

/// Parses NDJSON, skipping blank lines and lines that are not JSON objects.
pub fn parse_ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON line {l}: {e}")))
        .collect()
}

/// Event types, in order.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Events with each run of one delta type kept as its first event.
pub fn fold(events: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for e in events {
        let t = e["type"].as_str().unwrap_or_default();
        let repeat = out
            .last()
            .is_some_and(|p| p["type"].as_str() == Some(t) && DELTAS.contains(&t));
        if !repeat {
            out.push(e.clone());
        }
    }
    out
}

fn key_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(path.clone());
                if !OPAQUE.contains(&k.as_str()) {
                    key_paths(v, &path, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                key_paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// Key paths of an event's `data`, recursively (`actions[].callId`, `usage.inputTokens`, …).
/// Maps whose keys are ids (`presentation`) count by their values' keys.
pub fn data_keys(event: &Value) -> BTreeSet<String> {
    let mut data = event["data"].clone();
    if let Some(Value::Object(p)) = data.get_mut("presentation") {
        let values: Vec<Value> = p.values().cloned().collect();
        data["presentation"] = Value::Array(values);
    }
    let mut out = BTreeSet::new();
    key_paths(&data, "", &mut out);
    out
}

/// Checks that `ours` matches the capture `theirs`; the error lists every difference.
pub fn compare(ours: &[Value], theirs: &[Value]) -> Result<(), String> {
    let (ours, theirs) = (fold(ours), fold(theirs));
    let (ot, tt) = (types(&ours), types(&theirs));
    if ot != tt {
        return Err(format!(
            "event types differ (runs of deltas folded)\n ours: {ot:?}\n eve:  {tt:?}"
        ));
    }
    let mut problems = Vec::new();
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        let kind = ot[i].as_str();
        let (ok, tk) = (data_keys(o), data_keys(t));
        for missing in tk.difference(&ok) {
            let allowed = MISSING_OK.iter().any(|(k, p)| {
                *k == kind && (missing == p || missing.starts_with(&format!("{p}.")))
            });
            if !allowed {
                problems.push(format!("#{i} {kind}: missing `{missing}`"));
            }
        }
        for extra in ok.difference(&tk) {
            let allowed = EXTRA_OK.iter().any(|(k, p)| *k == kind && extra == p);
            if !allowed {
                problems.push(format!("#{i} {kind}: extra `{extra}`"));
            }
        }
        let meta: BTreeSet<&str> = o["meta"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        if !meta.contains("at") || !meta.contains("id") {
            problems.push(format!("#{i} {kind}: meta lacks `at` or `id`: {meta:?}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}
