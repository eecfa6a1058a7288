//! Model clients: one module per wire protocol, behind one trait.
//!
//! The runtime speaks to every provider through [`ModelClient`]: it sends a [`ModelRequest`] (system
//! prompt, history, tool specs) and receives streamed [`ModelEvent`]s plus the assembled
//! [`ModelResponse`]. Clients are hand-written on reqwest so retries, timeouts and stream parsing are
//! ours to test.
//!
//! [`ModelSettings`] says which provider and model to use; [`client`] turns it into a client.
//! Protocols: [`openai`] (OpenAI and every compatible server), [`anthropic`], and [`mock`], the
//! deterministic offline provider. [`windows`] knows the context windows of well-known models, and
//! [`is_context_overflow`] recognises every provider's way of saying "the prompt is too long".

pub mod anthropic;
mod attachment;
pub use attachment::{Attachment, NativeKind};
pub mod mock;
pub mod openai;
pub mod prices;
pub(crate) mod provider;
mod side;
pub mod sse;
pub(crate) use side::{SideError, side_call};
mod stream;
#[cfg(test)]
mod testing;
mod transport;
mod usage;
pub mod windows;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::env_vars as env;

pub use transport::parse_retry_after;
pub use usage::Usage;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: serde_json::Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider call id (`call_…`, `toolu_…`), or one we made up when the provider gave none.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments. Arguments that are not valid JSON are kept as a JSON string.
    pub input: serde_json::Value,
}

/// Reasoning the model produced.
///
/// `text` is what people see (the `reasoning.appended` events, the UI). Anthropic's extended
/// thinking also needs its blocks back, unchanged and in order, when a turn continues after tool
/// use: those are kept in `blocks`. Messages stored before `blocks` existed hold only `text` and
/// the last block's `signature`, and are sent back as one thinking block, as they always were.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// Reasoning text: the thinking blocks' text joined by a blank line; redacted blocks add nothing.
    pub text: String,
    /// Provider signature, when the provider requires it to be round-tripped. With `blocks`, the
    /// last thinking block's signature (what versions that kept no blocks read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The provider's reasoning blocks as they came, to be sent back verbatim (Anthropic). Empty for
    /// other providers and for messages stored in the older format.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<ThinkingBlock>,
}

/// One reasoning block that must go back to the provider exactly as it came. Serialised in
/// Anthropic's own shape: `{"type": "thinking", "thinking", "signature"}` or
/// `{"type": "redacted_thinking", "data"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingBlock {
    /// Visible thinking with the signature the provider verifies.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature of it.
        #[serde(default)]
        signature: String,
    },
    /// Thinking the provider encrypted; `data` is opaque and never shown.
    RedactedThinking {
        /// The encrypted content.
        data: String,
    },
}

/// One message of the conversation history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// From the user.
    User {
        /// Text.
        content: String,
        /// Files sent with the message: references to their copies in the session's workspace.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
    /// From the model.
    Assistant {
        /// Text (may be empty when the model only calls tools).
        content: String,
        /// Reasoning, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<Reasoning>,
        /// Tool calls.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result.
    Tool {
        /// The call this answers.
        call_id: String,
        /// Tool name.
        name: String,
        /// Result text (JSON results are serialised).
        content: String,
        /// Whether the call failed (or was denied, interrupted, refused).
        #[serde(default)]
        is_error: bool,
        /// Images and files the tool returned: references to their copies in the workspace.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
}

impl Message {
    /// A user message of plain text.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
            attachments: Vec::new(),
        }
    }
}

/// Everything one model call needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Model name as the provider knows it (without the `provider/` prefix).
    pub model: String,
    /// System prompt.
    pub system: String,
    /// History, oldest first.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Reasoning effort (`low`, `medium`, `high`), if configured.
    pub reasoning: Option<String>,
    /// Output token cap, if any.
    pub max_output_tokens: Option<u32>,
    /// Whether the model may, must, or must not call a tool (only sent when tools are offered).
    #[serde(default, skip_serializing_if = "ToolChoice::is_auto")]
    pub tool_choice: ToolChoice,
    /// Sampling temperature, when the caller needs one (a reviewer asks for 0); the provider's
    /// default otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// A JSON Schema the final answer must satisfy (the turn's `outputSchema`): sent as the
    /// provider's structured-output mode where it has one (OpenAI's `response_format`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// A one-way hash of the call's principal (`features::safety_id`), sent to providers that
    /// take one (OpenAI's `safety_identifier`, Anthropic's `metadata.user_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_identifier: Option<String>,
}

/// Whether the model may, must, or must not call a tool in one call.
///
/// Sent as OpenAI's `tool_choice` (`auto`, `required`, `none`, `{"type": "function", …}`) or
/// Anthropic's (`auto`, `any`, `none`, `{"type": "tool", …}`). Small local models call tools
/// reliably only when the choice is forced to one named tool: servers such as llama-cpp-python
/// then constrain the output to that tool's schema.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default; nothing is sent).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call a tool.
    None,
    /// The model must call this tool.
    Tool(String),
}

impl ToolChoice {
    /// Whether this is the default, which is not sent on the wire.
    pub(crate) fn is_auto(&self) -> bool {
        *self == ToolChoice::Auto
    }

    /// Parses `agent.yaml`'s `tool_choice` value: `auto`, `required`, `none`, or a tool name.
    pub fn parse(value: &str) -> ToolChoice {
        match value.trim() {
            "" | "auto" => ToolChoice::Auto,
            "required" | "any" => ToolChoice::Required,
            "none" => ToolChoice::None,
            name => ToolChoice::Tool(name.to_owned()),
        }
    }

    /// The choice for step `step` of a turn when the agent configures `configured`: a forced
    /// choice (`required` or a tool name) applies to the turn's first step only, so the model can
    /// answer once it has the tool's result; a named tool is forced only while it is offered.
    /// `none` applies to every step.
    pub fn for_step(configured: Option<&str>, step: u64, offered: &[ToolSpec]) -> ToolChoice {
        let Some(choice) = configured.map(ToolChoice::parse) else {
            return ToolChoice::Auto;
        };
        match choice {
            ToolChoice::None => ToolChoice::None,
            _ if step > 0 || offered.is_empty() => ToolChoice::Auto,
            ToolChoice::Tool(name) if !offered.iter().any(|t| t.name == name) => ToolChoice::Auto,
            other => other,
        }
    }
}

/// Providers cache a prompt prefix only from about this many tokens on (Anthropic: 1024 for
/// most models; OpenAI: 1024).
pub(crate) const CACHEABLE_PREFIX_TOKENS: usize = 1024;

/// A key naming the request's stable prefix (system prompt and tools), when that prefix is long
/// enough to be worth caching: Anthropic's `cache_control` breakpoint goes on it and OpenAI gets
/// it as `prompt_cache_key`, so calls sharing the prefix land on the same cache. `None` for a
/// short prefix (characters / 4 under [`CACHEABLE_PREFIX_TOKENS`]), which no provider caches.
pub(crate) fn prefix_cache_key(request: &ModelRequest) -> Option<String> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update(request.system.as_bytes());
    let mut chars = request.system.len();
    for tool in &request.tools {
        let schema = tool.input_schema.to_string();
        chars += tool.name.len() + tool.description.len() + schema.len();
        hasher.update([0]);
        hasher.update(tool.name.as_bytes());
        hasher.update([0]);
        hasher.update(tool.description.as_bytes());
        hasher.update([0]);
        hasher.update(schema.as_bytes());
    }
    if chars / 4 < CACHEABLE_PREFIX_TOKENS {
        return None;
    }
    Some(format!("eve-{}", &hex::encode(hasher.finalize())[..24]))
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// A natural end.
    #[default]
    Stop,
    /// It wants tool results.
    ToolCalls,
    /// It hit the output cap.
    Length,
    /// Filtered by the provider.
    ContentFilter,
    /// Anything else.
    Other,
}

/// A streamed piece of a response, as it arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ModelEvent {
    /// Visible text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// Reasoning text.
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// A tool call began.
    ToolCallStart {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text for the call with `id`.
    ToolCallDelta {
        /// Call id.
        id: String,
        /// Argument JSON fragment.
        delta: String,
    },
}

/// The assembled result of one model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// Visible text.
    pub content: String,
    /// Reasoning, if any.
    pub reasoning: Option<Reasoning>,
    /// Tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCall>,
    /// Usage.
    pub usage: Usage,
    /// Why it stopped.
    pub finish_reason: FinishReason,
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// 401/403: the key is missing or wrong.
    #[error(
        "the model provider rejected the API key (HTTP {status}): {message}; set the key eve \
         sends with EVE_API_KEY (or the provider's own variable: OPENAI_API_KEY, \
         ANTHROPIC_API_KEY, DEEPSEEK_API_KEY)"
    )]
    Auth {
        /// HTTP status.
        status: u16,
        /// Provider message.
        message: String,
    },
    /// 404: the model does not exist on this server.
    #[error(
        "model `{model}` was not found on {base_url}: {message}; name one this server serves \
         with EVE_MODEL (or `model:` in agent.yaml)"
    )]
    UnknownModel {
        /// Model name.
        model: String,
        /// Server.
        base_url: String,
        /// Provider message.
        message: String,
    },
    /// Any other HTTP error after retries.
    #[error("the model server answered HTTP {status}: {message}")]
    Http {
        /// HTTP status.
        status: u16,
        /// Provider message.
        message: String,
    },
    /// Connection failures and timeouts after retries.
    #[error("cannot reach the model server: {0}")]
    Transport(String),
    /// The stream was cut or held garbage.
    #[error("the model stream was malformed: {0}")]
    Malformed(String),
    /// Configuration problems (unknown provider, missing key).
    #[error("{0}")]
    Config(String),
    /// The provider refused the request because the prompt does not fit the model's context
    /// window (see [`is_context_overflow`]). The engine compacts and retries once.
    #[error(
        "the conversation no longer fits the model's context window (HTTP {status}): {message}"
    )]
    ContextTooLong {
        /// HTTP status (400 or 413 usually; 500 for a stream error object).
        status: u16,
        /// Provider message.
        message: String,
    },
}

impl ModelError {
    /// Whether the provider said the prompt is longer than the model's context window.
    pub fn is_context_overflow(&self) -> bool {
        matches!(self, ModelError::ContextTooLong { .. })
    }
}

/// Whether an error a provider answered (`status`, and its body or message) means "the prompt
/// does not fit the context window", in any of the wordings servers use:
/// - OpenAI, DeepSeek, Groq, llama-cpp-python: code `context_length_exceeded`, "This model's
///   maximum context length is N tokens…"; OpenAI's newer "Input tokens exceed the configured
///   limit"; OpenRouter's "This endpoint's maximum context length";
/// - Anthropic: "prompt is too long: N tokens > M maximum"; HTTP 413 `request_too_large`;
/// - llama.cpp's `llama-server`: "the request exceeds the available context size"
///   (`exceed_context_size_error`), "input is too large to process", "Requested tokens (N)
///   exceed context window of M";
/// - vLLM: "… is longer than the maximum model length of N", "Please reduce the length of the
///   messages";
/// - Mistral: "too large for model with N maximum context length"; Gemini: "input token count …
///   exceeds the maximum number of tokens allowed".
///
/// Rate limits (429: "tokens per minute") are never overflows, whatever they say.
pub fn is_context_overflow(status: u16, text: &str) -> bool {
    if status == 429 {
        return false;
    }
    if status == 413 {
        return true;
    }
    let text = text.to_ascii_lowercase();
    const WORDINGS: [&str; 16] = [
        "context_length_exceeded",
        "maximum context length",
        "context length exceeded",
        "exceeds the context window",
        "exceed context window",
        "exceeds the available context size",
        "exceed_context_size",
        "context window exceeds",
        "input is too large to process",
        "input tokens exceed the configured limit",
        "prompt is too long",
        "maximum model length",
        "reduce the length of the messages",
        "reduce the length of the input",
        "maximum number of tokens allowed",
        "too large for model with",
    ];
    WORDINGS.iter().any(|w| text.contains(w))
}

/// A model provider.
#[async_trait::async_trait]
pub trait ModelClient: Send + Sync {
    /// Makes one call, streaming events to `on_event` as they arrive, and returns the whole response.
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError>;

    /// The model's context window in tokens, if the provider says.
    async fn context_window(&self, model: &str) -> Option<u64>;
}

/// A model provider as named in `provider/model` strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI's API.
    OpenAi,
    /// Any OpenAI-compatible server; needs a base URL.
    OpenAiCompatible,
    /// Anthropic's Messages API.
    Anthropic,
    /// DeepSeek (OpenAI protocol).
    DeepSeek,
    /// Ollama (OpenAI protocol, local).
    Ollama,
    /// vLLM (OpenAI protocol, local).
    Vllm,
    /// llama.cpp's `llama-server` (OpenAI protocol, local).
    LlamaCpp,
    /// The deterministic offline mock.
    Mock,
}

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// OpenAI Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// No network: [`mock::MockClient`].
    Mock,
}

impl Provider {
    /// Every provider, in the order error messages list them.
    pub(crate) const ALL: [Provider; 8] = [
        Provider::OpenAi,
        Provider::OpenAiCompatible,
        Provider::Anthropic,
        Provider::Mock,
        Provider::DeepSeek,
        Provider::Ollama,
        Provider::Vllm,
        Provider::LlamaCpp,
    ];

    /// Parses a provider name (case-insensitive; a few spellings accepted).
    pub fn parse(name: &str) -> Option<Provider> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "openai" => Provider::OpenAi,
            "openai-compatible" | "openai_compatible" | "openai-compat" => {
                Provider::OpenAiCompatible
            }
            "anthropic" => Provider::Anthropic,
            "deepseek" => Provider::DeepSeek,
            "ollama" => Provider::Ollama,
            "vllm" => Provider::Vllm,
            "llamacpp" | "llama.cpp" | "llama-cpp" | "llama_cpp" => Provider::LlamaCpp,
            "mock" => Provider::Mock,
            _ => return None,
        })
    }

    /// The canonical name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::OpenAiCompatible => "openai-compatible",
            Provider::Anthropic => "anthropic",
            Provider::DeepSeek => "deepseek",
            Provider::Ollama => "ollama",
            Provider::Vllm => "vllm",
            Provider::LlamaCpp => "llamacpp",
            Provider::Mock => "mock",
        }
    }

    /// The protocol it speaks.
    pub fn protocol(self) -> Protocol {
        match self {
            Provider::Anthropic => Protocol::Anthropic,
            Provider::Mock => Protocol::Mock,
            _ => Protocol::OpenAi,
        }
    }

    /// The base URL used when none is configured.
    pub(crate) fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("https://api.openai.com/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com"),
            Provider::DeepSeek => Some("https://api.deepseek.com"),
            Provider::Ollama => Some("http://localhost:11434/v1"),
            Provider::Vllm => Some("http://localhost:8000/v1"),
            Provider::LlamaCpp => Some("http://localhost:8080/v1"),
            Provider::OpenAiCompatible | Provider::Mock => None,
        }
    }

    /// The provider's usual API-key variable, if it has one.
    pub(crate) fn api_key_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some(env::OPENAI_API_KEY),
            Provider::Anthropic => Some(env::ANTHROPIC_API_KEY),
            Provider::DeepSeek => Some(env::DEEPSEEK_API_KEY),
            _ => None,
        }
    }

    /// The provider SDK's own base-URL variable, if it has one (`EVE_BASE_URL` wins over it).
    pub(crate) fn base_url_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some(env::OPENAI_BASE_URL),
            Provider::Anthropic => Some(env::ANTHROPIC_BASE_URL),
            _ => None,
        }
    }

    /// Whether its hosted API refuses calls without a key (local servers do not need one).
    pub(crate) fn requires_api_key(self) -> bool {
        matches!(
            self,
            Provider::OpenAi | Provider::Anthropic | Provider::DeepSeek
        )
    }

    fn known_list() -> String {
        Provider::ALL
            .iter()
            .map(|p| format!("`{}`", p.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything needed to build a model client, resolved once before a command runs.
#[derive(Clone, PartialEq)]
pub struct ModelSettings {
    /// Which provider.
    pub provider: Provider,
    /// Model name as the provider knows it (without the `provider/` prefix).
    pub model: String,
    /// API base URL override (else the provider's default).
    pub base_url: Option<String>,
    /// API key, if any.
    pub api_key: Option<String>,
    /// Connect and first-byte timeout of one attempt.
    pub timeout: Duration,
    /// Longest silence allowed between two chunks of a streamed body.
    pub idle_timeout: Duration,
    /// Retries after the first attempt (for 408/409/429/5xx/529 and connection failures).
    pub max_retries: u32,
    /// First backoff delay; doubles on every retry, with jitter.
    pub backoff_base: Duration,
    /// Largest backoff delay.
    pub backoff_max: Duration,
    /// Largest delay a server's `Retry-After` can impose.
    pub retry_after_cap: Duration,
    /// Total time one call may take, every attempt and retry delay included
    /// (`limits.model_call_seconds`).
    pub call_timeout: Duration,
    /// Largest response body of one attempt, in bytes (`limits.model_response_bytes`).
    pub response_bytes: usize,
    /// Context window to report instead of asking the provider (`agent.yaml` `context_window`).
    pub context_window: Option<u64>,
    /// The `mock` provider's script (`EVE_MOCK_SCRIPT`): a path, or inline JSON.
    pub mock_script: Option<String>,
}

impl std::fmt::Debug for ModelSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSettings")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_max", &self.backoff_max)
            .field("retry_after_cap", &self.retry_after_cap)
            .field("call_timeout", &self.call_timeout)
            .field("response_bytes", &self.response_bytes)
            .field("context_window", &self.context_window)
            .field("mock_script", &self.mock_script)
            .finish()
    }
}

impl Default for ModelSettings {
    /// `mock/echo` with default timeouts and retries.
    fn default() -> Self {
        Self::new(Provider::Mock, "echo")
    }
}

/// Default total deadline of one model call (`limits.model_call_seconds`).
pub(crate) const DEFAULT_MODEL_CALL: Duration = Duration::from_secs(300);
/// Default longest silence between content-bearing chunks (`limits.model_idle_seconds`).
pub(crate) const DEFAULT_MODEL_IDLE: Duration = Duration::from_secs(60);
/// Default largest model response body (`limits.model_response_bytes`): 8 MiB.
pub(crate) const DEFAULT_MODEL_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// The model used when neither `EVE_MODEL` nor `agent.yaml` names one.
pub(crate) const DEFAULT_MODEL: &str = "mock/echo";

impl ModelSettings {
    /// Settings for `provider/model` with default timeouts and retries, no key, no base URL.
    pub fn new(provider: Provider, model: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
            base_url: None,
            api_key: None,
            timeout: Duration::from_secs(60),
            idle_timeout: DEFAULT_MODEL_IDLE,
            max_retries: 4,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            retry_after_cap: Duration::from_secs(60),
            call_timeout: DEFAULT_MODEL_CALL,
            response_bytes: DEFAULT_MODEL_RESPONSE_BYTES,
            context_window: None,
            mock_script: None,
        }
    }

    /// Parses `provider/name` (the name may itself contain `/`). A bare `mock` means `mock/echo`.
    pub fn from_model_string(value: &str) -> Result<Self, ModelError> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("mock") {
            return Ok(Self::new(Provider::Mock, "echo"));
        }
        let Some((provider_name, model)) = value.split_once('/') else {
            return Err(ModelError::Config(format!(
                "model `{value}` must be written `provider/name` (for example `openai/gpt-4.1`); \
                 known providers: {}",
                Provider::known_list()
            )));
        };
        let provider = Provider::parse(provider_name).ok_or_else(|| {
            ModelError::Config(format!(
                "unknown model provider `{provider_name}` in `{value}`; known providers: {}",
                Provider::known_list()
            ))
        })?;
        let model = model.trim();
        if model.is_empty() {
            return Err(ModelError::Config(format!(
                "model `{value}` has no model name after `{provider_name}/`"
            )));
        }
        Ok(Self::new(provider, model))
    }

    /// Resolves settings from the environment and `agent.yaml`: model = `EVE_MODEL` >
    /// `agent_model` > [`DEFAULT_MODEL`]; base URL = `EVE_BASE_URL` > the provider SDK's own
    /// variable (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`); key = `EVE_API_KEY` > the
    /// provider's own variable; the mock's script = `EVE_MOCK_SCRIPT`. Empty variables count as
    /// unset. `env` looks a variable up (`|k| std::env::var(k).ok()` in production).
    pub fn resolve(
        agent_model: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ModelError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let model = var(env::EVE_MODEL)
            .or_else(|| {
                agent_model
                    .map(str::to_owned)
                    .filter(|m| !m.trim().is_empty())
            })
            .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
        let mut settings = Self::from_model_string(&model)?;
        settings.base_url = var(env::EVE_BASE_URL)
            .or_else(|| settings.provider.base_url_env().and_then(var))
            .map(|u| u.trim().to_owned());
        settings.api_key = var(env::EVE_API_KEY)
            .or_else(|| settings.provider.api_key_env().and_then(var))
            .map(|k| k.trim().to_owned());
        settings.mock_script = var(env::EVE_MOCK_SCRIPT);
        Ok(settings)
    }

    /// The base URL requests go to: the override, else the provider's default.
    pub fn effective_base_url(&self) -> Option<String> {
        self.base_url
            .clone()
            .or_else(|| self.provider.default_base_url().map(str::to_owned))
    }

    /// Checks what a client needs: a base URL for `openai-compatible`, an API key for hosted
    /// providers (unless the base URL is overridden, e.g. a local proxy).
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.provider == Provider::OpenAiCompatible && self.base_url.is_none() {
            return Err(ModelError::Config(format!(
                "provider `openai-compatible` needs the server's base URL: set {} \
                 (for example http://localhost:8000/v1)",
                env::EVE_BASE_URL
            )));
        }
        if let Some(url) = &self.base_url {
            let parsed = reqwest::Url::parse(url);
            let usable = parsed.as_ref().is_ok_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some_and(|h| !h.is_empty())
            });
            if !usable {
                let from = match self.provider.base_url_env() {
                    Some(own) => format!("{} (or {own})", env::EVE_BASE_URL),
                    None => env::EVE_BASE_URL.to_owned(),
                };
                return Err(ModelError::Config(format!(
                    "the model server's base URL `{url}` from {from} is not an http(s) URL with a \
                     host: use for example http://localhost:8000/v1"
                )));
            }
        }
        let has_key = self.api_key.as_deref().is_some_and(|k| !k.is_empty());
        if self.provider.requires_api_key() && self.base_url.is_none() && !has_key {
            let own = self.provider.api_key_env().unwrap_or(env::EVE_API_KEY);
            return Err(ModelError::Config(format!(
                "model `{}/{}` needs an API key: set {own} (or {})",
                self.provider,
                self.model,
                env::EVE_API_KEY
            )));
        }
        Ok(())
    }
}

/// Builds the client for `settings` (after [`ModelSettings::validate`]).
pub fn client(settings: &ModelSettings) -> Result<Arc<dyn ModelClient>, ModelError> {
    settings.validate()?;
    Ok(match settings.provider.protocol() {
        Protocol::OpenAi => Arc::new(openai::OpenAiClient::new(settings)?),
        Protocol::Anthropic => Arc::new(anthropic::AnthropicClient::new(settings)?),
        Protocol::Mock => Arc::new(
            mock::MockClient::new(&settings.model, settings.mock_script.as_deref())?
                .with_context_window(settings.context_window),
        ),
    })
}
