//! One module per command. Each returns the process exit code.

mod build;
mod chat;
mod dev;
mod dev_lines;
mod eval;
mod info;
mod init;
mod memory;
mod releases;
mod run;
mod serve;
mod sessions;

use std::process::ExitCode;

use crate::cli::{Command, MemoryCommand, SessionsCommand};

/// Runs a parsed command.
pub fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Init(args) => init::run(args),
        Command::Info(args) => info::run(args),
        Command::Build(args) => build::run(args),
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Sessions(cmd) => match cmd {
            SessionsCommand::List(args) => sessions::list(args),
            SessionsCommand::Show(args) => sessions::show(args),
            SessionsCommand::Approve(args) => sessions::answer(args, true),
            SessionsCommand::Deny(args) => sessions::answer(args, false),
            SessionsCommand::Cancel(args) => sessions::cancel(args),
            SessionsCommand::Prune(args) => sessions::prune(args),
        },
        Command::Releases(args) => releases::releases(args),
        Command::Activate(args) => releases::activate(args),
        Command::Rollback(args) => releases::rollback(args),
        Command::Memory(cmd) => match cmd {
            MemoryCommand::Show(args) => memory::show(args),
            MemoryCommand::Edit(args) => memory::edit(args),
            MemoryCommand::Clear(args) => memory::clear(args),
        },
    }
}
