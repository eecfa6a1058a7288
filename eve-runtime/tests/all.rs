//! Integration tests of eve-runtime: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod behaviours;
mod channels;
mod composition;
mod deferred;
mod engine;
mod engine_accept;
mod engine_bench;
mod engine_resume;
mod engine_store;
mod engine_support;
mod escape;
mod integrity;
mod mcp;
mod model;
mod schedule;
mod server_auth;
mod server_limits;
mod server_principals;
mod server_routes;
mod server_stream;
mod server_support;
mod store_contract;
mod store_sqlite;
mod tools;
