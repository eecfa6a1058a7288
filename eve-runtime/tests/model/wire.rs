//! Event constructors for the two wire formats, byte-exact as the providers send them.

use serde_json::{Value, json};

/// OpenAI Chat Completions chunks.
pub mod oa {
    use super::*;

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        let body = json!({
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "test-model",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        format!("data: {body}\n\n")
    }

    pub fn role() -> String {
        chunk(json!({"role": "assistant", "content": ""}), None)
    }

    pub fn text(t: &str) -> String {
        chunk(json!({"content": t}), None)
    }

    /// DeepSeek / vLLM style.
    pub fn reasoning_content(t: &str) -> String {
        chunk(json!({"reasoning_content": t, "content": null}), None)
    }

    /// OpenRouter / Ollama style.
    pub fn reasoning(t: &str) -> String {
        chunk(json!({"reasoning": t}), None)
    }

    /// First chunk of a tool call: id, name, and (usually empty) arguments.
    pub fn tool_start(index: u64, id: &str, name: &str, args: &str) -> String {
        chunk(
            json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": args},
            }]}),
            None,
        )
    }

    /// A later chunk of a tool call: arguments only.
    pub fn tool_args(index: u64, args: &str) -> String {
        chunk(
            json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}),
            None,
        )
    }

    pub fn finish(reason: &str) -> String {
        chunk(json!({}), Some(reason))
    }

    pub fn usage(prompt: u64, completion: u64, cached: u64) -> String {
        let body = json!({
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "test-model",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        });
        format!("data: {body}\n\n")
    }

    pub fn done() -> String {
        "data: [DONE]\n\n".to_owned()
    }
}

/// Anthropic Messages events.
pub mod an {
    use super::*;

    fn event(name: &str, data: Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    pub fn message_start(input: u64, cache_read: u64) -> String {
        event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_test", "type": "message", "role": "assistant", "model": "test-model",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 1,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": cache_read},
            }}),
        )
    }

    pub fn ping() -> String {
        event("ping", json!({"type": "ping"}))
    }

    pub fn text_start(index: u64) -> String {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        )
    }

    pub fn text_delta(index: u64, t: &str) -> String {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "text_delta", "text": t}}),
        )
    }

    pub fn thinking_start(index: u64) -> String {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        )
    }

    pub fn thinking_delta(index: u64, t: &str) -> String {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "thinking_delta", "thinking": t}}),
        )
    }

    pub fn signature_delta(index: u64, signature: &str) -> String {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "signature_delta", "signature": signature}}),
        )
    }

    /// A `redacted_thinking` block: it arrives whole in its start event, with no deltas.
    pub fn redacted_thinking_start(index: u64, data: &str) -> String {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "redacted_thinking", "data": data}}),
        )
    }

    pub fn tool_start(index: u64, id: &str, name: &str) -> String {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        )
    }

    pub fn json_delta(index: u64, partial: &str) -> String {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": partial}}),
        )
    }

    pub fn block_stop(index: u64) -> String {
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        )
    }

    pub fn message_delta(stop_reason: &str, output: u64) -> String {
        event(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output}}),
        )
    }

    pub fn message_stop() -> String {
        event("message_stop", json!({"type": "message_stop"}))
    }

    pub fn error(kind: &str, message: &str) -> String {
        event(
            "error",
            json!({"type": "error", "error": {"type": kind, "message": message}}),
        )
    }
}
