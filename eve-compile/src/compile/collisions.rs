//! The one namespace the model sees: tools, subagents, built-ins and connection prefixes must not
//! share a name. Checked on the discovered files, so clashes show even when other checks fail.
//!
//! Names that differ only by case clash too, in every namespace (tools, skills, schedules): on a
//! case-insensitive file system (macOS, Windows) the two files cannot both exist, so a checkout
//! there silently keeps one of them, and a model told of `Search` and `search` confuses them.

use std::collections::BTreeMap;

use eve_discover::{AgentDir, Code, Diagnostic};

use super::Compiler;
use crate::manifest::*;

impl Compiler {
    /// Tool names must be unique across tools, subagents, built-ins and connection prefixes.
    pub(super) fn collisions(
        &mut self,
        dir: &AgentDir,
        subagents: &[Agent],
        connections: &[Connection],
    ) {
        let mut owners: BTreeMap<String, String> = BTreeMap::new();
        let mut claim = |this: &mut Self, name: &str, owner: String| {
            if let Some(prev) = owners.get(name) {
                this.push(
                    Diagnostic::new(
                        Code::NameCollision,
                        owner.clone(),
                        format!(
                            "the name `{name}` is also taken by {}{prev}",
                            this.shown_prefix
                        ),
                    )
                    .help("tools, subagents and connection prefixes share one namespace: rename one of them"),
                );
            } else {
                owners.insert(name.to_owned(), owner);
            }
        };
        self.case_clashes(
            "tool",
            dir.tools
                .iter()
                .map(|t| (t.name.as_str(), t.file.path.clone()))
                .chain(
                    subagents
                        .iter()
                        .map(|s| (s.name.as_str(), format!("{}/", s.path))),
                ),
        );
        self.case_clashes(
            "skill",
            dir.skills
                .iter()
                .map(|s| (s.name.as_str(), s.file.path.clone())),
        );
        self.case_clashes(
            "schedule",
            dir.schedules
                .iter()
                .map(|s| (s.name.as_str(), s.file.path.clone())),
        );
        // Raw discovered tools, so clashes are found even among tools that failed other checks.
        for t in &dir.tools {
            claim(self, &t.name, t.file.path.clone());
        }
        for s in subagents {
            claim(self, &s.name, format!("{}/", s.path));
        }
        for t in &dir.tools {
            if RESERVED_TOOL_NAMES.contains(&t.name.as_str()) || t.name.starts_with("eve__") {
                self.push(
                    Diagnostic::new(
                        Code::ReservedName,
                        t.file.path.clone(),
                        format!("`{}` is reserved by eve", t.name),
                    )
                    .help(format!(
                        "reserved names: {}, and anything starting with `eve__`; rename the file",
                        RESERVED_TOOL_NAMES.join(", ")
                    )),
                );
            }
        }
        for s in subagents {
            if RESERVED_TOOL_NAMES.contains(&s.name.as_str()) {
                self.push(
                    Diagnostic::new(
                        Code::ReservedName,
                        format!("{}/", s.path),
                        format!("`{}` is reserved by eve", s.name),
                    )
                    .help("rename the subagent folder"),
                );
            }
        }
        for c in connections {
            let pfx = format!("{}__", c.name);
            for t in &dir.tools {
                if t.name.starts_with(&pfx) {
                    self.push(
                        Diagnostic::new(
                            Code::NameCollision,
                            t.file.path.clone(),
                            format!(
                                "tool `{}` uses the prefix `{pfx}` owned by connection `{}`",
                                t.name, c.name
                            ),
                        )
                        .help(format!(
                            "rename the tool: names starting with `{pfx}` belong to the tools of connection `{}`",
                            c.name
                        )),
                    );
                }
            }
        }
    }

    /// Names of one namespace that differ only by case (`Search` and `search`).
    fn case_clashes<'a>(&mut self, what: &str, names: impl Iterator<Item = (&'a str, String)>) {
        let mut seen: BTreeMap<String, (&'a str, String)> = BTreeMap::new();
        for (name, owner) in names {
            match seen.get(&name.to_ascii_lowercase()) {
                Some((prev, prev_owner)) if *prev != name => {
                    let message = format!(
                        "the {what} name `{name}` differs only by case from `{prev}` ({}{prev_owner})",
                        self.shown_prefix
                    );
                    self.push(Diagnostic::new(Code::NameCollision, owner, message).help(
                        "on macOS and Windows the two files cannot both exist (a checkout keeps \
                             one), and a model mixes them up: rename one of them",
                    ));
                }
                Some(_) => {}
                None => {
                    seen.insert(name.to_ascii_lowercase(), (name, owner));
                }
            }
        }
    }
}
