//! Discovery → Manifest: parse every file, check every rule of the conventions, collect diagnostics.
//!
//! Compilation never stops at the first problem: each file is checked as far as it can be and every
//! diagnostic is kept, so one `eve build` shows all mistakes of a folder. A manifest is always
//! produced (best effort); callers refuse to use it when there are errors.
//!
//! This module holds the `Compiler` (diagnostics and run-time files collected so far) and what
//! every part shares: parsing a file into a document, name checks, the parallel driver. Each part
//! of an agent folder has its own file: `agent` (`instructions.md`, the walk over the folder),
//! `config` (`agent.yaml`, with its larger settings in `release`, `behaviours` and `memory`),
//! `tools`, `skills`, `schedules`, `hooks`, `connections`, `channels`, `sandbox`, and
//! `collisions` (the one namespace of tool names across them).

mod agent;
mod behaviours;
mod builtins;
mod channels;
mod collisions;
mod config;
mod connections;
mod hooks;
mod memory;
pub mod modules;
pub mod openapi;
mod release;
mod remote;
mod sandbox;
mod schedules;
mod skills;
mod state;
mod tools;
mod web;

use std::collections::BTreeSet;

use eve_discover::{Code, Diagnostic, Discovery, SourceFile};

use crate::frontmatter;
use crate::manifest::*;
use crate::yaml::{self, Doc};

pub use builtins::builtin_names;
pub use channels::is_env_ref;
pub use config::BUILTIN_TOOLS;
pub use tools::interpreter_for;

/// What the compiler needs besides the discovery.
#[derive(Debug, Clone)]
pub struct Options {
    /// Name of the root agent (the project folder's name).
    pub name: String,
    /// Prefix shown before every file path in diagnostics (such as `agent/`).
    pub file_prefix: String,
    /// Absolute folders no `sandbox.yaml` `write:` path may cover (the project's `.eve/` and the
    /// agent folder).
    pub protected_dirs: Vec<std::path::PathBuf>,
    /// The agent folder on disk, where files a build reads besides the discovered ones (an OpenAPI
    /// connection's document) are found; `None` when there is no folder to read.
    pub agent_dir: Option<std::path::PathBuf>,
    /// Where the build may keep caches (the project's `.eve/`): the evaluations of TypeScript and
    /// JavaScript modules; `None` caches nothing.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Fetches the documents an OpenAPI connection names by URL; `None` fetches nothing (the
    /// copies an earlier build cached in `cache_dir` are used).
    pub fetch: Option<openapi::Fetcher>,
}

/// The result of compiling.
#[derive(Debug, Clone)]
pub struct Output {
    /// The manifest (complete only when there are no errors).
    pub manifest: Manifest,
    /// Every problem found, discovery's included, in a stable order.
    pub diagnostics: Vec<Diagnostic>,
    /// Files the runtime needs at run time (scripts, skill files, workspace seeds), relative to the
    /// root agent folder, sorted.
    pub files: Vec<String>,
    /// The Node that evaluated the folder's TypeScript and JavaScript modules (path and version),
    /// when it has any.
    pub node: Option<String>,
}

impl Output {
    /// Number of errors.
    pub fn error_count(&self) -> usize {
        eve_discover::error_count(&self.diagnostics)
    }
}

/// Compiles a discovered agent folder.
pub fn compile(discovery: &Discovery, options: &Options) -> Output {
    let mut c = Compiler {
        diags: Vec::new(),
        files: BTreeSet::new(),
        shown_prefix: options.file_prefix.clone(),
        protected: options.protected_dirs.clone(),
        agent_dir: options.agent_dir.clone(),
        cache_dir: options.cache_dir.clone(),
        fetch: options.fetch.clone(),
        documents: Vec::new(),
        node: None,
        modules: Default::default(),
    };
    let agent = c.agent(&discovery.agent, &options.name, true);
    let mut diagnostics = discovery.diagnostics.clone();
    // A file discovery could not read (not UTF-8, unreadable) is reported there; it is not also
    // missing.
    let unread = |d: &Diagnostic| {
        d.code == Code::MissingInstructions
            && discovery.diagnostics.iter().any(|seen| seen.file == d.file)
    };
    diagnostics.extend(c.diags.into_iter().filter(|d| !unread(d)));
    // A file or folder an OpenAPI connection reads as its document, or that holds modules the
    // agent's modules import (`lib/`), is not unknown.
    let used = |f: &str, path: &String| path == f || (f.ends_with('/') && path.starts_with(f));
    diagnostics.retain(|d| {
        d.code != Code::UnknownEntry
            || !d.file.as_deref().is_some_and(|f| {
                c.documents.iter().any(|doc| used(f, doc))
                    || (c.node.is_some() && c.files.iter().any(|file| used(f, file)))
            })
    });
    for d in &mut diagnostics {
        // A document fetched from a URL is shown by its URL.
        if let Some(f) = d.file.as_ref().filter(|f| !f.contains("://")) {
            d.file = Some(format!("{}{f}", options.file_prefix));
        }
    }
    diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.code).cmp(&(&b.file, b.line, b.column, b.code))
    });
    diagnostics.dedup();
    Output {
        manifest: Manifest {
            version: MANIFEST_VERSION,
            eve_version: env!("CARGO_PKG_VERSION").to_owned(),
            agent,
            files: Default::default(),
        },
        diagnostics,
        files: c.files.into_iter().collect(),
        node: c.node,
    }
}

/// Checks a name against `^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether a URL field is an absolute `http://`/`https://` URL or starts with a `${VAR}` reference.
fn http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://") || url.starts_with("${")
}

const APPROVALS: &[(&str, Approval)] = &[
    ("never", Approval::Never),
    ("once", Approval::Once),
    ("always", Approval::Always),
    ("auto", Approval::Auto),
];

/// One compilation in progress: every part of the folder adds what it finds here.
struct Compiler {
    diags: Vec<Diagnostic>,
    files: BTreeSet<String>,
    /// Prefix of paths as people see them (`Options::file_prefix`), for paths quoted in messages.
    shown_prefix: String,
    /// [`Options::protected_dirs`].
    protected: Vec<std::path::PathBuf>,
    /// [`Options::agent_dir`].
    agent_dir: Option<std::path::PathBuf>,
    /// [`Options::cache_dir`].
    cache_dir: Option<std::path::PathBuf>,
    /// [`Options::fetch`].
    fetch: Option<openapi::Fetcher>,
    /// Documents of OpenAPI connections, relative to the root agent folder.
    documents: Vec<String>,
    /// The Node that evaluated modules ([`Output::node`]).
    node: Option<String>,
    /// What Node read from the folder's modules, by path.
    modules: modules::Evaluated,
}

/// A parsed YAML document or front matter, with its body.
struct Parsed {
    doc: Doc,
    body: String,
}

impl Compiler {
    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Parses YAML text of `file` (all of it, or its front matter at the given offsets); a
    /// syntax error becomes a diagnostic.
    fn parse(
        &mut self,
        file: &SourceFile,
        text: &str,
        (line_offset, column_offset): (u32, u32),
        body: String,
    ) -> Option<Parsed> {
        match yaml::parse(text, line_offset, column_offset) {
            Ok(doc) => Some(Parsed { doc, body }),
            Err(e) => {
                self.syntax_error(file, e);
                None
            }
        }
    }

    /// Parses a whole YAML file.
    fn yaml_file(&mut self, file: &SourceFile) -> Option<Parsed> {
        self.parse(file, &file.text, (0, 0), String::new())
    }

    /// Parses markdown front matter; a file without front matter has an empty document.
    fn markdown_file(&mut self, file: &SourceFile) -> Option<Parsed> {
        match frontmatter::markdown(&file.text) {
            Ok(Some(fm)) => self.parse(file, &fm.yaml, (fm.line_offset, fm.column_offset), fm.body),
            Ok(None) => Some(Parsed {
                doc: Doc::default(),
                body: file.text.clone(),
            }),
            Err(u) => {
                self.unterminated(file, u);
                None
            }
        }
    }

    /// Parses a script's front matter comment block; `None` when absent or broken.
    fn script_file(&mut self, file: &SourceFile, required_help: &str) -> Option<Parsed> {
        match frontmatter::script(&file.text) {
            Ok(Some(fm)) => self.parse(
                file,
                &fm.yaml,
                (fm.line_offset, fm.column_offset),
                String::new(),
            ),
            Ok(None) => {
                self.push(
                    Diagnostic::new(
                        Code::MissingField,
                        file.path.clone(),
                        "no front matter: the leading comment block must start and end with `# ---` (or `// ---`)",
                    )
                    .at(1, 1)
                    .help(required_help.to_owned()),
                );
                None
            }
            Err(u) => {
                self.unterminated(file, u);
                None
            }
        }
    }

    fn syntax_error(&mut self, file: &SourceFile, e: yaml::SyntaxError) {
        let mut d = Diagnostic::new(
            Code::YamlSyntax,
            file.path.clone(),
            format!("YAML does not parse: {}", e.message),
        )
        .help("check indentation, colons and quoting around this line");
        d.line = e.line;
        d.column = e.column;
        self.push(d);
    }

    fn unterminated(&mut self, file: &SourceFile, u: frontmatter::Unterminated) {
        self.push(
            Diagnostic::new(
                Code::UnterminatedFrontMatter,
                file.path.clone(),
                format!(
                    "front matter opened here is never closed with `{}`",
                    u.fence
                ),
            )
            .at(u.line, 1)
            .help(format!(
                "add a line `{}` after the last front matter line",
                u.fence
            )),
        );
    }

    fn check_name(&mut self, name: &str, path: &str, what: &str) -> bool {
        if valid_name(name) {
            return true;
        }
        self.push(
            Diagnostic::new(
                Code::InvalidName,
                path.to_owned(),
                format!("`{name}` is not a valid {what} name"),
            )
            .help(format!(
                "names start with a letter and use letters, digits, `_` and `-` (at most 64 characters); rename the {}",
                if path.ends_with('/') { "folder" } else { "file" }
            )),
        );
        false
    }

    /// Compiles independent items (tools) on a few threads when there are many: parsing YAML and
    /// checking schemas is most of a large build. Threads take small batches in turn (items differ
    /// in cost, so fixed halves would leave one thread idle); each batch has its own diagnostics and
    /// file list, merged back in input order, so the result does not depend on the thread count.
    fn parallel<T: Sync, R: Send>(
        &mut self,
        items: &[T],
        f: impl Fn(&mut Compiler, &T) -> Option<R> + Sync,
    ) -> Vec<R> {
        const MIN_PER_THREAD: usize = 64;
        const BATCH: usize = 16;
        let threads = eve_discover::threads_for(items.len(), MIN_PER_THREAD, 8);
        if threads == 1 {
            return items.iter().filter_map(|t| f(self, t)).collect();
        }
        let batches: Vec<&[T]> = items.chunks(BATCH).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let prefix = self.shown_prefix.clone();
        let protected = self.protected.clone();
        let work = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(batch) = batches.get(i) else {
                    return done;
                };
                let mut c = Compiler {
                    diags: Vec::new(),
                    files: BTreeSet::new(),
                    shown_prefix: prefix.clone(),
                    protected: protected.clone(),
                    agent_dir: None,
                    cache_dir: None,
                    fetch: None,
                    documents: Vec::new(),
                    node: None,
                    modules: Default::default(),
                };
                let out: Vec<R> = batch.iter().filter_map(|t| f(&mut c, t)).collect();
                done.push((i, out, c));
            }
        };
        let mut parts: Vec<(usize, Vec<R>, Compiler)> = std::thread::scope(|s| {
            let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
            let mut parts = work();
            for h in handles {
                parts.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            }
            parts
        });
        parts.sort_unstable_by_key(|(i, _, _)| *i);
        let mut out = Vec::with_capacity(items.len());
        for (_, results, c) in parts {
            out.extend(results);
            self.diags.extend(c.diags);
            self.files.extend(c.files);
        }
        out
    }
}
