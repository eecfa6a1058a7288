//! Why a tool call could not run or did not finish.
//!
//! Tool failures are reported to the model as text, so every variant reads as a sentence that says
//! what went wrong and, where there is one, what to do about it.

use std::path::PathBuf;

/// A reason a tool call failed before or while running.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A `${VAR}` reference names a variable that is not set.
    #[error("`${{{name}}}` in {place} is not set: set the environment variable `{name}`")]
    UnsetVar {
        /// Variable name.
        name: String,
        /// Where the reference was (`argv`, `url`, `header X`, `body`).
        place: String,
    },
    /// A command line references a secret: argv is visible to every user of the machine.
    #[error(
        "`${{{name}}}` in {place} would put a secret on a command line, which every user of the machine can read (`ps`); list it under `env: [{name}]` and read it from the environment instead"
    )]
    SecretInArgv {
        /// Variable name.
        name: String,
        /// Where the reference was (`argv`, `interpreter`).
        place: String,
    },
    /// A `{{...}}` template names something other than `input`.
    #[error(
        "unknown template reference `{{{{{reference}}}}}` in {place}: only `{{{{input}}}}` and `{{{{input.FIELD}}}}` are supported"
    )]
    UnknownTemplate {
        /// The text between the braces.
        reference: String,
        /// Where the template was.
        place: String,
    },
    /// The tool has nothing to run.
    #[error("the tool `{tool}` has an empty command line")]
    EmptyArgv {
        /// Tool name.
        tool: String,
    },
    /// The process could not be started.
    #[error("could not start `{program}`: {source}")]
    Spawn {
        /// Program that was to run.
        program: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The session workspace could not be created or resolved.
    #[error("could not prepare the workspace {}: {source}", path.display())]
    Workspace {
        /// Workspace path.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A path given to a built-in tool is absolute.
    #[error("`{path}` is an absolute path: give a path relative to the workspace")]
    AbsolutePath {
        /// The path as given.
        path: String,
    },
    /// A path given to a built-in tool leaves the workspace.
    #[error("`{path}` is outside the workspace: {reason}")]
    PathEscape {
        /// The path as given.
        path: String,
        /// How it escapes (`..`, a symlink).
        reason: String,
    },
    /// The kernel cannot open paths beneath the workspace (no `openat2`): the file tools refuse
    /// rather than resolve a path a tool could swap while it is looked at.
    #[error(
        "{tool} cannot run on this machine: {reason}. Use `bash` to read and write files instead"
    )]
    FileToolsUnavailable {
        /// The tool (`read_file`, `write_file`).
        tool: &'static str,
        /// What the kernel refused.
        reason: String,
    },
    /// A file operation of a built-in tool failed.
    #[error("{action} `{path}`: {source}")]
    Io {
        /// What was being done (`could not read`, `could not write`).
        action: &'static str,
        /// The path as given.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The input does not have the shape the tool needs.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The rendered URL of an HTTP tool is not a URL.
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl {
        /// The rendered URL.
        url: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A header of an HTTP tool has an invalid name or value.
    #[error("invalid header `{name}`: {reason}")]
    InvalidHeader {
        /// Header name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The HTTP method is not a method.
    #[error("invalid HTTP method `{0}`")]
    InvalidMethod(String),
    /// An input value placed in an HTTP tool's URL path would make a `.` or `..` segment, which
    /// moves the request to another folder of the server.
    #[error(
        "input `{field}` makes the URL path segment `{segment}`: a value placed in a URL path is one segment and may not be `.` or `..`"
    )]
    PathSegment {
        /// The input field (`team`, `a.b`).
        field: String,
        /// The segment it made.
        segment: String,
    },
    /// The tool's network policy refuses the destination of a request (or of a redirect).
    #[error("refused {url}: {reason}")]
    Refused {
        /// The URL (or `host:port`) that was refused.
        url: String,
        /// Why, as the egress rules say it.
        reason: String,
    },
    /// The tool's network policy cannot be applied as written.
    #[error("{0}")]
    Network(String),
    /// The HTTP request failed at the transport level.
    #[error("HTTP request failed: {0}")]
    Request(String),
    /// The call ran past its timeout.
    #[error("timed out after {ms} ms")]
    Timeout {
        /// The timeout.
        ms: u64,
    },
    /// The call was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// A background task of the runtime failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ToolError {
    /// Whether eve refused the call's input before running anything (the caller's mistake, not a
    /// failure of the tool): circuit breakers do not count these.
    pub(crate) fn is_input_refusal(&self) -> bool {
        use std::io::ErrorKind::*;
        match self {
            Self::AbsolutePath { .. }
            | Self::PathEscape { .. }
            | Self::InvalidInput(_)
            | Self::InvalidUrl { .. }
            | Self::InvalidHeader { .. }
            | Self::InvalidMethod(_)
            | Self::PathSegment { .. }
            | Self::UnknownTemplate { .. } => true,
            Self::Io { source, .. } => matches!(
                source.kind(),
                NotFound | PermissionDenied | IsADirectory | NotADirectory | InvalidInput
            ),
            _ => false,
        }
    }
}
