//! `hooks/`: scripts that run on runtime events, the events they listen to named in front matter.

use serde_json::Value;

use eve_discover::{Code, Diagnostic, Named};

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    pub(super) fn hook(&mut self, h: &Named) -> Option<(Hook, SandboxOverride)> {
        if super::modules::is_module(&h.file) {
            return self.module_hook(h);
        }
        let name_ok = self.check_name(&h.name, &h.file.path, "hook");
        let parsed = self.script_file(
            &h.file,
            "start the hook with a comment block:\n# ---\n# events: [turn.completed]\n# ---",
        )?;
        let mut f = Fields::new(&h.file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &[
                "events",
                "timeout",
                "env",
                "description",
                "interpreter",
                "sandbox",
                "network",
            ],
            "hook",
        );
        let events = match f.string_list("events") {
            Some(e) if !e.is_empty() => e,
            _ => {
                if !f.has("events") {
                    f.push(
                        Diagnostic::new(Code::MissingField, h.file.path.clone(), "hook has no `events`")
                            .help("list the events it runs on, e.g. `events: [turn.completed]` or `events: [\"*\"]`"),
                    );
                }
                return None;
            }
        };
        let mut ok = true;
        for (i, ev) in events.iter().enumerate() {
            if !HOOK_EVENTS.contains(&ev.as_str()) {
                let pointer = if matches!(f.raw("events"), Some(Value::Array(_))) {
                    format!("/events/{i}")
                } else {
                    "/events".to_owned()
                };
                let suggestion = crate::fields::closest(ev, HOOK_EVENTS)
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default();
                f.report_at(
                    Code::UnknownEvent,
                    &pointer,
                    format!("unknown event `{ev}`"),
                    &format!("{suggestion}events are: {}", HOOK_EVENTS.join(", ")),
                );
                ok = false;
            }
        }
        let timeout_ms = f.duration_ms("timeout").unwrap_or(10_000);
        let env = f.string_list("env").unwrap_or_default();
        let interpreter = f.string_list("interpreter");
        let own_sandbox = super::sandbox::read_override(&mut f);
        let runner = self.script_runner(&h.file, interpreter)?;
        (ok && name_ok).then(|| {
            let hook = Hook {
                name: h.name.clone(),
                source: h.file.path.clone(),
                events,
                timeout_ms,
                env,
                runner,
            };
            (hook, own_sandbox)
        })
    }
}
