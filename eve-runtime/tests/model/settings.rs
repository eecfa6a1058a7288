//! Model strings, environment precedence and the client factory.

use std::collections::HashMap;

use eve_runtime::env_vars::{
    ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, EVE_API_KEY, EVE_BASE_URL, EVE_MOCK_SCRIPT, EVE_MODEL,
    OPENAI_API_KEY, OPENAI_BASE_URL,
};
use eve_runtime::model::{ModelError, ModelSettings, Protocol, Provider, client};

fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn config_message(error: ModelError) -> String {
    match error {
        ModelError::Config(message) => message,
        other => panic!("expected a Config error, got {other:?}"),
    }
}

#[test]
fn model_strings_name_provider_and_model() {
    let s = ModelSettings::from_model_string("openai/gpt-4.1").unwrap();
    assert_eq!(
        (s.provider, s.model.as_str()),
        (Provider::OpenAi, "gpt-4.1")
    );
    let s = ModelSettings::from_model_string("vllm/meta-llama/Llama-3.1-8B-Instruct").unwrap();
    assert_eq!(s.provider, Provider::Vllm);
    assert_eq!(s.model, "meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(s.provider.protocol(), Protocol::OpenAi);
    assert_eq!(
        s.effective_base_url().as_deref(),
        Some("http://localhost:8000/v1")
    );
    let s = ModelSettings::from_model_string("mock").unwrap();
    assert_eq!((s.provider, s.model.as_str()), (Provider::Mock, "echo"));
    for (name, url) in [
        ("deepseek/deepseek-chat", "https://api.deepseek.com"),
        ("ollama/llama3.2", "http://localhost:11434/v1"),
        ("llamacpp/any", "http://localhost:8080/v1"),
        ("anthropic/claude-sonnet-4-5", "https://api.anthropic.com"),
    ] {
        let s = ModelSettings::from_model_string(name).unwrap();
        assert_eq!(s.effective_base_url().as_deref(), Some(url), "{name}");
    }
    assert_eq!(
        ModelSettings::from_model_string("openai-compatible/x")
            .unwrap()
            .provider
            .protocol(),
        Protocol::OpenAi
    );
}

#[test]
fn bad_model_strings_say_what_is_known() {
    let message = config_message(ModelSettings::from_model_string("gemini/pro").unwrap_err());
    assert!(message.contains("`gemini`"), "{message}");
    for known in ["openai", "openai-compatible", "anthropic", "mock"] {
        assert!(message.contains(&format!("`{known}`")), "{message}");
    }
    let message = config_message(ModelSettings::from_model_string("gpt-4.1").unwrap_err());
    assert!(message.contains("provider/name"), "{message}");
    let message = config_message(ModelSettings::from_model_string("openai/").unwrap_err());
    assert!(message.contains("no model name"), "{message}");
}

#[test]
fn resolve_applies_env_over_agent_yaml_over_default() {
    let s = ModelSettings::resolve(None, &env_of(&[])).unwrap();
    assert_eq!((s.provider, s.model.as_str()), (Provider::Mock, "echo"));

    let s = ModelSettings::resolve(
        Some("anthropic/claude"),
        &env_of(&[(ANTHROPIC_API_KEY, "ak")]),
    )
    .unwrap();
    assert_eq!(s.provider, Provider::Anthropic);
    assert_eq!(s.api_key.as_deref(), Some("ak"));

    let env = env_of(&[
        (EVE_MODEL, "openai/gpt-4.1-mini"),
        (OPENAI_API_KEY, "provider-key"),
        (EVE_API_KEY, "eve-key"),
        (EVE_BASE_URL, "http://localhost:4000/v1"),
        (EVE_MOCK_SCRIPT, "[]"),
    ]);
    let s = ModelSettings::resolve(Some("anthropic/claude"), &env).unwrap();
    assert_eq!(
        (s.provider, s.model.as_str()),
        (Provider::OpenAi, "gpt-4.1-mini")
    );
    assert_eq!(s.api_key.as_deref(), Some("eve-key"));
    assert_eq!(s.base_url.as_deref(), Some("http://localhost:4000/v1"));
    assert_eq!(s.mock_script.as_deref(), Some("[]"));

    // Empty variables count as unset.
    let s = ModelSettings::resolve(
        Some("openai/gpt-4.1"),
        &env_of(&[(EVE_MODEL, ""), (EVE_API_KEY, ""), (OPENAI_API_KEY, "ok")]),
    )
    .unwrap();
    assert_eq!(s.model, "gpt-4.1");
    assert_eq!(s.api_key.as_deref(), Some("ok"));

    // The provider SDKs' own base-URL variables count, below EVE_BASE_URL, for their provider only.
    let sdk = env_of(&[
        (OPENAI_BASE_URL, "http://127.0.0.1:4001/v1"),
        (ANTHROPIC_BASE_URL, "http://127.0.0.1:4002"),
    ]);
    let s = ModelSettings::resolve(Some("openai/gpt-4.1"), &sdk).unwrap();
    assert_eq!(s.base_url.as_deref(), Some("http://127.0.0.1:4001/v1"));
    let s = ModelSettings::resolve(Some("anthropic/claude"), &sdk).unwrap();
    assert_eq!(s.base_url.as_deref(), Some("http://127.0.0.1:4002"));
    let s = ModelSettings::resolve(Some("vllm/m"), &sdk).unwrap();
    assert_eq!(
        s.base_url, None,
        "OPENAI_BASE_URL is OpenAI's, not every server's"
    );
    let s = ModelSettings::resolve(
        Some("openai/gpt-4.1"),
        &env_of(&[
            (OPENAI_BASE_URL, "http://127.0.0.1:4001/v1"),
            (EVE_BASE_URL, "http://127.0.0.1:4000/v1"),
        ]),
    )
    .unwrap();
    assert_eq!(s.base_url.as_deref(), Some("http://127.0.0.1:4000/v1"));
}

#[test]
fn a_base_url_that_is_not_an_http_url_is_refused_before_any_call() {
    for bad in [
        "localhost:8000",
        "ftp://x/v1",
        "http://",
        "not a url",
        "/v1",
    ] {
        for (model, var) in [
            ("openai/gpt-4.1", OPENAI_BASE_URL),
            ("openai/gpt-4.1", EVE_BASE_URL),
            ("vllm/m", EVE_BASE_URL),
        ] {
            let s = ModelSettings::resolve(Some(model), &env_of(&[(var, bad)])).unwrap();
            let message = config_message(client(&s).err().unwrap());
            assert!(
                message.contains(bad) && message.contains(EVE_BASE_URL),
                "{model} {var}={bad}: {message}"
            );
        }
    }
    for good in [
        "http://localhost:8000/v1",
        "https://gw.example.com/openai/v1/",
        "http://[::1]:8080",
    ] {
        let s = ModelSettings::resolve(Some("vllm/m"), &env_of(&[(EVE_BASE_URL, good)])).unwrap();
        assert!(client(&s).is_ok(), "{good}");
    }
}

#[test]
fn missing_keys_and_base_urls_are_config_errors_naming_the_variable() {
    let openai = ModelSettings::resolve(Some("openai/gpt-4.1"), &env_of(&[])).unwrap();
    let message = config_message(client(&openai).err().unwrap());
    assert!(message.contains(OPENAI_API_KEY), "{message}");
    assert!(message.contains(EVE_API_KEY), "{message}");

    let anthropic = ModelSettings::resolve(Some("anthropic/claude"), &env_of(&[])).unwrap();
    let message = config_message(client(&anthropic).err().unwrap());
    assert!(message.contains(ANTHROPIC_API_KEY), "{message}");

    let compatible = ModelSettings::resolve(Some("openai-compatible/x"), &env_of(&[])).unwrap();
    let message = config_message(client(&compatible).err().unwrap());
    assert!(message.contains(EVE_BASE_URL), "{message}");

    // A base URL override (a local proxy) needs no key; local servers never do.
    let proxied = ModelSettings::resolve(
        Some("openai/gpt-4.1"),
        &env_of(&[(EVE_BASE_URL, "http://127.0.0.1:4000/v1")]),
    )
    .unwrap();
    assert!(client(&proxied).is_ok());
    let local = ModelSettings::resolve(Some("ollama/llama3.2"), &env_of(&[])).unwrap();
    assert!(client(&local).is_ok());
    let mock = ModelSettings::resolve(None, &env_of(&[])).unwrap();
    assert!(client(&mock).is_ok());
}

#[test]
fn debug_output_hides_the_api_key() {
    let mut s = ModelSettings::from_model_string("openai/gpt-4.1").unwrap();
    s.api_key = Some("sk-secret-value".into());
    let shown = format!("{s:?}");
    assert!(!shown.contains("sk-secret-value"), "{shown}");
    assert!(shown.contains("redacted"), "{shown}");
}

#[test]
fn retry_after_accepts_seconds_and_http_dates() {
    use eve_runtime::model::parse_retry_after;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
    assert_eq!(
        parse_retry_after(" 1.5 ", now),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-3", now), None);
    let _ = SystemTime::now();
}
