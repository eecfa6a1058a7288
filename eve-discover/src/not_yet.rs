//! eve's TypeScript modules that this version does not evaluate yet (`defineTool`, `defineAgent`,
//! `defineInstructions`, `defineHook`, `defineSchedule`, skill modules): each is one E120 error
//! that names what to write instead, so a module is never silently dropped or misread as a script
//! without front matter.
//!
//! Everything about these stop-gaps lives in this file; when module evaluation lands, it replaces
//! the calls to [`module`] and [`is_module`] in the walker (`walk.rs`, `slots.rs`) and this file
//! goes.

use crate::{Code, Diagnostic};

/// Whether a script file's text is one of eve's modules rather than a script with front matter:
/// no front matter line, and an `eve` import or a default export.
pub(crate) fn is_module(text: &str) -> bool {
    let front = text
        .lines()
        .take(40)
        .any(|l| matches!(l.trim(), "// ---" | "# ---"));
    !front
        && (text.contains("from \"eve")
            || text.contains("from 'eve")
            || text.contains("require(\"eve")
            || text.contains("export default"))
}

/// The first string literal after `key:` in a module (`description: "Get the weather"`), if any.
fn string_field(text: &str, key: &str) -> Option<String> {
    let needle = format!("{key}:");
    let at = text.find(&needle)? + needle.len();
    let rest = text[at..].trim_start();
    let quote = rest
        .chars()
        .next()
        .filter(|c| matches!(c, '"' | '\'' | '`'))?;
    let body = &rest[1..];
    let end = body.find(quote)?;
    let value = &body[..end];
    (!value.is_empty() && !value.contains('\n') && value.len() <= 200).then(|| value.to_owned())
}

/// The 1-based line of the first of `needles` found in `text` (1 when none is).
fn line_of(text: &str, needles: &[&str]) -> u32 {
    let at = needles
        .iter()
        .filter_map(|n| text.find(n))
        .min()
        .unwrap_or(0);
    u32::try_from(text[..at].matches('\n').count() + 1).unwrap_or(u32::MAX)
}

/// Which slot a module was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// `agent.ts`.
    Agent,
    /// `instructions.ts` or `instructions/*.ts`.
    Instructions,
    /// `tools/*.ts`.
    Tool,
    /// `hooks/*.ts`.
    Hook,
    /// `schedules/*.ts`.
    Schedule,
    /// `skills/*.ts`.
    Skill,
    /// `subagents/NAME.ts`.
    Subagent,
}

/// The E120 diagnostic for a module found in `slot`.
pub(crate) fn module(slot: Slot, path: &str, text: &str) -> Diagnostic {
    let stem = path
        .rsplit('/')
        .next()
        .map_or("NAME", |f| crate::split_ext(f).0);
    let description = string_field(text, "description")
        .unwrap_or_else(|| "What it does".to_owned())
        .replace('"', "'");
    let (what, define, help) = match slot {
        Slot::Agent => {
            let model = string_field(text, "model");
            let example = match &model {
                Some(m) => format!("`model: {m}`"),
                None => "`model: openai/gpt-4.1`".to_owned(),
            };
            (
                "agent modules",
                "defineAgent",
                format!(
                    "write the settings in `agent.yaml` ({example}; reasoning, limits, compaction \
                     and tools as in docs/models.md and docs/runtime.md), then remove this file or \
                     prefix its name with `_`; until then its settings would be lost"
                ),
            )
        }
        Slot::Instructions => (
            "instruction modules",
            "defineInstructions",
            "write the prompt in `instructions.md`, or in `.md` files in `instructions/` (read \
             after `instructions.md`, in file-name order)"
                .to_owned(),
        ),
        Slot::Tool => (
            "tool modules",
            "defineTool",
            format!(
                "write `tools/{stem}.ts` as a script: start it with front matter \
                 `// ---`, `// description: {description}`, `// input: {{type: object, \
                 properties: …}}`, `// ---`, read the input as JSON on stdin and print the result \
                 (docs/tools.md); or write `tools/{stem}.yaml` with `run:`"
            ),
        ),
        Slot::Hook => (
            "hook modules",
            "defineHook",
            format!(
                "write `hooks/{stem}.ts` as a script with front matter `// ---`, \
                 `// events: [turn.completed]`, `// ---` that reads the event as JSON on stdin \
                 (docs/hooks.md)"
            ),
        ),
        Slot::Schedule => (
            "schedule modules",
            "defineSchedule",
            format!(
                "write `schedules/{stem}.md` with front matter `cron: \"0 9 * * *\"` and the \
                 prompt as its body (docs/schedules.md)"
            ),
        ),
        Slot::Skill => (
            "skill modules",
            "defineSkill",
            format!(
                "write `skills/{stem}.md` with front matter `description: {description}` and \
                 the procedure as its body"
            ),
        ),
        Slot::Subagent => (
            "subagent modules",
            "defineAgent",
            format!(
                "write a folder `subagents/{stem}/` with `agent.yaml` (`description:`, `model:`) \
                 and `instructions.md` (docs/subagents.md)"
            ),
        ),
    };
    Diagnostic::new(
        Code::ModuleNotYet,
        path.to_owned(),
        format!("TypeScript {what} (`{define}`) are not read by this version of eve"),
    )
    .at(line_of(text, &[define, "export default"]), 1)
    .help(help)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_and_scripts_are_told_apart() {
        let module = "import { defineTool } from \"eve/tools\";\nexport default defineTool({\n  \
                      description: \"Get the weather\",\n});\n";
        assert!(is_module(module));
        assert!(!is_module(
            "// ---\n// description: d\n// ---\nimport x from \"eve\";\n"
        ));
        assert!(!is_module("console.log(1)\n"));
        let d = super::module(Slot::Tool, "tools/get_weather.ts", module);
        assert_eq!(d.line, Some(1));
        let help = d.help.unwrap();
        assert!(help.contains("// description: Get the weather"), "{help}");
        let d = super::module(
            Slot::Agent,
            "agent.ts",
            "import { defineAgent } from \"eve\";\n\nexport default defineAgent({ model: \"openai/gpt-5\" });\n",
        );
        assert_eq!(d.line, Some(1));
        assert!(d.help.unwrap().contains("`model: openai/gpt-5`"));
    }
}
