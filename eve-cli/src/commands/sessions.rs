//! `eve sessions`: list, show, approve, deny.

use std::process::ExitCode;

use crate::cli::{SessionsAnswerArgs, SessionsListArgs, SessionsShowArgs};

pub fn list(_args: SessionsListArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`eve sessions` is not available in this build")
}

pub fn show(_args: SessionsShowArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`eve sessions` is not available in this build")
}

pub fn answer(_args: SessionsAnswerArgs, _approve: bool) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`eve sessions` is not available in this build")
}
