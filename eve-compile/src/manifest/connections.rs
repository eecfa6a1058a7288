//! Connections: MCP servers whose tools the agent offers, how to reach them, which of their
//! tools are offered, and the default timeout of a call.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Approval;

/// Tool filters of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    /// Only these tools (empty = all).
    pub allow: Vec<String>,
    /// Never these tools.
    pub block: Vec<String>,
}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Transport {
    /// A child process speaking MCP on stdio.
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Environment (values may be `${VAR}` references).
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP server.
    Http {
        /// Endpoint URL.
        url: String,
        /// Headers (values may be `${VAR}` references).
        headers: BTreeMap<String, String>,
    },
}

/// An MCP server whose tools appear as `NAME__tool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// Name from the path; the tool prefix is `NAME__`.
    pub name: String,
    /// Source file.
    pub source: String,
    /// Transport.
    pub transport: Transport,
    /// Tool filters.
    pub tools: ToolFilter,
    /// Approval for every tool of this server.
    pub approval: Approval,
    /// Per-call timeout in milliseconds.
    pub timeout_ms: u64,
    /// Longest wait for the server to start and answer `initialize`, in milliseconds (`None`:
    /// the runtime's default, 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_ms: Option<u64>,
}

/// Default MCP call timeout: 60 s.
pub const DEFAULT_MCP_TIMEOUT_MS: u64 = 60_000;
