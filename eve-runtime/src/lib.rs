//! The eve runtime.
//!
//! The public API exists for two callers: the `eve` CLI (`eve-cli`: build, dev, serve, run, chat,
//! sessions, store and release commands) and this crate's integration tests (`tests/`, examples).
//! Everything else is `pub(crate)`: an item is `pub` only when one of those uses it, and
//! `unreachable_pub` keeps items of private modules from claiming more.
#![warn(unreachable_pub)]

pub mod builds;
pub mod content;
pub mod engine;
pub mod env_vars;
pub mod events;
pub mod exec;
pub mod features;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod redact;
pub mod releases;
pub mod retention;
pub mod schedule;
pub mod server;
pub mod store;
pub mod telemetry;
pub(crate) mod tenancy;
pub mod tools;
pub mod wire;
pub mod workspace;
