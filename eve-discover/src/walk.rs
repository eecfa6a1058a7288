//! The walker: lists and reads the agent folder through a [`Source`], turns what it cannot read
//! or use into diagnostics, and sends each entry of an agent folder to its slot (`slots.rs` has
//! the rules of each slot folder).
//!
//! Everything discovery reports about unreadable folders, undecodable files, escaping or looping
//! symlinks and entries that are neither file nor folder is said here, once, for every slot and
//! for `evals/` alike.

use crate::names::{SLOT_FOLDERS, closest, dir_label, is_ignored, join, split_ext};
use crate::refused;
use crate::{AgentDir, Code, Diagnostic, DirEntry, EntryKind, MAX_DEPTH, Source, SourceFile};

/// The help of every "nests too deep" diagnostic.
pub(crate) const TOO_DEEP_HELP: &str =
    "flatten the folders, or look for a symlink that points back at one of its parent folders";

/// One walk: the source it reads and the diagnostics collected so far.
pub(crate) struct Walker<'a> {
    pub(crate) source: &'a dyn Source,
    pub(crate) diagnostics: Vec<Diagnostic>,
    /// The root agent folder is the project's folder (the flat layout).
    pub(crate) flat: bool,
}

impl<'a> Walker<'a> {
    /// A walk of `source` with no diagnostics yet.
    pub(crate) fn new(source: &'a dyn Source) -> Self {
        Self {
            source,
            diagnostics: Vec::new(),
            flat: false,
        }
    }
}

impl Walker<'_> {
    pub(crate) fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    /// Lists a folder, dropping ignored names and reporting unusable entries.
    pub(crate) fn list(&mut self, dir: &str) -> Vec<DirEntry> {
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
    pub(crate) fn read_text(&mut self, path: String, executable: bool) -> Option<SourceFile> {
        let bytes = self.source.read(&path);
        self.decode(path, executable, bytes)
    }

    /// Reads the files a folder's entries will need, all at once (see [`Source::read_many`]).
    /// The results are taken in the same order by [`Walker::next_text`].
    pub(crate) fn prefetch(
        &self,
        paths: &[String],
    ) -> std::vec::IntoIter<std::io::Result<Vec<u8>>> {
        self.source.read_many(paths).into_iter()
    }

    /// Like [`Walker::read_text`], with the bytes from a prefetch (read now if there are none left).
    pub(crate) fn next_text(
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

    pub(crate) fn unknown(&mut self, path: String, what: &str, help: &str) {
        self.push(
            Diagnostic::new(Code::UnknownEntry, path, what.to_owned())
                .help(format!("{help}; or prefix the name with `_` to ignore it")),
        );
    }

    pub(crate) fn agent(&mut self, dir: &str, depth: usize) -> AgentDir {
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
                (_, name) if self.flat && dir.is_empty() && is_project_entry(e.kind, name) => {}
                (EntryKind::Dir, "instructions") => {
                    agent.instructions_dir = self.instructions_dir(&path)
                }
                (EntryKind::Dir, "extensions") => self.push(refused::extensions(dir_label(&path))),
                (EntryKind::File, name) if refused::is_module_file(name) => {
                    if let Some(module) = self.root_module(path, e.executable) {
                        agent.modules.push(module);
                    }
                }
                (EntryKind::Dir, "tools") => self.tools(&path, "", depth, &mut agent.tools),
                (EntryKind::Dir, "skills") => self.skills(&path, &mut agent.skills),
                (EntryKind::Dir, "subagents") => self.subagents(
                    &path,
                    depth,
                    &mut agent.subagents,
                    &mut agent.remote_subagents,
                ),
                (EntryKind::Dir, "schedules") => {
                    agent.schedules = self.flat(
                        &path,
                        &["md", "ts", "mts", "js", "mjs"],
                        "a schedule is `schedules/NAME.md` (or a `defineSchedule` module)",
                    );
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
                            "{guess}agent folders are instructions/, tools/, skills/, subagents/, \
                             schedules/, hooks/, connections/, channels/ and sandbox/"
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

    /// A JavaScript or TypeScript module at an agent folder's root: eve's `agent.ts` or
    /// `instructions.ts` (returned, for the build to evaluate), `sandbox.ts` (refused), or
    /// something else.
    fn root_module(&mut self, path: String, executable: bool) -> Option<SourceFile> {
        let name = path.rsplit('/').next().unwrap_or_default();
        let (stem, ext) = split_ext(name);
        let stem = stem.to_owned();
        let evaluated = matches!(ext, Some("ts" | "mts" | "js" | "mjs"));
        let file = self.read_text(path.clone(), executable)?;
        if stem == "sandbox" {
            self.push(refused::sandbox_provider(
                &path,
                &file.text,
                "defineSandbox(",
            ));
        } else if let Some(d) = refused::module(&path, &file.text) {
            self.push(d);
        } else if evaluated && (stem == "agent" || stem == "instructions") {
            return Some(file);
        } else {
            self.unknown(
                path,
                "unknown file",
                "an agent folder holds agent.yaml (or agent.ts), instructions.md (or \
                 instructions.ts) and the slot folders",
            );
        }
        None
    }

    /// `instructions/`: its `.md` files, in file-name order (not recursive).
    fn instructions_dir(&mut self, dir: &str) -> Vec<SourceFile> {
        let mut entries = self.list(dir);
        entries.sort_by(|a, b| {
            (a.name.to_lowercase(), &a.name).cmp(&(b.name.to_lowercase(), &b.name))
        });
        let mut out = Vec::new();
        for e in entries {
            let path = join(dir, &e.name);
            match (e.kind, split_ext(&e.name).1) {
                (EntryKind::File, Some("md")) => out.extend(self.read_text(path, e.executable)),
                (EntryKind::File, Some("ts" | "mts" | "js" | "mjs")) => {
                    if let Some(file) = self.read_text(path.clone(), e.executable) {
                        match refused::module(&path, &file.text) {
                            Some(d) => self.push(d),
                            // A `defineInstructions` module, evaluated by the build.
                            None => out.push(file),
                        }
                    }
                }
                (EntryKind::Dir, _) => self.unknown(
                    dir_label(&path),
                    "unexpected folder",
                    "`instructions/` is read without its subfolders: put the `.md` files directly in it",
                ),
                _ => self.unknown(
                    path,
                    "unexpected file",
                    "`instructions/` holds `.md` files and `defineInstructions` modules, read after `instructions.md` in file-name order",
                ),
            }
        }
        out
    }

    /// Calls `f` with every file path under `dir` (recursively).
    pub(crate) fn files_under(&mut self, dir: &str, depth: usize, f: &mut dyn FnMut(&str)) {
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
}

/// Whether a root entry of a flat-layout project is the project's rather than the agent's.
fn is_project_entry(kind: EntryKind, name: &str) -> bool {
    match kind {
        EntryKind::Dir => matches!(
            name,
            "node_modules" | "evals" | "lib" | "app" | "apps" | "dist" | "public" | "scripts"
        ),
        _ => {
            matches!(
                name,
                "package.json"
                    | "package-lock.json"
                    | "npm-shrinkwrap.json"
                    | "pnpm-lock.yaml"
                    | "pnpm-workspace.yaml"
                    | "yarn.lock"
                    | "bun.lock"
                    | "bun.lockb"
                    | "tsconfig.json"
                    | "deno.json"
                    | "README.md"
                    | "LICENSE"
                    | "CHANGELOG.md"
                    | "Dockerfile"
            ) || (refused::is_module_file(name)
                && !matches!(split_ext(name).0, "agent" | "instructions" | "sandbox"))
        }
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
