//! Diagnostics: the data every stage of `eve build` reports problems with.
//!
//! A diagnostic is data first (code, severity, file, position, message, help); renderers for people
//! (source snippets) and machines (JSON) are built on top of it elsewhere. It lives in the lowest crate
//! so discovery and compilation share one type.

use serde::Serialize;

/// How bad a diagnostic is. Errors fail the build; warnings are printed and the build goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The build fails.
    Error,
    /// Printed; the build still succeeds.
    Warning,
    /// Says what the build did with something that might surprise (a built-in replaced).
    Note,
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $sev:ident, $title:literal; )*) => {
        /// Every diagnostic code `eve build` can emit. Codes are stable: scripts may match on them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// All codes, in order (for documentation and tests).
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable code string, such as `E020`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }

            /// The default severity of this code.
            pub fn severity(self) -> Severity {
                match self { $(Code::$variant => Severity::$sev,)* }
            }

            /// A short title naming the class of problem.
            pub fn title(self) -> &'static str {
                match self { $(Code::$variant => $title,)* }
            }
        }
    };
}

codes! {
    /// The root agent has no `instructions.md`.
    MissingInstructions = "E001", Error, "missing instructions";
    /// A file or folder could not be read.
    Unreadable = "E002", Error, "unreadable file";
    /// A file that must be text is not valid UTF-8.
    NotUtf8 = "E003", Error, "file is not UTF-8";
    /// A symlink points outside the agent folder, nowhere, or back at a folder containing it.
    SymlinkEscape = "E004", Error, "symlink leaves the agent folder";
    /// A name does not match `^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`.
    InvalidName = "E005", Error, "invalid name";
    /// A name is reserved by eve (`eve`, `eve__*`, `load_skill`, built-in tools).
    ReservedName = "E006", Error, "reserved name";
    /// Two things claim the same name.
    NameCollision = "E007", Error, "name collision";
    /// Folders nest deeper than eve follows.
    TooDeep = "E008", Error, "folder nesting too deep";
    /// YAML (a file or front matter) does not parse.
    YamlSyntax = "E010", Error, "YAML syntax error";
    /// A field has the wrong type or an invalid value.
    InvalidField = "E011", Error, "invalid field";
    /// A required field is missing.
    MissingField = "E012", Error, "missing field";
    /// Front matter is opened but never closed.
    UnterminatedFrontMatter = "E013", Error, "unterminated front matter";
    /// A tool input schema is not a valid JSON Schema, or not an object schema.
    InvalidSchema = "E020", Error, "invalid JSON Schema";
    /// A YAML tool has neither or both of `run:` and `http:`.
    ToolRunner = "E021", Error, "tool has no single runner";
    /// A script is neither executable nor of a type eve knows an interpreter for.
    NotRunnable = "E022", Error, "script cannot be run";
    /// A cron expression does not parse.
    InvalidCron = "E030", Error, "invalid cron expression";
    /// A time zone name is unknown.
    InvalidTimezone = "E031", Error, "unknown time zone";
    /// A subagent has no `description` in its `agent.yaml`.
    MissingDescription = "E040", Error, "subagent without description";
    /// A remote agent (`subagents/NAME.yaml`) has a bad `url`, a secret written in the file, or
    /// a malformed `${VAR}` reference.
    InvalidRemoteAgent = "E041", Error, "invalid remote agent";
    /// A hook names an event eve does not emit.
    UnknownEvent = "E050", Error, "unknown hook event";
    /// A connection is none of stdio (`command`), HTTP (`url`) and OpenAPI (`openapi`), or more
    /// than one.
    InvalidConnection = "E060", Error, "invalid connection";
    /// An OpenAPI connection's document does not parse, is not OpenAPI 3.0/3.1, cannot be read
    /// from the agent folder, or yields an operation eve cannot offer as a tool.
    InvalidOpenApi = "E061", Error, "invalid OpenAPI document";
    /// A channel is of an unknown kind or lacks what its kind needs.
    InvalidChannel = "E070", Error, "invalid channel";
    /// `operators:` of `channels/eve.yaml` names a principal that cannot be (an unknown kind, a
    /// token or user the API does not accept, JWT claims without JWT auth), or sits in another
    /// channel's file.
    InvalidOperators = "E071", Error, "invalid operators";
    /// A sandbox setting is wrong: provider, network entry, path, size or count.
    InvalidSandbox = "E080", Error, "invalid sandbox setting";
    /// `model:` names a provider eve has no client for.
    UnknownProvider = "E090", Error, "unknown model provider";
    /// An eval case file is not one case or a list of cases, or a case is not a mapping.
    EvalShape = "E100", Error, "invalid eval case file";
    /// An eval case has no user message to send.
    EvalMessages = "E101", Error, "eval case without messages";
    /// An expectation of an eval case is malformed (unknown kind, wrong type, bad regex).
    EvalExpect = "E102", Error, "invalid eval expectation";
    /// Two eval cases have the same id.
    EvalDuplicateId = "E103", Error, "duplicate eval case id";
    /// An eval case's `mock` is not a mock-model script.
    EvalMock = "E104", Error, "invalid eval mock script";
    /// Importing a TypeScript or JavaScript module threw (or Node could not evaluate it).
    ModuleThrows = "E110", Error, "module throws at import";
    /// A `defineTool` module has no `inputSchema`.
    ModuleNoInputSchema = "E111", Error, "tool without inputSchema";
    /// A module's default export is not the definition its folder expects.
    ModuleNotDefinition = "E112", Error, "default export is not a definition";
    /// A module's definition uses something eve (Rust) does not take (a custom approval policy, an
    /// `endsTurn` function, a schema that cannot give its JSON Schema).
    ModuleUnfit = "E113", Error, "definition eve cannot take";
    /// Node is missing or too old to evaluate the folder's modules.
    NodeUnfit = "E114", Error, "Node missing or too old";
    /// A channel written in TypeScript (`channels/*.ts`).
    TypeScriptChannel = "E121", Error, "TypeScript channel";
    /// A sandbox provider (`sandbox.ts`, `defineSandbox`).
    SandboxProvider = "E122", Error, "sandbox provider";
    /// A workflow tool (`defineWorkflowTool`).
    WorkflowTool = "E123", Error, "workflow tool";
    /// An `extensions/` folder.
    Extension = "E124", Error, "extension";
    /// One of eve's Vercel-specific helpers (`eve/vercel`, `eve/next`, `VercelSandbox`,
    /// `vercelOidc`, `defineWorkspaceAgent`, …).
    VercelHelper = "E125", Error, "Vercel-specific helper";
    /// A `state:` slot of `agent.yaml` is malformed (a reserved or invalid name, an `initial`
    /// value over its cap, an unknown field), or a tool's input takes the reserved `$state` key.
    InvalidState = "E130", Error, "invalid state declaration";
    /// A file or folder eve does not understand.
    UnknownEntry = "W001", Warning, "unknown file or folder";
    /// A field eve does not know (probably a typo).
    UnknownField = "W002", Warning, "unknown field";
    /// Instructions are empty.
    EmptyInstructions = "W003", Warning, "empty instructions";
    /// A tool or skill has no description, so the model cannot know when to use it.
    MissingToolDescription = "W004", Warning, "no description";
    /// A tool, hook or agent runs with `sandbox: host` (unconfined), or says `provider: local`.
    Unconfined = "W010", Warning, "runs unconfined";
    /// A tool, hook or connection reaches more of the network than the agent's default.
    NetworkWidened = "W011", Warning, "network wider than the agent's";
    /// A script's interpreter is not on `PATH`, or too old for the script (Node for `.ts`).
    InterpreterUnfit = "W012", Warning, "interpreter missing or too old";
    /// An OpenAPI connection's document named by URL could not be fetched: the copy an earlier
    /// build fetched is used.
    OpenApiStale = "W013", Warning, "OpenAPI document not fetched";
    /// An authored tool takes the name of a built-in tool the agent is offered, and replaces it.
    BuiltinReplaced = "N001", Note, "built-in tool replaced";
    /// `default_tools` turns on a built-in that its settings leave off (`web_search` without a
    /// provider in `web.search`).
    BuiltinUnset = "N002", Note, "built-in tool needs a setting";
    /// A file in `evals/` that is not an eval case file.
    UnknownEvalEntry = "W100", Warning, "not an eval case file";
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found in an agent folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable code, such as `E020`.
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// The file (or folder) concerned, relative to the project; `None` for the folder as a whole.
    pub file: Option<String>,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// 1-based column, when known.
    pub column: Option<u32>,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with the code's default severity and no position.
    pub fn new(code: Code, file: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        Self {
            code,
            severity: code.severity(),
            file: file.into(),
            line: None,
            column: None,
            message: message.into(),
            help: None,
        }
    }

    /// Sets the 1-based line and column.
    #[must_use]
    pub fn at(mut self, line: u32, column: u32) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// Sets the help text.
    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Counts errors in a list of diagnostics.
pub fn error_count(diags: &[Diagnostic]) -> usize {
    diags.iter().filter(|d| d.is_error()).count()
}
