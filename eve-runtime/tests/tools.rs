//! Tool execution tests with real processes.
