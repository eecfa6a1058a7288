//! Compile a discovered agent folder into a checked [`Manifest`].

pub mod manifest;

pub use manifest::*;
