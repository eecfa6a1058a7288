//! State slots defined in TypeScript or JavaScript (`defineState(name, initial)` from
//! `eve/context`): Node reports every slot the agent's modules define while they are imported at
//! build (`js/evaluate.mjs`), with the value `initial()` gives and where the slot is defined, and
//! each becomes a slot of the agent's `state:` as if `agent.yaml` declared it (64 KiB cap). A slot
//! `agent.yaml` also declares keeps that declaration (its `initial` and `max_bytes`). In a call,
//! the tool runner (`js/tool.mjs`) hands the session's values to the handles and returns what
//! `update` changed; the runtime keeps them like any tool's `$state` (docs/tools.md, State).

use std::path::Path;

use eve_discover::{Code, Diagnostic};
use serde::Deserialize;
use serde_json::Value;

use super::super::Compiler;
use super::loaded::percent_decode;
use crate::manifest::{AgentConfig, DEFAULT_STATE_MAX_BYTES, StateSlot};

/// One `defineState` slot as Node reported it.
#[derive(Debug, Clone, Deserialize)]
pub(in crate::compile) struct StateRead {
    name: String,
    /// The value `initial()` gave (absent when `error` says why there is none).
    #[serde(default)]
    initial: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    /// Where `defineState` was called: a `file://` URL, line and column.
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    line: u32,
    #[serde(default)]
    column: u32,
}

impl Compiler {
    /// Adds the slots the agent's modules define to `config.state`; every problem is an E130 at
    /// the `defineState` call.
    pub(in crate::compile) fn module_states(&mut self, config: &mut AgentConfig) {
        let states = std::mem::take(&mut self.modules.states);
        let agent_dir = self.modules.agent_dir.clone();
        for state in states {
            let file = shown_file(state.file.as_deref(), agent_dir.as_deref());
            let at = |message: String, help: &str| {
                Diagnostic::new(Code::InvalidState, file.clone(), message)
                    .at(state.line.max(1), state.column.max(1))
                    .help(help.to_owned())
            };
            if let Some((message, help)) = crate::compile::state::name_problem(&state.name) {
                let d = at(message, help);
                self.push(d);
                continue;
            }
            if config.state.contains_key(&state.name) {
                continue;
            }
            let initial = match (state.initial, state.error) {
                (Some(initial), None) => initial,
                (_, error) => {
                    let d = at(
                        format!(
                            "state `{}`: {}",
                            state.name,
                            error.unwrap_or_else(|| "it has no initial value".to_owned())
                        ),
                        "make `initial` return plain JSON data (objects, arrays, strings, numbers, booleans, null)",
                    );
                    self.push(d);
                    continue;
                }
            };
            let size = initial.to_string().len() as u64;
            if size > DEFAULT_STATE_MAX_BYTES {
                let d = at(
                    format!(
                        "the initial value of state `{}` is {size} bytes of JSON, over the cap of {DEFAULT_STATE_MAX_BYTES}",
                        state.name
                    ),
                    "make the initial value smaller, or declare the slot in agent.yaml with a larger `max_bytes`",
                );
                self.push(d);
                continue;
            }
            config.state.insert(
                state.name,
                StateSlot {
                    initial,
                    max_bytes: DEFAULT_STATE_MAX_BYTES,
                },
            );
        }
    }
}

/// The file a `defineState` call is in, as diagnostics show it: relative to the agent folder
/// when it is inside it.
fn shown_file(url: Option<&str>, agent_dir: Option<&Path>) -> String {
    let Some(path) = url
        .and_then(|u| u.strip_prefix("file://"))
        .map(percent_decode)
    else {
        return "agent.yaml".to_owned();
    };
    agent_dir
        .and_then(|dir| Path::new(&path).strip_prefix(dir).ok())
        .and_then(Path::to_str)
        .map_or(path.clone(), str::to_owned)
}
