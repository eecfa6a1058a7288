//! `skills/`: one Markdown file (or folder with `SKILL.md` and assets) per skill; front matter
//! gives the description the model sees before it loads the body.

use eve_discover::{Code, Diagnostic, SkillFile};

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

/// Largest skill file (front matter and body): about a million tokens, more than nearly every
/// model can take in one go. The body is embedded in the manifest, which every build load reads.
const MAX_SKILL_BYTES: usize = 4 * 1024 * 1024;

impl Compiler {
    pub(super) fn skills(&mut self, files: &[SkillFile]) -> Vec<Skill> {
        let mut out: Vec<Skill> = Vec::new();
        for s in files {
            if !self.check_name(&s.name, &s.file.path, "skill") {
                continue;
            }
            if let Some(prev) = out.iter().find(|o| o.name == s.name) {
                self.push(
                    Diagnostic::new(
                        Code::NameCollision,
                        s.file.path.clone(),
                        format!(
                            "skill `{}` is also defined by {}{}",
                            s.name, self.shown_prefix, prev.source
                        ),
                    )
                    .help("keep one of them, or rename one file"),
                );
                continue;
            }
            if super::modules::is_module(&s.file) {
                out.extend(self.module_skill(s));
                continue;
            }
            if s.file.text.len() > MAX_SKILL_BYTES {
                self.push(
                    Diagnostic::new(
                        Code::InvalidField,
                        s.file.path.clone(),
                        format!(
                            "skill `{}` is {:.1} MiB, over the limit of {} MiB: a loaded skill goes \
                             whole into the conversation, and this is more than nearly every \
                             model's context window",
                            s.name,
                            s.file.text.len() as f64 / (1024.0 * 1024.0),
                            MAX_SKILL_BYTES / (1024 * 1024)
                        ),
                    )
                    .help(
                        "split it into smaller skills, or make it a packaged skill \
                         (`skills/NAME/SKILL.md`) whose reference material stays in files beside \
                         SKILL.md for a tool to read",
                    ),
                );
                continue;
            }
            let Some(parsed) = self.markdown_file(&s.file) else {
                continue;
            };
            let mut f = Fields::new(&s.file.path, &parsed.doc, "", &mut self.diags);
            f.unknown_keys(
                &[
                    "name",
                    "description",
                    "deferred",
                    "license",
                    "metadata",
                    "allowed-tools",
                    "compatibility",
                ],
                "skill",
            );
            // eve's rule: without `description:`, a skill is described by its first non-empty line.
            let description = f
                .string("description")
                .filter(|d| !d.trim().is_empty())
                .or_else(|| first_line(&parsed.body))
                .unwrap_or_default();
            if description.trim().is_empty() {
                f.push(
                    Diagnostic::new(Code::MissingToolDescription, s.file.path.clone(), format!("skill `{}` has no description", s.name))
                        .help("add front matter `description:` saying when the skill applies, or a first line that says it; the model only sees the description until it loads the skill"),
                );
            }
            let deferred = f.bool("deferred").unwrap_or(false);
            let license = f.string("license");
            let metadata = f.raw("metadata").cloned();
            for a in &s.assets {
                self.files.insert(a.clone());
            }
            out.push(Skill {
                name: s.name.clone(),
                source: s.file.path.clone(),
                description,
                body: parsed.body.trim().to_owned(),
                deferred,
                license,
                metadata,
                files: s.assets.clone(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// The first non-empty line of a skill's body, without a Markdown heading's `#`s.
fn first_line(body: &str) -> Option<String> {
    body.lines()
        .map(|line| line.trim().trim_start_matches('#').trim())
        .find(|line| !line.is_empty())
        .map(str::to_owned)
}
