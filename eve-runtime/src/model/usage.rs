//! Token usage of a model call: what the provider reported, or, when it reported nothing
//! (llama.cpp, some proxies), an estimate from the request and the answer, marked as one, so token
//! and cost limits still apply.

use serde::{Deserialize, Serialize};

use super::ModelResponse;

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
    /// The server reported no usage, so eve estimated it (a token is about four characters of
    /// the request and the answer); limits and costs still apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// An estimate of a call's usage from the bytes of its request and the characters of its
    /// answer, for servers that report none (llama.cpp, some proxies).
    pub(crate) fn estimate(request_bytes: usize, response: &ModelResponse) -> Self {
        let answer = response.content.len()
            + response.reasoning.as_ref().map_or(0, |r| r.text.len())
            + response
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.input.to_string().len())
                .sum::<usize>();
        let tokens = |chars: usize| (chars as u64).div_ceil(4);
        Self {
            input_tokens: tokens(request_bytes),
            output_tokens: tokens(answer).max(1),
            cache_read_tokens: 0,
            estimated: true,
        }
    }

    /// Whether the server reported nothing at all.
    pub(crate) fn is_missing(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0 && self.cache_read_tokens == 0
    }
}
