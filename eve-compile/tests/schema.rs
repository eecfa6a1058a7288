//! The checked-in manifest JSON Schema matches the Rust types.

use std::path::PathBuf;

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/manifest.schema.json")
}

/// Fails when `docs/manifest.schema.json` is stale. Regenerate with
/// `EVE_UPDATE_SCHEMA=1 cargo test -p eve-compile schema`.
#[test]
fn manifest_schema_is_up_to_date() {
    let generated = eve_compile::schema::manifest_schema_json();
    let path = schema_path();
    if std::env::var_os("EVE_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/manifest.schema.json is stale: run `EVE_UPDATE_SCHEMA=1 cargo test -p eve-compile schema` and commit it"
    );
}

/// Every diagnostic code is documented in `docs/diagnostics.md`.
#[test]
fn every_code_is_documented() {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/diagnostics.md"),
    )
    .unwrap();
    for code in eve_discover::Code::ALL {
        assert!(
            doc.contains(&format!("| {} |", code.as_str())),
            "docs/diagnostics.md does not document {}",
            code.as_str()
        );
    }
}
