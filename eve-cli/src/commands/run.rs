//! `eve run`: one prompt, streamed, then exit.

use std::process::ExitCode;

use crate::cli::RunArgs;

pub fn run(_args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`eve run` is not available in this build")
}
