//! The manifest's JSON Schema, generated from its Rust types.
//!
//! `docs/manifest.schema.json` is this output, checked in; a test fails when it is stale, so the
//! published schema can never drift from what `eve build` writes.

/// The JSON Schema of [`crate::Manifest`], pretty-printed with a trailing newline.
pub fn manifest_schema_json() -> String {
    let schema = schemars::schema_for!(crate::Manifest);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}
