//! Eval cases: `evals/NAME.yaml` beside the agent folder, parsed and checked like the agent.
//!
//! Discovery (`eve_discover::discover_evals`) finds the files; this module turns each into
//! [`EvalCase`]s and reports every problem at once as a coded diagnostic (`E100`–`E104`, plus the
//! shared YAML and field codes `E010`, `E011`, `E012`, `W002`) with file and line. A file holds
//! one case (a mapping) or a list of them. A case's id is its file's path under `evals/` (without
//! the extension) plus its 1-based index in a list (`weather#2`), or the path plus its own `id:`
//! (`weather/paris`). [`check`] decides whether what a run did meets a case's expectations; it
//! is pure, so `eve eval` (in-process or against a server) and tests share it.
//!
//! Parsing is split in two: `parse` reads a file into cases (shape, id, tags, model, messages
//! and the mock script), and `expect` reads a case's `expect:` (calls, text, approvals, budgets,
//! the judge's rubric and the scorer command). The types they produce, and [`load`], are here.

pub mod check;

mod expect;
mod parse;

use std::collections::BTreeMap;

use eve_discover::{Code, Diagnostic};
use serde::Serialize;
use serde_json::Value;

pub use check::{Failure, Observed, ObservedCall, check};
pub use parse::compile_evals;

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
    /// What the last turn's structured result (`result.completed`, asked for by the case's
    /// `output_schema`) must contain: mappings key by key, recursively; other values equal.
    pub result: Option<Value>,
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
    /// A JSON Schema every turn of the case asks its result to satisfy (`outputSchema`).
    pub output_schema: Option<Value>,
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
