//! The schema hash: its value for known schemas is fixed (manifests and the built-in tools of the
//! runtime carry it), it ignores key order, and it equals the SHA-256 of the compact serialisation
//! of the value with every object's keys sorted, for any JSON value.

use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use eve_compile::hash::json_hash;

/// The definition the hash must keep: sort every object's keys, serialise compactly, SHA-256.
fn reference(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    hex::encode(Sha256::digest(sorted(value).to_string().as_bytes()))
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

#[test]
fn known_schemas_keep_their_hash() {
    // The schema of a tool without `input:`.
    assert_eq!(
        json_hash(&json!({"type": "object", "properties": {}})),
        "efddc7bd8bbcef73a14eb1ace1ffdaec81e518ef1e13c1e9271d0b8acb694a49"
    );
    assert_eq!(
        json_hash(&json!({
            "type": "object",
            "required": ["city"],
            "properties": {"city": {"type": "string", "description": "a \"quoted\" name", "maxLength": 64}},
        })),
        "ef6ee24a73a3fa563160ac9d9952328a4e99f061dac185b986abfce21613a53f"
    );
}

#[test]
fn key_order_does_not_change_the_hash() {
    let a: Value =
        serde_json::from_str(r#"{"b": {"y": 1, "x": [2, {"q": 1, "p": 2}]}, "a": null}"#).unwrap();
    let b: Value =
        serde_json::from_str(r#"{"a": null, "b": {"x": [2, {"p": 2, "q": 1}], "y": 1}}"#).unwrap();
    assert_eq!(json_hash(&a), json_hash(&b));
    let c: Value =
        serde_json::from_str(r#"{"a": null, "b": {"x": [{"p": 2, "q": 1}, 2], "y": 1}}"#).unwrap();
    assert_ne!(
        json_hash(&a),
        json_hash(&c),
        "array order is part of the value"
    );
}

proptest! {
    #[test]
    fn the_hash_is_sha256_of_the_sorted_compact_form(value in json_value()) {
        prop_assert_eq!(json_hash(&value), reference(&value));
    }
}
