//! Input validation against the tools' JSON Schemas.
//!
//! The engine validates a call before anything runs, so an invalid input goes back to the model as
//! a list of precise messages (with the JSON path of each violation) and never reaches a tool.
//! Schemas are compiled once per build, not per call.

use std::collections::HashMap;

use eve_compile::Tool;
use serde_json::Value;

/// Compiled input validators for a set of tools.
pub struct Validators {
    by_name: HashMap<String, Result<jsonschema::Validator, String>>,
}

impl std::fmt::Debug for Validators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.by_name.keys().collect();
        names.sort();
        f.debug_struct("Validators").field("tools", &names).finish()
    }
}

impl Validators {
    /// Compiles the input schema of every tool. A schema that does not compile is remembered: calls
    /// to that tool are then refused with the reason (the build checks schemas, so this is rare).
    pub fn new(tools: &[Tool]) -> Self {
        let mut validators = Self {
            by_name: HashMap::with_capacity(tools.len()),
        };
        for tool in tools {
            validators.insert(&tool.name, &tool.input_schema);
        }
        validators
    }

    /// Adds (or replaces) the validator of one tool, such as a dynamic or MCP tool known only at run
    /// time.
    pub fn insert(&mut self, name: &str, schema: &Value) {
        let compiled = jsonschema::validator_for(schema).map_err(|e| e.to_string());
        self.by_name.insert(name.to_owned(), compiled);
    }

    /// Whether a validator exists for `tool`.
    pub fn contains(&self, tool: &str) -> bool {
        self.by_name.contains_key(tool)
    }

    /// Checks `input` against the schema of `tool`. Every violation is reported, each as
    /// `input/path/to/field: what is wrong` (`input` alone for the root).
    pub fn validate(&self, tool: &str, input: &Value) -> Result<(), Vec<String>> {
        match self.by_name.get(tool) {
            None => Err(vec![format!("unknown tool `{tool}`")]),
            Some(Err(reason)) => Err(vec![format!(
                "the input schema of `{tool}` is invalid: {reason}"
            )]),
            Some(Ok(validator)) => {
                let errors: Vec<String> = validator
                    .iter_errors(input)
                    .map(|error| format!("input{}: {}", error.instance_path(), error))
                    .collect();
                if errors.is_empty() {
                    Ok(())
                } else {
                    Err(errors)
                }
            }
        }
    }
}
