//! Recorded streams split at every byte offset decode to the same events and response.

use eve_runtime::model::{ModelEvent, ModelResponse, ThinkingBlock, anthropic, openai};
use proptest::prelude::*;

use super::wire::{an, oa};

fn openai_stream() -> String {
    [
        oa::role(),
        ": OPENROUTER PROCESSING\n\n".to_owned(),
        oa::reasoning_content("Thinking about "),
        oa::reasoning_content("the wéather 🌦"),
        oa::text("Let me look that up — "),
        oa::text("momentito."),
        oa::tool_start(0, "call_a", "weather", ""),
        oa::tool_args(0, "{\"city\":"),
        oa::tool_start(1, "call_b", "time", "{\"tz\""),
        oa::tool_args(0, " \"Zürich\"}"),
        oa::tool_args(1, ": \"Europe/Zurich\"}"),
        oa::finish("tool_calls"),
        oa::usage(120, 48, 64),
        oa::done(),
    ]
    .concat()
}

fn anthropic_stream() -> String {
    [
        an::message_start(30, 10),
        an::ping(),
        an::thinking_start(0),
        an::thinking_delta(0, "Need the wéather "),
        an::thinking_delta(0, "for 東京."),
        an::signature_delta(0, "c2lnbmF0dXJl"),
        an::block_stop(0),
        an::text_start(1),
        an::text_delta(1, "Checking 🌦 now."),
        an::block_stop(1),
        an::tool_start(2, "toolu_01", "weather"),
        an::json_delta(2, "{\"city\": "),
        an::json_delta(2, "\"東京\"}"),
        an::block_stop(2),
        an::tool_start(3, "toolu_02", "time"),
        an::json_delta(3, "{}"),
        an::block_stop(3),
        an::message_delta("tool_use", 77),
        an::message_stop(),
    ]
    .concat()
}

/// Extended thinking with tools: thinking, redacted thinking, thinking, then a tool call.
fn anthropic_thinking_stream() -> String {
    [
        an::message_start(30, 0),
        an::thinking_start(0),
        an::thinking_delta(0, "Erst das Wétter, "),
        an::thinking_delta(0, "dann 東京."),
        an::signature_delta(0, "c2lnLUE="),
        an::block_stop(0),
        an::redacted_thinking_start(1, "RW5jcnlwdGVk+/=="),
        an::block_stop(1),
        an::thinking_start(2),
        an::thinking_delta(2, "Tool 🌦."),
        an::signature_delta(2, "c2lnLUI="),
        an::block_stop(2),
        an::tool_start(3, "toolu_01", "weather"),
        an::json_delta(3, "{\"city\": \"東京\"}"),
        an::block_stop(3),
        an::message_delta("tool_use", 50),
        an::message_stop(),
    ]
    .concat()
}

type Decoded = (Vec<ModelEvent>, ModelResponse);

fn decode_openai(chunks: &[&[u8]]) -> Decoded {
    let mut decoder = openai::StreamDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk, &mut events).unwrap();
    }
    let response = decoder.finish(&mut events).unwrap();
    (events, response)
}

fn decode_anthropic(chunks: &[&[u8]]) -> Decoded {
    let mut decoder = anthropic::StreamDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk, &mut events).unwrap();
    }
    let response = decoder.finish(&mut events).unwrap();
    (events, response)
}

fn check_every_offset(bytes: &[u8], decode: fn(&[&[u8]]) -> Decoded) -> Decoded {
    let expected = decode(&[bytes]);
    for i in 0..=bytes.len() {
        assert_eq!(
            decode(&[&bytes[..i], &bytes[i..]]),
            expected,
            "split at {i}"
        );
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode(&singles), expected, "byte by byte");
    expected
}

#[test]
fn openai_stream_survives_every_split() {
    let stream = openai_stream();
    let (events, response) = check_every_offset(stream.as_bytes(), decode_openai);
    assert_eq!(response.content, "Let me look that up — momentito.");
    assert_eq!(
        response.reasoning.unwrap().text,
        "Thinking about the wéather 🌦"
    );
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].input["city"], "Zürich");
    assert_eq!(response.tool_calls[1].input["tz"], "Europe/Zurich");
    assert_eq!(response.usage.cache_read_tokens, 64);
    // 2 reasoning, 2 text, 2 starts, 4 argument deltas.
    assert_eq!(events.len(), 10);

    // The same stream with CRLF line endings: a split between `\r` and `\n` must not matter.
    let crlf = stream.replace('\n', "\r\n");
    let (crlf_events, crlf_response) = check_every_offset(crlf.as_bytes(), decode_openai);
    assert_eq!(crlf_events, events);
    assert_eq!(crlf_response.tool_calls, response.tool_calls);
}

#[test]
fn anthropic_stream_survives_every_split() {
    let stream = anthropic_stream();
    let (events, response) = check_every_offset(stream.as_bytes(), decode_anthropic);
    assert_eq!(response.content, "Checking 🌦 now.");
    let reasoning = response.reasoning.unwrap();
    assert_eq!(reasoning.text, "Need the wéather for 東京.");
    assert_eq!(reasoning.signature.as_deref(), Some("c2lnbmF0dXJl"));
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].input["city"], "東京");
    assert_eq!(response.usage.input_tokens, 40);
    assert_eq!(response.usage.output_tokens, 77);
    assert_eq!(events.len(), 2 + 1 + 3 + 2);
}

#[test]
fn anthropic_thinking_blocks_survive_every_split() {
    let stream = anthropic_thinking_stream();
    let (events, response) = check_every_offset(stream.as_bytes(), decode_anthropic);
    let reasoning = response.reasoning.unwrap();
    assert_eq!(reasoning.text, "Erst das Wétter, dann 東京.\n\nTool 🌦.");
    assert_eq!(reasoning.signature.as_deref(), Some("c2lnLUI="));
    assert_eq!(
        reasoning.blocks,
        vec![
            ThinkingBlock::Thinking {
                thinking: "Erst das Wétter, dann 東京.".into(),
                signature: "c2lnLUE=".into(),
            },
            ThinkingBlock::RedactedThinking {
                data: "RW5jcnlwdGVk+/==".into(),
            },
            ThinkingBlock::Thinking {
                thinking: "Tool 🌦.".into(),
                signature: "c2lnLUI=".into(),
            },
        ]
    );
    assert_eq!(response.tool_calls[0].input["city"], "東京");
    // 3 reasoning, 1 start, 1 argument delta.
    assert_eq!(events.len(), 5);
}

fn cut_at(bytes: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
    cuts.iter_mut().for_each(|c| *c %= bytes.len() + 1);
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(&bytes[start..cut]);
        start = cut;
    }
    pieces.push(&bytes[start..]);
    pieces
}

proptest! {
    #[test]
    fn any_chunking_decodes_the_same(cuts in proptest::collection::vec(0usize..10_000, 0..12)) {
        let openai = openai_stream();
        let expected = decode_openai(&[openai.as_bytes()]);
        prop_assert_eq!(decode_openai(&cut_at(openai.as_bytes(), cuts.clone())), expected);
        let anthropic = anthropic_stream();
        let expected = decode_anthropic(&[anthropic.as_bytes()]);
        prop_assert_eq!(decode_anthropic(&cut_at(anthropic.as_bytes(), cuts.clone())), expected);
        let thinking = anthropic_thinking_stream();
        let expected = decode_anthropic(&[thinking.as_bytes()]);
        prop_assert_eq!(decode_anthropic(&cut_at(thinking.as_bytes(), cuts)), expected);
    }
}
