//! Progress from a running script tool: a line the tool writes to **stderr** starting with
//! [`PREFIX`] (`eve:progress Fetching page 2 of 5`) is a progress report. The runtime streams each
//! as `action.partial` with the text as its label (eve's event for a preliminary result) while
//! the call runs; the line stays in stderr as well.
//!
//! The text is the tool's, so it is bounded: control characters are dropped, a label is cut to
//! [`MAX_LABEL_CHARS`], and one call reports at most [`MAX_REPORTS`] times (later lines are
//! ignored), so a chatty tool cannot flood the session's stream.

use tokio::sync::mpsc;

/// What starts a progress line on stderr.
pub(crate) const PREFIX: &str = "eve:progress ";
/// The longest label, in characters.
pub(crate) const MAX_LABEL_CHARS: usize = 200;
/// Most progress reports of one call.
pub(crate) const MAX_REPORTS: usize = 100;
/// The longest line looked at; a longer one is not a progress line.
const MAX_LINE_BYTES: usize = 4096;

/// Where a call's progress labels are sent.
pub(crate) type ProgressSink = mpsc::Sender<String>;

/// Finds progress lines in a stream of stderr chunks.
#[derive(Debug)]
pub(crate) struct ProgressLines {
    sink: ProgressSink,
    line: Vec<u8>,
    overlong: bool,
    sent: usize,
}

impl ProgressLines {
    pub(crate) fn new(sink: ProgressSink) -> Self {
        Self {
            sink,
            line: Vec::new(),
            overlong: false,
            sent: 0,
        }
    }

    /// Takes the next chunk of stderr.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        for &byte in chunk {
            if byte == b'\n' {
                if !self.overlong {
                    self.line_done();
                }
                self.line.clear();
                self.overlong = false;
            } else if self.line.len() < MAX_LINE_BYTES {
                self.line.push(byte);
            } else {
                self.overlong = true;
            }
        }
    }

    fn line_done(&mut self) {
        if self.sent >= MAX_REPORTS {
            return;
        }
        let text = String::from_utf8_lossy(&self.line);
        let Some(rest) = text.trim_end_matches('\r').strip_prefix(PREFIX) else {
            return;
        };
        let label = label(rest);
        if label.is_empty() {
            return;
        }
        // A full queue drops the report rather than block the tool's stderr.
        if self.sink.try_send(label).is_ok() {
            self.sent += 1;
        }
    }
}

/// A progress text as a label: control characters dropped, trimmed, cut to [`MAX_LABEL_CHARS`].
pub(crate) fn label(text: &str) -> String {
    let clean: String = text.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    let mut out: String = clean.chars().take(MAX_LABEL_CHARS).collect();
    if clean.chars().count() > MAX_LABEL_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_progress_lines_across_chunks() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut lines = ProgressLines::new(tx);
        lines.feed(b"warning: x\neve:progr");
        lines.feed(b"ess Step 1\x1b[31m of 2\r\nnot eve:progress x\n");
        lines.feed(b"eve:progress   \n");
        assert_eq!(rx.try_recv().unwrap(), "Step 1[31m of 2");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn reports_are_bounded() {
        let (tx, mut rx) = mpsc::channel(1000);
        let mut lines = ProgressLines::new(tx);
        for i in 0..(MAX_REPORTS + 50) {
            lines.feed(format!("eve:progress {i}\n").as_bytes());
        }
        let mut n = 0;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        assert_eq!(n, MAX_REPORTS);
        let long = format!("eve:progress {}\n", "y".repeat(1000));
        let (tx, mut rx) = mpsc::channel(4);
        ProgressLines::new(tx).feed(long.as_bytes());
        assert_eq!(rx.try_recv().unwrap().chars().count(), MAX_LABEL_CHARS + 1);
    }
}
