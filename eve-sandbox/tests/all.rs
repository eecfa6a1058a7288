//! Integration tests of eve-sandbox: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod egress;
mod egress_private;
mod isolate;
