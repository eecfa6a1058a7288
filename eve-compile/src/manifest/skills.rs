//! Skills: instructions the model loads on demand, with the files a packaged skill carries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A skill: instructions the model can load on demand with `load_skill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    /// Name from the path.
    pub name: String,
    /// Source file, relative to the root agent folder.
    pub source: String,
    /// When to use it (listed in the system prompt).
    pub description: String,
    /// The markdown body (front matter removed).
    pub body: String,
    /// Not listed in the system prompt; only loadable by name.
    pub deferred: bool,
    /// License, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Free-form metadata, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// Other files of a packaged skill, relative to the root agent folder.
    pub files: Vec<String>,
}
