//! What a message asks of the turn that takes it, besides its text: an `outputSchema` the turn's
//! answer must satisfy ([`super::output`]), `clientContext` every model call of the turn sees
//! ([`super::client_context`]), and a `turnPolicy` for a message sent while a turn runs.
//!
//! The request bodies are eve's client's (`SendTurnOptions`). What a message asks is stored with
//! it (the inbox row's `input`), and when its turn starts, with the turn (a note under
//! `turn-input:<session>`, keyed by the turn's number), so a turn resumed by another process, or
//! after a restart, still has its schema and its context. Client context is never written to the
//! session's messages: later turns, and whoever reads the history, never see it.

use serde_json::{Map, Value, json};

use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::store::{Batch, NoteOp, NoteRecord, Op, TurnStatus, now_ms};

/// How a message sent while a turn runs joins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessagePolicy {
    /// Folded into the running turn at its next step boundary.
    Steer,
    /// Waits for the running turn to end and starts a turn of its own.
    Queue,
}

/// What a message asks of its turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnInput {
    /// The JSON Schema the turn's result must satisfy.
    pub output_schema: Option<Value>,
    /// User-role context for every model call of the turn, one message each.
    pub client_context: Vec<String>,
    /// How the message joins a running turn, over the agent's `turn_policy`.
    pub turn_policy: Option<MessagePolicy>,
    /// The caller's W3C `traceparent` (the request's header): the turn's trace joins it.
    pub traceparent: Option<String>,
    /// Who sent the message (a principal or a channel identity), as the accepting channel said:
    /// kept with the message and the turn so a turn knows it without a read (memory's `user`
    /// scope, the provider's safety identifier). Never read from a request body.
    pub sender: Option<String>,
}

/// A body field that does not fit: its code and what to send instead.
pub(crate) type InputError = (&'static str, String);

impl TurnInput {
    /// Reads `outputSchema`, `clientContext` and `turnPolicy` from a request body (`null` is
    /// absent). `None` when the body asks none of them.
    pub(crate) fn from_body(body: &Map<String, Value>) -> Result<Option<Self>, InputError> {
        let get = |name: &str| body.get(name).filter(|v| !v.is_null());
        let mut input = Self::default();
        if let Some(schema) = get("outputSchema") {
            input.output_schema = Some(output_schema(schema)?);
        }
        if let Some(context) = get("clientContext") {
            input.client_context = client_context(context)?;
        }
        if let Some(policy) = get("turnPolicy") {
            input.turn_policy = Some(match policy.as_str() {
                Some("steer") => MessagePolicy::Steer,
                Some("queue") => MessagePolicy::Queue,
                _ => {
                    return Err((
                        "invalid_turn_policy",
                        "`turnPolicy` must be \"steer\" or \"queue\".".to_owned(),
                    ));
                }
            });
        }
        Ok((!input.is_empty()).then_some(input))
    }

    /// Whether it asks nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.output_schema.is_none()
            && self.client_context.is_empty()
            && self.turn_policy.is_none()
            && self.traceparent.is_none()
            && self.sender.is_none()
    }

    /// Whether it asks anything of the turn itself (a schema or context), beyond how the message
    /// joins it.
    pub(crate) fn shapes_turn(&self) -> bool {
        self.output_schema.is_some() || !self.client_context.is_empty()
    }

    /// As stored (the inbox row's `input`, a turn's note).
    pub(crate) fn to_value(&self) -> Value {
        let mut out = Map::new();
        if let Some(schema) = &self.output_schema {
            out.insert("outputSchema".into(), schema.clone());
        }
        if !self.client_context.is_empty() {
            out.insert("clientContext".into(), json!(self.client_context));
        }
        if let Some(policy) = self.turn_policy {
            let name = match policy {
                MessagePolicy::Steer => "steer",
                MessagePolicy::Queue => "queue",
            };
            out.insert("turnPolicy".into(), json!(name));
        }
        if let Some(traceparent) = &self.traceparent {
            out.insert("traceparent".into(), json!(traceparent));
        }
        if let Some(sender) = &self.sender {
            out.insert("sender".into(), json!(sender));
        }
        Value::Object(out)
    }

    /// From what [`Self::to_value`] stored (a field that does not read is left out).
    pub(crate) fn from_value(value: &Value) -> Self {
        let Some(map) = value.as_object() else {
            return Self::default();
        };
        let mut input = Self::from_body(map).ok().flatten().unwrap_or_default();
        input.traceparent = map
            .get("traceparent")
            .and_then(Value::as_str)
            .map(str::to_owned);
        input.sender = map.get("sender").and_then(Value::as_str).map(str::to_owned);
        input
    }

    /// Whether the turn that takes the message keeps it (what it asks of the turn, or who sent
    /// it), so a resumed turn runs as it started.
    pub(crate) fn kept_with_turn(&self) -> bool {
        self.shapes_turn() || self.sender.is_some()
    }
}

/// `outputSchema`: a JSON object that compiles as a JSON Schema.
fn output_schema(value: &Value) -> Result<Value, InputError> {
    if !value.is_object() {
        return Err((
            "invalid_output_schema",
            "`outputSchema` must be a JSON Schema object.".to_owned(),
        ));
    }
    if let Err(e) = jsonschema::validator_for(value) {
        return Err((
            "invalid_output_schema",
            format!("`outputSchema` is not a valid JSON Schema: {e}"),
        ));
    }
    Ok(value.clone())
}

/// `clientContext`: a string, non-empty strings, or a JSON object (one message, as JSON).
fn client_context(value: &Value) -> Result<Vec<String>, InputError> {
    let bad = |m: &str| ("invalid_client_context", m.to_owned());
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(vec![s.clone()]),
        Value::String(_) => Err(bad("`clientContext` must not be empty.")),
        Value::Array(items) => items
            .iter()
            .map(|item| match item.as_str() {
                Some(s) if !s.trim().is_empty() => Ok(s.to_owned()),
                _ => Err(bad(
                    "`clientContext` array entries must be non-empty strings.",
                )),
            })
            .collect(),
        Value::Object(_) => Ok(vec![value.to_string()]),
        _ => Err(bad(
            "`clientContext` must be a string, an array of strings, or a JSON object.",
        )),
    }
}

/// The namespace of the notes holding what the turns of `session` were asked.
pub(crate) fn namespace(session: &str) -> String {
    format!("turn-input:{session}")
}

/// The write that keeps `input` with turn `seq` of `session`.
pub(crate) fn keep_with_turn(session: &str, seq: u64, input: &TurnInput) -> Op {
    let now = now_ms();
    Op::Note(NoteOp::Put(NoteRecord {
        namespace: namespace(session),
        key: seq.to_string(),
        text: input.to_value().to_string(),
        created_at: now,
        updated_at: now,
    }))
}

/// What turn `seq` of `session` was asked, as kept with it (nothing: a plain turn).
pub(crate) async fn of_turn(rt: &Runtime, session: &str, seq: u64) -> RuntimeResult<TurnInput> {
    let note = rt
        .inner
        .store
        .note(&namespace(session), &seq.to_string())
        .await?;
    Ok(note
        .and_then(|n| serde_json::from_str::<Value>(&n.text).ok())
        .map(|v| TurnInput::from_value(&v))
        .unwrap_or_default())
}

impl Runtime {
    /// Keeps `input` (an `outputSchema`, `clientContext` sent with answers to input requests)
    /// with the turn of `session` that waits on input, so the turn resumed by the answers runs
    /// under it (what it asks replaces what the turn was asked). Call before answering.
    pub(crate) async fn set_waiting_turn_input(
        &self,
        session: &str,
        input: &TurnInput,
    ) -> RuntimeResult<()> {
        if !input.shapes_turn() {
            return Ok(());
        }
        let turn = self.inner.store.last_turn(session).await?;
        let Some(turn) = turn.filter(|t| t.status == TurnStatus::Waiting) else {
            return Err(RuntimeError::Other(format!(
                "session {session} has no turn waiting for input"
            )));
        };
        // The answers' input replaces what the turn was asked; who sent the turn's message stays.
        let mut input = input.clone();
        if input.sender.is_none() {
            input.sender = of_turn(self, session, turn.seq).await?.sender;
        }
        let mut batch = Batch::durable();
        batch.push(keep_with_turn(session, turn.seq, &input));
        self.commit(batch).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn reads_every_shape_of_client_context() {
        let one = TurnInput::from_body(&body(json!({"clientContext": "on /cart"}))).unwrap();
        assert_eq!(one.unwrap().client_context, vec!["on /cart"]);
        let many = TurnInput::from_body(&body(json!({"clientContext": ["a", "b"]}))).unwrap();
        assert_eq!(many.unwrap().client_context, vec!["a", "b"]);
        let object = TurnInput::from_body(&body(json!({"clientContext": {"page": 2}}))).unwrap();
        assert_eq!(object.unwrap().client_context, vec![r#"{"page":2}"#]);
        for bad in [json!(3), json!([""]), json!(""), json!([1])] {
            let err = TurnInput::from_body(&body(json!({ "clientContext": bad }))).unwrap_err();
            assert_eq!(err.0, "invalid_client_context");
        }
    }

    #[test]
    fn refuses_a_schema_that_does_not_compile_and_a_policy_it_does_not_know() {
        let err = TurnInput::from_body(&body(json!({"outputSchema": {"type": 5}}))).unwrap_err();
        assert_eq!(err.0, "invalid_output_schema");
        let err = TurnInput::from_body(&body(json!({"outputSchema": "x"}))).unwrap_err();
        assert_eq!(err.0, "invalid_output_schema");
        let err = TurnInput::from_body(&body(json!({"turnPolicy": "now"}))).unwrap_err();
        assert_eq!(err.0, "invalid_turn_policy");
        assert_eq!(
            TurnInput::from_body(&body(json!({"message": "hi"}))),
            Ok(None)
        );
    }

    #[test]
    fn survives_being_stored() {
        let input = TurnInput {
            output_schema: Some(json!({"type": "object"})),
            client_context: vec!["ctx".into()],
            turn_policy: Some(MessagePolicy::Queue),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            sender: Some("jwt:alice".into()),
        };
        assert_eq!(TurnInput::from_value(&input.to_value()), input);
    }

    #[test]
    fn a_request_body_never_names_the_sender() {
        let asked = TurnInput::from_body(&body(json!({"sender": "jwt:bob", "clientContext": "c"})))
            .unwrap()
            .unwrap();
        assert_eq!(asked.sender, None);
        assert_eq!(
            TurnInput::from_body(&body(json!({"sender": "jwt:bob"}))),
            Ok(None)
        );
    }
}
