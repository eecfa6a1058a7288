//! The slots of an agent folder: what each of `tools/`, `skills/`, `subagents/`, `schedules/`,
//! `hooks/`, `connections/`, `channels/` and `sandbox/` may hold, the name each file gets, and
//! what is reported when an entry does not fit.
//!
//! A slot reads the files it keeps in one batch ([`Source::read_many`](crate::Source::read_many)),
//! and only those its listing found to be files, so a FIFO named like a tool is reported and never
//! opened.

use crate::names::{dir_label, join, split_ext};
use crate::refused;
use crate::walk::{TOO_DEEP_HELP, Walker};
use crate::{
    Code, Diagnostic, DirEntry, EntryKind, MAX_DEPTH, Named, SandboxDir, SkillFile, Subagent,
    ToolFile,
};

impl Walker<'_> {
    pub(crate) fn tools(&mut self, dir: &str, prefix: &str, depth: usize, out: &mut Vec<ToolFile>) {
        if depth > MAX_DEPTH {
            self.push(
                Diagnostic::new(
                    Code::TooDeep,
                    dir_label(dir),
                    format!("tool folders nest deeper than {MAX_DEPTH} levels; eve stops here"),
                )
                .help(TOO_DEEP_HELP),
            );
            return;
        }
        let entries = self.list(dir);
        let not_tool =
            |e: &DirEntry| matches!(split_ext(&e.name).1, Some("md" | "txt" | "json" | "lock"));
        let wanted: Vec<String> = entries
            .iter()
            .filter(|e| e.kind != EntryKind::Dir && !not_tool(e))
            .map(|e| join(dir, &e.name))
            .collect();
        let mut read = self.prefetch(&wanted);
        for e in entries {
            let path = join(dir, &e.name);
            if e.kind == EntryKind::Dir {
                let sub = format!("{prefix}{}-", e.name);
                let (tools, diagnostics) = (out.len(), self.diagnostics.len());
                self.tools(&path, &sub, depth + 1, out);
                // A folder such as `tools/search.py/` made by mistake would otherwise vanish
                // without a word.
                if out.len() == tools && self.diagnostics.len() == diagnostics {
                    self.unknown(
                        dir_label(&path),
                        "folder holds no tools",
                        "a tool is a file (`tools/NAME.yaml` or a script with front matter); \
                         put tool files in the folder or remove it",
                    );
                }
                continue;
            }
            let (stem, ext) = split_ext(&e.name);
            match ext {
                _ if not_tool(&e) => self.unknown(
                    path,
                    "not a tool",
                    "a tool is `tools/NAME.yaml` or a script with front matter",
                ),
                _ => {
                    let yaml = matches!(ext, Some("yaml" | "yml"));
                    if let Some(file) = self.next_text(&mut read, path, e.executable) {
                        if self.module_refused(&file) {
                            continue;
                        }
                        out.push(ToolFile {
                            name: format!("{prefix}{stem}"),
                            file,
                            yaml,
                        });
                    }
                }
            }
        }
    }

    pub(crate) fn skills(&mut self, dir: &str, out: &mut Vec<SkillFile>) {
        // First every packaged skill's folder is listed (its diagnostics kept aside), so that only
        // a SKILL.md the listing found as a file is read, together with the flat skills.
        struct Packaged {
            assets: Vec<String>,
            has_main: bool,
            diagnostics: Vec<Diagnostic>,
        }
        let entries = self.list(dir);
        let mut packaged = Vec::new();
        let mut wanted = Vec::new();
        for e in &entries {
            let path = join(dir, &e.name);
            if e.kind == EntryKind::Dir {
                let main = join(&path, "SKILL.md");
                let mut assets = Vec::new();
                let mut has_main = false;
                let outer = std::mem::take(&mut self.diagnostics);
                self.files_under(&path, 0, &mut |p: &str| {
                    if p == main {
                        has_main = true;
                    } else {
                        assets.push(p.to_owned());
                    }
                });
                let diagnostics = std::mem::replace(&mut self.diagnostics, outer);
                if has_main {
                    wanted.push(main);
                }
                packaged.push(Packaged {
                    assets,
                    has_main,
                    diagnostics,
                });
            } else if split_ext(&e.name).1 == Some("md") {
                wanted.push(path);
            }
        }
        let mut read = self.prefetch(&wanted);
        let mut packaged = packaged.into_iter();
        for e in entries {
            let path = join(dir, &e.name);
            match e.kind {
                EntryKind::Dir => {
                    let Some(p) = packaged.next() else {
                        continue;
                    };
                    self.diagnostics.extend(p.diagnostics);
                    if !p.has_main {
                        self.push(
                            Diagnostic::new(
                                Code::MissingField,
                                dir_label(&path),
                                "packaged skill has no SKILL.md",
                            )
                            .help("add SKILL.md with front matter `description:` and the skill's body"),
                        );
                        continue;
                    }
                    let main = join(&path, "SKILL.md");
                    if let Some(file) = self.next_text(&mut read, main, false) {
                        out.push(SkillFile {
                            name: e.name.clone(),
                            file,
                            assets: p.assets,
                        });
                    }
                }
                _ => match split_ext(&e.name) {
                    (stem, Some("md")) => {
                        if let Some(file) = self.next_text(&mut read, path, e.executable) {
                            out.push(SkillFile {
                                name: stem.to_owned(),
                                file,
                                assets: Vec::new(),
                            });
                        }
                    }
                    (stem, Some("ts" | "mts" | "js" | "mjs")) => {
                        // A `defineSkill` module, evaluated by the build.
                        let stem = stem.to_owned();
                        if let Some(file) = self.read_text(path, e.executable)
                            && !self.module_refused(&file)
                        {
                            out.push(SkillFile {
                                name: stem,
                                file,
                                assets: Vec::new(),
                            });
                        }
                    }
                    _ => self.unknown(
                        path,
                        "not a skill",
                        "a skill is `skills/NAME.md` or `skills/NAME/SKILL.md`",
                    ),
                },
            }
        }
    }

    pub(crate) fn subagents(
        &mut self,
        dir: &str,
        depth: usize,
        out: &mut Vec<Subagent>,
        remote: &mut Vec<Named>,
    ) {
        if depth >= MAX_DEPTH {
            self.push(
                Diagnostic::new(
                    Code::TooDeep,
                    dir_label(dir),
                    format!("subagents nest deeper than {MAX_DEPTH} levels; eve stops here"),
                )
                .help(TOO_DEEP_HELP),
            );
            return;
        }
        for e in self.list(dir) {
            let path = join(dir, &e.name);
            if e.kind == EntryKind::Dir {
                let agent = self.agent(&path, depth + 1);
                out.push(Subagent {
                    name: e.name,
                    agent,
                });
            } else if refused::is_module_file(&e.name) {
                if let Some(file) = self.read_text(path, e.executable)
                    && !self.module_refused(&file)
                {
                    self.push(
                        Diagnostic::new(
                            Code::ModuleNotDefinition,
                            file.path,
                            "a subagent module (`subagents/NAME.ts`) is not read: eve's declared \
                             peers and remote agents are deployment wiring eve does not take over",
                        )
                        .help(
                            "a subagent is a folder `subagents/NAME/` holding a full agent (its \
                             `agent.ts` or `agent.yaml` with `description:`), or \
                             `subagents/NAME.yaml` naming a remote eve agent (docs/subagents.md)",
                        ),
                    );
                }
            } else if let (stem, Some("yaml" | "yml")) = split_ext(&e.name) {
                // `subagents/NAME.yaml`: another eve deployment, called as a subagent.
                let stem = stem.to_owned();
                if let Some(file) = self.read_text(path, e.executable) {
                    remote.push(Named { name: stem, file });
                }
            } else {
                self.unknown(
                    path,
                    "not a subagent",
                    "a subagent is a folder `subagents/NAME/` holding a full agent, or `subagents/NAME.yaml` naming a remote agent",
                );
            }
        }
    }

    /// A flat slot folder: one file per item, named by its stem. `exts` empty = any extension.
    pub(crate) fn flat(&mut self, dir: &str, exts: &[&str], help: &str) -> Vec<Named> {
        let mut out = Vec::new();
        let entries = self.list(dir);
        let ext_ok = |e: &DirEntry| {
            let ext = split_ext(&e.name).1;
            exts.is_empty() || ext.is_some_and(|x| exts.contains(&x))
        };
        let wanted: Vec<String> = entries
            .iter()
            .filter(|e| e.kind != EntryKind::Dir && ext_ok(e))
            .map(|e| join(dir, &e.name))
            .collect();
        let mut read = self.prefetch(&wanted);
        for e in entries {
            let path = join(dir, &e.name);
            let stem = split_ext(&e.name).0;
            let slot = matches!(dir.rsplit('/').next(), Some("hooks" | "schedules"));
            if e.kind != EntryKind::Dir && refused::is_module_file(&e.name) {
                if dir.rsplit('/').next() == Some("channels") {
                    self.push(refused::channel(&path));
                    continue;
                }
                if slot && ext_ok(&e) {
                    let Some(file) = self.next_text(&mut read, path, e.executable) else {
                        continue;
                    };
                    if !self.module_refused(&file) {
                        out.push(Named {
                            name: stem.to_owned(),
                            file,
                        });
                    }
                    continue;
                }
            }
            if e.kind == EntryKind::Dir || !ext_ok(&e) {
                let what = if e.kind == EntryKind::Dir {
                    "unexpected folder"
                } else {
                    "unexpected file"
                };
                let help = if help.is_empty() {
                    "this slot holds files only"
                } else {
                    help
                };
                let shown = if e.kind == EntryKind::Dir {
                    dir_label(&path)
                } else {
                    path
                };
                self.unknown(shown, what, help);
                continue;
            }
            if let Some(file) = self.next_text(&mut read, path, e.executable) {
                out.push(Named {
                    name: stem.to_owned(),
                    file,
                });
            }
        }
        out
    }

    pub(crate) fn sandbox(&mut self, dir: &str) -> SandboxDir {
        let mut sandbox = SandboxDir::default();
        for e in self.list(dir) {
            let path = join(dir, &e.name);
            match (e.kind, e.name.as_str()) {
                (EntryKind::File, "sandbox.yaml" | "sandbox.yml") => {
                    sandbox.config = self.read_text(path, false);
                }
                (EntryKind::File, name) if refused::is_module_file(name) => {
                    let text = self.read_text(path.clone(), false).map(|f| f.text);
                    self.push(refused::sandbox_provider(
                        &path,
                        text.as_deref().unwrap_or_default(),
                        "defineSandbox(",
                    ));
                }
                (EntryKind::Dir, "workspace") => {
                    let mut files = Vec::new();
                    self.files_under(&path, 0, &mut |p: &str| files.push(p.to_owned()));
                    sandbox.workspace = files;
                }
                _ => self.unknown(
                    if e.kind == EntryKind::Dir {
                        dir_label(&path)
                    } else {
                        path
                    },
                    "unknown sandbox entry",
                    "sandbox/ holds sandbox.yaml and workspace/",
                ),
            }
        }
        sandbox
    }

    /// Reports a JavaScript or TypeScript module that uses what eve does not take over
    /// ([`refused::module`]); returns whether it did (the file is then not used). Other modules
    /// are kept: the build evaluates them.
    pub(crate) fn module_refused(&mut self, file: &crate::SourceFile) -> bool {
        let name = file.path.rsplit('/').next().unwrap_or_default();
        if !refused::is_module_file(name) {
            return false;
        }
        match refused::module(&file.path, &file.text) {
            Some(d) => {
                self.push(d);
                true
            }
            None => false,
        }
    }
}
