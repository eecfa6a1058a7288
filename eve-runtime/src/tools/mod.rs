//! Tool execution.
