//! Integration tests of the `eve` binary: one test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ai_sdk;
mod build_cli;
mod channels;
mod chat;
mod chat_tty;
mod crash;
mod dev;
mod dev_lines;
mod docs;
mod docs_env;
mod eval;
mod examples;
mod fail_fast;
mod limits;
mod memory;
mod plan;
mod redaction;
mod run_cli;
mod schedules;
mod serve;
mod sessions_cli;
mod subagents;
mod support_dev;
mod support_run;
mod templates;
