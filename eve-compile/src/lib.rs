//! Compile a discovered agent folder into a checked [`Manifest`], and write build artifacts.
//!
//! `eve build` = [`eve_discover::discover`] + [`compile::compile`] + [`build::write`]. This crate is
//! pure Rust over files (no async, no network) so builds take milliseconds.

pub mod build;
pub mod compile;
pub mod cron;
pub mod delta;
pub mod evals;
mod fields;
pub mod frontmatter;
pub mod hash;
pub mod interpreters;
pub mod layout;
pub mod manifest;
pub mod pack;
pub mod project;
pub mod prompt_template;
pub mod render;
pub mod schema;
pub mod tz;
pub mod yaml;

pub use compile::{Options, Output, compile};
pub use delta::{Change, ChangeKind, Delta, capability_delta};
pub use fields::parse_duration_ms;
pub use manifest::*;

pub use project::Project;
