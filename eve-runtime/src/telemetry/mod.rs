//! Traces of what a runtime does, with OpenTelemetry's GenAI semantic conventions: a span per
//! turn (`invoke_agent {agent}`), per step (`agent.step`), per model call (`chat {model}`), per
//! tool call (`execute_tool {tool}`), per approval wait (`await_approval {tool}`), per compaction
//! and per task a call starts, exported over OTLP (HTTP/protobuf) and kept in the local trace
//! store ([`local`]) for `eve traces`.
//!
//! A turn is durable and may run in several processes (a restart, an answer taken by another
//! node): its trace context is kept with the turn (a note under `trace:<session>`, by turn
//! number, written when the turn first runs), and every id a span needs again later is derived
//! from the session, turn, step or call, so a resumed turn continues its trace: the turn's span
//! is sent once, when the turn ends, with the turn's own start time, and its steps, calls and
//! waits are its children whichever process ran them.
//!
//! What spans carry is redacted with the runtime's [`crate::redact::Secrets`] (every string
//! attribute), and prompts, outputs, tool inputs and results are on spans only when the operator
//! opts in (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).

pub mod config;
mod emit;
pub mod local;
mod observe;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};
use sha2::{Digest, Sha256};

pub use config::TelemetryConfig;

use crate::redact::Secrets;
use crate::store::{NoteOp, NoteRecord, Op, Store, now_ms};

/// A runtime's tracing: the tracer, what it is set up with, and the turns open in this process.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    config: TelemetryConfig,
    secrets: Arc<Secrets>,
    open: Mutex<Open>,
    /// The local trace store, when it is on and opened.
    local: Option<Arc<local::TraceStore>>,
}

/// What this process remembers of the spans still open (their starts): a restart forgets it,
/// and spans then start at what the store knows (the turn's start) or at their end.
#[derive(Default)]
struct Open {
    /// Turns by session and number.
    turns: HashMap<(String, u64), TurnTrace>,
    /// Steps' starts by session, turn and step.
    steps: HashMap<(String, u64, u64), SystemTime>,
    /// Input requests waiting: the turn, the start, the tool asked about.
    approvals: HashMap<String, ((String, u64), SystemTime, String)>,
}

/// The trace context of one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnTrace {
    /// The session.
    pub session: String,
    /// The turn's number.
    pub seq: u64,
    /// The agent that runs it.
    pub agent: String,
    /// The trace (the caller's, when the turn joins one).
    pub trace_id: TraceId,
    /// The turn's span.
    pub span_id: SpanId,
    /// The span the turn's span is a child of (the caller's, or the parent's subagent call).
    pub parent: Option<SpanId>,
    /// Whether the trace is sampled (nothing is sent when it is not).
    pub sampled: bool,
    /// When the turn started (epoch milliseconds).
    pub started_at: i64,
    /// The parent session of a subagent's turn.
    pub parent_session: Option<String>,
}

impl TurnTrace {
    /// The context of a span of this turn, as a parent of its children.
    fn context_of(&self, span: SpanId) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            span,
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )
    }

    /// The W3C `traceparent` of `span` in this trace.
    pub fn traceparent_of(&self, span: SpanId) -> String {
        format!("00-{}-{}-01", self.trace_id, span)
    }

    /// The id of step `step`'s span.
    pub fn step_span(&self, step: u64) -> SpanId {
        span_id(&[
            "step",
            &self.session,
            &self.seq.to_string(),
            &step.to_string(),
        ])
    }

    /// The id of call `call_id`'s span.
    pub fn call_span(&self, call_id: &str) -> SpanId {
        span_id(&["call", &self.session, call_id])
    }

    /// As kept with the turn.
    fn to_note(&self) -> String {
        serde_json::json!({
            "traceparent": self.traceparent_of(self.span_id),
            "parent": self.parent.map(|p| p.to_string()),
            "sampled": self.sampled,
            "parentSession": self.parent_session,
        })
        .to_string()
    }

    fn from_note(
        text: &str,
        session: &str,
        seq: u64,
        agent: &str,
        started_at: i64,
    ) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let (trace_id, span_id, _) = parse_traceparent(v["traceparent"].as_str()?)?;
        Some(Self {
            session: session.to_owned(),
            seq,
            agent: agent.to_owned(),
            trace_id,
            span_id,
            parent: v["parent"].as_str().and_then(|p| SpanId::from_hex(p).ok()),
            sampled: v["sampled"].as_bool().unwrap_or(true),
            started_at,
            parent_session: v["parentSession"].as_str().map(str::to_owned),
        })
    }
}

/// The namespace of the notes keeping the trace context of `session`'s turns.
pub fn namespace(session: &str) -> String {
    format!("trace:{session}")
}

/// `00-<trace>-<span>-<flags>`: the trace, the span and whether it was sampled. `None` for
/// anything else (a malformed header is ignored, as the W3C spec says).
pub fn parse_traceparent(text: &str) -> Option<(TraceId, SpanId, bool)> {
    let parts: Vec<&str> = text.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    if version.len() != 2 || *version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let hex = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    };
    if !hex(version) || !hex(trace) || !hex(span) || flags.len() != 2 || !hex(flags) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace_id, span_id, flags & 1 == 1))
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.finalize().into()
}

/// A span id derived from `parts` (never the invalid all-zero id).
fn span_id(parts: &[&str]) -> SpanId {
    let d = digest(parts);
    let mut bytes: [u8; 8] = d[..8].try_into().unwrap_or([1; 8]);
    if bytes == [0; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

/// A trace id derived from `parts`.
fn trace_id(parts: &[&str]) -> TraceId {
    let d = digest(parts);
    let mut bytes: [u8; 16] = d[..16].try_into().unwrap_or([1; 16]);
    if bytes == [0; 16] {
        bytes[15] = 1;
    }
    TraceId::from_bytes(bytes)
}

thread_local! {
    /// The ids the next span built on this thread takes (see [`Ids`]).
    static NEXT_IDS: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// Ids of new spans: the ones set for the span being built on this thread (a turn's or a step's
/// span, whose ids are derived so another process can refer to them), else random.
#[derive(Debug, Default)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        NEXT_IDS
            .with(|n| n.get().0)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_IDS
            .with(|n| n.get().1)
            .unwrap_or_else(|| self.0.new_span_id())
    }
}

/// How often spans are written to the local trace store.
const LOCAL_DELAY: Duration = Duration::from_millis(500);

/// Epoch milliseconds as a time.
pub(crate) fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl Telemetry {
    /// Sets tracing up: the OTLP exporter when an endpoint is configured, the local store when
    /// it is on (and opens). Errors are the operator's configuration's (a bad endpoint).
    pub fn new(config: TelemetryConfig, secrets: Arc<Secrets>) -> Result<Arc<Self>, String> {
        use opentelemetry::trace::TracerProvider as _;
        use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let mut builder = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_id_generator(Ids::default());
        if let Some(otlp) = &config.otlp {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(otlp.endpoint.clone())
                .with_headers(otlp.headers.iter().cloned().collect())
                .with_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("OTLP exporter: {e}"))?;
            builder = builder.with_batch_exporter(exporter);
        }
        let mut kept = None;
        if let Some(local) = &config.local {
            // The local store is a convenience: a command runs on without it.
            match local::TraceStore::open(local.clone()) {
                Ok(store) => {
                    let store = Arc::new(store);
                    // Written every [`LOCAL_DELAY`]: the console shows a turn's spans soon
                    // after it ends, whatever the OTLP exporter's schedule.
                    let config = opentelemetry_sdk::trace::BatchConfigBuilder::default()
                        .with_scheduled_delay(LOCAL_DELAY)
                        .build();
                    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(
                        local::Exporter::new(store.clone()),
                    )
                    .with_batch_config(config)
                    .build();
                    builder = builder.with_span_processor(processor);
                    kept = Some(store);
                }
                Err(e) => tracing::warn!(
                    path = %local.path.display(),
                    error = %e,
                    "cannot open the local trace store; traces are not kept locally"
                ),
            }
        }
        let provider = builder.build();
        let tracer = provider.tracer("eve");
        Ok(Arc::new(Self {
            provider,
            tracer,
            config,
            secrets,
            open: Mutex::new(Open::default()),
            local: kept,
        }))
    }

    /// What tracing is set up with.
    pub fn config(&self) -> &TelemetryConfig {
        &self.config
    }

    /// The local trace store this runtime writes, when it is on (what the console reads).
    pub fn local_store(&self) -> Option<&Arc<local::TraceStore>> {
        self.local.as_ref()
    }

    /// Sends what is buffered (before a one-shot command exits).
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::debug!(error = %e, "flushing spans");
        }
    }

    /// The trace context of turn `seq` of `session`: kept with the turn, or made now (joining
    /// `caller`'s `traceparent` for a root turn, or the parent's subagent call for a child's)
    /// and kept: in `fresh`, the batch that starts the turn, when the turn starts now (no read,
    /// no commit of its own), else in a commit of its own. Remembered in this process until the
    /// turn ends.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn begin_turn(
        &self,
        store: &dyn Store,
        session: &str,
        seq: u64,
        agent: &str,
        started_at: i64,
        caller: Option<&str>,
        parent_call: Option<(&str, &str)>,
        fresh: Option<&mut crate::store::Batch>,
    ) -> Option<TurnTrace> {
        let key = (session.to_owned(), seq);
        if let Some(open) = self.open.lock().ok()?.turns.get(&key) {
            return Some(open.clone());
        }
        let ns = namespace(session);
        // A turn starting now has no kept context yet: nothing to read, and its note rides with
        // the turn's start. A resumed turn reads the one its start kept.
        let kept = match &fresh {
            Some(_) => None,
            None => match store.note(&ns, &seq.to_string()).await {
                Ok(note) => note
                    .and_then(|n| TurnTrace::from_note(&n.text, session, seq, agent, started_at)),
                Err(e) => {
                    tracing::debug!(error = %e, "reading a turn's trace context");
                    None
                }
            },
        };
        let trace = match kept {
            Some(trace) => trace,
            None => {
                let trace = self.new_turn(session, seq, agent, started_at, caller, parent_call);
                let now = now_ms();
                let op = Op::Note(NoteOp::Put(NoteRecord {
                    namespace: ns,
                    key: seq.to_string(),
                    text: trace.to_note(),
                    created_at: now,
                    updated_at: now,
                }));
                match fresh {
                    Some(batch) => {
                        batch.push(op);
                    }
                    None => {
                        let mut batch = crate::store::Batch::new();
                        batch.push(op);
                        if let Err(e) = store.commit(batch).await {
                            tracing::debug!(error = %e, "keeping a turn's trace context");
                        }
                    }
                }
                trace
            }
        };
        if let Ok(mut open) = self.open.lock() {
            open.turns.insert(key, trace.clone());
        }
        Some(trace)
    }

    fn new_turn(
        &self,
        session: &str,
        seq: u64,
        agent: &str,
        started_at: i64,
        caller: Option<&str>,
        parent_call: Option<(&str, &str)>,
    ) -> TurnTrace {
        let seq_text = seq.to_string();
        let span = span_id(&["turn", session, &seq_text]);
        // A subagent's turn runs beneath its parent's call, in the parent's trace, when the
        // parent's turn is open in this process.
        let beneath_parent = parent_call.and_then(|(parent, call_id)| {
            let open = self.open.lock().ok()?;
            let turn = open
                .turns
                .values()
                .filter(|t| t.session == parent)
                .max_by_key(|t| t.seq)?
                .clone();
            Some((turn.trace_id, turn.call_span(call_id), turn.sampled))
        });
        let caller = caller.and_then(parse_traceparent);
        let (trace, parent, parent_sampled) = match (beneath_parent, caller) {
            (Some((t, s, sampled)), _) => (t, Some(s), Some(sampled)),
            (None, Some((t, s, sampled))) => (t, Some(s), Some(sampled)),
            (None, None) => (trace_id(&["trace", session, &seq_text]), None, None),
        };
        let sampled = self
            .config
            .sampling
            .decide(trace.to_bytes(), parent_sampled);
        TurnTrace {
            session: session.to_owned(),
            seq,
            agent: agent.to_owned(),
            trace_id: trace,
            span_id: span,
            parent,
            sampled,
            started_at,
            parent_session: parent_call.map(|(p, _)| p.to_owned()),
        }
    }

    /// The open turn `seq` of `session`, when it runs in this process.
    pub(crate) fn turn(&self, session: &str, seq: u64) -> Option<TurnTrace> {
        let open = self.open.lock().ok()?;
        open.turns.get(&(session.to_owned(), seq)).cloned()
    }

    /// A step of an open turn starts now.
    pub(crate) fn step_began(&self, session: &str, seq: u64, step: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.steps
                .entry((session.to_owned(), seq, step))
                .or_insert_with(SystemTime::now);
        }
    }

    /// The `traceparent` a tool's process and its outgoing requests carry for call `call_id`
    /// of turn `seq` of `session` (the call's span), when the turn is traced here.
    pub fn traceparent_for_call(&self, session: &str, seq: u64, call_id: &str) -> Option<String> {
        let turn = self.turn(session, seq)?;
        turn.sampled
            .then(|| turn.traceparent_of(turn.call_span(call_id)))
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_as_the_w3c_spec_says() {
        let (t, s, sampled) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s.to_string(), "00f067aa0ba902b7");
        assert!(sampled);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        assert_eq!(span_id(&["step", "s", "1"]), span_id(&["step", "s", "1"]));
        assert_ne!(span_id(&["step", "s", "1"]), span_id(&["step", "s1", ""]));
        assert_ne!(
            trace_id(&["trace", "a", "0"]),
            trace_id(&["trace", "a", "1"])
        );
    }
}

#[cfg(test)]
mod shape_tests;
