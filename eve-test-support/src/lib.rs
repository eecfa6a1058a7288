//! Test support shared by `eve-runtime`'s and `eve-cli`'s integration tests, so that the two
//! suites lay out agents, compare streams and wait the same way instead of keeping copies.
//!
//! - [`TestAgent`]: a project folder in a temp dir with `agent/` laid out as a user would write it.
//! - [`capture`]: our event streams against the captured eve 0.80.1 streams.
//! - [`eventually`], [`eventually_async`]: wait for a condition, with a deadline.
//! - [`json_or_text`], [`lines_of`]: reading what a server answered or a tool wrote.
//!
//! Helpers only one suite needs stay in that suite's `tests/` folder. This is test code: a panic
//! is how a helper reports that the test failed, so `unwrap` and `expect` are allowed here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent;
pub mod capture;
mod wait;

pub use agent::TestAgent;
pub use wait::{eventually, eventually_async};

use std::path::Path;

use serde_json::Value;

/// A response body as JSON, or as a JSON string when it is not JSON.
pub fn json_or_text(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The lines of a file, none when it does not exist (yet): the side-effect log tools append to.
pub fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
