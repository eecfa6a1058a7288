//! The `eve` command as a library: the clap definition (`cli`), one module per command
//! (`commands`), and [`main`], which the binary calls.
//!
//! A library target so that tests can reach the command-line definition itself
//! (`eve_cli::cli::Cli::command()`) instead of parsing `--help` text.

pub mod cli;
pub mod commands;
pub mod logs;
mod project;
mod render;
mod sanitize;
mod term;
mod yaml_edit;

use std::process::ExitCode;

use clap::Parser;

/// Parses the command line, runs the command, and turns an error into one line on stderr and
/// exit status 2.
pub fn main() -> ExitCode {
    quiet_broken_pipe();
    let cli = cli::Cli::parse();
    match commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            // An error may quote a tool, a model or a server: shown neutralised.
            let text = format!("{err:#}");
            let text = logs::secrets().redact(&text);
            sanitize::errln!(
                "{}",
                render::error_line(&sanitize::Untrusted(&text).to_string())
            );
            ExitCode::from(2)
        }
    }
}

/// `eve sessions list | head` (and `eve build 2>&1 | head`) must end quietly when the reader goes
/// away, as other Unix tools do: a write to a closed stdout or stderr ends the process with the
/// status a SIGPIPE death would give (141) instead of a panic. Every other panic keeps the default
/// report.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        let closed = message.contains("failed printing to stdout")
            || message.contains("failed printing to stderr");
        if closed && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
