//! The eve runtime.

pub mod model;
pub mod tools;
pub mod engine;
pub mod store;
pub mod mcp;
pub mod server;
pub mod schedule;
