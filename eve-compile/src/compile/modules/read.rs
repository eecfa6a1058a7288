//! The build's side of module tools: one Node process reads every module tool of an agent folder
//! (`js/evaluate.mjs`), and its answer becomes manifest tools, diagnostics with file:line, and the
//! `node_modules` files the build carries.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use eve_discover::{AgentDir, Code, Diagnostic, Named, SkillFile, SourceFile, ToolFile};

use super::super::Compiler;
use super::cache::Cache;
use super::node::locate_node;
use super::{NODE_HOOK_RUNNER, NODE_RUNNER, evaluate_args, find_node, is_module, split_tools};
use crate::hash::json_hash;
use crate::manifest::*;

/// Longest the evaluation of an agent folder's modules may take.
const EVALUATE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Deserialize)]
struct Answer {
    node: String,
    results: Vec<ModuleResult>,
    #[serde(default)]
    loaded: Vec<String>,
    #[serde(default)]
    states: Vec<super::state::StateRead>,
}

#[derive(Debug, Deserialize)]
struct ModuleResult {
    path: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    tool: Option<ToolRead>,
    #[serde(default)]
    hook: Option<HookRead>,
    #[serde(default)]
    schedule: Option<ScheduleRead>,
    #[serde(default)]
    agent: Option<AgentRead>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    skill: Option<SkillRead>,
    #[serde(default)]
    builtin: Option<String>,
    #[serde(default)]
    problems: Vec<Problem>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentRead {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    context_window: Option<u64>,
    #[serde(default)]
    default_tools: Option<bool>,
    #[serde(default)]
    compaction_threshold: Option<f64>,
    #[serde(default)]
    ignored: Vec<String>,
    #[serde(default)]
    line: u32,
}

#[derive(Debug, Deserialize)]
struct SkillRead {
    #[serde(default)]
    description: String,
    markdown: String,
    #[serde(default)]
    deferred: bool,
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    files: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct HookRead {
    events: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct ScheduleRead {
    cron: String,
    markdown: String,
    #[serde(default)]
    timezone: Option<String>,
}

/// What Node read from an agent folder's modules: each module read without a problem, by path
/// (relative to the root agent folder), and the program module tools and hooks run with.
#[derive(Debug, Default)]
pub(in crate::compile) struct Evaluated {
    by_path: BTreeMap<String, ModuleResult>,
    program: String,
    /// Built-in tools a `tools/` module turns on (`export { default } from "eve/tools/bash"`,
    /// `true`) or off (`disableTool()`, `false`), by name.
    builtins: Vec<(String, bool)>,
    /// The `defineState` slots the modules define (see `state.rs`).
    pub(super) states: Vec<super::state::StateRead>,
    /// The agent folder on disk the modules were read from.
    pub(super) agent_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolRead {
    #[serde(default)]
    description: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    approval: Option<String>,
    #[serde(default)]
    ends_turn: Option<bool>,
    #[serde(default)]
    deferred: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct Problem {
    code: String,
    line: u32,
    column: u32,
    message: String,
}

impl Compiler {
    /// Reads every module of `dir` (its tools, hooks and schedules that are modules) with one
    /// Node process; what each defines is kept for the parts that compile them, and every
    /// problem is a diagnostic, all at once.
    pub(in crate::compile) fn evaluate_modules(&mut self, dir: &AgentDir) {
        let mut wanted: Vec<(&'static str, String)> = Vec::new();
        wanted.extend(
            split_tools(dir)
                .0
                .iter()
                .map(|t| ("tool", t.file.path.clone())),
        );
        wanted.extend(
            dir.hooks
                .iter()
                .filter(|h| is_module(&h.file))
                .map(|h| ("hook", h.file.path.clone())),
        );
        wanted.extend(
            dir.schedules
                .iter()
                .filter(|s| is_module(&s.file))
                .map(|s| ("schedule", s.file.path.clone())),
        );
        wanted.extend(
            dir.skills
                .iter()
                .filter(|s| is_module(&s.file))
                .map(|s| ("skill", s.file.path.clone())),
        );
        wanted.extend(
            dir.instructions_dir
                .iter()
                .filter(|f| is_module(f))
                .map(|f| ("instructions", f.path.clone())),
        );
        for m in &dir.modules {
            let stem = m.path.rsplit('/').next().unwrap_or(&m.path);
            let kind = if stem.starts_with("agent.") {
                "agent"
            } else {
                "instructions"
            };
            wanted.push((kind, m.path.clone()));
        }
        let Some((_, first)) = wanted.first().cloned() else {
            return;
        };
        for (_, path) in &wanted {
            self.files.insert(path.clone());
        }
        let Some(agent_dir) = self.agent_dir.clone() else {
            self.push(
                Diagnostic::new(
                    Code::NodeUnfit,
                    first,
                    "modules are evaluated with Node from the agent folder on disk, and this build has none",
                )
                .help("build the agent from its folder (`eve build`)"),
            );
            return;
        };
        let unfit = |why: String| {
            Diagnostic::new(Code::NodeUnfit, first.clone(), why).help(
                "install Node 24 (eve's own requirement; 22.6 is the least that strips types) \
                 and put it on PATH, or point EVE_NODE at it",
            )
        };
        let (node_path, program) = match locate_node() {
            Ok(found) => found,
            Err(why) => {
                self.push(unfit(why));
                return;
            }
        };
        let request = serde_json::json!({
            "modules": wanted.iter().map(|(kind, path)| serde_json::json!({
                "kind": kind,
                "path": agent_dir.join(path),
            })).collect::<Vec<_>>(),
        });
        let texts: Vec<&str> = wanted
            .iter()
            .filter_map(|(_, path)| module_text(dir, path))
            .collect();
        let cache = self
            .cache_dir
            .as_deref()
            .map(|d| Cache::new(d, &dir.path, &node_path, &request, &texts));
        // A rebuild whose modules and their imports did not change: Node's earlier answer.
        let cached = cache.as_ref().and_then(Cache::get).and_then(|entry| {
            crate::interpreters::remember_node_version(&node_path, entry.version);
            serde_json::from_value::<Answer>(entry.answer).ok()
        });
        let answer = match cached {
            Some(answer) => answer,
            None => {
                let node = match find_node() {
                    Ok(node) => node,
                    Err(why) => {
                        self.push(unfit(why));
                        return;
                    }
                };
                let compile_cache = self.cache_dir.as_ref().map(|d| d.join("cache/node"));
                let raw = match evaluate(&node.path, &agent_dir, &request, compile_cache) {
                    Ok(raw) => raw,
                    Err(why) => {
                        self.push(
                            Diagnostic::new(Code::ModuleThrows, first, why)
                                .help("run the module with `node` to see the whole error"),
                        );
                        return;
                    }
                };
                let Ok(answer) = serde_json::from_value::<Answer>(raw.clone()) else {
                    self.push(
                        Diagnostic::new(
                            Code::ModuleThrows,
                            first,
                            "Node's answer was not readable",
                        )
                        .help("run the module with `node` to see the whole error"),
                    );
                    return;
                };
                if let Some(cache) = &cache {
                    cache.put(&agent_dir, node.version, &raw);
                }
                answer
            }
        };
        self.node = Some(format!("{} ({})", node_path.display(), answer.node));
        self.modules.program = program;
        self.carry_loaded(&agent_dir, &answer.loaded);
        self.modules.states = answer.states;
        self.modules.agent_dir = Some(agent_dir.clone());
        for ((_, path), result) in wanted.into_iter().zip(answer.results) {
            if Path::new(&result.path) != agent_dir.join(&path) {
                continue;
            }
            let mut failed = false;
            for p in &result.problems {
                let code = match p.code.as_str() {
                    "throws" => Code::ModuleThrows,
                    "no-input-schema" => Code::ModuleNoInputSchema,
                    "not-definition" => Code::ModuleNotDefinition,
                    _ => Code::ModuleUnfit,
                };
                let help = match code {
                    Code::ModuleThrows => {
                        "fix the module so that importing it does not throw (execute is not run at build)"
                    }
                    Code::ModuleNoInputSchema => {
                        "add `inputSchema: z.object({…})` (or a JSON Schema object; `z.object({})` for no input)"
                    }
                    Code::ModuleNotDefinition => {
                        "a module default-exports its folder's definition: `defineTool({…})` (or `disableTool()`) in tools/, `defineHook` in hooks/, `defineSchedule` in schedules/"
                    }
                    _ => "see docs/typescript.md for what eve (Rust) takes from a definition",
                };
                self.push(
                    Diagnostic::new(code, path.clone(), p.message.clone())
                        .at(p.line.max(1), p.column.max(1))
                        .help(help),
                );
                failed = true;
            }
            if !failed {
                self.modules.by_path.insert(path, result);
            }
        }
    }

    /// The module tools `files`, from what [`Compiler::evaluate_modules`] read.
    pub(in crate::compile) fn module_tools(
        &mut self,
        files: &[&ToolFile],
        sandbox: &Sandbox,
    ) -> Vec<(Tool, SandboxOverride)> {
        let mut out = Vec::new();
        for t in files {
            let path = &t.file.path;
            let Some(result) = self.modules.by_path.remove(path) else {
                continue;
            };
            match result.kind.as_deref() {
                Some("builtin-tool") => {
                    if let Some(name) = result.builtin {
                        self.modules.builtins.push((name, true));
                    }
                    continue;
                }
                Some("disabled-tool") => {
                    self.modules.builtins.push((t.name.clone(), false));
                    continue;
                }
                Some("tool") => {}
                _ => continue,
            }
            let Some(read) = result.tool else { continue };
            let Some(mut input_schema) = read.input else {
                continue;
            };
            if let Value::Object(map) = &mut input_schema {
                map.remove("$schema");
            }
            if !self.module_schema(path, &input_schema) || !self.check_name(&t.name, path, "tool") {
                continue;
            }
            if read.description.trim().is_empty() {
                self.push(
                    Diagnostic::new(
                        Code::MissingToolDescription,
                        path.clone(),
                        format!("tool `{}` has no description", t.name),
                    )
                    .help("add `description:` so the model knows when to call it"),
                );
            }
            let approval = match read.approval.as_deref() {
                Some("once") => Approval::Once,
                Some("always") => Approval::Always,
                Some("auto") => Approval::Auto,
                _ => Approval::Never,
            };
            let tool = Tool {
                name: t.name.clone(),
                source: path.clone(),
                description: read.description,
                schema_hash: json_hash(&input_schema),
                input_schema,
                approval,
                effect: Effect::Write,
                timeout_ms: sandbox.timeout_ms,
                output_limit: sandbox.output_limit,
                deferred: read.deferred.unwrap_or(false),
                env: Vec::new(),
                dynamic: Vec::new(),
                phase: None,
                runner: Runner::Script {
                    path: path.clone(),
                    interpreter: vec![
                        self.modules.program.clone(),
                        "--experimental-strip-types".to_owned(),
                        "--no-warnings".to_owned(),
                        NODE_RUNNER.to_owned(),
                    ],
                },
                ends_turn: read.ends_turn.unwrap_or(false),
                approval_prompt: None,
            };
            out.push((tool, SandboxOverride::default()));
        }
        out
    }

    /// Settings of an `agent.ts` module (`defineAgent`): the model, reasoning, context window and
    /// compaction threshold, where `agent.yaml` does not set them; the rest is warned about.
    pub(in crate::compile) fn module_agent(&mut self, dir: &AgentDir, config: &mut AgentConfig) {
        let Some(file) = dir.modules.iter().find(|m| {
            m.path
                .rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("agent."))
        }) else {
            return;
        };
        let Some(read) = self
            .modules
            .by_path
            .remove(&file.path)
            .and_then(|r| r.agent)
        else {
            return;
        };
        if config.model.is_none() {
            config.model = read.model;
        }
        if config.reasoning.is_none() {
            config.reasoning = read.reasoning;
        }
        if config.context_window.is_none() {
            config.context_window = read.context_window;
        }
        if let Some(on) = read.default_tools
            && dir.config.is_none()
        {
            config.default_tools = on;
        }
        if let Some(threshold) = read.compaction_threshold {
            config.compaction.threshold = threshold;
        }
        for field in read.ignored {
            self.push(
                Diagnostic::new(
                    Code::UnknownField,
                    file.path.clone(),
                    format!("`{field}` of defineAgent is not taken over by eve (Rust)"),
                )
                .at(read.line.max(1), 1)
                .help("set it in agent.yaml (see docs/typescript.md, \"Migrating\")"),
            );
        }
    }

    /// Turns on the built-in tools `tools/` modules re-export from `eve/tools/<name>` and off
    /// those they disable (`disableTool()`), as eve does.
    pub(in crate::compile) fn module_builtins(&mut self, config: &mut AgentConfig) {
        let changes = std::mem::take(&mut self.modules.builtins);
        if changes.is_empty() {
            return;
        }
        let mut on: Vec<String> = config
            .builtins_on()
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        for (name, enable) in changes {
            if !crate::DEFAULT_TOOL_EFFECTS.iter().any(|(n, _)| *n == name) {
                continue;
            }
            on.retain(|n| *n != name);
            if enable {
                on.push(name);
            }
        }
        config.builtins = Some(on);
    }

    /// The root `instructions.ts` module of `dir` (`defineInstructions`), if it has one.
    pub(in crate::compile) fn instructions_module(dir: &AgentDir) -> Option<&SourceFile> {
        dir.modules.iter().find(|m| {
            m.path
                .rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("instructions."))
        })
    }

    /// The text of an instructions module (`defineInstructions({content})`), once read; `None`
    /// when Node could not read it (its diagnostic is already out).
    pub(in crate::compile) fn module_instructions(&mut self, file: &SourceFile) -> Option<String> {
        self.modules.by_path.remove(&file.path)?.instructions
    }

    /// A `defineSkill` module, once read: `None` when Node could not read it.
    pub(in crate::compile) fn module_skill(&mut self, s: &SkillFile) -> Option<Skill> {
        let read = self.modules.by_path.remove(&s.file.path)?.skill?;
        let description = if read.description.trim().is_empty() {
            read.markdown
                .lines()
                .map(|l| l.trim().trim_start_matches('#').trim())
                .find(|l| !l.is_empty())
                .unwrap_or_default()
                .to_owned()
        } else {
            read.description
        };
        if description.trim().is_empty() {
            self.push(
                Diagnostic::new(
                    Code::MissingToolDescription,
                    s.file.path.clone(),
                    format!("skill `{}` has no description", s.name),
                )
                .help("add `description:` saying when the skill applies"),
            );
            return None;
        }
        if let Some(first) = read.files.keys().next() {
            self.push(
                Diagnostic::new(
                    Code::UnknownField,
                    s.file.path.clone(),
                    format!(
                        "skill `{}`: the `files` of defineSkill (`{first}`, …) are not carried \
                         into the box by this version; the skill's markdown is",
                        s.name
                    ),
                )
                .help(
                    "make it a packaged skill: `skills/NAME/SKILL.md` with the files beside it \
                     (docs/typescript.md)",
                ),
            );
        }
        Some(Skill {
            name: s.name.clone(),
            source: s.file.path.clone(),
            description,
            body: read.markdown.trim().to_owned(),
            deferred: read.deferred,
            license: read.license,
            metadata: read.metadata,
            files: Vec::new(),
        })
    }

    /// A `defineHook` module, from what [`Compiler::evaluate_modules`] read.
    pub(in crate::compile) fn module_hook(&mut self, h: &Named) -> Option<(Hook, SandboxOverride)> {
        let read = self.modules.by_path.remove(&h.file.path)?.hook?;
        let name_ok = self.check_name(&h.name, &h.file.path, "hook");
        let mut ok = true;
        for ev in &read.events {
            if !HOOK_EVENTS.contains(&ev.as_str()) {
                let suggestion = crate::fields::closest(ev, HOOK_EVENTS)
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default();
                self.push(
                    Diagnostic::new(
                        Code::UnknownEvent,
                        h.file.path.clone(),
                        format!("unknown event `{ev}`"),
                    )
                    .help(format!(
                        "{suggestion}events are: {}",
                        HOOK_EVENTS.join(", ")
                    )),
                );
                ok = false;
            }
        }
        let hook = Hook {
            name: h.name.clone(),
            source: h.file.path.clone(),
            events: read.events,
            timeout_ms: 10_000,
            env: Vec::new(),
            runner: Runner::Script {
                path: h.file.path.clone(),
                interpreter: vec![
                    self.modules.program.clone(),
                    "--experimental-strip-types".to_owned(),
                    "--no-warnings".to_owned(),
                    NODE_HOOK_RUNNER.to_owned(),
                ],
            },
        };
        (ok && name_ok).then_some((hook, SandboxOverride::default()))
    }

    /// A `defineSchedule` module (with `markdown`), from what [`Compiler::evaluate_modules`] read.
    pub(in crate::compile) fn module_schedule(&mut self, s: &Named) -> Option<Schedule> {
        let read = self.modules.by_path.remove(&s.file.path)?.schedule?;
        let name_ok = self.check_name(&s.name, &s.file.path, "schedule");
        let mut ok = true;
        if let Err(why) = crate::cron::check_cron(&read.cron)
            .and_then(|c| super::super::schedules::fires_at_all(&c))
        {
            self.push(
                Diagnostic::new(
                    Code::InvalidCron,
                    s.file.path.clone(),
                    format!("invalid cron expression \"{}\": {why}", read.cron),
                )
                .help("use five fields: minute hour day-of-month month day-of-week, e.g. \"*/15 * * * *\""),
            );
            ok = false;
        }
        let timezone = read.timezone.unwrap_or_else(|| "UTC".to_owned());
        if crate::tz::zone(&timezone).is_none() {
            self.push(
                Diagnostic::new(
                    Code::InvalidTimezone,
                    s.file.path.clone(),
                    format!("unknown time zone \"{timezone}\""),
                )
                .help("use an IANA name such as `Europe/Paris` or `UTC`"),
            );
            ok = false;
        }
        (ok && name_ok).then(|| Schedule {
            name: s.name.clone(),
            source: s.file.path.clone(),
            cron: read.cron,
            timezone,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            prompt: read.markdown.trim().to_owned(),
        })
    }

    /// Whether a module's input schema is an object schema that is valid JSON Schema (E020).
    fn module_schema(&mut self, path: &str, schema: &Value) -> bool {
        let problem = if let Err(e) = jsonschema::validator_for(schema) {
            Some(format!("`inputSchema` is not valid JSON Schema: {e}"))
        } else if schema.get("type").and_then(Value::as_str) != Some("object") {
            Some("`inputSchema` is not an object schema: tool input is always an object".to_owned())
        } else {
            None
        };
        match problem {
            Some(msg) => {
                self.push(
                    Diagnostic::new(Code::InvalidSchema, path.to_owned(), msg)
                        .help("use `z.object({…})`, or a JSON Schema with `type: \"object\"`"),
                );
                false
            }
            None => true,
        }
    }
}

/// The text of the module at `path` in `dir` (a tool, hook, schedule, skill, instructions or
/// root module), for the cache's key.
fn module_text<'a>(dir: &'a AgentDir, path: &str) -> Option<&'a str> {
    let files = dir
        .tools
        .iter()
        .map(|t| &t.file)
        .chain(dir.hooks.iter().map(|h| &h.file))
        .chain(dir.schedules.iter().map(|s| &s.file))
        .chain(dir.skills.iter().map(|s| &s.file))
        .chain(&dir.instructions_dir)
        .chain(&dir.modules);
    files
        .into_iter()
        .find(|f| f.path == path)
        .map(|f| f.text.as_str())
}

/// Runs the evaluation and reads its answer (one JSON line). With `compile_cache`, Node keeps the
/// code it compiled there (`NODE_COMPILE_CACHE`: zod and the modules compile once, not per build).
fn evaluate(
    node: &Path,
    agent_dir: &Path,
    request: &Value,
    compile_cache: Option<PathBuf>,
) -> Result<Value, String> {
    let mut command = Command::new(node);
    if let Some(dir) = compile_cache {
        command.env("NODE_COMPILE_CACHE", dir);
    }
    let mut child = command
        .args(evaluate_args())
        .current_dir(agent_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", node.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(request.to_string().as_bytes());
    }
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut buf);
        }
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut buf);
        }
        buf
    });
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < EVALUATE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "evaluating the modules took longer than {}s (a module that never finishes importing?)",
                    EVALUATE_TIMEOUT.as_secs()
                ));
            }
        }
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let line = String::from_utf8_lossy(&stdout);
    serde_json::from_str::<Value>(line.trim()).map_err(|_| {
        let why = String::from_utf8_lossy(&stderr);
        let why = why
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no answer");
        format!("Node could not evaluate the modules: {why}")
    })
}
