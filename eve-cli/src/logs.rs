//! The log output of `eve serve` and `eve dev`: standard error, with every secret the runtime knows
//! shown as `${VAR}` (the last of the redaction chokepoints listed in `eve_runtime::redact`), and
//! through the terminal sink ([`crate::sanitize::write_log`]): a log line may quote an MCP
//! server's stderr or a tool's error, and neither may drive the terminal or forge a log line.
//!
//! One registry per process: the runtime the command starts learns into it (its
//! `RuntimeConfig::secrets`), and the log writer redacts each event's line with it.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use eve_runtime::redact::Secrets;

/// `eve serve`'s log filter when `EVE_LOG` is not set (`docs/cli.md` names it; a docs test checks).
pub const SERVE_FILTER: &str = "warn";
/// `eve dev`'s: warnings, and each schedule fire (`docs/cli.md` names it; a docs test checks).
pub const DEV_FILTER: &str = "warn,eve_runtime::schedule=info";

static SECRETS: OnceLock<Arc<Secrets>> = OnceLock::new();

/// The process's registry of secrets.
pub fn secrets() -> Arc<Secrets> {
    SECRETS.get_or_init(|| Arc::new(Secrets::new())).clone()
}

/// Makes a [`RedactedLine`] per log event.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactingStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine {
            secrets: secrets(),
            buf: Vec::new(),
        }
    }
}

/// One log event's text, written to standard error redacted when it is complete.
pub struct RedactedLine {
    secrets: Arc<Secrets>,
    buf: Vec<u8>,
}

impl RedactedLine {
    fn emit(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        let shown = self.secrets.redact(&text);
        crate::sanitize::write_log(&shown);
        self.buf.clear();
    }
}

impl Write for RedactedLine {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.emit();
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        self.emit();
    }
}
