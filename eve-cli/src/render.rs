//! Terminal output helpers: colour only on a terminal (and never with `NO_COLOR`), short durations.

use std::io::IsTerminal;
use std::time::Duration;

use eve_runtime::env_vars::NO_COLOR;

/// Whether stderr gets colour.
pub fn stderr_color() -> bool {
    std::env::var_os(NO_COLOR).is_none() && std::io::stderr().is_terminal()
}

/// Whether stderr is a terminal (a person reads it).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Whether stdout gets colour.
pub fn stdout_color() -> bool {
    std::env::var_os(NO_COLOR).is_none() && std::io::stdout().is_terminal()
}

/// Wraps text in an ANSI style when `on`.
pub fn paint(on: bool, code: &str, text: &str) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// A one-line error for stderr.
pub fn error_line(msg: &str) -> String {
    format!("{} {msg}", paint(stderr_color(), "1;31", "error:"))
}

/// `1.2 ms`, `340 ms`, `2.1 s`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// `1 tool`, `3 tools`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// What a build holds, for its one-line summary: tools and skills always, the rest when present
/// (`3 tools, 1 skill, 2 schedules`).
pub(crate) fn counted(counts: &eve_compile::build::Counts) -> Vec<String> {
    let mut parts = vec![plural(counts.tools, "tool"), plural(counts.skills, "skill")];
    for (n, w) in [
        (counts.subagents, "subagent"),
        (counts.schedules, "schedule"),
        (counts.hooks, "hook"),
        (counts.connections, "connection"),
        (counts.channels, "channel"),
    ] {
        if n > 0 {
            parts.push(plural(n, w));
        }
    }
    parts
}
