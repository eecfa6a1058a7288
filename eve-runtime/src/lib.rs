//! The eve runtime.

pub mod engine;
pub mod env_vars;
pub mod events;
pub mod exec;
pub mod features;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod redact;
pub mod releases;
pub mod schedule;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod wire;
pub mod workspace;
