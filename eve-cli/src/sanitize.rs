//! Everything eve prints to the terminal goes through here, so text from outside eve (a model's
//! reply, a tool's output, a hook's or an MCP server's message, a platform user's message, an
//! error quoting any of them) can never drive the terminal: move the cursor, erase or overwrite
//! a line, set the window title, write the clipboard (OSC 52), open a hyperlink (OSC 8), or make
//! a line read differently from what it holds (bidi overrides, invisible characters).
//!
//! Two layers, so a new view is hard to get wrong:
//! - [`Untrusted`] (and [`neutralise`]) shows foreign text with every control character and
//!   invisible formatting character replaced by a visible form. Views wrap each foreign value
//!   in it *before* adding eve's own colours.
//! - The output macros ([`outln!`], [`out!`], [`errln!`], [`err!`]) are the only way the CLI
//!   writes to stdout and stderr (a test of this module rejects `println!` and friends anywhere
//!   else in `src/`). They pass the finished text through [`own_styles`], which keeps the colour
//!   sequences eve itself uses (its [`PALETTE`]) and neutralises every other control, so a
//!   foreign value a view forgot to wrap can at most borrow one of eve's colours, never move the
//!   cursor or hide text.
//!
//! What is replaced, and how it shows:
//! - C0 controls except `\n` and `\t` (so `\r`, BEL, BS, ESC…) and DEL become their Unicode
//!   control pictures (`␛`, `␍`, `␇`, `␡`); a `\r` just before `\n` is dropped (a Windows line end
//!   overwrites nothing). Because ESC itself is shown, no escape sequence (CSI, OSC, DCS, APC, PM,
//!   SOS) reaches the terminal: its remaining characters print as plain text.
//! - C1 controls (U+0080–U+009F, including the 8-bit CSI U+009B), bidi controls (U+061C,
//!   U+200E/F, U+202A–U+202E, U+2066–U+2069), and invisible characters that can make text read
//!   differently (zero-width space, word joiner and invisible operators, soft hyphen, BOM,
//!   Hangul fillers, line and paragraph separators, interlinear annotations, tag characters
//!   U+E0000–U+E007F, the variation selectors of U+E0100–U+E01EF…) become `\u{…}`.
//! - Zero-width joiner and non-joiner are kept between two non-ASCII characters (emoji
//!   sequences, Persian and Indic scripts), and shown as `\u{200d}` next to ASCII. The variation
//!   selectors U+FE00–U+FE0F (emoji presentation) and combining marks are kept.
//!
//! `--json` output is not text for a person: [`json_line`] and [`json_pretty`] write the exact
//! JSON value, escaping (as `\u009b`, `\u202e`) the same characters the views replace, so it
//! parses to the very bytes eve stored and is still safe to print on a terminal.
//!
//! Debug builds only: `EVE_TEST_RAW_TERMINAL=1` turns both layers off, so tests can show the
//! attack text reaching the terminal when nothing neutralises it. A release build ignores it.

use std::borrow::Cow;
use std::fmt::{self, Display, Write as _};
use std::io::Write as _;

/// The SGR parameters eve's own colours use (`crate::render::paint`, the diagnostics of
/// `eve_compile::render`, the log formatter of `eve serve`/`eve dev`): reset, bold, dim, italic,
/// normal intensity, and the foreground colours red to cyan. [`own_styles`] keeps `ESC [ … m`
/// made of these and nothing else (none of them can hide text or move the cursor).
pub const PALETTE: [&str; 11] = ["0", "1", "2", "3", "22", "31", "32", "33", "34", "35", "36"];

/// Whether the test-only switch turned neutralising off (debug builds only).
fn raw() -> bool {
    #[cfg(debug_assertions)]
    {
        static RAW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *RAW.get_or_init(|| {
            std::env::var_os(eve_runtime::env_vars::EVE_TEST_RAW_TERMINAL).is_some_and(|v| v == "1")
        })
    }
    #[cfg(not(debug_assertions))]
    {
        false
    }
}

/// Characters shown as `\u{…}` wherever they are (the joiners have a rule of their own).
fn hidden(c: char) -> bool {
    matches!(c,
        '\u{80}'..='\u{9f}'
        | '\u{ad}'
        | '\u{34f}'
        | '\u{61c}'
        | '\u{115f}'..='\u{1160}'
        | '\u{17b4}'..='\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{200b}'
        | '\u{200e}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{3164}'
        | '\u{feff}'
        | '\u{ffa0}'
        | '\u{fff9}'..='\u{fffb}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e007f}'
        | '\u{e0100}'..='\u{e01ef}')
}

/// Zero-width non-joiner and joiner.
fn joiner(c: char) -> bool {
    matches!(c, '\u{200c}' | '\u{200d}')
}

/// Whether [`neutralise`] may change `c` (context aside): what [`json_line`] escapes.
fn touched(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || hidden(c) || joiner(c)
}

/// Appends the visible form of `c`, or `c` itself when it is harmless. `prev` and `next` are
/// its neighbours (for the joiners).
fn push_shown(out: &mut String, c: char, prev: Option<char>, next: Option<char>) {
    match c {
        '\n' | '\t' => out.push(c),
        '\r' if next == Some('\n') => {}
        '\u{0}'..='\u{1f}' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('?')),
        '\u{7f}' => out.push('\u{2421}'),
        c if hidden(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c if joiner(c) => {
            let joins = |n: Option<char>| n.is_some_and(|n| !n.is_ascii() && !touched(n));
            if joins(prev) && joins(next) {
                out.push(c);
            } else {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
        c => out.push(c),
    }
}

/// `text` with every control and invisible formatting character replaced by a visible form (the
/// module header lists them); `\n`, `\t` and printable text unchanged.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    if raw() || !text.chars().any(touched) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut prev = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        push_shown(&mut out, c, prev, chars.peek().copied());
        prev = Some(c);
    }
    Cow::Owned(out)
}

/// Foreign text, shown neutralised when formatted (`{}`; width and alignment apply).
#[derive(Debug, Clone, Copy)]
pub struct Untrusted<T>(pub T);

impl<T: Display> Display for Untrusted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        f.pad(&neutralise(&text))
    }
}

/// The length of the SGR sequence of eve's palette at the start of `rest` (which starts with
/// ESC), if it is one.
fn own_sgr(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix("\u{1b}[")?;
    let end = body.find('m')?;
    let params = &body[..end];
    let ok = params.is_empty() || params.split(';').all(|p| PALETTE.contains(&p));
    ok.then_some(2 + end + 1)
}

/// Eve's finished output: the colour sequences of its [`PALETTE`] kept, every other control and
/// invisible character neutralised as [`neutralise`] does.
pub fn own_styles(text: &str) -> Cow<'_, str> {
    if raw() || !text.chars().any(touched) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut prev = None;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '\u{1b}'
            && let Some(len) = own_sgr(rest)
        {
            out.push_str(&rest[..len]);
            rest = &rest[len..];
            prev = Some('m');
            continue;
        }
        rest = &rest[c.len_utf8()..];
        push_shown(&mut out, c, prev, rest.chars().next());
        prev = Some(c);
    }
    Cow::Owned(out)
}

/// Writes formatted text to stdout through [`own_styles`]: what [`out!`] and [`outln!`] do.
pub fn write_out(args: fmt::Arguments<'_>, newline: bool) {
    let text = args.to_string();
    let shown = own_styles(&text);
    if newline {
        println!("{shown}");
    } else {
        print!("{shown}");
        let _ = std::io::stdout().flush();
    }
}

/// Writes formatted text to stderr through [`own_styles`]: what [`err!`] and [`errln!`] do.
pub fn write_err(args: fmt::Arguments<'_>, newline: bool) {
    let text = args.to_string();
    let shown = own_styles(&text);
    if newline {
        eprintln!("{shown}");
    } else {
        eprint!("{shown}");
        let _ = std::io::stderr().flush();
    }
}

/// Eve's own line control on stderr: `\r` and erase-line, for the status lines of `eve chat`
/// and `eve eval` (a `'static` string: no foreign text can come this way).
pub fn erase_err_line() {
    let mut err = std::io::stderr();
    let _ = err.write_all(b"\r\x1b[2K");
    let _ = err.flush();
}

/// One event of the `eve serve`/`eve dev` log, written to stderr: the formatter's own colours
/// kept, every other control neutralised (the formatter escapes an ESC in a message, but not in a
/// field's value, nor `\r` or bidi controls anywhere), and the lines after the first indented, so
/// text inside a log event cannot pass for a log line of its own.
pub fn write_log(event: &str) {
    let _ = std::io::stderr()
        .lock()
        .write_all(log_line(event).as_bytes());
}

/// What [`write_log`] writes for one event.
fn log_line(event: &str) -> String {
    let shown = own_styles(event);
    let body = shown.strip_suffix('\n').unwrap_or(&shown);
    let mut line = body.replace('\n', "\n    ");
    line.push('\n');
    line
}

/// A JSON formatter that also escapes what [`neutralise`] would change (DEL, C1 controls, bidi
/// and invisible characters), as `\uXXXX`: the same JSON value, safe on a terminal.
struct Escaping<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for Escaping<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if raw() {
            return writer.write_all(fragment.as_bytes());
        }
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if touched(c) {
                writer.write_all(&fragment.as_bytes()[start..i])?;
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(writer, "\\u{unit:04x}")?;
                }
                start = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

fn json_with<F: serde_json::ser::Formatter>(
    value: &(impl serde::Serialize + ?Sized),
    formatter: F,
) -> String {
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, Escaping(formatter));
    if value.serialize(&mut ser).is_err() {
        return "null".to_owned();
    }
    // The formatter writes whole UTF-8 strings and ASCII escapes only.
    String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `value` as one line of JSON, with what the terminal must not see escaped.
pub fn json_line(value: &(impl serde::Serialize + ?Sized)) -> String {
    json_with(value, serde_json::ser::CompactFormatter)
}

/// `value` as indented JSON, with what the terminal must not see escaped.
pub fn json_pretty(value: &(impl serde::Serialize + ?Sized)) -> String {
    json_with(value, serde_json::ser::PrettyFormatter::new())
}

/// `println!` through [`own_styles`]: stdout, eve's colours kept, every other control shown.
macro_rules! outln {
    () => {
        $crate::sanitize::write_out(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::sanitize::write_out(format_args!($($arg)*), true)
    };
}

/// `print!` through [`own_styles`] (flushed).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::sanitize::write_out(format_args!($($arg)*), false)
    };
}

/// `eprintln!` through [`own_styles`].
macro_rules! errln {
    () => {
        $crate::sanitize::write_err(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::sanitize::write_err(format_args!($($arg)*), true)
    };
}

/// `eprint!` through [`own_styles`] (flushed).
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::sanitize::write_err(format_args!($($arg)*), false)
    };
}

pub(crate) use {err, errln, out, outln};

#[cfg(test)]
#[path = "sanitize_tests.rs"]
mod tests;
