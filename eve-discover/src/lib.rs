//! Agent folder discovery: walk an agent folder and put every file in its slot.
//!
//! An agent is a folder; the path of a file is its identity. Discovery reads the tree (from disk or
//! from memory), classifies each entry by the conventions (`tools/`, `skills/`, `subagents/`, …),
//! derives names from paths, and reports anything it does not understand as a [`Diagnostic`]. It never
//! parses YAML and never runs anything: that is compilation's job (`eve-compile`).

mod diagnostic;
pub mod evals;
mod names;
pub use names::closest;
mod source;

pub use diagnostic::{Code, Diagnostic, Severity, error_count};
pub use evals::{EvalDiscovery, EvalFile, discover_evals};
pub use source::{DirEntry, EntryKind, FsSource, MemSource, Source};

/// How deep subagents (and folders inside tools/skills) may nest before discovery stops.
pub const MAX_DEPTH: usize = 16;

/// A text file read from the agent folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Path relative to the root agent folder, with `/` separators (e.g. `tools/weather.py`).
    pub path: String,
    /// The file's contents.
    pub text: String,
    /// Whether an execute bit is set.
    pub executable: bool,
}

/// A file whose name (derived from its path) is its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The derived name (`tools/sub/get.py` → `sub-get`).
    pub name: String,
    /// The file.
    pub file: SourceFile,
}

/// A tool file: a YAML definition or a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFile {
    /// The derived name.
    pub name: String,
    /// The file.
    pub file: SourceFile,
    /// `tools/NAME.yaml` (declarative) rather than a script.
    pub yaml: bool,
}

/// A skill: `skills/NAME.md`, or `skills/NAME/SKILL.md` with sibling files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// The derived name.
    pub name: String,
    /// The markdown file.
    pub file: SourceFile,
    /// Other files of a packaged skill, relative to the root agent folder.
    pub assets: Vec<String>,
}

/// A subagent folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subagent {
    /// The folder name.
    pub name: String,
    /// Its contents: a full agent.
    pub agent: AgentDir,
}

/// `sandbox/`: configuration and the files seeded into every session workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxDir {
    /// `sandbox/sandbox.yaml`.
    pub config: Option<SourceFile>,
    /// Files under `sandbox/workspace/`, relative to the root agent folder.
    pub workspace: Vec<String>,
}

/// One agent folder, classified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentDir {
    /// Path of this folder relative to the root agent (`""` for the root).
    pub path: String,
    /// `agent.yaml`.
    pub config: Option<SourceFile>,
    /// `instructions.md`.
    pub instructions: Option<SourceFile>,
    /// `tools/**`.
    pub tools: Vec<ToolFile>,
    /// `skills/**`.
    pub skills: Vec<SkillFile>,
    /// `subagents/*/`.
    pub subagents: Vec<Subagent>,
    /// `schedules/*.md`.
    pub schedules: Vec<Named>,
    /// `hooks/*`.
    pub hooks: Vec<Named>,
    /// `connections/*.yaml`.
    pub connections: Vec<Named>,
    /// `channels/*.yaml`.
    pub channels: Vec<Named>,
    /// `sandbox/`.
    pub sandbox: Option<SandboxDir>,
}

impl AgentDir {
    /// Number of files discovered in this agent and its subagents.
    pub fn file_count(&self) -> usize {
        usize::from(self.config.is_some())
            + usize::from(self.instructions.is_some())
            + self.tools.len()
            + self
                .skills
                .iter()
                .map(|s| 1 + s.assets.len())
                .sum::<usize>()
            + self.schedules.len()
            + self.hooks.len()
            + self.connections.len()
            + self.channels.len()
            + self
                .sandbox
                .as_ref()
                .map_or(0, |s| usize::from(s.config.is_some()) + s.workspace.len())
            + self
                .subagents
                .iter()
                .map(|s| s.agent.file_count())
                .sum::<usize>()
    }
}

/// The result of walking an agent folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// The root agent.
    pub agent: AgentDir,
    /// Everything discovery could not make sense of.
    pub diagnostics: Vec<Diagnostic>,
}

/// Walks the agent folder behind `source`.
pub fn discover(source: &dyn Source) -> Discovery {
    let mut walker = Walker {
        source,
        diagnostics: Vec::new(),
    };
    let agent = walker.agent("", 0);
    Discovery {
        agent,
        diagnostics: walker.diagnostics,
    }
}

/// True for names discovery skips silently: `_x`, `.x`, and `*.test.*`.
pub fn is_ignored(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('.') || name.contains(".test.")
}

/// Splits `name.ext` into stem and extension (the last dot; a leading dot does not count).
pub fn split_ext(name: &str) -> (&str, Option<&str>) {
    match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], Some(&name[i + 1..])),
        _ => (name, None),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

struct Walker<'a> {
    source: &'a dyn Source,
    diagnostics: Vec<Diagnostic>,
}

impl Walker<'_> {
    fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    /// Lists a folder, dropping ignored names and reporting unusable entries.
    fn list(&mut self, dir: &str) -> Vec<DirEntry> {
        let entries = match self.source.read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.push(
                    Diagnostic::new(
                        Code::Unreadable,
                        dir_label(dir),
                        format!("cannot read folder: {e}"),
                    )
                    .help("check the folder's permissions"),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if is_ignored(&e.name) {
                continue;
            }
            let path = join(dir, &e.name);
            if !e.name_is_utf8 {
                self.push(
                    Diagnostic::new(Code::NotUtf8, path, "file name is not valid UTF-8").help(
                        "rename it using UTF-8 characters, or prefix it with `_` to ignore it",
                    ),
                );
                continue;
            }
            match e.kind {
                EntryKind::Escaping => self.push(
                    Diagnostic::new(
                        Code::SymlinkEscape,
                        path,
                        "symlink points outside the agent folder (or to nothing)",
                    )
                    .help("copy the target into the agent folder, or point the link inside it"),
                ),
                EntryKind::Loop => self.push(
                    Diagnostic::new(
                        Code::SymlinkEscape,
                        path,
                        "symlink points back at a folder that contains it, so it would be walked forever",
                    )
                    .help("remove the link, or point it at a file or a folder that is not one of its parents"),
                ),
                EntryKind::Other => self.push(
                    Diagnostic::new(Code::UnknownEntry, path, "not a regular file or folder")
                        .help("remove it, or prefix its name with `_` to ignore it"),
                ),
                _ => out.push(e),
            }
        }
        out
    }

    /// Reads a text file; reports and returns `None` when it cannot.
    fn read_text(&mut self, path: String, executable: bool) -> Option<SourceFile> {
        let bytes = self.source.read(&path);
        self.decode(path, executable, bytes)
    }

    /// Reads the files a folder's entries will need, all at once (see [`Source::read_many`]).
    /// The results are taken in the same order by [`Walker::next_text`].
    fn prefetch(&self, paths: &[String]) -> std::vec::IntoIter<std::io::Result<Vec<u8>>> {
        self.source.read_many(paths).into_iter()
    }

    /// Like [`Walker::read_text`], with the bytes from a prefetch (read now if there are none left).
    fn next_text(
        &mut self,
        read: &mut std::vec::IntoIter<std::io::Result<Vec<u8>>>,
        path: String,
        executable: bool,
    ) -> Option<SourceFile> {
        let bytes = read.next().unwrap_or_else(|| self.source.read(&path));
        self.decode(path, executable, bytes)
    }

    /// Turns a read's result into a text file; reports and returns `None` when it cannot.
    fn decode(
        &mut self,
        path: String,
        executable: bool,
        bytes: std::io::Result<Vec<u8>>,
    ) -> Option<SourceFile> {
        match bytes {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Some(SourceFile {
                    path,
                    text,
                    executable,
                }),
                Err(e) => {
                    let at = e.utf8_error().valid_up_to();
                    let (line, column) = line_column(&e.as_bytes()[..at]);
                    self.push(
                        Diagnostic::new(
                            Code::NotUtf8,
                            path,
                            format!("file is not valid UTF-8 (first bad byte at offset {at})"),
                        )
                        .at(line, column)
                        .help("save the file as UTF-8; binaries belong in a `_`-prefixed folder and are called from `run:`"),
                    );
                    None
                }
            },
            Err(e) => {
                self.push(
                    Diagnostic::new(Code::Unreadable, path, format!("cannot read file: {e}"))
                        .help("check the file's permissions"),
                );
                None
            }
        }
    }

    fn unknown(&mut self, path: String, what: &str, help: &str) {
        self.push(
            Diagnostic::new(Code::UnknownEntry, path, what.to_owned())
                .help(format!("{help}; or prefix the name with `_` to ignore it")),
        );
    }

    fn agent(&mut self, dir: &str, depth: usize) -> AgentDir {
        let mut agent = AgentDir {
            path: dir.to_owned(),
            ..AgentDir::default()
        };
        for e in self.list(dir) {
            let path = join(dir, &e.name);
            match (e.kind, e.name.as_str()) {
                (EntryKind::File, "agent.yaml" | "agent.yml") => {
                    if agent.config.is_some() {
                        self.push(
                            Diagnostic::new(
                                Code::NameCollision,
                                path,
                                "both agent.yaml and agent.yml exist",
                            )
                            .help("keep one of them"),
                        );
                    } else {
                        agent.config = self.read_text(path, e.executable);
                    }
                }
                (EntryKind::File, "instructions.md") => {
                    agent.instructions = self.read_text(path, e.executable);
                }
                (EntryKind::Dir, "tools") => self.tools(&path, "", depth, &mut agent.tools),
                (EntryKind::Dir, "skills") => self.skills(&path, &mut agent.skills),
                (EntryKind::Dir, "subagents") => self.subagents(&path, depth, &mut agent.subagents),
                (EntryKind::Dir, "schedules") => {
                    agent.schedules =
                        self.flat(&path, &["md"], "a schedule is `schedules/NAME.md`");
                }
                (EntryKind::Dir, "hooks") => agent.hooks = self.flat(&path, &[], ""),
                (EntryKind::Dir, "connections") => {
                    agent.connections = self.flat(
                        &path,
                        &["yaml", "yml"],
                        "a connection is `connections/NAME.yaml`",
                    );
                }
                (EntryKind::Dir, "channels") => {
                    agent.channels =
                        self.flat(&path, &["yaml", "yml"], "a channel is `channels/NAME.yaml`");
                }
                (EntryKind::Dir, "sandbox") => agent.sandbox = Some(self.sandbox(&path)),
                (EntryKind::Dir, "agent.yaml" | "agent.yml" | "instructions.md") => self.push(
                    Diagnostic::new(
                        Code::UnknownEntry,
                        dir_label(&path),
                        format!("`{}` is a folder; eve expects a file here", e.name),
                    )
                    .help("replace the folder with a file of that name"),
                ),
                (EntryKind::Dir, name) => {
                    let guess = closest(name, &SLOT_FOLDERS)
                        .map(|s| format!("did you mean `{s}/`? "))
                        .unwrap_or_default();
                    self.unknown(
                        dir_label(&path),
                        "unknown folder",
                        &format!(
                            "{guess}agent folders are tools/, skills/, subagents/, schedules/, \
                             hooks/, connections/, channels/ and sandbox/"
                        ),
                    )
                }
                _ => self.unknown(
                    path,
                    "unknown file",
                    "an agent folder holds agent.yaml, instructions.md and the slot folders",
                ),
            }
        }
        agent
    }

    fn tools(&mut self, dir: &str, prefix: &str, depth: usize, out: &mut Vec<ToolFile>) {
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

    fn skills(&mut self, dir: &str, out: &mut Vec<SkillFile>) {
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
                    _ => self.unknown(
                        path,
                        "not a skill",
                        "a skill is `skills/NAME.md` or `skills/NAME/SKILL.md`",
                    ),
                },
            }
        }
    }

    /// Calls `f` with every file path under `dir` (recursively).
    fn files_under(&mut self, dir: &str, depth: usize, f: &mut dyn FnMut(&str)) {
        if depth > MAX_DEPTH {
            self.push(
                Diagnostic::new(
                    Code::TooDeep,
                    dir_label(dir),
                    format!("folders nest deeper than {MAX_DEPTH} levels; eve stops here"),
                )
                .help(TOO_DEEP_HELP),
            );
            return;
        }
        for e in self.list(dir) {
            let path = join(dir, &e.name);
            if e.kind == EntryKind::Dir {
                self.files_under(&path, depth + 1, f);
            } else {
                f(&path);
            }
        }
    }

    fn subagents(&mut self, dir: &str, depth: usize, out: &mut Vec<Subagent>) {
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
            } else {
                self.unknown(
                    path,
                    "not a subagent",
                    "a subagent is a folder `subagents/NAME/` holding a full agent",
                );
            }
        }
    }

    /// A flat slot folder: one file per item, named by its stem. `exts` empty = any extension.
    fn flat(&mut self, dir: &str, exts: &[&str], help: &str) -> Vec<Named> {
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

    fn sandbox(&mut self, dir: &str) -> SandboxDir {
        let mut sandbox = SandboxDir::default();
        for e in self.list(dir) {
            let path = join(dir, &e.name);
            match (e.kind, e.name.as_str()) {
                (EntryKind::File, "sandbox.yaml" | "sandbox.yml") => {
                    sandbox.config = self.read_text(path, false);
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
}

/// 1-based line and column (in characters) just after `valid`, a valid UTF-8 prefix.
fn line_column(valid: &[u8]) -> (u32, u32) {
    let text = std::str::from_utf8(valid).unwrap_or_default();
    let line = text.matches('\n').count() + 1;
    let column = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (
        u32::try_from(line).unwrap_or(u32::MAX),
        u32::try_from(column).unwrap_or(u32::MAX),
    )
}

/// The slot folders of an agent folder, for "did you mean" on a misnamed one.
const SLOT_FOLDERS: [&str; 8] = [
    "tools",
    "skills",
    "subagents",
    "schedules",
    "hooks",
    "connections",
    "channels",
    "sandbox",
];

const TOO_DEEP_HELP: &str =
    "flatten the folders, or look for a symlink that points back at one of its parent folders";

fn dir_label(dir: &str) -> String {
    if dir.is_empty() {
        ".".to_owned()
    } else {
        format!("{dir}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_slot() {
        let src = MemSource::new()
            .file("agent.yaml", "model: mock/echo\n")
            .file("instructions.md", "Be brief.")
            .executable("tools/weather.py", "# ---\n# description: w\n# ---\n")
            .file("tools/search.yaml", "description: s\n")
            .executable("tools/gh/issues.sh", "#!/bin/sh\n")
            .file("tools/_helper.py", "")
            .file("tools/weather.test.py", "")
            .file("skills/flat.md", "---\ndescription: f\n---\nbody")
            .file("skills/pkg/SKILL.md", "---\ndescription: p\n---\n")
            .file("skills/pkg/ref/data.csv", "a,b")
            .file("subagents/helper/agent.yaml", "description: h\n")
            .file("subagents/helper/instructions.md", "help")
            .file("subagents/helper/tools/t.yaml", "description: t\n")
            .file("schedules/daily.md", "---\ncron: '0 9 * * *'\n---\nReport.")
            .executable("hooks/audit.sh", "#!/bin/sh\n")
            .file("connections/gh.yaml", "url: http://x\n")
            .file("channels/eve.yaml", "kind: http\n")
            .file("sandbox/sandbox.yaml", "{}\n")
            .file("sandbox/workspace/notes/a.txt", "x")
            .file(".hidden/x", "");
        let d = discover(&src);
        assert!(d.diagnostics.is_empty(), "{:?}", d.diagnostics);
        let a = &d.agent;
        let tools: Vec<_> = a.tools.iter().map(|t| (t.name.as_str(), t.yaml)).collect();
        assert_eq!(
            tools,
            [("gh-issues", false), ("search", true), ("weather", false)]
        );
        assert_eq!(a.skills[1].name, "pkg");
        assert_eq!(a.skills[1].assets, ["skills/pkg/ref/data.csv"]);
        assert_eq!(
            a.subagents[0].agent.tools[0].file.path,
            "subagents/helper/tools/t.yaml"
        );
        assert_eq!(a.schedules[0].name, "daily");
        assert_eq!(a.hooks[0].name, "audit");
        assert_eq!(
            a.sandbox.as_ref().map(|s| s.workspace.clone()),
            Some(vec!["sandbox/workspace/notes/a.txt".to_owned()])
        );
    }

    #[test]
    fn reports_unknown_and_bad_entries() {
        let src = MemSource::new()
            .file("instructions.md", "x")
            .file("notes.txt", "x")
            .file("widgets/a.md", "x")
            .file("skills/pkg/other.md", "x")
            .file("tools/bin.py", vec![0xff, 0xfe])
            .escaping_link("tools/link.py");
        let d = discover(&src);
        let codes: Vec<_> = d
            .diagnostics
            .iter()
            .map(|d| (d.code.as_str(), d.file.clone().unwrap_or_default()))
            .collect();
        assert!(codes.contains(&("W001", "notes.txt".into())), "{codes:?}");
        assert!(codes.contains(&("W001", "widgets/".into())), "{codes:?}");
        assert!(codes.contains(&("E012", "skills/pkg/".into())), "{codes:?}");
        assert!(
            codes.contains(&("E003", "tools/bin.py".into())),
            "{codes:?}"
        );
        assert!(
            codes.contains(&("E004", "tools/link.py".into())),
            "{codes:?}"
        );
    }

    /// Files are read ahead on several threads, but only those the listing found to be files: a
    /// FIFO named like a skill's SKILL.md or a tool is reported, never opened (it would block).
    #[cfg(unix)]
    #[test]
    fn reads_only_what_the_listing_found_as_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["tools", "skills/fifo", "skills/pkg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for i in 0..100 {
            std::fs::write(root.join(format!("tools/t{i:03}.yaml")), "description: t\n").unwrap();
            std::fs::write(
                root.join(format!("skills/s{i:03}.md")),
                "---\ndescription: s\n---\n",
            )
            .unwrap();
        }
        std::fs::write(
            root.join("skills/pkg/SKILL.md"),
            "---\ndescription: p\n---\n",
        )
        .unwrap();
        let made = ["skills/fifo/SKILL.md", "tools/t050x.sh"].iter().all(|f| {
            std::process::Command::new("mkfifo")
                .arg(root.join(f))
                .status()
                .is_ok_and(|s| s.success())
        });
        if !made {
            return;
        }
        let d = discover(&FsSource::new(root).unwrap());
        let a = &d.agent;
        assert_eq!(a.tools.len(), 100);
        assert_eq!(a.tools[50].file.text, "description: t\n");
        assert_eq!(a.skills.len(), 101);
        assert!(a.skills.iter().any(|s| s.name == "pkg"));
        let found: Vec<_> = d
            .diagnostics
            .iter()
            .map(|d| (d.code.as_str(), d.file.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            found,
            [
                ("W001", "skills/fifo/SKILL.md".to_owned()),
                ("E012", "skills/fifo/".to_owned()),
                ("W001", "tools/t050x.sh".to_owned()),
            ]
        );
    }
}
