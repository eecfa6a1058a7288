//! The SSE parser on its own.

use eve_runtime::model::sse::{SseEvent, SseParser};

fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        parser.push(chunk, &mut out);
    }
    parser.finish(&mut out);
    out
}

fn parse(input: &str) -> Vec<SseEvent> {
    parse_chunks(&[input.as_bytes()])
}

fn ev(event: &str, data: &str) -> SseEvent {
    SseEvent {
        event: event.into(),
        data: data.into(),
        id: None,
        retry: None,
    }
}

#[test]
fn line_endings_fields_and_comments() {
    assert_eq!(
        parse(
            "event: ping\ndata: {}\n\n: keep-alive comment\n\ndata:no-space\r\n\r\ndata:  two\r\rdata: a\ndata: b\n\n"
        ),
        vec![
            ev("ping", "{}"),
            ev("message", "no-space"),
            ev("message", " two"),
            ev("message", "a\nb"),
        ]
    );
}

#[test]
fn events_without_data_are_not_dispatched_and_their_name_does_not_leak() {
    assert_eq!(
        parse("event: lonely\n\ndata: x\n\n"),
        vec![ev("message", "x")]
    );
    // A bare `data` line is an empty data line.
    assert_eq!(parse("data\n\n"), vec![ev("message", "")]);
}

#[test]
fn ids_persist_and_retry_is_read() {
    let events = parse("id: 7\nretry: 1500\ndata: a\n\ndata: b\n\nid\ndata: c\n\n");
    assert_eq!(events[0].id.as_deref(), Some("7"));
    assert_eq!(events[0].retry, Some(1500));
    assert_eq!(events[1].id.as_deref(), Some("7"));
    assert_eq!(events[1].retry, None);
    assert_eq!(events[2].id.as_deref(), Some(""));
}

#[test]
fn a_leading_bom_is_skipped_even_when_split() {
    let input = b"\xEF\xBB\xBFdata: x\n\n";
    assert_eq!(parse_chunks(&[input]), vec![ev("message", "x")]);
    assert_eq!(
        parse_chunks(&[&input[..1], &input[1..2], &input[2..]]),
        vec![ev("message", "x")]
    );
}

#[test]
fn the_last_event_is_kept_at_eof_without_a_blank_line() {
    assert_eq!(parse("data: [DONE]"), vec![ev("message", "[DONE]")]);
    assert_eq!(parse("data: a\n"), vec![ev("message", "a")]);
}

#[test]
fn invalid_utf8_never_panics() {
    let events = parse_chunks(&[b"data: \xFF\xFE ok\n\n", b"\xC3"]);
    assert_eq!(events.len(), 1);
    assert!(events[0].data.ends_with(" ok"));
}

#[test]
fn every_split_point_gives_the_same_events() {
    let input = "event: a\r\ndata: héllo 🌍\r\ndata: ünïcödé\r\n\r\n: comment\rdata: cr only\r\rid: 9\ndata: 日本語\n\n";
    let bytes = input.as_bytes();
    let expected = parse(input);
    assert_eq!(expected.len(), 3);
    assert_eq!(expected[0].data, "héllo 🌍\nünïcödé");
    for i in 0..=bytes.len() {
        assert_eq!(
            parse_chunks(&[&bytes[..i], &bytes[i..]]),
            expected,
            "split at {i}"
        );
        for j in i..=bytes.len() {
            assert_eq!(
                parse_chunks(&[&bytes[..i], &bytes[i..j], &bytes[j..]]),
                expected,
                "split at {i} and {j}"
            );
        }
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(parse_chunks(&singles), expected);
}
