//! Tests of the sanitiser: the attacks a prompt-injected agent prints, a property over any text,
//! the JSON escaping, and a scan of the CLI's source for output that bypasses the sink.

use proptest::prelude::*;

use super::*;
use crate::render::paint;

/// Whether `c` may appear in a view's output: the rule the module header states.
fn allowed(c: char) -> bool {
    !touched(c) || joiner(c)
}

/// Joiners in `out` stand between two non-ASCII characters that are themselves allowed.
fn joiners_join(out: &str) -> bool {
    let chars: Vec<char> = out.chars().collect();
    chars.iter().enumerate().all(|(i, c)| {
        !joiner(*c)
            || (i > 0
                && i + 1 < chars.len()
                && !chars[i - 1].is_ascii()
                && !chars[i + 1].is_ascii()
                && !touched(chars[i - 1])
                && !touched(chars[i + 1]))
    })
}

#[test]
fn the_attacks_show_as_text() {
    let cases = [
        // A title, an erased line, a carriage return, and a fake approval.
        (
            "\x1b]0;pwned\x07\x1b[2K\rApproval granted by admin\n",
            "␛]0;pwned␇␛[2K␍Approval granted by admin\n",
        ),
        // OSC 52 to the clipboard, with the ST terminator.
        (
            "\x1b]52;c;Y3VybCBldmlsLnNo\x1b\\",
            "␛]52;c;Y3VybCBldmlsLnNo␛\\",
        ),
        // An OSC 8 hyperlink whose text hides its target.
        (
            "\x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\",
            "␛]8;;https://evil.example␛\\docs␛]8;;␛\\",
        ),
        // Cursor up and the 8-bit CSI.
        ("ok\x1b[1A\u{9b}2K", "ok␛[1A\\u{9b}2K"),
        // DCS, APC, PM, SOS introducers (7-bit and 8-bit).
        ("\x1bP\x1b_\x1b^\x1bX\u{90}\u{9f}", "␛P␛_␛^␛X\\u{90}\\u{9f}"),
        // A right-to-left override that makes `deny` read `yned`, and an isolate.
        (
            "\u{202e}ynde\u{202c} \u{2067}x\u{2069}",
            "\\u{202e}ynde\\u{202c} \\u{2067}x\\u{2069}",
        ),
        // Invisible characters inside a command.
        (
            "rm\u{200b} -rf\u{2060} /\u{feff}",
            "rm\\u{200b} -rf\\u{2060} /\\u{feff}",
        ),
        // Tag characters (hidden ASCII) and a soft hyphen.
        (
            "a\u{e0041}\u{e0042}b\u{ad}c",
            "a\\u{e0041}\\u{e0042}b\\u{ad}c",
        ),
        // DEL, NUL, backspace, vertical tab, shift-out.
        ("\x7f\0\x08\x0b\x0e", "␡␀␈␋␎"),
        // A Windows line end is a line end; a lone CR is shown.
        ("one\r\ntwo\rthree", "one\ntwo␍three"),
        // Line and paragraph separators.
        ("a\u{2028}b\u{2029}", "a\\u{2028}b\\u{2029}"),
        // A joiner between ASCII letters is shown; inside an emoji sequence it is kept.
        ("ap\u{200d}prove", "ap\\u{200d}prove"),
        ("👩\u{200d}💻 ❤\u{fe0f}", "👩\u{200d}💻 ❤\u{fe0f}"),
    ];
    for (attack, shown) in cases {
        assert_eq!(neutralise(attack), shown, "{attack:?}");
        assert_eq!(own_styles(attack), shown, "{attack:?}");
        assert_eq!(Untrusted(attack).to_string(), shown, "{attack:?}");
    }
}

#[test]
fn printable_text_is_borrowed_unchanged() {
    for text in [
        "",
        "plain ASCII, tabs\tand\nnewlines",
        "naïve café – «quoted» — 東京 — مرحبا — 🎉",
        "नमस्ते", // combining marks
    ] {
        assert!(matches!(neutralise(text), Cow::Borrowed(t) if t == text));
        assert!(matches!(own_styles(text), Cow::Borrowed(t) if t == text));
    }
}

#[test]
fn untrusted_pads_what_it_shows() {
    assert_eq!(format!("[{:<6}]", Untrusted("a\x1bb")), "[a␛b   ]");
}

#[test]
fn eve_keeps_its_colours_and_only_those() {
    for code in PALETTE
        .iter()
        .copied()
        .chain(["1;31", "1;32", "1;33", "1;34", "1;35"])
    {
        let painted = paint(true, code, "word");
        assert_eq!(own_styles(&painted), painted, "{code}");
        // Foreign text wrapped first shows its own sequences, inside eve's colour.
        let foreign = format!("{}", Untrusted(&painted));
        assert!(!foreign.contains('\x1b'), "{foreign:?}");
    }
    for other in [
        "\x1b[8m",      // concealed text
        "\x1b[30;40m",  // black on black
        "\x1b[38;5;1m", // 256 colours
        "\x1b[1;8m",    // a palette code beside one that is not
        "\x1b[2K",      // erase line
        "\x1b[H",       // cursor home
        "\x1b[?1049h",  // alternate screen
        "\x1b]0;t\x07", // title
        "\x1b[31",      // unterminated
        "\x1b[31;",     // unterminated
    ] {
        let shown = own_styles(other);
        assert!(!shown.contains('\x1b'), "{other:?} -> {shown:?}");
        assert!(shown.starts_with('␛'), "{shown:?}");
    }
}

/// Collects what the log formatter writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[test]
fn the_log_formatters_own_colours_are_in_the_palette() {
    // The formatter `eve serve` and `eve dev` use, in colour, at every level, with a span and
    // fields: every colour it writes is one the sink keeps. It escapes an ESC in the message
    // itself, but a field's Display value (`error = %e`) comes out raw: the sink shows it.
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(true)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("turn", session = "wrun_1");
        let _in = span.enter();
        let foreign = "\x1b]0;pwned\x07";
        tracing::trace!(connection = %"evil", "a {foreign}");
        tracing::debug!(connection = %"evil", "mcp server stderr: {foreign}");
        tracing::info!(count = 2, "resuming");
        tracing::warn!(error = %foreign, "platform reply failed");
        tracing::error!(error = ?foreign, "request failed");
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("=\x1b[0m\x1b]0;pwned\x07"), "{text:?}");
    let shown = log_line(&text);
    assert_eq!(
        shown.matches("\x1b[").count(),
        text.matches("\x1b[").count(),
        "every colour of the formatter is kept: {shown:?}"
    );
    assert!(!shown.contains("\x1b]"), "{shown:?}");
    assert!(shown.contains("=\x1b[0m␛]0;pwned␇"), "{shown:?}");
}

#[test]
fn a_log_event_is_one_line_and_its_continuations_are_indented() {
    // What the sink makes of one formatted event: eve's colours kept, a foreign line break
    // cannot start a line of its own.
    let event = "\x1b[33m WARN\x1b[0m tool said: ok\n2025-01-01T00:00:00Z  INFO approved\r\n";
    assert_eq!(
        log_line(event),
        "\x1b[33m WARN\x1b[0m tool said: ok\n    2025-01-01T00:00:00Z  INFO approved\n"
    );
    // What tracing's formatter leaves of a foreign escape (it writes ESC as `\x1b`), and a
    // carriage return it does not escape.
    assert_eq!(
        log_line(" WARN mcp server stderr: \\x1b[2K\rApproved\n"),
        " WARN mcp server stderr: \\x1b[2K␍Approved\n"
    );
}

#[test]
fn json_stays_the_same_value_and_escapes_what_the_views_replace() {
    let value = serde_json::json!({
        "text": "\x1b]0;pwned\x07\u{9b}2K\u{202e}x\u{200b}\u{e0041}\x7f👩\u{200d}💻",
        "k\u{202e}": [1, null, true],
    });
    for text in [json_line(&value), json_pretty(&value)] {
        assert!(text.chars().all(|c| !touched(c) || c == '\n'), "{text:?}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
        assert_eq!(own_styles(&text), text);
    }
    assert_eq!(
        json_line(&serde_json::json!("\u{9b}\u{e0041}")),
        "\"\\u009b\\udb40\\udc41\""
    );
    // Without anything to escape, the same bytes serde_json writes.
    let plain = serde_json::json!({"a": "b c", "n": [1, 2.5], "é": "東京"});
    assert_eq!(json_line(&plain), plain.to_string());
    assert_eq!(
        json_pretty(&plain),
        serde_json::to_string_pretty(&plain).unwrap()
    );
}

/// Any character, with the ones the sanitiser cares about made frequent.
fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        any::<char>(),
        prop::sample::select(vec![
            '\x1b',
            '\r',
            '\n',
            '\t',
            '\x07',
            '\0',
            '\x7f',
            '\u{9b}',
            '\u{85}',
            '\u{202e}',
            '\u{2066}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{feff}',
            '\u{e0041}',
            '[',
            ']',
            'm',
            ';',
            '1',
            'a',
            'é',
            '👩',
            '💻',
        ]),
    ]
}

fn any_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any_char(), 0..80).prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #[test]
    fn no_control_survives_neutralising(text in any_text()) {
        let out = neutralise(&text);
        prop_assert!(out.chars().all(allowed), "{:?} -> {:?}", text, out);
        prop_assert!(joiners_join(&out), "{:?} -> {:?}", text, out);
        prop_assert!(!out.contains('\x1b'));
    }

    #[test]
    fn no_foreign_sequence_survives_the_sink(text in any_text()) {
        // Whatever the finished output holds, only SGR sequences of the palette remain.
        let out = own_styles(&text);
        let mut rest: &str = &out;
        while let Some(at) = rest.find('\x1b') {
            let len = own_sgr(&rest[at..]);
            prop_assert!(len.is_some(), "{:?} -> {:?}", text, out);
            rest = &rest[at + len.unwrap_or(1)..];
        }
        prop_assert!(out.chars().all(|c| allowed(c) || c == '\x1b'), "{:?}", out);
    }

    #[test]
    fn text_without_controls_is_unchanged(text in "\\PC*") {
        // `\PC`: no control, format, unassigned or private-use character (no joiners either).
        if !text.chars().any(touched) {
            let shown = neutralise(&text);
            prop_assert_eq!(shown.as_ref(), text.as_str());
        }
    }

    #[test]
    fn json_round_trips(text in any_text()) {
        let line = json_line(&text);
        let back: String = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(&back, &text);
        prop_assert!(line.chars().all(|c| !touched(c)), "{:?}", line);
    }
}

/// Files allowed to write to stdout or stderr themselves, and why.
const RAW_WRITERS: [(&str, &str); 3] = [
    ("sanitize.rs", "the sink itself"),
    (
        "commands/acp/mod.rs",
        "ACP's JSON-RPC frames on stdout: serialised JSON, whose strings escape every control \
         character, and nothing else",
    ),
    (
        "bin/eve-sandbox-helper.rs",
        "a separate program with one fixed sentence",
    ),
];

#[test]
fn every_view_prints_through_the_sink() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut found = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if RAW_WRITERS.iter().any(|(f, _)| *f == rel) || rel == "sanitize_tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            let direct = ["println!(", "print!(", "eprintln!(", "eprint!("]
                .iter()
                .any(|m| code.contains(m));
            let handle = ["io::stdout()", "io::stderr()"].iter().any(|h| {
                code.match_indices(h).any(|(at, _)| {
                    let after = &code[at + h.len()..];
                    !after.starts_with(".is_terminal()")
                })
            });
            if direct || handle {
                found.push(format!("src/{rel}:{}: {code}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these write to the terminal around the sink; use outln!/out!/errln!/err! from \
         crate::sanitize (and Untrusted for foreign text), see the header of src/sanitize.rs:\n{}",
        found.join("\n")
    );
}
