//! The event envelope on the wire: one NDJSON line per event on a session's stream.
//!
//! Every stored event leaves the runtime in the same envelope, whoever sends it (the HTTP stream,
//! `eve run --json`, an observe hook's stdin): `{"type", "data", "meta": {"at", "id"}}`, with
//! `at` as RFC 3339 with milliseconds. The event names and data fields are in
//! [`crate::engine::events`]; this module is the one place that wraps them.

use serde_json::Value;

use crate::store::{StoredEvent, rfc3339};

impl StoredEvent {
    /// The wire envelope: `{"type", "data", "meta": {"at", "id"}}`.
    pub fn to_wire(&self) -> Value {
        serde_json::json!({
            "type": self.kind,
            "data": self.data,
            "meta": {"at": rfc3339(self.at), "id": self.id},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_has_type_data_and_meta_in_that_order() {
        let event = StoredEvent {
            session_id: "wrun_1".to_owned(),
            index: 3,
            id: "evt_1".to_owned(),
            kind: "turn.started".to_owned(),
            data: serde_json::json!({"sequence": 0}),
            at: 1_764_571_413_606,
        };
        assert_eq!(
            event.to_wire().to_string(),
            r#"{"type":"turn.started","data":{"sequence":0},"meta":{"at":"2025-12-01T06:43:33.606Z","id":"evt_1"}}"#
        );
    }
}
