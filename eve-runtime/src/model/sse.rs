//! An incremental Server-Sent-Events parser: bytes in, events out.
//!
//! Both wire protocols we speak (OpenAI Chat Completions, Anthropic Messages) stream their answers
//! as `text/event-stream`. The network hands us chunks cut at arbitrary places (inside a line, between
//! `\r` and `\n`, inside a multi-byte UTF-8 character), so the parser buffers bytes and only decodes
//! whole lines. It follows the WHATWG "event stream interpretation" rules: `\n`, `\r\n` and lone `\r`
//! end a line; a blank line dispatches the event; lines starting with `:` are comments; several
//! `data:` lines are joined with `\n`; a single space after the colon is dropped; a leading BOM is
//! skipped. It never panics, whatever the input.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, or `message` when absent.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` seen, if any.
    pub id: Option<String>,
    /// The `retry:` field of this event, in milliseconds, if any.
    pub retry: Option<u64>,
}

/// Incremental parser state. Feed it with [`SseParser::push`], end with [`SseParser::finish`].
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being received (no terminator yet).
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` at the start of the next one belongs to it.
    after_cr: bool,
    /// Whether the start of the stream (and a possible BOM) is behind us.
    started: bool,
    /// Fields of the event being built.
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    retry: Option<u64>,
    /// Number of events dispatched so far.
    dispatched: usize,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseParser {
    /// A fresh parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many events were dispatched so far.
    pub(crate) fn dispatched(&self) -> usize {
        self.dispatched
    }

    /// Feeds a chunk and appends every event it completes to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) {
        if chunk.is_empty() {
            return;
        }
        if !self.started {
            // Wait until we can tell whether the stream starts with a BOM.
            let mut probe = std::mem::take(&mut self.line);
            probe.extend_from_slice(chunk);
            if probe.len() < BOM.len() && BOM.starts_with(&probe) {
                self.line = probe;
                return;
            }
            self.started = true;
            let rest = probe.strip_prefix(BOM).unwrap_or(&probe).to_vec();
            self.push_started(&rest, out);
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        self.push_started(chunk, out);
    }

    fn push_started(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let (head, tail) = rest.split_at(pos);
            self.line.extend_from_slice(head);
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
            let is_cr = tail.first() == Some(&b'\r');
            rest = tail.get(1..).unwrap_or_default();
            if is_cr {
                match rest.first() {
                    Some(b'\n') => rest = rest.get(1..).unwrap_or_default(),
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.line.extend_from_slice(rest);
    }

    /// Ends the stream. A last line without terminator is taken as a line, and an event whose
    /// blank line never came is still dispatched: servers that close right after their last
    /// `data:` line lose nothing. A truncated payload then fails where it is decoded.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let line = if self.started {
                line
            } else {
                line.strip_prefix(BOM).unwrap_or(&line).to_vec()
            };
            self.process_line(&line, out);
        }
        self.started = true;
        self.after_cr = false;
        self.dispatch(out);
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = line.get(colon + 1..).unwrap_or_default();
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (line.get(..colon).unwrap_or_default(), value)
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok();
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        let retry = self.retry.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        self.dispatched += 1;
        out.push(SseEvent {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
            retry,
        });
    }
}
