//! Input validation: every violation, with its path, before anything runs.

use eve_runtime::tools::{Validators, run_validated};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Fixture;

fn weather_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1},
            "units": {"enum": ["metric", "imperial"]},
            "stops": {"type": "array", "items": {"type": "object", "properties": {"at": {"type": "string"}}}}
        },
        "required": ["city"],
        "additionalProperties": false
    })
}

#[test]
fn violations_are_listed_with_their_paths() {
    let fx = Fixture::new();
    let mut t = fx.sh_tool("weather", "echo");
    t.input_schema = weather_schema();
    let validators = Validators::new(&[t]);
    assert_eq!(
        validators.validate("weather", &json!({"city": "Oslo", "days": 2})),
        Ok(())
    );
    let errors = validators
        .validate(
            "weather",
            &json!({"days": 0, "units": "kelvin", "stops": [{"at": 5}], "extra": 1}),
        )
        .unwrap_err();
    let joined = errors.join("\n");
    assert_eq!(errors.len(), 5, "{joined}");
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("input: ") && e.contains("\"city\" is a required property")),
        "{joined}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("input/days: ")),
        "{joined}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("input/units: ")),
        "{joined}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("input/stops/0/at: ")),
        "{joined}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("input: ") && e.contains("extra")),
        "{joined}"
    );
}

#[test]
fn unknown_tools_and_broken_schemas_are_refused_not_panics() {
    let fx = Fixture::new();
    let mut t = fx.sh_tool("broken", "echo");
    t.input_schema = json!({"type": 12});
    let mut validators = Validators::new(&[t]);
    let error = validators.validate("broken", &json!({})).unwrap_err();
    assert!(
        error[0].contains("input schema of `broken` is invalid"),
        "{error:?}"
    );
    let error = validators.validate("nope", &json!({})).unwrap_err();
    assert_eq!(error, vec!["unknown tool `nope`".to_owned()]);
    validators.insert("dynamic", &json!({"type": "object", "required": ["x"]}));
    assert!(validators.contains("dynamic"));
    assert!(validators.validate("dynamic", &json!({"x": 1})).is_ok());
}

#[tokio::test]
async fn invalid_input_runs_nothing() {
    let fx = Fixture::new();
    let mut t = fx.sh_tool("weather", "touch ran; echo '{}'");
    t.input_schema = weather_schema();
    let validators = Validators::new(std::slice::from_ref(&t));
    let r = run_validated(
        &validators,
        &t,
        &json!({"city": 3}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(!r.ok);
    let error = r.error.unwrap();
    assert!(error.contains("input/city: "), "{error}");
    assert!(!fx.ws_file("ran").exists());
    let r = run_validated(
        &validators,
        &t,
        &json!({"city": "Oslo"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert!(fx.ws_file("ran").exists());
}
