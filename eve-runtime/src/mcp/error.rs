//! Why an MCP connection could not start, or a call through it could not finish.
//!
//! These errors reach the model (as a failed tool result) and the operator (through
//! [`super::McpManager::status`]), so each one names the connection, says what went wrong and, where
//! there is something to do, what.

/// A reason an MCP server is unavailable or a call to it failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    /// A `${VAR}` reference in the connection names a variable that is not set.
    #[error(
        "connection `{connection}`: `${{{name}}}` in {place} is not set: set the environment variable `{name}`"
    )]
    UnsetVar {
        /// Connection name.
        connection: String,
        /// Variable name.
        name: String,
        /// Where the reference was (`command`, `args`, `env FOO`, `url`, `header X`).
        place: String,
    },
    /// The connection's configuration cannot be used (an invalid URL or header).
    #[error("connection `{connection}`: {reason}")]
    Config {
        /// Connection name.
        connection: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// An OAuth connection holds no usable token, or its authorization failed.
    #[error("oauth_unauthorized: connection `{connection}`: {reason}")]
    Unauthorized {
        /// Connection name.
        connection: String,
        /// Why, and what to do (never a token or secret).
        reason: String,
    },
    /// The server process could not be spawned.
    #[error("could not start the MCP server `{connection}` (`{program}`): {reason}")]
    Spawn {
        /// Connection name.
        connection: String,
        /// Program that was to run.
        program: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The server did not finish the `initialize` handshake in time.
    #[error(
        "the MCP server `{connection}` did not finish starting within {seconds} s and was stopped{stderr}"
    )]
    StartTimeout {
        /// Connection name.
        connection: String,
        /// The start timeout.
        seconds: u64,
        /// `; stderr: …` with the tail of the server's stderr, or empty.
        stderr: String,
    },
    /// The `initialize` handshake failed (the process exited, the URL refused, a protocol error).
    #[error("the MCP server `{connection}` failed to start: {reason}{stderr}")]
    Initialize {
        /// Connection name.
        connection: String,
        /// What the client saw.
        reason: String,
        /// `; stderr: …` with the tail of the server's stderr, or empty.
        stderr: String,
    },
    /// The server went away (process exited, connection closed).
    #[error("the MCP server `{connection}` exited{stderr}; it is restarted on the next call")]
    Exited {
        /// Connection name.
        connection: String,
        /// `; stderr: …` with the tail of the server's stderr, or empty.
        stderr: String,
    },
    /// The session with an HTTP server broke.
    #[error(
        "lost the connection to the MCP server `{connection}`; it is reconnected on the next call"
    )]
    Disconnected {
        /// Connection name.
        connection: String,
    },
    /// The server is waiting out a restart backoff (only when the caller does not wait).
    #[error(
        "the MCP server `{connection}` is restarting (next attempt in {retry_in_ms} ms); last error: {last_error}"
    )]
    Backoff {
        /// Connection name.
        connection: String,
        /// Time until the next start attempt.
        retry_in_ms: u64,
        /// Why it stopped.
        last_error: String,
    },
    /// The server failed too often: calls fail fast until `retry_at`.
    #[error(
        "the MCP server `{connection}` is unavailable: it had to be restarted {restarts} times within {window_s} s \
         (last error: {last_error}); its tools fail without trying until {retry_at} (in {retry_in_s} s), \
         then it is started again"
    )]
    CircuitOpen {
        /// Connection name.
        connection: String,
        /// Restarts counted in the window.
        restarts: usize,
        /// The window, in seconds.
        window_s: u64,
        /// Why it stopped last.
        last_error: String,
        /// When the next attempt is allowed (RFC 3339, UTC).
        retry_at: String,
        /// Seconds until then (rounded up).
        retry_in_s: u64,
    },
    /// The caller cancelled while waiting for the server.
    #[error("the call was cancelled while the MCP server `{connection}` was restarting")]
    Cancelled {
        /// Connection name.
        connection: String,
    },
    /// The manager was shut down.
    #[error("the MCP server `{connection}` was shut down")]
    ShutDown {
        /// Connection name.
        connection: String,
    },
}

/// `; stderr: …` for the given tail, or empty when there is none.
pub(crate) fn stderr_suffix(tail: &str) -> String {
    let tail = tail.trim();
    if tail.is_empty() {
        String::new()
    } else {
        format!("; stderr: {tail}")
    }
}
