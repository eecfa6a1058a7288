//! The manifest: what `eve build` produces and the runtime executes.
//!
//! These types are the contract between the compiler and the runtime. Their JSON Schema is generated
//! from them (`docs/manifest.schema.json`, checked by a test). Every collection is ordered, so the
//! same agent folder always serialises to the same bytes and so to the same build hash. A manifest
//! never holds a secret: `${VAR}` references are kept as written and resolved at run time.

//!
//! The types are grouped by what they describe, one file per part of an agent folder, as the
//! compiler's own `compile/` is: `config` (`agent.yaml`), `limits` (budgets, compaction and
//! phases), `tools`, `skills`, `schedules`, `hooks`, `connections`, `channels` and `sandbox`
//! (settings, and how each process's effective sandbox is resolved). This file holds the
//! manifest and the agent that ties them together; everything is re-exported here, so every
//! type is `crate::manifest::Name` (and `crate::Name`) wherever it is defined.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod channels;
mod config;
mod connections;
mod hooks;
mod limits;
mod openapi;
mod remote;
mod sandbox;
mod schedules;
mod skills;
mod tools;
mod web;

pub use channels::*;
pub use config::*;
pub use connections::*;
pub use hooks::*;
pub use limits::*;
pub use openapi::*;
pub use remote::*;
pub use sandbox::*;
pub use schedules::*;
pub use skills::*;
pub use tools::*;
pub use web::*;

/// Version of the manifest format. Bumped on incompatible changes.
pub const MANIFEST_VERSION: u32 = 1;

/// A compiled agent project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Manifest format version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// Version of eve that built it.
    pub eve_version: String,
    /// The root agent.
    pub agent: Agent,
    /// Every runtime file the build carries (its pack), by path relative to the agent folder:
    /// SHA-256 and permission bits. The runtime checks a file against it before running it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileDigest>,
}

/// What a build file must hash to, recorded at `eve build`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    /// SHA-256 of the contents, lowercase hex.
    pub sha256: String,
    /// Permission bits.
    pub mode: u32,
}

/// One agent: the root, or a subagent (which has the same shape and nests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The agent's name: the project folder's name for the root, the folder name for a subagent.
    pub name: String,
    /// Folder of this agent relative to the root agent folder (`""` for the root).
    pub path: String,
    /// What the agent does (required for subagents: it becomes the subagent tool's description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The system prompt (`instructions.md` without front matter).
    pub instructions: String,
    /// Settings from `agent.yaml`, with defaults filled in.
    pub config: AgentConfig,
    /// Tools, sorted by name.
    pub tools: Vec<Tool>,
    /// Skills, sorted by name.
    pub skills: Vec<Skill>,
    /// Subagents, sorted by name.
    pub subagents: Vec<Agent>,
    /// Schedules, sorted by name.
    pub schedules: Vec<Schedule>,
    /// Hooks, sorted by name.
    pub hooks: Vec<Hook>,
    /// MCP server connections, sorted by name.
    pub connections: Vec<Connection>,
    /// Channels, sorted by name.
    pub channels: Vec<Channel>,
    /// Sandbox settings and seed files.
    pub sandbox: Sandbox,
    /// For a remote agent (`subagents/NAME.yaml`): the deployment it is; its turns run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteAgent>,
}

impl Agent {
    /// Looks up a tool by name.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Looks up a subagent by name.
    pub fn subagent(&self, name: &str) -> Option<&Agent> {
        self.subagents.iter().find(|a| a.name == name)
    }

    /// Looks up a skill by name.
    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}
