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

/// Where `eve dev` writes its log, under the project's `.eve/`: JSON lines, whatever
/// `EVE_LOG_FORMAT` says of standard error (`eve logs` reads it).
pub const DEV_LOG: &str = "logs/dev.log";

/// The size past which the dev log is rotated: the file becomes `dev.log.1` (replacing the one
/// before) and a new one starts, so the two hold at most twice this.
pub const DEV_LOG_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Whether `EVE_LOG_FORMAT` asks for JSON lines.
pub fn json_format() -> bool {
    std::env::var(eve_runtime::env_vars::EVE_LOG_FORMAT)
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("json"))
}

/// Starts the process's log: standard error, filtered by `EVE_LOG` (else `default_filter`), as
/// text (coloured when `ansi`) or JSON lines (`EVE_LOG_FORMAT=json`), every secret redacted;
/// with `file`, also JSON lines into that file (rotated, see [`DEV_LOG_MAX_BYTES`]).
pub fn init(default_filter: &str, ansi: bool, file: Option<std::path::PathBuf>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _, fmt};
    let filter = EnvFilter::try_from_env(eve_runtime::env_vars::EVE_LOG)
        .unwrap_or_else(|_| EnvFilter::new(default_filter));
    let stderr = if json_format() {
        fmt::layer()
            .json()
            .with_current_span(false)
            .with_writer(RedactingStderr)
            .boxed()
    } else {
        fmt::layer()
            .with_writer(RedactingStderr)
            .with_ansi(ansi)
            .boxed()
    };
    let file = file.and_then(|path| {
        let log = FileLog::open(path)?;
        Some(
            fmt::layer()
                .json()
                .with_current_span(false)
                .with_writer(log)
                .boxed(),
        )
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file)
        .try_init();
}

/// A log file of JSON lines, redacted like standard error, rotated at [`DEV_LOG_MAX_BYTES`].
#[derive(Clone)]
pub struct FileLog {
    inner: Arc<std::sync::Mutex<(std::path::PathBuf, std::fs::File, u64)>>,
}

impl FileLog {
    /// Opens (appends to) `path`, creating its folder; `None` when it cannot be written.
    pub fn open(path: std::path::PathBuf) -> Option<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ok()?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .ok()?;
        let size = file.metadata().map_or(0, |m| m.len());
        Some(Self {
            inner: Arc::new(std::sync::Mutex::new((path, file, size))),
        })
    }

    fn append(&self, line: &str) {
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let (path, file, size) = &mut *guard;
        if *size > 0 && *size + line.len() as u64 > DEV_LOG_MAX_BYTES {
            let mut old = path.clone().into_os_string();
            old.push(".1");
            let _ = std::fs::rename(&*path, &old);
            if let Ok(fresh) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&*path)
            {
                *file = fresh;
                *size = 0;
            }
        }
        if file.write_all(line.as_bytes()).is_ok() {
            *size += line.len() as u64;
        }
    }
}

/// One event's line for a [`FileLog`], written whole when complete.
pub struct FileLine {
    log: FileLog,
    buf: Vec<u8>,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for FileLog {
    type Writer = FileLine;

    fn make_writer(&'a self) -> Self::Writer {
        FileLine {
            log: self.clone(),
            buf: Vec::new(),
        }
    }
}

impl Write for FileLine {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for FileLine {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        self.log.append(&secrets().redact(&text));
    }
}
