//! Integration tests of the `eve` binary: one test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod crash;
mod examples;
mod run_cli;
mod support_run;
mod serve;
mod support_dev;
mod dev;
mod chat;
mod schedules;
mod ai_sdk;
mod build_cli;
mod docs;
mod subagents;
