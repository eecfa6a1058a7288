//! The `eve` binary: parses the command line and hands off to `commands/`.

mod cli;
mod commands;
mod project;
mod render;
mod term;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::dispatch(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}", render::error_line(&format!("{err:#}")));
            ExitCode::from(2)
        }
    }
}
