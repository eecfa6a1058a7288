//! Eval cases: `evals/NAME.yaml` beside the agent folder, parsed and checked like the agent.
//!
//! Discovery (`eve_discover::discover_evals`) finds the files; this module turns each into
//! [`EvalCase`]s and reports every problem at once as a coded diagnostic (`E100`–`E104`, plus the
//! shared YAML and field codes `E010`, `E011`, `E012`, `W002`) with file and line. A file holds
//! one case (a mapping) or a list of them. A case's id is its file's path under `evals/` (without
//! the extension) plus its 1-based index in a list (`weather#2`), or the path plus its own `id:`
//! (`weather/paris`). [`check`] decides whether what a run did meets a case's expectations; it
//! is pure, so `eve eval` (in-process or against a server) and tests share it.

pub mod check;

use std::collections::BTreeMap;

use eve_discover::{Code, Diagnostic, EvalDiscovery};
use serde::Serialize;
use serde_json::Value;

use crate::fields::{Fields, kind};
use crate::yaml;

pub use check::{Failure, Observed, ObservedCall, check};

/// One user turn of a case, or an answer to the approvals the previous turn stopped on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Turn {
    /// A user message.
    User(String),
    /// Approve (or deny) every pending approval, with an optional reason for the model.
    Answer {
        /// `true` approves, `false` denies.
        approve: bool,
        /// Passed to the model with the answer.
        reason: Option<String>,
    },
}

/// `called_tool`: a call the run must contain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalledTool {
    /// Tool name.
    pub name: String,
    /// A subset the call's input must contain (objects recursively; other values equal).
    pub input: Option<Value>,
    /// Exactly this many matching calls (default: at least one).
    pub count: Option<u64>,
}

/// `text`: what the agent's replies must (not) say.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TextExpect {
    /// Substrings the replies must contain.
    pub contains: Vec<String>,
    /// Substrings they must not contain.
    pub not_contains: Vec<String>,
    /// Regular expressions (Rust `regex` syntax) they must match.
    pub regex: Vec<String>,
}

/// `approval_requested`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalExpect {
    /// `true`: some approval was asked; `false`: none was.
    Any(bool),
    /// Approval was asked for each of these tools.
    Tools(Vec<String>),
}

/// `judge`: a rubric graded by the judge model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeExpect {
    /// What a good answer does, in words.
    pub rubric: String,
    /// The lowest passing score, 0 to 1 (default 0.7).
    pub threshold: f64,
    /// The judge model (`provider/name`); default `EVE_JUDGE_MODEL`.
    pub model: Option<String>,
}

/// `command`: a scorer run in the session's workspace after the last turn, in the sandbox the
/// agent's `bash` tool runs in. Exit 0 passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandExpect {
    /// Argv (a string is run with `sh -c`).
    pub run: Vec<String>,
    /// Files written into the workspace first (path relative to it → contents).
    pub files: BTreeMap<String, String>,
    /// Seconds before it is killed (default 60).
    pub timeout_seconds: u64,
}

/// `expect`: everything a run must do for the case to pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Expect {
    /// Calls the run must contain.
    pub called_tool: Vec<CalledTool>,
    /// Tools the run must not call.
    pub not_called: Vec<String>,
    /// Skills the run must load.
    pub loaded_skill: Vec<String>,
    /// What the replies must say.
    pub text: Option<TextExpect>,
    /// Whether approval must (not) be asked.
    pub approval_requested: Option<ApprovalExpect>,
    /// Most model steps over the whole case.
    pub max_steps: Option<u64>,
    /// Most cost in US dollars (needs `limits.price_per_million`).
    pub max_cost_usd: Option<f64>,
    /// Most wall-clock seconds; also the case's deadline.
    pub max_seconds: Option<f64>,
    /// A rubric for the judge model.
    pub judge: Option<JudgeExpect>,
    /// A scorer command.
    pub command: Option<CommandExpect>,
}

/// One eval case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalCase {
    /// Stable id (see the module docs).
    pub id: String,
    /// The file, relative to the project (`evals/weather.yaml`).
    pub file: String,
    /// Line of the case in the file.
    pub line: u32,
    /// Tags for `--tag`/`--exclude-tag`.
    pub tags: Vec<String>,
    /// User turns and approval answers, in order.
    pub messages: Vec<Turn>,
    /// A mock-model script (docs/models.md) as JSON: when set, the case runs on the mock model.
    pub mock: Option<Value>,
    /// A model for this case (`provider/name`), instead of the agent's.
    pub model: Option<String>,
    /// What the run must do.
    pub expect: Expect,
}

/// Every case of a project, with the problems found.
#[derive(Debug, Clone, Default)]
pub struct EvalSuite {
    /// Cases, in file order.
    pub cases: Vec<EvalCase>,
    /// Problems, with paths relative to the project.
    pub diagnostics: Vec<Diagnostic>,
}

impl EvalSuite {
    /// Number of errors.
    pub fn error_count(&self) -> usize {
        eve_discover::error_count(&self.diagnostics)
    }
}

const CASE_FIELDS: &[&str] = &["id", "tags", "messages", "mock", "model", "expect"];
const EXPECT_FIELDS: &[&str] = &[
    "called_tool",
    "not_called",
    "loaded_skill",
    "text",
    "approval_requested",
    "max_steps",
    "max_cost_usd",
    "max_seconds",
    "judge",
    "command",
];
const STEP_FIELDS: &[&str] = &[
    "text",
    "reasoning",
    "tool_calls",
    "delay_ms",
    "usage",
    "finish",
    "error",
];

/// Parses every file of an `evals/` discovery. `prefix` is shown before each path (`evals/`).
pub fn compile_evals(discovery: &EvalDiscovery, prefix: &str) -> EvalSuite {
    let mut diags = Vec::new();
    let mut cases = Vec::new();
    // Every case's id, valid or not, so a duplicate is reported even next to other errors.
    let mut ids: Vec<(String, String, u32)> = Vec::new();
    for f in &discovery.files {
        let file = format!("{prefix}{}", f.file.path);
        let doc = match yaml::parse(&f.file.text, 0, 0) {
            Ok(doc) => doc,
            Err(e) => {
                let mut d = Diagnostic::new(Code::YamlSyntax, file.clone(), e.message)
                    .help("fix the YAML at the line shown");
                if let (Some(l), Some(c)) = (e.line, e.column) {
                    d = d.at(l, c);
                }
                diags.push(d);
                continue;
            }
        };
        match &doc.value {
            Value::Array(items) => {
                if items.is_empty() {
                    diags.push(
                        Diagnostic::new(Code::EvalShape, file.clone(), "the file holds no cases")
                            .at(1, 1)
                            .help("write one case as a mapping, or a list of them"),
                    );
                }
                for i in 0..items.len() {
                    let id = format!("{}#{}", f.stem, i + 1);
                    if let Some(c) = case(
                        &file,
                        &doc,
                        &format!("/{i}"),
                        &f.stem,
                        id,
                        &mut ids,
                        &mut diags,
                    ) {
                        cases.push(c);
                    }
                }
            }
            Value::Object(_) => {
                if let Some(c) = case(
                    &file,
                    &doc,
                    "",
                    &f.stem,
                    f.stem.clone(),
                    &mut ids,
                    &mut diags,
                ) {
                    cases.push(c);
                }
            }
            other => diags.push(
                Diagnostic::new(
                    Code::EvalShape,
                    file.clone(),
                    format!(
                        "an eval file holds a case (a mapping) or a list of cases, found {}",
                        kind(other)
                    ),
                )
                .at(1, 1)
                .help("start the file with `messages:` (one case) or `- messages:` (a list)"),
            ),
        }
    }
    let mut seen: BTreeMap<&str, (&str, u32)> = BTreeMap::new();
    for (id, file, line) in &ids {
        if let Some((first, first_line)) = seen.get(id.as_str()) {
            diags.push(
                Diagnostic::new(
                    Code::EvalDuplicateId,
                    file.clone(),
                    format!("case id `{id}` is also used at {first}:{first_line}"),
                )
                .at(*line, 1)
                .help("give one of them another `id:`"),
            );
        } else {
            seen.insert(id, (file, *line));
        }
    }
    let duplicated: Vec<&String> = ids
        .iter()
        .map(|(id, _, _)| id)
        .filter(|id| ids.iter().filter(|(other, _, _)| other == *id).count() > 1)
        .collect();
    cases.retain(|c| !duplicated.contains(&&c.id));
    let mut diagnostics: Vec<Diagnostic> = discovery
        .diagnostics
        .iter()
        .cloned()
        .map(|mut d| {
            d.file = d.file.map(|f| format!("{prefix}{f}"));
            d
        })
        .collect();
    diagnostics.extend(diags);
    diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.code).cmp(&(&b.file, b.line, b.column, b.code))
    });
    EvalSuite { cases, diagnostics }
}

fn case(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    stem: &str,
    default_id: String,
    ids: &mut Vec<(String, String, u32)>,
    diags: &mut Vec<Diagnostic>,
) -> Option<EvalCase> {
    let line = doc.position(base).map_or(1, |(l, _)| l);
    if !doc.value.pointer(base).is_some_and(Value::is_object) {
        let found = doc.value.pointer(base).map_or("nothing".to_owned(), kind);
        let mut d = Diagnostic::new(
            Code::EvalShape,
            file.to_owned(),
            format!("a case must be a mapping with `messages:` and `expect:`, found {found}"),
        )
        .help("write the case as `- messages: [\"…\"]` with `expect:` under it");
        if let Some((l, c)) = doc.position(base) {
            d = d.at(l, c);
        }
        diags.push(d);
        return None;
    }
    let before = eve_discover::error_count(diags);
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(CASE_FIELDS, "eval case");
    let id = match f.string("id") {
        Some(id) if valid_id(&id) => format!("{stem}/{id}"),
        Some(id) => {
            f.report(
                Code::InvalidField,
                "id",
                format!("case id `{id}` may hold only letters, digits, `_`, `-` and `.`"),
                "rename it, such as `paris-sunny`",
            );
            default_id
        }
        None => default_id,
    };
    ids.push((id.clone(), file.to_owned(), line));
    let tags = f.string_list("tags").unwrap_or_default();
    let model = f.string("model");
    if let Some(m) = &model
        && !m.contains('/')
        && m != "mock"
    {
        f.report(
            Code::InvalidField,
            "model",
            format!("`model: {m}` must be written `provider/name`"),
            "for example `openai/gpt-4.1` or `mock/echo`",
        );
    }
    let messages = messages(&mut f);
    let mock = f.raw("mock").cloned();
    if mock.is_some() {
        check_mock(&mut f);
    }
    let (expect_at, has_expect) = (f.pointer("expect"), f.has("expect"));
    let expect = expect(file, doc, &expect_at, has_expect, diags);
    if eve_discover::error_count(diags) > before {
        return None;
    }
    Some(EvalCase {
        id,
        file: file.to_owned(),
        line,
        tags,
        messages,
        mock,
        model,
        expect,
    })
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn messages(f: &mut Fields<'_>) -> Vec<Turn> {
    const HELP: &str = "write `messages: [\"first turn\", {approve: true}, \"second turn\"]`";
    let Some(raw) = f.raw("messages").cloned() else {
        let base = f.base.clone();
        f.report_at(
            Code::EvalMessages,
            &base,
            "the case has no `messages:`: nothing would be sent to the agent".to_owned(),
            HELP,
        );
        return Vec::new();
    };
    let items = match raw {
        Value::String(s) => vec![Value::String(s)],
        Value::Array(items) => items,
        other => {
            f.report(
                Code::EvalMessages,
                "messages",
                format!(
                    "`messages` must be a string or a list, found {}",
                    kind(&other)
                ),
                HELP,
            );
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let p = format!("{}/{i}", f.pointer("messages"));
        match item {
            Value::String(s) => out.push(Turn::User(s)),
            Value::Object(m) => {
                let approve = m.get("approve").and_then(Value::as_bool);
                let reason = m.get("reason").and_then(Value::as_str).map(str::to_owned);
                let known = m.keys().all(|k| k == "approve" || k == "reason");
                match approve {
                    Some(approve) if known => {
                        if out.is_empty() {
                            f.report_at(
                                Code::EvalMessages,
                                &p,
                                "an approval answer comes before any message".to_owned(),
                                "put the message whose tool call needs approval first",
                            );
                        }
                        out.push(Turn::Answer { approve, reason });
                    }
                    _ => f.report_at(
                        Code::EvalMessages,
                        &p,
                        "a turn is a string (a user message) or an approval answer \
                         `{approve: true|false, reason?: \"…\"}`"
                            .to_owned(),
                        HELP,
                    ),
                }
            }
            other => f.report_at(
                Code::EvalMessages,
                &p,
                format!(
                    "a turn must be a string or `{{approve: …}}`, found {}",
                    kind(&other)
                ),
                HELP,
            ),
        }
    }
    if !out.iter().any(|t| matches!(t, Turn::User(_))) {
        f.report(
            Code::EvalMessages,
            "messages",
            "`messages` holds no user message".to_owned(),
            HELP,
        );
    }
    out
}

/// The shape of a mock script (the runtime parses it fully before the run): a list of step
/// mappings, or a mapping of such lists keyed by agent.
fn check_mock(f: &mut Fields<'_>) {
    let base = f.pointer("mock");
    let Some(raw) = f.raw("mock").cloned() else {
        return;
    };
    const HELP: &str = "a mock script is a list of steps such as `- {tool_calls: [{name: get_weather, input: {city: Paris}}]}` and `- {text: \"It is sunny.\"}` (docs/models.md)";
    let lists: Vec<(String, Value)> = match raw {
        Value::Array(_) => vec![(base.clone(), raw)],
        Value::Object(m) => m
            .into_iter()
            .map(|(k, v)| (format!("{base}/{}", yaml::escape_pointer(&k)), v))
            .collect(),
        other => {
            f.report_at(
                Code::EvalMock,
                &base,
                format!("`mock` must be a list of steps, found {}", kind(&other)),
                HELP,
            );
            return;
        }
    };
    for (p, list) in lists {
        let Value::Array(steps) = list else {
            f.report_at(
                Code::EvalMock,
                &p,
                "each agent's mock script must be a list of steps".to_owned(),
                HELP,
            );
            continue;
        };
        for (i, step) in steps.iter().enumerate() {
            let sp = format!("{p}/{i}");
            let Value::Object(m) = step else {
                f.report_at(
                    Code::EvalMock,
                    &sp,
                    format!("a mock step must be a mapping, found {}", kind(step)),
                    HELP,
                );
                continue;
            };
            for (k, v) in m {
                let kp = format!("{sp}/{}", yaml::escape_pointer(k));
                if !STEP_FIELDS.contains(&k.as_str()) {
                    f.report_at(
                        Code::EvalMock,
                        &kp,
                        format!(
                            "unknown mock step field `{k}`; the fields are: {}",
                            STEP_FIELDS.join(", ")
                        ),
                        HELP,
                    );
                } else if k == "tool_calls" {
                    let ok = v.as_array().is_some_and(|calls| {
                        calls.iter().all(|c| {
                            c.get("name").is_some_and(Value::is_string)
                                && c.as_object().is_some_and(|o| {
                                    o.keys()
                                        .all(|k| matches!(k.as_str(), "name" | "input" | "id"))
                                })
                        })
                    });
                    if !ok {
                        f.report_at(
                            Code::EvalMock,
                            &kp,
                            "`tool_calls` must be a list of `{name, input?, id?}`".to_owned(),
                            HELP,
                        );
                    }
                } else if matches!(k.as_str(), "text" | "reasoning" | "error" | "finish")
                    && !v.is_string()
                {
                    f.report_at(
                        Code::EvalMock,
                        &kp,
                        format!("`{k}` of a mock step must be a string, found {}", kind(v)),
                        HELP,
                    );
                }
            }
        }
    }
}

fn expect(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    present: bool,
    diags: &mut Vec<Diagnostic>,
) -> Expect {
    let mut out = Expect::default();
    if !present {
        return out;
    }
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(EXPECT_FIELDS, "expect");
    if let Some(raw) = f.raw("called_tool").cloned() {
        let items = match raw {
            Value::Array(items) => items,
            other => vec![other],
        };
        for (i, item) in items.iter().enumerate() {
            let p = if f.raw("called_tool").is_some_and(Value::is_array) {
                format!("{}/{i}", f.pointer("called_tool"))
            } else {
                f.pointer("called_tool")
            };
            match item {
                Value::String(name) => out.called_tool.push(CalledTool {
                    name: name.clone(),
                    input: None,
                    count: None,
                }),
                Value::Object(m) => {
                    let name = m.get("name").and_then(Value::as_str);
                    let count = m.get("count").map(Value::as_u64);
                    let unknown = m
                        .keys()
                        .find(|k| !matches!(k.as_str(), "name" | "input" | "count"));
                    if let Some(k) = unknown {
                        f.report_at(
                            Code::EvalExpect,
                            &format!("{p}/{}", yaml::escape_pointer(k)),
                            format!(
                                "unknown field `{k}` in `called_tool`; the fields are name, input, count"
                            ),
                            "remove it",
                        );
                    }
                    match (name, count) {
                        (Some(name), Some(None)) => {
                            let _ = name;
                            f.report_at(
                                Code::EvalExpect,
                                &format!("{p}/count"),
                                "`count` must be a whole number".to_owned(),
                                "write `count: 1`",
                            );
                        }
                        (Some(name), count) => out.called_tool.push(CalledTool {
                            name: name.to_owned(),
                            input: m.get("input").cloned(),
                            count: count.flatten(),
                        }),
                        (None, _) => f.report_at(
                            Code::EvalExpect,
                            &p,
                            "`called_tool` needs the tool's `name`".to_owned(),
                            "write `called_tool: {name: get_weather, input: {city: Paris}}`",
                        ),
                    }
                }
                other => f.report_at(
                    Code::EvalExpect,
                    &p,
                    format!(
                        "`called_tool` must be a tool name, `{{name, input?, count?}}` or a list of them, found {}",
                        kind(other)
                    ),
                    "write `called_tool: {name: get_weather, input: {city: Paris}}`",
                ),
            }
        }
    }
    out.not_called = f.string_list("not_called").unwrap_or_default();
    out.loaded_skill = f.string_list("loaded_skill").unwrap_or_default();
    if let Some(raw) = f.raw("text").cloned() {
        out.text = text(&mut f, raw);
    }
    match f.raw("approval_requested").cloned() {
        None => {}
        Some(Value::Bool(b)) => out.approval_requested = Some(ApprovalExpect::Any(b)),
        Some(Value::String(_) | Value::Array(_)) => {
            out.approval_requested = f
                .string_list("approval_requested")
                .map(ApprovalExpect::Tools);
        }
        Some(other) => f.report(
            Code::EvalExpect,
            "approval_requested",
            format!(
                "`approval_requested` must be true, false, a tool name or a list of them, found {}",
                kind(&other)
            ),
            "write `approval_requested: true` or `approval_requested: delete_file`",
        ),
    }
    out.max_steps = f.u64("max_steps");
    out.max_cost_usd = positive(&mut f, "max_cost_usd");
    out.max_seconds = positive(&mut f, "max_seconds");
    let (judge_at, has_judge) = (f.pointer("judge"), f.has("judge"));
    let (command_at, has_command) = (f.pointer("command"), f.has("command"));
    if has_judge {
        out.judge = judge(file, doc, &judge_at, diags);
    }
    if has_command {
        out.command = command(file, doc, &command_at, diags);
    }
    out
}

fn positive(f: &mut Fields<'_>, key: &str) -> Option<f64> {
    let v = f.f64(key)?;
    if v.is_finite() && v >= 0.0 {
        Some(v)
    } else {
        f.report(
            Code::EvalExpect,
            key,
            format!("`{key}` must not be negative"),
            "write a number such as `0.05`",
        );
        None
    }
}

fn text(f: &mut Fields<'_>, raw: Value) -> Option<TextExpect> {
    const HELP: &str = "write `text: {contains: sunny}`, `{not_contains: error}` or `{regex: \"\\\\d+ °C\"}` (a string is `contains`)";
    let mut out = TextExpect::default();
    let map = match raw {
        Value::String(s) => {
            out.contains.push(s);
            return Some(out);
        }
        Value::Object(m) => m,
        other => {
            f.report(
                Code::EvalExpect,
                "text",
                format!("`text` must be a mapping, found {}", kind(&other)),
                HELP,
            );
            return None;
        }
    };
    let base = f.pointer("text");
    for (k, v) in map {
        let p = format!("{base}/{}", yaml::escape_pointer(&k));
        let list: Option<Vec<String>> = match &v {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect(),
            _ => None,
        };
        let Some(list) = list else {
            f.report_at(
                Code::EvalExpect,
                &p,
                format!(
                    "`text.{k}` must be a string or a list of strings, found {}",
                    kind(&v)
                ),
                HELP,
            );
            continue;
        };
        match k.as_str() {
            "contains" => out.contains.extend(list),
            "not_contains" => out.not_contains.extend(list),
            "regex" => {
                for r in &list {
                    if let Err(e) = regex::Regex::new(r) {
                        let first = e.to_string();
                        let last = first.lines().last().unwrap_or_default().trim().to_owned();
                        f.report_at(
                            Code::EvalExpect,
                            &p,
                            format!("`text.regex` `{r}` is not a regular expression: {last}"),
                            "fix the pattern (Rust regex syntax; in YAML, single-quote it so `\\` stays as written)",
                        );
                    }
                }
                out.regex.extend(list);
            }
            other => f.report_at(
                Code::EvalExpect,
                &p,
                format!("unknown text expectation `{other}`; use contains, not_contains or regex"),
                HELP,
            ),
        }
    }
    Some(out)
}

fn judge(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<JudgeExpect> {
    if let Some(Value::String(rubric)) = doc.value.pointer(base) {
        return Some(JudgeExpect {
            rubric: rubric.clone(),
            threshold: 0.7,
            model: None,
        });
    }
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(&["rubric", "threshold", "model"], "judge");
    let rubric = f.required_string("rubric", "write the rubric: what a good answer does")?;
    let threshold = match f.f64("threshold") {
        Some(t) if (0.0..=1.0).contains(&t) => t,
        Some(t) => {
            f.report(
                Code::EvalExpect,
                "threshold",
                format!("`threshold` is a score from 0 to 1, found {t}"),
                "write `threshold: 0.7`",
            );
            0.7
        }
        None => 0.7,
    };
    Some(JudgeExpect {
        rubric,
        threshold,
        model: f.string("model"),
    })
}

fn command(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<CommandExpect> {
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(&["run", "files", "timeout"], "command");
    let run = match f.raw("run").cloned() {
        Some(Value::String(s)) => vec!["sh".to_owned(), "-c".to_owned(), s],
        Some(Value::Array(_)) => f.string_list("run").unwrap_or_default(),
        Some(other) => {
            f.report(
                Code::EvalExpect,
                "run",
                format!(
                    "`run` must be a command line or an argv list, found {}",
                    kind(&other)
                ),
                "write `run: [python3, check.py]`",
            );
            return None;
        }
        None => {
            let base = f.base.clone();
            f.report_at(
                Code::MissingField,
                &base,
                "`command` needs `run:`, the scorer to run in the session workspace".to_owned(),
                "write `run: [python3, check.py]`",
            );
            return None;
        }
    };
    if run.is_empty() {
        f.report(
            Code::EvalExpect,
            "run",
            "`run` is empty".to_owned(),
            "write `run: [python3, check.py]`",
        );
        return None;
    }
    let files = f.string_map("files").unwrap_or_default();
    for path in files.keys() {
        if path.starts_with('/') || path.split('/').any(|s| s == ".." || s.is_empty()) {
            let p = format!("{}/{}", f.pointer("files"), yaml::escape_pointer(path));
            f.report_at(
                Code::EvalExpect,
                &p,
                format!("`files` path `{path}` must be relative to the workspace, without `..`"),
                "write a path such as `tests/check.py`",
            );
        }
    }
    let timeout_seconds = f.u64("timeout").unwrap_or(60).max(1);
    Some(CommandExpect {
        run,
        files,
        timeout_seconds,
    })
}

/// Discovers and compiles the `evals/` folder of the project at `root`; `None` when there is
/// no such folder.
pub fn load(root: &std::path::Path) -> Option<EvalSuite> {
    let dir = root.join("evals");
    if !dir.is_dir() {
        return None;
    }
    Some(match eve_discover::FsSource::new(&dir) {
        Ok(src) => compile_evals(&eve_discover::discover_evals(&src), "evals/"),
        Err(e) => EvalSuite {
            cases: Vec::new(),
            diagnostics: vec![
                Diagnostic::new(
                    Code::Unreadable,
                    "evals/".to_owned(),
                    format!("cannot read the folder: {e}"),
                )
                .help("check the folder's permissions"),
            ],
        },
    })
}
