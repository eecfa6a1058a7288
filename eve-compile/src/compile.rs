//! Discovery → Manifest: parse every file, check every rule of the conventions, collect diagnostics.
//!
//! Compilation never stops at the first problem: each file is checked as far as it can be and every
//! diagnostic is kept, so one `eve build` shows all mistakes of a folder. A manifest is always
//! produced (best effort); callers refuse to use it when there are errors.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sha2::{Digest, Sha256};

use eve_discover::{AgentDir, Code, Diagnostic, Discovery, Named, SkillFile, SourceFile, ToolFile};

use crate::fields::Fields;
use crate::frontmatter;
use crate::manifest::*;
use crate::yaml::{self, Doc};

/// What the compiler needs besides the discovery.
#[derive(Debug, Clone)]
pub struct Options {
    /// Name of the root agent (the project folder's name).
    pub name: String,
    /// Prefix shown before every file path in diagnostics (such as `agent/`).
    pub file_prefix: String,
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
    };
    let agent = c.agent(&discovery.agent, &options.name, true);
    let mut diagnostics = discovery.diagnostics.clone();
    diagnostics.extend(c.diags);
    for d in &mut diagnostics {
        if let Some(f) = &d.file {
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
        },
        diagnostics,
        files: c.files.into_iter().collect(),
    }
}

/// Checks a name against `^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// SHA-256 (hex) of a JSON value in canonical form (object keys sorted, no whitespace).
pub fn json_hash(value: &Value) -> String {
    let mut h = HashWriter(Sha256::new());
    canonical(value, &mut h);
    hex::encode(h.0.finalize())
}

/// Feeds serialised JSON straight into the hash, without building strings first.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn canonical(value: &Value, h: &mut HashWriter) {
    match value {
        Value::Object(m) => {
            h.0.update(b"{");
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    h.0.update(b",");
                }
                // Writing into the hash cannot fail, and a string always serialises.
                let _ = serde_json::to_writer(&mut *h, k);
                h.0.update(b":");
                canonical(v, h);
            }
            h.0.update(b"}");
        }
        Value::Array(items) => {
            h.0.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    h.0.update(b",");
                }
                canonical(v, h);
            }
            h.0.update(b"]");
        }
        other => {
            let _ = serde_json::to_writer(&mut *h, other);
        }
    }
}

/// The interpreter eve uses for a script extension when the file is not executable.
pub fn interpreter_for(ext: Option<&str>) -> Option<&'static [&'static str]> {
    Some(match ext? {
        "py" => &["python3"],
        "js" | "mjs" | "cjs" => &["node"],
        "ts" | "mts" => &["node", "--experimental-strip-types"],
        "sh" => &["sh"],
        "bash" => &["bash"],
        "rb" => &["ruby"],
        "pl" => &["perl"],
        "php" => &["php"],
        "lua" => &["lua"],
        _ => return None,
    })
}

const TOOL_FIELDS: &[&str] = &[
    "description",
    "input",
    "approval",
    "effect",
    "timeout",
    "deferred",
    "env",
    "dynamic",
    "output_limit",
    "interpreter",
];
const APPROVALS: &[(&str, Approval)] = &[
    ("never", Approval::Never),
    ("once", Approval::Once),
    ("always", Approval::Always),
];
const EFFECTS: &[(&str, Effect)] = &[
    ("read", Effect::Read),
    ("idempotent", Effect::Idempotent),
    ("write", Effect::Write),
];
/// Built-in tools whose approval `agent.yaml` `approvals:` can set.
pub const BUILTIN_TOOLS: &[&str] = &["bash", "read_file", "write_file"];
const DYNAMIC_EVENTS: &[&str] = &["session.started", "turn.started"];
const HTTP_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];
const SCHEMA_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];
const KNOWN_SCHEMA_DIALECTS: &[&str] = &[
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
];

struct Compiler {
    diags: Vec<Diagnostic>,
    files: BTreeSet<String>,
    /// Prefix of paths as people see them (`Options::file_prefix`), for paths quoted in messages.
    shown_prefix: String,
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

    /// Parses a whole YAML file.
    fn yaml_file(&mut self, file: &SourceFile) -> Option<Parsed> {
        match yaml::parse(&file.text, 0, 0) {
            Ok(doc) => Some(Parsed {
                doc,
                body: String::new(),
            }),
            Err(e) => {
                self.syntax_error(file, e);
                None
            }
        }
    }

    /// Parses markdown front matter; a file without front matter has an empty document.
    fn markdown_file(&mut self, file: &SourceFile) -> Option<Parsed> {
        match frontmatter::markdown(&file.text) {
            Ok(Some(fm)) => match yaml::parse(&fm.yaml, fm.line_offset, fm.column_offset) {
                Ok(doc) => Some(Parsed { doc, body: fm.body }),
                Err(e) => {
                    self.syntax_error(file, e);
                    None
                }
            },
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
            Ok(Some(fm)) => match yaml::parse(&fm.yaml, fm.line_offset, fm.column_offset) {
                Ok(doc) => Some(Parsed {
                    doc,
                    body: String::new(),
                }),
                Err(e) => {
                    self.syntax_error(file, e);
                    None
                }
            },
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

    fn agent(&mut self, dir: &AgentDir, name: &str, root: bool) -> Agent {
        let (config, description) = self.config(dir, root);
        let instructions = self.instructions(dir);
        let sandbox = self.sandbox(dir);
        let tools = self.tools(dir, &sandbox);
        let skills = self.skills(&dir.skills);
        let mut subagents = Vec::new();
        for sub in &dir.subagents {
            self.check_name(&sub.name, &format!("{}/", sub.agent.path), "subagent");
            subagents.push(self.agent(&sub.agent, &sub.name, false));
        }
        let schedules = dir
            .schedules
            .iter()
            .filter_map(|s| self.schedule(s))
            .collect();
        let hooks = dir.hooks.iter().filter_map(|h| self.hook(h)).collect();
        let connections: Vec<Connection> = dir
            .connections
            .iter()
            .filter_map(|c| self.connection(c))
            .collect();
        let channels = dir
            .channels
            .iter()
            .filter_map(|c| self.channel(c))
            .collect();
        self.collisions(dir, &subagents, &connections);
        Agent {
            name: name.to_owned(),
            path: dir.path.clone(),
            description,
            instructions,
            config,
            tools,
            skills,
            subagents,
            schedules,
            hooks,
            connections,
            channels,
            sandbox,
        }
    }

    fn config(&mut self, dir: &AgentDir, root: bool) -> (AgentConfig, Option<String>) {
        let mut config = AgentConfig {
            model: None,
            reasoning: None,
            context_window: None,
            compaction: Compaction::default(),
            limits: Limits::default(),
            default_tools: true,
            approvals: BTreeMap::new(),
            turn_policy: TurnPolicy::Queue,
        };
        let mut description = None;
        let config_path = format!("{}agent.yaml", prefix(&dir.path));
        if let Some(file) = &dir.config
            && let Some(parsed) = self.yaml_file(file)
        {
            let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
            f.unknown_keys(
                &[
                    "model",
                    "reasoning",
                    "context_window",
                    "compaction",
                    "limits",
                    "default_tools",
                    "turn_policy",
                    "approvals",
                    "description",
                    "name",
                ],
                "agent.yaml",
            );
            config.model = f.string("model");
            if let Some(m) = &config.model
                && !m.contains('/')
            {
                f.report(
                    Code::InvalidField,
                    "model",
                    format!("`model` is `{m}`; expected `provider/name`"),
                    "for example `openai/gpt-4.1`, `anthropic/claude-sonnet-4-5` or `mock/echo`",
                );
            }
            config.reasoning = f
                .choice(
                    "reasoning",
                    &[("low", "low"), ("medium", "medium"), ("high", "high")],
                )
                .map(str::to_owned);
            config.context_window = f.u64("context_window");
            config.default_tools = f.bool("default_tools").unwrap_or(true);
            config.turn_policy = f
                .choice(
                    "turn_policy",
                    &[("queue", TurnPolicy::Queue), ("steer", TurnPolicy::Steer)],
                )
                .unwrap_or_default();
            description = f.string("description");
            match f.raw("compaction").cloned() {
                Some(Value::Bool(b)) => config.compaction.enabled = b,
                Some(Value::Object(_)) => {
                    let mut c =
                        Fields::new(&file.path, &parsed.doc, "/compaction", &mut self.diags);
                    c.unknown_keys(&["enabled", "threshold"], "compaction");
                    if let Some(b) = c.bool("enabled") {
                        config.compaction.enabled = b;
                    }
                    if let Some(t) = c.f64("threshold") {
                        if t > 0.0 && t <= 1.0 {
                            config.compaction.threshold = t;
                        } else {
                            c.report(
                                Code::InvalidField,
                                "threshold",
                                format!(
                                    "`threshold` is {t}; it is a fraction of the context window"
                                ),
                                "use a number above 0 and at most 1, such as 0.8",
                            );
                        }
                    }
                }
                Some(other) => {
                    let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
                    f.report(
                        Code::InvalidField,
                        "compaction",
                        format!(
                            "`compaction` must be true, false or a mapping, found {}",
                            crate::fields::kind(&other)
                        ),
                        "write `compaction: false`, or a mapping with `enabled:` and `threshold:`",
                    );
                }
                None => {}
            }
            if parsed.doc.value.get("approvals").is_some() {
                let mut a = Fields::new(&file.path, &parsed.doc, "/approvals", &mut self.diags);
                for tool in BUILTIN_TOOLS {
                    if let Some(policy) = a.choice(tool, APPROVALS) {
                        config.approvals.insert((*tool).to_owned(), policy);
                    }
                }
                a.unknown_keys(BUILTIN_TOOLS, "approvals (built-in tool names)");
            }
            if parsed.doc.value.get("limits").is_some() {
                let mut l = Fields::new(&file.path, &parsed.doc, "/limits", &mut self.diags);
                l.unknown_keys(
                    &[
                        "max_steps_per_turn",
                        "max_tokens",
                        "max_cost_usd",
                        "max_turn_seconds",
                        "price_per_million",
                    ],
                    "limits",
                );
                if let Some(n) = l.u64("max_steps_per_turn") {
                    config.limits.max_steps_per_turn = u32::try_from(n).unwrap_or(u32::MAX).max(1);
                }
                config.limits.max_tokens = l.u64("max_tokens");
                config.limits.max_cost_usd = l.f64("max_cost_usd");
                config.limits.max_turn_seconds = l.u64("max_turn_seconds");
                if parsed
                    .doc
                    .value
                    .pointer("/limits/price_per_million")
                    .is_some()
                {
                    let mut p = Fields::new(
                        &file.path,
                        &parsed.doc,
                        "/limits/price_per_million",
                        &mut self.diags,
                    );
                    p.unknown_keys(&["input", "output"], "price_per_million");
                    match (p.f64("input"), p.f64("output")) {
                        (Some(input), Some(output)) if input >= 0.0 && output >= 0.0 => {
                            config.limits.price_per_million = Some(Price { input, output });
                        }
                        _ => p.report_at(
                            Code::InvalidField,
                            "/limits/price_per_million",
                            "`price_per_million` needs non-negative `input` and `output` prices"
                                .to_owned(),
                            "for example `price_per_million: {input: 2.0, output: 8.0}` (US dollars per million tokens)",
                        ),
                    }
                }
            }
        }
        if !root && description.as_deref().is_none_or(|d| d.trim().is_empty()) {
            self.push(
                Diagnostic::new(
                    Code::MissingDescription,
                    config_path,
                    "subagent has no `description`",
                )
                .help("add `description: <what this subagent does>` to its agent.yaml: the parent model sees it as the tool's description"),
            );
        }
        (config, description)
    }

    fn instructions(&mut self, dir: &AgentDir) -> String {
        let Some(file) = &dir.instructions else {
            let what = if dir.path.is_empty() {
                "the agent"
            } else {
                "this subagent"
            };
            self.push(
                Diagnostic::new(
                    Code::MissingInstructions,
                    format!("{}instructions.md", prefix(&dir.path)),
                    format!("{what} has no instructions.md"),
                )
                .help("create instructions.md with the system prompt"),
            );
            return String::new();
        };
        let Some(parsed) = self.markdown_file(file) else {
            return String::new();
        };
        let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(&["description", "title"], "instructions.md front matter");
        let body = parsed.body.trim().to_owned();
        if body.is_empty() {
            self.push(
                Diagnostic::new(
                    Code::EmptyInstructions,
                    file.path.clone(),
                    "instructions.md is empty",
                )
                .help("write the system prompt: who the agent is and how it should work"),
            );
        }
        body
    }

    fn script_runner(
        &mut self,
        file: &SourceFile,
        interpreter: Option<Vec<String>>,
    ) -> Option<Runner> {
        self.files.insert(file.path.clone());
        let (_, ext) = eve_discover::split_ext(file.path.rsplit('/').next().unwrap_or(&file.path));
        let interpreter = match interpreter {
            Some(i) => i,
            None if file.executable && file.text.starts_with("#!") => Vec::new(),
            None => match interpreter_for(ext) {
                Some(i) => i.iter().map(|s| (*s).to_owned()).collect(),
                None => {
                    let what = match ext {
                        Some(ext) => format!("for `.{ext}` files"),
                        None => "for files without an extension".to_owned(),
                    };
                    self.push(
                        Diagnostic::new(
                            Code::NotRunnable,
                            file.path.clone(),
                            format!("script is not executable, and eve knows no interpreter {what}"),
                        )
                        .help("make it executable with a `#!` line (chmod +x), or set `interpreter:` in its front matter"),
                    );
                    return None;
                }
            },
        };
        Some(Runner::Script {
            path: file.path.clone(),
            interpreter,
        })
    }

    fn tools(&mut self, dir: &AgentDir, sandbox: &Sandbox) -> Vec<Tool> {
        let mut tools = self.parallel(&dir.tools, |c, t| c.tool(t, sandbox));
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
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
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .min(items.len() / MIN_PER_THREAD)
            .clamp(1, 8);
        if threads == 1 {
            return items.iter().filter_map(|t| f(self, t)).collect();
        }
        let batches: Vec<&[T]> = items.chunks(BATCH).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let prefix = self.shown_prefix.clone();
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

    fn tool(&mut self, t: &ToolFile, sandbox: &Sandbox) -> Option<Tool> {
        let name_ok = self.check_name(&t.name, &t.file.path, "tool");
        let mut parsed = if t.yaml {
            self.yaml_file(&t.file)?
        } else {
            self.script_file(
                &t.file,
                "start the script with a comment block:\n# ---\n# description: What the tool does\n# input:\n#   type: object\n# ---",
            )?
        };
        let file = &t.file;
        let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
        let mut known: Vec<&str> = TOOL_FIELDS.to_vec();
        if t.yaml {
            known.retain(|k| *k != "interpreter");
            known.extend(["run", "http"]);
        }
        f.unknown_keys(&known, "tool");
        let description = f.string("description").unwrap_or_default();
        if description.trim().is_empty() && f.raw("description").is_none() {
            f.push(
                Diagnostic::new(
                    Code::MissingToolDescription,
                    file.path.clone(),
                    format!("tool `{}` has no description", t.name),
                )
                .help("add `description:` so the model knows when to call it"),
            );
        }
        let approval = f.choice("approval", APPROVALS).unwrap_or_default();
        let effect = f.choice("effect", EFFECTS).unwrap_or_default();
        let timeout_ms = f.duration_ms("timeout").unwrap_or(sandbox.timeout_ms);
        let output_limit = f.u64("output_limit").unwrap_or(sandbox.output_limit);
        let deferred = f.bool("deferred").unwrap_or(false);
        let env = f.string_list("env").unwrap_or_default();
        let dynamic = f.string_list("dynamic").unwrap_or_default();
        for ev in &dynamic {
            if !DYNAMIC_EVENTS.contains(&ev.as_str()) {
                f.report(
                    Code::InvalidField,
                    "dynamic",
                    format!("`dynamic` lists `{ev}`, which is not a dynamic-tool event"),
                    "dynamic tools resolve at `session.started` and `turn.started`",
                );
            }
        }
        let interpreter = if t.yaml {
            None
        } else {
            f.string_list("interpreter")
        };
        let has_input = f.raw("input").is_some();
        let has_run = f.has("run");
        let has_http = f.has("http");
        let run_raw = f.raw("run").cloned();
        drop(f);

        if has_input {
            self.input_schema(file, &parsed.doc)?;
        }
        let runner = if t.yaml {
            match (has_run, has_http) {
                (true, false) => {
                    let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
                    match run_raw {
                        Some(Value::String(s)) => Runner::Command {
                            argv: vec!["sh".to_owned(), "-c".to_owned(), s],
                        },
                        Some(Value::Array(_)) => {
                            let argv = f.string_list("run")?;
                            if argv.is_empty() {
                                f.report(
                                    Code::InvalidField,
                                    "run",
                                    "`run` is an empty list".to_owned(),
                                    "give the program and its arguments",
                                );
                                return None;
                            }
                            Runner::Command { argv }
                        }
                        Some(other) => {
                            f.report(
                                Code::InvalidField,
                                "run",
                                format!(
                                    "`run` must be a command string or an argv list, found {}",
                                    crate::fields::kind(&other)
                                ),
                                "for example `run: [python3, _bin/weather.py]`",
                            );
                            return None;
                        }
                        None => return None,
                    }
                }
                (false, true) => Runner::Http(self.http(file, &parsed.doc)?),
                (run, _) => {
                    let msg = if run {
                        "tool has both `run:` and `http:`"
                    } else {
                        "tool has neither `run:` nor `http:`"
                    };
                    self.push(
                        Diagnostic::new(Code::ToolRunner, file.path.clone(), msg)
                            .at(1, 1)
                            .help("a YAML tool runs a command (`run: [prog, args…]`) or makes a request (`http: {method, url}`), exactly one of them"),
                    );
                    return None;
                }
            }
        } else {
            self.script_runner(file, interpreter)?
        };
        if !name_ok {
            return None;
        }
        // The checked schema moves out of the document: nothing reads it there any more.
        let input_schema = match parsed.doc.value.get_mut("input") {
            Some(schema) if has_input => schema.take(),
            _ => serde_json::json!({"type": "object", "properties": {}}),
        };
        Some(Tool {
            name: t.name.clone(),
            source: file.path.clone(),
            description,
            schema_hash: json_hash(&input_schema),
            input_schema,
            approval,
            effect,
            timeout_ms,
            output_limit,
            deferred,
            env,
            dynamic,
            runner,
        })
    }

    /// Checks a tool's `input` schema: an object schema that is valid JSON Schema.
    fn input_schema(&mut self, file: &SourceFile, doc: &Doc) -> Option<()> {
        let schema = doc.value.get("input")?;
        let pos = |p: &str| doc.position(p);
        let err = |msg: String, at: Option<(u32, u32)>, help: &str| {
            let mut d =
                Diagnostic::new(Code::InvalidSchema, file.path.clone(), msg).help(help.to_owned());
            if let Some((l, c)) = at {
                d = d.at(l, c);
            }
            d
        };
        let Value::Object(map) = schema else {
            self.push(err(
                format!(
                    "`input` is not a JSON Schema object: found {}",
                    crate::fields::kind(schema)
                ),
                pos("/input"),
                "write `input:` as a schema mapping with `type: object` and `properties:`",
            ));
            return None;
        };
        if let Some(dialect) = map.get("$schema") {
            let known = dialect
                .as_str()
                .is_some_and(|d| KNOWN_SCHEMA_DIALECTS.contains(&d));
            if !known {
                self.push(err(
                    format!("`$schema` is {dialect}, a dialect eve does not know"),
                    pos("/input/$schema"),
                    "remove `$schema` (draft 2020-12 is assumed) or use a standard draft URL",
                ));
                return None;
            }
        }
        // Building a validator meta-validates the schema too; only when it fails is the schema
        // meta-validated on its own, to tell a wrong keyword from a bad pattern or reference.
        let built = jsonschema::validator_for(schema);
        let meta = match &built {
            Ok(_) => Ok(()),
            Err(_) => jsonschema::meta::validate(schema),
        };
        if let Err(e) = meta {
            let path = e.instance_path().as_str().to_owned();
            let pointer = format!("/input{path}");
            let shown = if path.is_empty() {
                "input".to_owned()
            } else {
                format!("input{}", path.replace('/', "."))
            };
            let bad_type = (path.ends_with("/type") || path.contains("/type/"))
                .then(|| doc.value.pointer(&pointer).and_then(Value::as_str))
                .flatten()
                .filter(|t| !SCHEMA_TYPES.contains(t));
            let d = match bad_type {
                Some(t) => err(
                    format!("`{shown}` is `{t}`, which is not a JSON Schema type"),
                    pos(&pointer),
                    &match crate::fields::closest(t, SCHEMA_TYPES) {
                        Some(c) => {
                            format!("did you mean `{c}`? types are: {}", SCHEMA_TYPES.join(", "))
                        }
                        None => format!("types are: {}", SCHEMA_TYPES.join(", ")),
                    },
                ),
                None => err(
                    format!(
                        "`{shown}` is not valid JSON Schema: {}",
                        short(&e.to_string())
                    ),
                    pos(&pointer),
                    "see https://json-schema.org/understanding-json-schema for the allowed keywords and types",
                ),
            };
            self.push(d);
            return None;
        }
        if let Err(e) = built {
            self.push(err(
                format!(
                    "`input` cannot be compiled as a JSON Schema: {}",
                    short(&e.to_string())
                ),
                pos("/input"),
                "check patterns (regular expressions) and references in the schema",
            ));
            return None;
        }
        if map.get("type").and_then(Value::as_str) != Some("object") {
            self.push(err(
                "`input` is not a JSON Schema object: expected `type: object`".to_owned(),
                pos("/input/type").or(pos("/input")),
                "tool input is always an object: add `type: object` and describe fields under `properties:`",
            ));
            return None;
        }
        Some(())
    }

    fn http(&mut self, file: &SourceFile, doc: &Doc) -> Option<HttpRequest> {
        let mut f = Fields::new(&file.path, doc, "/http", &mut self.diags);
        f.unknown_keys(&["method", "url", "headers", "body"], "http");
        let method = f
            .string("method")
            .unwrap_or_else(|| "GET".to_owned())
            .to_uppercase();
        if !HTTP_METHODS.contains(&method.as_str()) {
            f.report(
                Code::InvalidField,
                "method",
                format!("`method` is `{method}`, not an HTTP method eve sends"),
                "use GET, POST, PUT, PATCH, DELETE or HEAD",
            );
            return None;
        }
        let url = f.required_string(
            "url",
            "add `url: https://…` (templates like {{input.city}} and ${VAR} are allowed)",
        )?;
        if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("${")) {
            f.report(
                Code::InvalidField,
                "url",
                format!("`url` is `{url}`; it must start with http:// or https://"),
                "write the full URL, such as `https://api.example.com/v1/{{input.city}}`",
            );
            return None;
        }
        let headers = f.string_map("headers").unwrap_or_default();
        let body = f.raw("body").cloned();
        Some(HttpRequest {
            method,
            url,
            headers,
            body,
        })
    }

    fn skills(&mut self, files: &[SkillFile]) -> Vec<Skill> {
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
            let description = f.string("description").unwrap_or_default();
            if description.trim().is_empty() {
                f.push(
                    Diagnostic::new(Code::MissingToolDescription, s.file.path.clone(), format!("skill `{}` has no description", s.name))
                        .help("add front matter `description:` saying when the skill applies; the model only sees the description until it loads the skill"),
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

    fn schedule(&mut self, s: &Named) -> Option<Schedule> {
        let name_ok = self.check_name(&s.name, &s.file.path, "schedule");
        let parsed = self.markdown_file(&s.file)?;
        let mut f = Fields::new(&s.file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &["cron", "timezone", "overlap", "catch_up", "description"],
            "schedule",
        );
        let cron = f.required_string(
            "cron",
            "add front matter `cron: \"0 9 * * *\"` (minute hour day-of-month month day-of-week)",
        );
        let mut ok = cron.is_some();
        if let Some(expr) = &cron
            && let Err(why) = check_cron(expr)
        {
            f.report(
                    Code::InvalidCron,
                    "cron",
                    format!("invalid cron expression \"{expr}\": {why}"),
                    "use five fields: minute hour day-of-month month day-of-week, e.g. \"*/15 * * * *\"",
                );
            ok = false;
        }
        let timezone = f.string("timezone").unwrap_or_else(|| "UTC".to_owned());
        if timezone.parse::<chrono_tz::Tz>().is_err() {
            f.report(
                Code::InvalidTimezone,
                "timezone",
                format!("unknown time zone \"{timezone}\""),
                "use an IANA name such as `Europe/Paris` or `UTC`",
            );
            ok = false;
        }
        let overlap = f
            .choice(
                "overlap",
                &[("skip", Overlap::Skip), ("queue", Overlap::Queue)],
            )
            .unwrap_or_default();
        let catch_up = f
            .choice(
                "catch_up",
                &[("none", CatchUp::None), ("latest", CatchUp::Latest)],
            )
            .unwrap_or_default();
        let prompt = parsed.body.trim().to_owned();
        if prompt.is_empty() {
            f.push(
                Diagnostic::new(
                    Code::MissingField,
                    s.file.path.clone(),
                    "schedule has no prompt",
                )
                .help("write the prompt to run below the front matter"),
            );
            ok = false;
        }
        (ok && name_ok).then(|| Schedule {
            name: s.name.clone(),
            source: s.file.path.clone(),
            cron: cron.unwrap_or_default(),
            timezone,
            overlap,
            catch_up,
            prompt,
        })
    }

    fn hook(&mut self, h: &Named) -> Option<Hook> {
        let name_ok = self.check_name(&h.name, &h.file.path, "hook");
        let parsed = self.script_file(
            &h.file,
            "start the hook with a comment block:\n# ---\n# events: [turn.completed]\n# ---",
        )?;
        let mut f = Fields::new(&h.file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &["events", "timeout", "env", "description", "interpreter"],
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
        let runner = self.script_runner(&h.file, interpreter)?;
        (ok && name_ok).then(|| Hook {
            name: h.name.clone(),
            source: h.file.path.clone(),
            events,
            timeout_ms,
            env,
            runner,
        })
    }

    fn connection(&mut self, c: &Named) -> Option<Connection> {
        let mut ok = self.check_name(&c.name, &c.file.path, "connection");
        if c.name.contains("__") {
            self.push(
                Diagnostic::new(Code::InvalidName, c.file.path.clone(), format!("connection name `{}` contains `__`", c.name))
                    .help("`__` separates the connection from its tool names (`NAME__tool`); rename the file"),
            );
            ok = false;
        }
        let parsed = self.yaml_file(&c.file)?;
        let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &[
                "command",
                "args",
                "env",
                "url",
                "headers",
                "tools",
                "approval",
                "timeout",
                "description",
            ],
            "connection",
        );
        let transport = match (f.has("command"), f.has("url")) {
            (true, false) => Transport::Stdio {
                command: f.string("command")?,
                args: f.string_list("args").unwrap_or_default(),
                env: f.string_map("env").unwrap_or_default(),
            },
            (false, true) => {
                let url = f.string("url")?;
                if !(url.starts_with("http://")
                    || url.starts_with("https://")
                    || url.starts_with("${"))
                {
                    f.report(
                        Code::InvalidConnection,
                        "url",
                        format!("`url` is `{url}`; it must start with http:// or https://"),
                        "an MCP server over HTTP is `url: https://…/mcp`; a local server is `command:` with `args:`",
                    );
                    return None;
                }
                Transport::Http {
                    url,
                    headers: f.string_map("headers").unwrap_or_default(),
                }
            }
            (both, _) => {
                let msg = if both {
                    "connection has both `command` and `url`"
                } else {
                    "connection has neither `command` nor `url`"
                };
                f.push(
                    Diagnostic::new(Code::InvalidConnection, c.file.path.clone(), msg)
                        .at(1, 1)
                        .help("a stdio MCP server has `command:` (and `args:`); a Streamable HTTP server has `url:`"),
                );
                return None;
            }
        };
        let mut tools = ToolFilter::default();
        if f.has("tools") {
            let mut t = Fields::new(&c.file.path, &parsed.doc, "/tools", &mut self.diags);
            t.unknown_keys(&["allow", "block"], "tools");
            tools.allow = t.string_list("allow").unwrap_or_default();
            tools.block = t.string_list("block").unwrap_or_default();
        }
        let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
        let approval = f.choice("approval", APPROVALS).unwrap_or_default();
        let timeout_ms = f.duration_ms("timeout").unwrap_or(DEFAULT_MCP_TIMEOUT_MS);
        ok.then(|| Connection {
            name: c.name.clone(),
            source: c.file.path.clone(),
            transport,
            tools,
            approval,
            timeout_ms,
        })
    }

    fn channel(&mut self, c: &Named) -> Option<Channel> {
        let name_ok = self.check_name(&c.name, &c.file.path, "channel");
        let parsed = self.yaml_file(&c.file)?;
        let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
        let kind = if c.name == "eve" && !f.has("kind") {
            Some(ChannelKind::Http)
        } else if !f.has("kind") {
            f.push(
                Diagnostic::new(
                    Code::InvalidChannel,
                    c.file.path.clone(),
                    "channel has no `kind`",
                )
                .at(1, 1)
                .help("set `kind:` to http, slack, discord, telegram or webhook"),
            );
            None
        } else {
            f.choice(
                "kind",
                &[
                    ("http", ChannelKind::Http),
                    ("slack", ChannelKind::Slack),
                    ("discord", ChannelKind::Discord),
                    ("telegram", ChannelKind::Telegram),
                    ("webhook", ChannelKind::Webhook),
                ],
            )
        };
        let kind = kind?;
        let (required, secrets): (&[&str], &[&str]) = match kind {
            ChannelKind::Http => (&[], &[]),
            ChannelKind::Slack => (
                &["signing_secret", "bot_token"],
                &["signing_secret", "bot_token"],
            ),
            ChannelKind::Discord => (&["public_key"], &["bot_token"]),
            ChannelKind::Telegram => (
                &["bot_token", "secret_token"],
                &["bot_token", "secret_token"],
            ),
            ChannelKind::Webhook => (&["secret"], &["secret"]),
        };
        let mut ok = name_ok;
        for key in required {
            if !f.has(key) {
                f.push(
                    Diagnostic::new(Code::InvalidChannel, c.file.path.clone(), format!("{kind:?} channel needs `{key}`").to_lowercase())
                        .at(1, 1)
                        .help(format!("add `{key}: ${{ENV_VAR}}` (the value is read from the environment at run time)")),
                );
                ok = false;
            }
        }
        let mut settings = BTreeMap::new();
        if let Value::Object(map) = &parsed.doc.value {
            for (k, v) in map {
                if k == "kind" || k == "auth" {
                    continue;
                }
                if secrets.contains(&k.as_str()) && !is_env_ref(v) {
                    f.report(
                        Code::InvalidField,
                        k,
                        format!("`{k}` is a secret written in the file"),
                        "reference it as `${ENV_VAR}`: secrets are resolved at run time and never stored in builds",
                    );
                    ok = false;
                    continue;
                }
                settings.insert(k.clone(), v.clone());
            }
        }
        let auth = self.auth(&c.file, &parsed.doc);
        if auth.is_none() {
            ok = false;
        }
        ok.then(|| Channel {
            name: c.name.clone(),
            source: c.file.path.clone(),
            kind,
            auth: auth.unwrap_or_default(),
            settings,
        })
    }

    fn auth(&mut self, file: &SourceFile, doc: &Doc) -> Option<Auth> {
        let raw = doc.value.get("auth").cloned();
        let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
        let secret = |f: &mut Fields<'_>, key: &str, value: Option<String>| -> Option<String> {
            let v = value?;
            if is_env_ref(&Value::String(v.clone())) {
                Some(v)
            } else {
                f.report_at(
                    Code::InvalidField,
                    &format!("/auth/{key}"),
                    format!("`auth.{key}` is a secret written in the file"),
                    "reference it as `${ENV_VAR}`: secrets are resolved at run time and never stored in builds",
                );
                None
            }
        };
        match raw {
            None | Some(Value::Null) => Some(Auth::None),
            Some(Value::String(s)) if s == "none" => Some(Auth::None),
            Some(Value::Object(_)) => {
                let mut a = Fields::new(&file.path, doc, "/auth", &mut self.diags);
                let kind = a.choice(
                    "type",
                    &[("none", 0), ("bearer", 1), ("basic", 2), ("jwt", 3)],
                );
                match kind {
                    Some(0) => Some(Auth::None),
                    Some(1) => {
                        a.unknown_keys(&["type", "tokens", "token"], "auth");
                        let mut tokens = a.string_list("tokens").unwrap_or_default();
                        tokens.extend(a.string("token"));
                        if tokens.is_empty() {
                            a.report(
                                Code::MissingField,
                                "type",
                                "bearer auth has no `tokens`".to_owned(),
                                "add `tokens: [${API_TOKEN}]`",
                            );
                            return None;
                        }
                        let mut ok = Vec::new();
                        for t in tokens {
                            ok.push(secret(&mut a, "tokens", Some(t))?);
                        }
                        Some(Auth::Bearer { tokens: ok })
                    }
                    Some(2) => {
                        a.unknown_keys(&["type", "username", "password"], "auth");
                        let username = a.required_string("username", "add `username:`")?;
                        let password =
                            a.required_string("password", "add `password: ${PASSWORD_VAR}`");
                        let password = secret(&mut a, "password", password)?;
                        Some(Auth::Basic { username, password })
                    }
                    Some(3) => {
                        a.unknown_keys(&["type", "secret", "issuer", "audience"], "auth");
                        let s = a.required_string("secret", "add `secret: ${JWT_SECRET}`");
                        let secret_v = secret(&mut a, "secret", s)?;
                        Some(Auth::Jwt {
                            secret: secret_v,
                            issuer: a.string("issuer"),
                            audience: a.string("audience"),
                        })
                    }
                    _ => {
                        if !a.has("type") {
                            a.report_at(
                                Code::MissingField,
                                "/auth",
                                "`auth` has no `type`".to_owned(),
                                "set `type:` to none, bearer, basic or jwt",
                            );
                        }
                        None
                    }
                }
            }
            Some(other) => {
                f.report(
                    Code::InvalidField,
                    "auth",
                    format!(
                        "`auth` must be `none` or a mapping with `type:`, found {}",
                        crate::fields::kind(&other)
                    ),
                    "write `auth: none`, or `auth:` with `type: bearer` and `tokens: [${API_TOKEN}]`",
                );
                None
            }
        }
    }

    fn sandbox(&mut self, dir: &AgentDir) -> Sandbox {
        let mut sandbox = Sandbox::default();
        let Some(sb) = &dir.sandbox else {
            return sandbox;
        };
        for file in &sb.workspace {
            self.files.insert(file.clone());
        }
        sandbox.workspace = sb.workspace.clone();
        if let Some(file) = &sb.config
            && let Some(parsed) = self.yaml_file(file)
        {
            let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
            f.unknown_keys(&["provider", "timeout", "output_limit"], "sandbox");
            if let Some(p) = f.choice("provider", &[("local", "local")]) {
                sandbox.provider = p.to_owned();
            }
            if let Some(t) = f.duration_ms("timeout") {
                sandbox.timeout_ms = t;
            }
            if let Some(o) = f.u64("output_limit") {
                sandbox.output_limit = o;
            }
        }
        sandbox
    }

    /// Tool names must be unique across tools, subagents, built-ins and connection prefixes.
    fn collisions(&mut self, dir: &AgentDir, subagents: &[Agent], connections: &[Connection]) {
        let mut owners: BTreeMap<String, String> = BTreeMap::new();
        let mut claim = |this: &mut Self, name: &str, owner: String| {
            if let Some(prev) = owners.get(name) {
                this.push(
                    Diagnostic::new(
                        Code::NameCollision,
                        owner.clone(),
                        format!(
                            "the name `{name}` is also taken by {}{prev}",
                            this.shown_prefix
                        ),
                    )
                    .help("tools, subagents and connection prefixes share one namespace: rename one of them"),
                );
            } else {
                owners.insert(name.to_owned(), owner);
            }
        };
        // Raw discovered tools, so clashes are found even among tools that failed other checks.
        for t in &dir.tools {
            claim(self, &t.name, t.file.path.clone());
        }
        for s in subagents {
            claim(self, &s.name, format!("{}/", s.path));
        }
        for t in &dir.tools {
            if RESERVED_TOOL_NAMES.contains(&t.name.as_str()) || t.name.starts_with("eve__") {
                self.push(
                    Diagnostic::new(
                        Code::ReservedName,
                        t.file.path.clone(),
                        format!("`{}` is reserved by eve", t.name),
                    )
                    .help(format!(
                        "reserved names: {}, and anything starting with `eve__`; rename the file",
                        RESERVED_TOOL_NAMES.join(", ")
                    )),
                );
            }
        }
        for s in subagents {
            if RESERVED_TOOL_NAMES.contains(&s.name.as_str()) {
                self.push(
                    Diagnostic::new(
                        Code::ReservedName,
                        format!("{}/", s.path),
                        format!("`{}` is reserved by eve", s.name),
                    )
                    .help("rename the subagent folder"),
                );
            }
        }
        for c in connections {
            let pfx = format!("{}__", c.name);
            for t in &dir.tools {
                if t.name.starts_with(&pfx) {
                    self.push(
                        Diagnostic::new(
                            Code::NameCollision,
                            t.file.path.clone(),
                            format!(
                                "tool `{}` uses the prefix `{pfx}` owned by connection `{}`",
                                t.name, c.name
                            ),
                        )
                        .help(format!(
                            "rename the tool: names starting with `{pfx}` belong to the tools of connection `{}`",
                            c.name
                        )),
                    );
                }
            }
        }
    }
}

/// Whether a value is exactly a `${VAR}` reference.
pub fn is_env_ref(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        let s = s.trim();
        s.starts_with("${")
            && s.ends_with('}')
            && s[2..s.len() - 1]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && s.len() > 3
    })
}

/// Checks a five-field cron expression (or a nickname such as `@daily`).
pub fn check_cron(expr: &str) -> Result<croner::Cron, String> {
    let trimmed = expr.trim();
    let fields = trimmed.split_whitespace().count();
    if !trimmed.starts_with('@') && fields != 5 {
        return Err(format!("expected 5 fields, found {fields}"));
    }
    if !trimmed.starts_with('@') {
        check_cron_ranges(trimmed)?;
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(trimmed)
        .map_err(|e| e.to_string())
}

/// Names the first number outside its field's range (croner only says "out of bounds").
fn check_cron_ranges(expr: &str) -> Result<(), String> {
    const FIELDS: [(&str, u32, u32); 5] = [
        ("minute", 0, 59),
        ("hour", 0, 23),
        ("day-of-month", 1, 31),
        ("month", 1, 12),
        ("day-of-week", 0, 7),
    ];
    for (field, (what, lo, hi)) in expr.split_whitespace().zip(FIELDS) {
        for part in field.split(',') {
            // `a-b/step`: the step is a count, not a value of the field.
            let values = part.split('/').next().unwrap_or(part);
            for v in values.split('-') {
                if let Ok(n) = v.parse::<u32>()
                    && (n < lo || n > hi)
                {
                    return Err(format!("{what} `{n}` is out of range {lo}-{hi}"));
                }
            }
        }
    }
    Ok(())
}

fn prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    }
}

fn short(msg: &str) -> String {
    let one = msg.lines().next().unwrap_or(msg);
    if one.chars().count() > 200 {
        let cut: String = one.chars().take(200).collect();
        format!("{cut}…")
    } else {
        one.to_owned()
    }
}

/// The next time a schedule fires strictly after `after`, in UTC.
pub fn next_fire(
    schedule: &Schedule,
    after: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let cron = check_cron(&schedule.cron).ok()?;
    let tz: chrono_tz::Tz = schedule.timezone.parse().ok()?;
    let local = after.with_timezone(&tz);
    cron.find_next_occurrence(&local, false)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}
