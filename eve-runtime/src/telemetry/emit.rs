//! The spans themselves: their names, kinds, parents and GenAI attributes. Every span is made
//! whole once what it covers is over (its start and end given), with its parent named by id, so
//! a span's children may be sent by another process than the one that sends it.

use std::time::SystemTime;

use opentelemetry::trace::{
    Link, SpanBuilder, SpanId, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};

use super::{NEXT_IDS, Telemetry, TurnTrace, at_ms};
use crate::model::{ModelRequest, ModelResponse};
use crate::store::{CallStatus, ToolCallRecord};

/// One span to send.
pub(super) struct SpanSpec {
    pub name: String,
    pub kind: SpanKind,
    /// Its parent in the turn's trace; `None`: the turn's own parent (the turn's span).
    pub parent: Option<SpanId>,
    /// Its own id when others refer to it; else a random one.
    pub id: Option<SpanId>,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub links: Vec<Link>,
    /// An error type and message: the span's status is an error.
    pub error: Option<(String, String)>,
}

impl Telemetry {
    /// A string attribute, redacted.
    pub(super) fn text(&self, key: &'static str, value: &str) -> KeyValue {
        KeyValue::new(key, self.secrets.redact(value).into_owned())
    }

    /// Attributes every span of a turn carries.
    fn turn_attributes(&self, turn: &TurnTrace) -> Vec<KeyValue> {
        vec![
            self.text("gen_ai.conversation.id", &turn.session),
            self.text("gen_ai.agent.name", &turn.agent),
            self.text("eve.session.id", &turn.session),
            KeyValue::new("eve.turn", turn.seq as i64),
        ]
    }

    /// Sends `spec` as a span of `turn`'s trace.
    pub(super) fn send(&self, turn: &TurnTrace, mut spec: SpanSpec) {
        if !turn.sampled {
            return;
        }
        let parent = spec.parent.or(turn.parent);
        let cx = match parent {
            Some(span) => Context::new().with_remote_span_context(turn.context_of(span)),
            None => Context::new(),
        };
        let mut attributes = self.turn_attributes(turn);
        attributes.append(&mut spec.attributes);
        let builder = SpanBuilder::from_name(spec.name)
            .with_kind(spec.kind)
            .with_start_time(spec.start)
            .with_attributes(attributes)
            .with_links(spec.links);
        NEXT_IDS.with(|n| n.set((Some(turn.trace_id), spec.id)));
        let mut span = self.tracer.build_with_context(builder, &cx);
        NEXT_IDS.with(|n| n.set((None, None)));
        use opentelemetry::trace::Span as _;
        if let Some((kind, message)) = spec.error {
            span.set_attribute(self.text("error.type", &kind));
            span.set_status(Status::error(self.secrets.redact(&message).into_owned()));
        }
        span.end_with_timestamp(spec.end.max(spec.start));
    }

    /// A model call of step `step` (`chat {model}`), from `start` to now.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn chat(
        &self,
        turn: &TurnTrace,
        step: u64,
        model_id: &str,
        model: &str,
        start: SystemTime,
        request: Option<&ModelRequest>,
        result: Result<&ModelResponse, &str>,
    ) {
        let provider = model_id
            .split_once('/')
            .map_or("unknown", |(provider, _)| provider);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            self.text("gen_ai.provider.name", provider),
            self.text("gen_ai.request.model", model),
            KeyValue::new("eve.step", step as i64),
        ];
        if let Some(request) = request {
            if let Some(max) = request.max_output_tokens {
                attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(max)));
            }
            if let Some(t) = request.temperature {
                attributes.push(KeyValue::new("gen_ai.request.temperature", f64::from(t)));
            }
            if self.config.capture_content {
                attributes.push(self.text("gen_ai.system_instructions", &request.system));
                let messages = serde_json::to_string(&request.messages).unwrap_or_default();
                attributes.push(self.text("gen_ai.input.messages", &messages));
            }
        }
        let mut error = None;
        match result {
            Ok(response) => {
                let finish = serde_json::to_value(response.finish_reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "stop".to_owned());
                attributes.extend([
                    self.text("gen_ai.response.model", model),
                    KeyValue::new(
                        "gen_ai.usage.input_tokens",
                        response.usage.input_tokens as i64,
                    ),
                    KeyValue::new(
                        "gen_ai.usage.output_tokens",
                        response.usage.output_tokens as i64,
                    ),
                    KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        Value::Array(Array::String(vec![StringValue::from(finish)])),
                    ),
                ]);
                if response.usage.cache_read_tokens > 0 {
                    attributes.push(KeyValue::new(
                        "gen_ai.usage.cache_read.input_tokens",
                        response.usage.cache_read_tokens as i64,
                    ));
                }
                if response.usage.estimated {
                    attributes.push(KeyValue::new("eve.usage.estimated", true));
                }
                if self.config.capture_content {
                    let output = serde_json::json!([{
                        "role": "assistant",
                        "content": response.content,
                        "tool_calls": response.tool_calls,
                    }])
                    .to_string();
                    attributes.push(self.text("gen_ai.output.messages", &output));
                }
            }
            Err(message) => error = Some(("model_error".to_owned(), message.to_owned())),
        }
        self.send(
            turn,
            SpanSpec {
                name: format!("chat {model}"),
                kind: SpanKind::Client,
                parent: Some(turn.step_span(step)),
                id: None,
                start,
                end: SystemTime::now(),
                attributes,
                links: Vec::new(),
                error,
            },
        );
    }

    /// A tool call as it is settled (`execute_tool {tool}`): from when it started running (or
    /// was decided) to now, with its effect and outcome.
    pub(crate) fn tool(&self, turn: &TurnTrace, call: &ToolCallRecord) {
        let end = SystemTime::now();
        let start = call.started_at.map_or(end, at_ms);
        let kind = if call.kind == "load-skill" {
            "extension"
        } else {
            "function"
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            self.text("gen_ai.tool.name", &call.name),
            self.text("gen_ai.tool.call.id", &call.call_id),
            KeyValue::new("gen_ai.tool.type", kind),
            self.text("eve.tool.effect", &call.effect),
            KeyValue::new("eve.tool.outcome", call.status.as_str()),
            KeyValue::new("eve.step", call.step_index as i64),
        ];
        if call.attempts > 1 {
            attributes.push(KeyValue::new("eve.tool.attempts", i64::from(call.attempts)));
        }
        if self.config.capture_content {
            attributes.push(self.text("gen_ai.tool.call.arguments", &call.input.to_string()));
            if let Some(output) = &call.output {
                attributes.push(self.text("gen_ai.tool.call.result", &output.to_string()));
            }
        }
        let error = (call.status != CallStatus::Completed).then(|| {
            (
                call.status.as_str().to_owned(),
                format!("the call {}", call.status.as_str()),
            )
        });
        self.send(
            turn,
            SpanSpec {
                name: format!("execute_tool {}", call.name),
                kind: SpanKind::Internal,
                parent: Some(turn.step_span(call.step_index)),
                id: Some(turn.call_span(&call.call_id)),
                start,
                end,
                attributes,
                links: Vec::new(),
                error,
            },
        );
    }
}
