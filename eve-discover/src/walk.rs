//! The walker: lists and reads the agent folder through a [`Source`], turns what it cannot read
//! or use into diagnostics, and sends each entry of an agent folder to its slot (`slots.rs` has
//! the rules of each slot folder).
//!
//! Everything discovery reports about unreadable folders, undecodable files, escaping or looping
//! symlinks and entries that are neither file nor folder is said here, once, for every slot and
//! for `evals/` alike.

use crate::names::{SLOT_FOLDERS, closest, dir_label, is_ignored, join};
use crate::{AgentDir, Code, Diagnostic, DirEntry, EntryKind, MAX_DEPTH, Source, SourceFile};

/// The help of every "nests too deep" diagnostic.
pub(crate) const TOO_DEEP_HELP: &str =
    "flatten the folders, or look for a symlink that points back at one of its parent folders";

/// One walk: the source it reads and the diagnostics collected so far.
pub(crate) struct Walker<'a> {
    pub(crate) source: &'a dyn Source,
    pub(crate) diagnostics: Vec<Diagnostic>,
}

impl<'a> Walker<'a> {
    /// A walk of `source` with no diagnostics yet.
    pub(crate) fn new(source: &'a dyn Source) -> Self {
        Self {
            source,
            diagnostics: Vec::new(),
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
                (
                    EntryKind::File,
                    "agent.ts" | "agent.mts" | "agent.js" | "agent.mjs" | "instructions.ts"
                    | "instructions.mts" | "instructions.js" | "instructions.mjs",
                ) => {
                    if let Some(file) = self.read_text(path, e.executable) {
                        agent.modules.push(file);
                    }
                }
                (EntryKind::File, "instructions.md") => {
                    agent.instructions = self.read_text(path, e.executable);
                }
                (EntryKind::Dir, "tools") => self.tools(&path, "", depth, &mut agent.tools),
                (EntryKind::Dir, "skills") => self.skills(&path, &mut agent.skills),
                (EntryKind::Dir, "subagents") => self.subagents(&path, depth, &mut agent.subagents),
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
