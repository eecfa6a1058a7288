//! The built-in tools an agent is offered: `default_tools` in `agent.yaml` (a bool, a list of
//! names, or a map of names to bools over the defaults), and the authored tools that replace a
//! built-in by taking its name (each said by a build note, N001).

use serde_json::Value;

use eve_discover::{Code, Diagnostic};

use super::Compiler;
use crate::fields::{Fields, closest, kind};
use crate::manifest::*;

/// Every built-in name `default_tools` may name.
pub fn builtin_names() -> Vec<&'static str> {
    DEFAULT_TOOL_EFFECTS.iter().map(|(n, _)| *n).collect()
}

/// Reads `default_tools` into `(default_tools, builtins)` of [`AgentConfig`]: a bool as it is;
/// a list turns on exactly the built-ins it names; a map turns built-ins on or off from the
/// defaults (`{bash: false}`, `{glob: true}`). Unknown names are reported with the closest
/// known one, and left out.
pub(super) fn default_tools(f: &mut Fields<'_>) -> (bool, Option<Vec<String>>) {
    const KEY: &str = "default_tools";
    let names = builtin_names();
    let unknown = |f: &mut Fields<'_>, pointer: &str, name: &str| {
        let help = match closest(name, &names) {
            Some(near) => format!(
                "did you mean `{near}`? built-in tools: {}",
                names.join(", ")
            ),
            None => format!("built-in tools: {}", names.join(", ")),
        };
        f.report_at(
            Code::InvalidField,
            pointer,
            format!("`{name}` in `default_tools` is not a built-in tool"),
            &help,
        );
    };
    let chosen: Vec<String> = match f.raw(KEY).cloned() {
        None => return (true, None),
        Some(Value::Bool(on)) => return (on, None),
        Some(Value::Array(items)) => {
            let mut on = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let pointer = format!("{}/{i}", f.pointer(KEY));
                match item.as_str().map(str::trim) {
                    Some(name) if names.contains(&name) => on.push(name.to_owned()),
                    Some(name) => unknown(f, &pointer, name),
                    None => f.report_at(
                        Code::InvalidField,
                        &pointer,
                        format!(
                            "`default_tools` lists {}, not a built-in tool's name",
                            kind(item)
                        ),
                        "list names: `default_tools: [bash, read_file, glob]`",
                    ),
                }
            }
            on
        }
        Some(Value::Object(map)) => {
            let mut on: Vec<String> = names
                .iter()
                .filter(|n| !OPT_IN_TOOLS.contains(n))
                .map(|n| (*n).to_owned())
                .collect();
            for (name, value) in &map {
                let pointer = f.pointer(KEY) + "/" + &name.replace('~', "~0").replace('/', "~1");
                if !names.contains(&name.as_str()) {
                    unknown(f, &pointer, name);
                    continue;
                }
                match value {
                    Value::Bool(true) if !on.contains(name) => on.push(name.clone()),
                    Value::Bool(true) => {}
                    Value::Bool(false) => on.retain(|n| n != name),
                    other => f.report_at(
                        Code::InvalidField,
                        &pointer,
                        format!(
                            "`default_tools.{name}` must be true or false, found {}",
                            kind(other)
                        ),
                        "write `default_tools: {glob: true, bash: false}`",
                    ),
                }
            }
            on
        }
        Some(other) => {
            f.report(
                Code::InvalidField,
                KEY,
                format!(
                    "`default_tools` must be true, false, a list or a mapping, found {}",
                    kind(&other)
                ),
                "write `default_tools: false`, a list (`[bash, glob, grep]`), or a mapping \
                 (`{glob: true, bash: false}`)",
            );
            return (true, None);
        }
    };
    // In the table's order, each once.
    let on: Vec<String> = names
        .iter()
        .filter(|n| chosen.iter().any(|c| c == *n))
        .map(|n| (*n).to_owned())
        .collect();
    (!on.is_empty(), Some(on))
}

/// Whether `default_tools` as written (`raw`) turns `name` on by naming it: in a list, or as
/// `name: true` in a map.
pub(super) fn turned_on(raw: Option<&Value>, name: &str) -> bool {
    match raw {
        Some(Value::Array(items)) => items
            .iter()
            .any(|i| i.as_str().map(str::trim) == Some(name)),
        Some(Value::Object(map)) => map.get(name) == Some(&Value::Bool(true)),
        _ => false,
    }
}

impl Compiler {
    /// An authored tool at the name of a built-in that is on replaces it: a note says so. A
    /// subagent cannot take such a name (it would be offered twice).
    pub(super) fn check_builtins(&mut self, agent: &Agent) {
        for name in agent.config.builtins_on() {
            if name == AGENT_TOOL && !agent.path.is_empty() {
                // Offered to the root agent only.
                continue;
            }
            if let Some(tool) = agent.replaced_builtin(name) {
                self.push(
                    Diagnostic::new(
                        Code::BuiltinReplaced,
                        tool.source.clone(),
                        format!("`{}` replaces the built-in tool `{name}`", tool.source),
                    )
                    .help(format!(
                        "the model is offered this tool as `{name}`; to keep the built-in, rename \
                         the file; to drop `{name}` altogether, remove it and turn it off in \
                         agent.yaml (`default_tools: {{{name}: false}}`)"
                    )),
                );
            }
            if let Some(sub) = agent.subagents.iter().find(|s| s.name == name) {
                if name == AGENT_TOOL {
                    // A subagent folder named `agent` is that agent: it replaces the copy.
                    self.push(
                        Diagnostic::new(
                            Code::BuiltinReplaced,
                            format!("{}/", sub.path),
                            "this subagent replaces the built-in tool `agent` (a copy of the \
                             root agent)"
                                .to_owned(),
                        )
                        .help(
                            "to keep the built-in, rename the subagent folder; to drop `agent` \
                             altogether, turn it off in agent.yaml (`default_tools: {agent: false}`)",
                        ),
                    );
                    continue;
                }
                self.push(
                    Diagnostic::new(
                        Code::ReservedName,
                        format!("{}/", sub.path),
                        format!("`{name}` is the name of a built-in tool this agent is offered"),
                    )
                    .help(format!(
                        "rename the subagent folder, or turn the built-in off in agent.yaml \
                         (`default_tools: {{{name}: false}}`)"
                    )),
                );
            }
        }
    }
}
