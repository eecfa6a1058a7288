//! Integration tests of eve-compile: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod artifacts;
mod auth_methods;
mod behaviours;
mod builtins;
mod diagnostics;
mod hash;
mod hostile;
mod mistakes;
mod oauth;
mod operators;
mod prices;
mod questions;
mod release_policy;
mod sandbox;
mod schema;
mod self_change;
mod support;
mod web;
