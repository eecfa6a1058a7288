//! Names of the environment variables that configure models, in one place.
//!
//! The CLI documents them, [`super::ModelSettings::resolve`] reads them, tests set them: a typo in one
//! of those places must be a compile error, not a silently ignored variable.

/// `provider/name` of the model; overrides `agent.yaml` `model`.
pub const EVE_MODEL: &str = "EVE_MODEL";
/// Base URL of the provider's API (for example `http://localhost:8000/v1`); overrides the default.
pub const EVE_BASE_URL: &str = "EVE_BASE_URL";
/// API key for whichever provider is selected; wins over the provider's own variable.
pub const EVE_API_KEY: &str = "EVE_API_KEY";
/// OpenAI's usual key variable.
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
/// Anthropic's usual key variable.
pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";
/// DeepSeek's usual key variable.
pub const DEEPSEEK_API_KEY: &str = "DEEPSEEK_API_KEY";
/// Script of the `mock` provider: a path to a JSON file, or inline JSON when it starts with `[`.
pub const EVE_MOCK_SCRIPT: &str = "EVE_MOCK_SCRIPT";
