//! The eve runtime.

pub mod model;
