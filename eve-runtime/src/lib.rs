//! The eve runtime.

pub mod model;
pub mod tools;
