//! `state:` in `agent.yaml`: the durable per-session state slots of an agent (eve's
//! `defineState(name, initial)`), and the one check that needs the agent's tools: no script or
//! `run:` tool of an agent with state may take the reserved `$state` key as an input field, since
//! that key carries the state on the tool's stdin (docs/tools.md, "State").
//!
//! ```yaml
//! state:
//!   my-agent.budget:
//!     initial: {count: 0, cap: 25}
//!     max_bytes: 4096        # optional; 64 KiB unless set, at most 1 MiB
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

use eve_discover::{Code, Diagnostic};

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;
use crate::yaml::escape_pointer;

/// Name prefixes eve keeps for its own context keys (as `defineState` refuses them).
const RESERVED_PREFIXES: &[&str] = &["eve.", "eve:mount."];

/// Whether `name` is a valid slot name: 1 to 128 of letters, digits and `._:-`, starting with a
/// letter or digit.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
}

/// What is wrong with `name` as a state slot's name (a reserved prefix, a character eve does not
/// take), with what to do; `None` when it is fine.
pub(in crate::compile) fn name_problem(name: &str) -> Option<(String, &'static str)> {
    if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| name.starts_with(**p)) {
        return Some((
            format!("state slot `{name}` uses the reserved `{prefix}` prefix"),
            "use a name of your own namespace, such as `my-agent.budget`",
        ));
    }
    (!valid_name(name)).then(|| {
        (
            format!("`{name}` is not a state slot name"),
            "use 1 to 128 letters, digits, `.`, `:`, `_` or `-`, starting with a letter or digit, \
             such as `my-agent.budget`",
        )
    })
}

impl Compiler {
    /// `state: {NAME: {initial, max_bytes}}`; every mistake is an `E130` at its line.
    pub(super) fn state_config(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
    ) -> BTreeMap<String, StateSlot> {
        let mut slots = BTreeMap::new();
        let names: Vec<(String, Value)> = match doc.value.get("state") {
            None | Some(Value::Null) => return slots,
            Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(other) => {
                let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidState,
                    "state",
                    format!(
                        "`state` must be a mapping from slot names to slots, found {}",
                        crate::fields::kind(other)
                    ),
                    "write `state: {my-agent.budget: {initial: {count: 0}}}`",
                );
                return slots;
            }
        };
        for (name, value) in names {
            let key_at = doc.key_position(&format!("/state/{}", escape_pointer(&name)));
            let at_key = |message: String, help: &str| {
                let d = Diagnostic::new(Code::InvalidState, file.path.clone(), message)
                    .help(help.to_owned());
                match key_at {
                    Some((line, column)) => d.at(line, column),
                    None => d,
                }
            };
            if let Some((message, help)) = name_problem(&name) {
                let d = at_key(message, help);
                self.push(d);
                continue;
            }
            let mut f = Fields::new(&file.path, doc, "/state", &mut self.diags);
            if !value.is_object() {
                f.report(
                    Code::InvalidState,
                    &name,
                    format!(
                        "state slot `{name}` must be a mapping with `initial:`, found {}",
                        crate::fields::kind(&value)
                    ),
                    "write `initial:` (the value a session starts with) and, optionally, \
                     `max_bytes:`",
                );
                continue;
            }
            let base = f.pointer(&name);
            let mut s = Fields::new(&file.path, doc, &base, &mut self.diags);
            s.unknown_keys(&["initial", "max_bytes"], "state slot");
            let initial = s.raw("initial").cloned().unwrap_or(Value::Null);
            let max_bytes = match s.u64("max_bytes") {
                Some(0) => {
                    s.report(
                        Code::InvalidState,
                        "max_bytes",
                        "`max_bytes` is 0: no value fits".to_owned(),
                        "leave it out for 64 KiB, or set a number of bytes up to 1048576",
                    );
                    continue;
                }
                Some(n) if n > STATE_MAX_BYTES_LIMIT => {
                    s.report(
                        Code::InvalidState,
                        "max_bytes",
                        format!(
                            "`max_bytes` is {n}, over the most a state slot may hold \
                             ({STATE_MAX_BYTES_LIMIT} bytes)"
                        ),
                        "keep large data in the session's workspace files; state is for small \
                         values (counters, plans, flags)",
                    );
                    continue;
                }
                Some(n) => n,
                None if s.has("max_bytes") => continue,
                None => DEFAULT_STATE_MAX_BYTES,
            };
            let size = initial.to_string().len() as u64;
            if size > max_bytes {
                s.report(
                    Code::InvalidState,
                    "initial",
                    format!(
                        "the `initial` value of `{name}` is {size} bytes of JSON, over its cap of \
                         {max_bytes}"
                    ),
                    "make the initial value smaller, or raise `max_bytes`",
                );
                continue;
            }
            slots.insert(name, StateSlot { initial, max_bytes });
        }
        slots
    }

    /// With state declared, the `$state` key of a process tool's stdin is the state's: a tool
    /// whose input schema declares a `$state` property would have it overwritten.
    pub(super) fn check_state_key(&mut self, agent: &Agent) {
        if agent.config.state.is_empty() {
            return;
        }
        for tool in &agent.tools {
            let process = matches!(tool.runner, Runner::Script { .. } | Runner::Command { .. });
            let takes = tool
                .input_schema
                .get("properties")
                .and_then(|p| p.get(STATE_KEY))
                .is_some();
            if process && takes {
                self.push(
                    Diagnostic::new(
                        Code::InvalidState,
                        tool.source.clone(),
                        format!(
                            "tool `{}` has an input field `{STATE_KEY}`, the key that carries \
                             the agent's state on the tool's stdin",
                            tool.name
                        ),
                    )
                    .help("rename the input field (the agent.yaml declares `state:`)"),
                );
            }
        }
    }
}
