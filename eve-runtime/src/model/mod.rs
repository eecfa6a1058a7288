//! Model clients: one module per wire protocol, behind one trait.
//!
//! The runtime speaks to every provider through [`ModelClient`]: it sends a [`ModelRequest`] (system
//! prompt, history, tool specs) and receives streamed [`ModelEvent`]s plus the assembled
//! [`ModelResponse`]. Clients are hand-written on reqwest so retries, timeouts and stream parsing are
//! ours to test.

use serde::{Deserialize, Serialize};

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

/// Reasoning the model produced (Anthropic thinking blocks carry a signature that must be sent back).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// Reasoning text.
    pub text: String,
    /// Provider signature, when the provider requires it to be round-tripped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// One message of the conversation history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// From the user.
    User {
        /// Text.
        content: String,
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
    },
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
}

/// Token usage of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from cache.
    pub cache_read_tokens: u64,
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
    #[error("the model provider rejected the API key (HTTP {status}): {message}")]
    Auth {
        /// HTTP status.
        status: u16,
        /// Provider message.
        message: String,
    },
    /// 404: the model does not exist on this server.
    #[error("model `{model}` was not found on {base_url}: {message}")]
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
