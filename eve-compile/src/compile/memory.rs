//! `memory:` and `probe:` in `agent.yaml` (documented together in docs/tools.md): the notes the
//! agent keeps with the built-in `memory` tool, and what the environment probe reports in the
//! system prompt. Each is `true`, `false` or a mapping.

use serde_json::Value;

use eve_discover::Code;

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    /// `memory: true`, or `memory: {scopes, max_chars, save_at}`.
    pub(super) fn memory_config(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
    ) -> Option<Memory> {
        let default = Memory {
            scopes: vec![MemoryScope::Agent],
            max_chars: 4000,
            save_at: 0.75,
        };
        match doc.value.get("memory")? {
            Value::Bool(true) => Some(default),
            Value::Bool(false) | Value::Null => None,
            Value::Object(_) => {
                let mut m = Fields::new(&file.path, doc, "/memory", &mut self.diags);
                m.unknown_keys(&["scopes", "max_chars", "save_at"], "memory");
                let mut memory = default;
                if let Some(scopes) = m.string_list("scopes") {
                    let mut parsed = Vec::new();
                    for scope in scopes {
                        match scope.as_str() {
                            "agent" => parsed.push(MemoryScope::Agent),
                            "user" => parsed.push(MemoryScope::User),
                            "session" => parsed.push(MemoryScope::Session),
                            other => m.report(
                                Code::InvalidField,
                                "scopes",
                                format!("`scopes` has `{other}`, which is not a memory scope"),
                                "use `agent`, `user` or `session`",
                            ),
                        }
                    }
                    parsed.sort();
                    parsed.dedup();
                    if parsed.is_empty() {
                        m.report(
                            Code::InvalidField,
                            "scopes",
                            "`scopes` names no memory scope".to_owned(),
                            "list at least one of `agent`, `user`, `session`",
                        );
                    } else {
                        memory.scopes = parsed;
                    }
                }
                if let Some(n) = m.u64("max_chars") {
                    memory.max_chars = n.max(100);
                }
                if let Some(t) = m.f64("save_at") {
                    if t > 0.0 && t < 1.0 {
                        memory.save_at = t;
                    } else {
                        m.report(
                            Code::InvalidField,
                            "save_at",
                            format!("`save_at` is {t}; it is a fraction of the context window"),
                            "use a number between 0 and 1, such as 0.75",
                        );
                    }
                }
                Some(memory)
            }
            other => {
                let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "memory",
                    format!(
                        "`memory` must be true, false or a mapping, found {}",
                        crate::fields::kind(other)
                    ),
                    "write `memory: true`, or a mapping with `scopes:`, `max_chars:` and `save_at:`",
                );
                None
            }
        }
    }

    /// `probe: true`, or `probe: {programs, listing}`.
    pub(super) fn probe_config(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
    ) -> Option<Probe> {
        let default = Probe {
            programs: DEFAULT_PROBE_PROGRAMS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            listing: true,
        };
        match doc.value.get("probe")? {
            Value::Bool(true) => Some(default),
            Value::Bool(false) | Value::Null => None,
            Value::Object(_) => {
                let mut p = Fields::new(&file.path, doc, "/probe", &mut self.diags);
                p.unknown_keys(&["programs", "listing"], "probe");
                let mut probe = default;
                if let Some(programs) = p.string_list("programs") {
                    let bad: Vec<&String> = programs
                        .iter()
                        .filter(|name| {
                            name.is_empty()
                                || !name
                                    .chars()
                                    .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
                        })
                        .collect();
                    if let Some(name) = bad.first() {
                        p.report(
                            Code::InvalidField,
                            "programs",
                            format!("`programs` has `{name}`, which is not a program name"),
                            "list names looked up on PATH, such as `git` or `python3`",
                        );
                    } else {
                        probe.programs = programs;
                    }
                }
                if let Some(listing) = p.bool("listing") {
                    probe.listing = listing;
                }
                Some(probe)
            }
            other => {
                let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "probe",
                    format!(
                        "`probe` must be true, false or a mapping, found {}",
                        crate::fields::kind(other)
                    ),
                    "write `probe: true`, or a mapping with `programs:` and `listing:`",
                );
                None
            }
        }
    }
}
