//! Integration tests of the `eve` binary: one test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ai_sdk;
mod build_cli;
mod channels;
mod chat;
mod crash;
mod dev;
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
mod subagents;
mod support_dev;
mod support_run;
mod templates;
