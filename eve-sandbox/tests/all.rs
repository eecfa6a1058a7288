//! The one integration-test binary of eve-sandbox.

mod isolate;
