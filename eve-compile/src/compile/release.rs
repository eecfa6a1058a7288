//! The release policy in `agent.yaml`: `activation`, `gate` and `rollback`, how a new build
//! becomes the active release and when the runtime rolls it back. The root agent's only.

use serde_json::Value;

use eve_discover::Code;

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    /// `activation:`, `gate:` and `rollback:`: how a new build becomes the active release. They
    /// belong to the project, so a subagent's are refused.
    pub(super) fn release_policy(
        &mut self,
        config: &mut AgentConfig,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
        root: bool,
    ) {
        let present: Vec<&str> = ["activation", "gate", "rollback"]
            .into_iter()
            .filter(|k| doc.value.get(*k).is_some())
            .collect();
        if present.is_empty() {
            return;
        }
        let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
        if !root {
            for key in present {
                f.report(
                    Code::InvalidField,
                    key,
                    format!(
                        "`{key}` is set in a subagent; releases are decided for the whole project"
                    ),
                    "move it to the root agent's agent.yaml",
                );
            }
            return;
        }
        config.activation = f
            .choice(
                "activation",
                &[("auto", Activation::Auto), ("review", Activation::Review)],
            )
            .unwrap_or_default();
        if let Some(tags) = f.string_list("gate") {
            let mut gate: Vec<String> = Vec::new();
            for tag in tags {
                let tag = tag.trim().to_owned();
                if tag.is_empty() || tag.chars().any(char::is_whitespace) {
                    f.report(
                        Code::InvalidField,
                        "gate",
                        format!("`gate` has the tag `{tag}`; a tag is one word"),
                        "list eval tags, such as `gate: [smoke, safety]`",
                    );
                } else if !gate.contains(&tag) {
                    gate.push(tag);
                }
            }
            gate.sort();
            config.gate = gate;
        }
        match doc.value.get("rollback") {
            None | Some(Value::Null) => {}
            Some(Value::Object(_)) => {
                let mut r = Fields::new(&file.path, doc, "/rollback", &mut self.diags);
                r.unknown_keys(&["failures", "window"], "rollback");
                let failures = r.u64("failures");
                let window = r.duration_ms("window");
                match (failures, window) {
                    (Some(n), Some(window_ms)) if n >= 1 => {
                        config.rollback = Some(RollbackPolicy {
                            failures: u32::try_from(n).unwrap_or(u32::MAX),
                            window_ms,
                        });
                    }
                    (Some(0), _) => r.report(
                        Code::InvalidField,
                        "failures",
                        "`rollback.failures` is 0; a rollback needs at least one failed turn"
                            .to_owned(),
                        "for example `rollback: {failures: 3, window: 10m}`",
                    ),
                    (None, _) if r.raw("failures").is_none() => r.report_at(
                        Code::InvalidField,
                        "/rollback",
                        "`rollback` has no `failures`".to_owned(),
                        "for example `rollback: {failures: 3, window: 10m}`",
                    ),
                    (_, None) if r.raw("window").is_none() => r.report_at(
                        Code::InvalidField,
                        "/rollback",
                        "`rollback` has no `window`".to_owned(),
                        "for example `rollback: {failures: 3, window: 10m}`",
                    ),
                    // A bad value was reported where it was read.
                    _ => {}
                }
            }
            Some(other) => f.report(
                Code::InvalidField,
                "rollback",
                format!(
                    "`rollback` must be a mapping, found {}",
                    crate::fields::kind(other)
                ),
                "for example `rollback: {failures: 3, window: 10m}`",
            ),
        }
    }
}
