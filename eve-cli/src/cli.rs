//! Command-line interface definition: every `eve` subcommand and flag, and nothing else.
//!
//! Behaviour lives in `commands/` (one file per command) and in the library crates.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use eve_runtime::env_vars;

/// eve: durable AI agents from a folder.
///
/// An agent is a folder: `agent/instructions.md` is the prompt; `tools/`, `skills/`, `subagents/`,
/// `schedules/`, `hooks/`, `connections/`, `channels/` and `sandbox/` hold the rest.
#[derive(Debug, Parser)]
#[command(
    name = "eve",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Accepted before the command too (`eve -C demo build`, as git and make take `-C`); clap
    /// hands the values to the command's own copy of these flags, which is what commands read.
    #[command(flatten)]
    pub project: ProjectArgs,
}

/// The exit codes, as `eve --help` lists them (`docs/cli.md`, "Exit codes").
const EXIT_CODES: &str = "\
Exit codes:
  0    success
  1    the agent folder has errors, or a turn of `eve run` failed or was cancelled
  2    a usage or environment error (unknown flag, no agent folder, a port in use, an unset
       secret, an unknown or ambiguous session, a server `eve chat --url` cannot reach)
  3    `eve run` stopped at an approval nobody could answer
  130  a second SIGTERM or Ctrl-C stopped `eve serve`/`eve dev` at once";

/// Where the project and its agent folder are.
#[derive(Debug, Clone, Args)]
pub struct ProjectArgs {
    /// Project folder (holds `agent/` and `.eve/`). Defaults to the current folder.
    #[arg(
        long,
        short = 'C',
        global = true,
        value_name = "DIR",
        env = env_vars::EVE_PROJECT
    )]
    pub project: Option<PathBuf>,
    /// A workspace member's name (`agents/NAME/`), or the agent folder if not `<project>/agent`.
    #[arg(long, global = true, value_name = "NAME|DIR", env = env_vars::EVE_AGENT)]
    pub agent: Option<PathBuf>,
    /// Store: `postgres://user:password@host/db` (a fleet's shared PostgreSQL) or a SQLite file.
    /// Defaults to `<project>/.eve/eve.db`.
    #[arg(long, global = true, value_name = "URL", env = env_vars::EVE_STORE, hide_env_values = true)]
    pub store: Option<String>,
}

/// Which model this process runs the agent on.
#[derive(Debug, Clone, Default, Args)]
pub struct ModelArgs {
    /// Model for this process (`provider/name`, e.g. `ollama/llama3.2`), over `agent.yaml`'s
    /// `model:` for the agent and its subagents.
    #[arg(long, short = 'm', value_name = "PROVIDER/NAME", env = env_vars::EVE_MODEL)]
    pub model: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scaffold a new agent project from a template.
    Init(InitArgs),
    /// Show what is in the agent folder: tools, skills, subagents, schedules, connections, channels.
    Info(InfoArgs),
    /// Discover and compile the agent into `.eve/builds/<hash>/`, and hand it to the runtime as a
    /// release (activated, pending review, or refused by the gate).
    Build(BuildArgs),
    /// Run one prompt against the agent and stream the reply.
    Run(RunArgs),
    /// Serve the session API (`/eve/v1`) from the current build until SIGTERM or Ctrl-C.
    #[command(visible_alias = "start")]
    Serve(ServeArgs),
    /// Build, serve, and rebuild on every change to the agent folder (dev mode).
    Dev(DevArgs),
    /// Talk to the agent in the terminal (in this process, or with a server via `--url`).
    Chat(ChatArgs),
    /// List, inspect and answer sessions in the local store (without a subcommand: the list).
    Sessions(SessionsArgs),
    /// Show, edit and clear the notes the agent keeps with its `memory` tool (without a
    /// subcommand: every note).
    Memory(MemoryArgs),
    /// Authorize, list and log out of the OAuth MCP connections (`connections/NAME.yaml` with
    /// `oauth:`).
    #[command(subcommand)]
    Connections(ConnectionsCommand),
    /// Run the eval cases in `evals/` against the current agent and report what passed.
    Eval(EvalArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(CompletionsArgs),
    /// List releases, show one, compare two, or read their audit log.
    Releases(ReleasesArgs),
    /// Make a release (or a build, by hash) the active one, at once, in running servers too.
    Activate(ActivateArgs),
    /// Make an earlier release active again (default: the one before the active release).
    Rollback(RollbackArgs),
    /// Check a project's store in full, or move it to another backend.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Show the log `eve dev` writes (`.eve/logs/dev.log`), or one session's lines of it.
    Logs(LogsArgs),
    /// List the traces in the local trace store, or show one as a tree of its spans (without a
    /// subcommand: the list).
    Traces(TracesArgs),
    /// Serve the agent over the Agent Client Protocol on stdio, for editors (in this process, or
    /// with a server via `--url`).
    Acp(AcpArgs),
    /// Change the agent's settings in `agent.yaml`, keeping its comments and layout.
    #[command(subcommand)]
    Set(SetCommand),
}

#[derive(Debug, Subcommand)]
pub enum SetCommand {
    /// Set the model (and its reasoning effort) in `agent.yaml`; without an ID, show the model in
    /// force and list the models eve knows.
    Model(SetModelArgs),
}

#[derive(Debug, Args)]
pub struct SetModelArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// The model, `provider/name` (e.g. `openai/gpt-4.1`).
    #[arg(value_name = "PROVIDER/NAME")]
    pub id: Option<String>,
    /// Reasoning effort for models that support it.
    #[arg(long, value_name = "LEVEL", value_parser = ["low", "medium", "high"])]
    pub reasoning: Option<String>,
    /// Without an ID: print the model in force and the known models as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `eve acp`: the agent over ACP (JSON-RPC 2.0 on stdin and stdout).
#[derive(Debug, Args)]
pub struct AcpArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Serve a running server's agent (`http://127.0.0.1:3000`) instead of running it here; the
    /// bearer token, when the server wants one, is read from `EVE_TOKEN`.
    #[arg(long, env = env_vars::EVE_URL)]
    pub url: Option<String>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Only the lines of this session (an id, or the start of one).
    #[arg(long, short = 's', value_name = "ID")]
    pub session: Option<String>,
    /// Keep printing lines as they are written (until Ctrl-C).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print each line as the JSON object it is stored as.
    #[arg(long)]
    pub json: bool,
}

/// `eve traces`: without a subcommand, the list.
#[derive(Debug, Args)]
pub struct TracesArgs {
    #[command(subcommand)]
    pub command: Option<TracesCommand>,
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum TracesCommand {
    /// The newest traces, newest first.
    List(TracesListArgs),
    /// One trace: its spans as a tree, with their times and attributes.
    Show(TracesShowArgs),
}

#[derive(Debug, Default, Args)]
pub struct TracesListArgs {
    /// How many traces.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: u64,
    /// Only the traces of this session.
    #[arg(long)]
    pub session: Option<String>,
}

#[derive(Debug, Args)]
pub struct TracesShowArgs {
    /// Trace id, or a prefix of at least 8 characters.
    pub id: String,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `eve releases`: without a subcommand, the list.
#[derive(Debug, Args)]
pub struct ReleasesArgs {
    #[command(subcommand)]
    pub command: Option<ReleasesCommand>,
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ReleasesCommand {
    /// Every release, newest last, with its status and delta summary.
    List,
    /// One release: build, source, checks, the capability delta.
    Show {
        /// Release id (or a unique prefix), or a build hash.
        id: String,
    },
    /// The capability delta from release A to release B.
    Diff {
        /// The release compared from.
        a: String,
        /// The release compared to.
        b: String,
    },
    /// The audit events of releases (and proposed changes), oldest first.
    Log {
        /// Keep printing events as they happen.
        #[arg(long)]
        follow: bool,
    },
}

#[derive(Debug, Args)]
pub struct ActivateArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Release id (or a unique prefix), or a build hash (or a unique prefix of one).
    pub target: String,
    /// Activate a release the gate refused (recorded as forced).
    #[arg(long)]
    pub force: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// The release to go back to (default: the one active before the active release).
    pub id: Option<String>,
    /// Why, recorded with the rollback.
    #[arg(long, default_value = "rolled back by hand")]
    pub reason: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every row of a SQLite store into PostgreSQL (idempotent: a second run copies
    /// nothing), then compare counts per table and spot-check rows.
    Migrate(StoreMigrateArgs),
    /// Check the store in full: SQLite's integrity_check (PostgreSQL's amcheck where installed)
    /// and eve's consistency checks. Exit 0 when nothing is wrong, 1 otherwise.
    Check(StoreCheckArgs),
}

#[derive(Debug, Args)]
pub struct StoreCheckArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StoreMigrateArgs {
    /// The SQLite store to copy from (a project's `.eve/eve.db`).
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// The PostgreSQL store to copy into (`postgres://user:password@host/db`).
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConnectionsCommand {
    /// Every connection with `oauth:` and its authorization (authorized, expires, scopes).
    List(ConnectionsListArgs),
    /// Run the authorization code flow for an app-scoped connection and store its token.
    Login(ConnectionNameArgs),
    /// Remove a connection's stored token.
    Logout(ConnectionLogoutArgs),
}

#[derive(Debug, Args)]
pub struct ConnectionLogoutArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// The connection (`connections/NAME.yaml`).
    pub name: String,
    /// For `credentials: user`: the principal whose token goes (`jwt:alice`).
    #[arg(long)]
    pub principal: Option<String>,
}

#[derive(Debug, Args)]
pub struct ConnectionsListArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ConnectionNameArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// The connection (`connections/NAME.yaml`).
    pub name: String,
}

/// `eve memory`: without a subcommand, `show` (its flags apply).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MemoryArgs {
    #[command(subcommand)]
    pub command: Option<MemoryCommand>,
    #[command(flatten)]
    pub show: MemoryShowArgs,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Print the notes of every scope (or of one).
    Show(MemoryShowArgs),
    /// Add, replace or remove one note.
    Edit(MemoryEditArgs),
    /// Remove every note of one scope.
    Clear(MemoryTargetArgs),
}

#[derive(Debug, Args)]
pub struct MemoryTargetArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// `agent` (default), `user` or `session`.
    #[arg(long, value_parser = ["agent", "user", "session"])]
    pub scope: Option<String>,
    /// The user of the `user` scope: a principal (`token:NAME`, `basic:USER`, `jwt:SUB`) or a
    /// channel identity (`slack:U123`, `telegram:42`, `discord:…`).
    #[arg(long)]
    pub user: Option<String>,
    /// The session of the `session` scope.
    #[arg(long)]
    pub session: Option<String>,
}

#[derive(Debug, Args)]
pub struct MemoryShowArgs {
    #[command(flatten)]
    pub target: MemoryTargetArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[group(id = "change", required = true, multiple = false)]
pub struct MemoryEditArgs {
    #[command(flatten)]
    pub target: MemoryTargetArgs,
    /// Add a note with this text.
    #[arg(long, group = "change")]
    pub add: Option<String>,
    /// Replace the note with this id (with `--text`).
    #[arg(long, group = "change", requires = "text")]
    pub replace: Option<String>,
    /// The new text of the note `--replace` names.
    #[arg(long)]
    pub text: Option<String>,
    /// Remove the note with this id.
    #[arg(long, group = "change")]
    pub remove: Option<String>,
}

/// `eve eval`: the cases of `evals/*.yaml`, each in a fresh session on a private store.
///
/// Exit status: 0 every selected case passed, 1 a case failed, 2 the suite could not run
/// (eval files or the agent have errors, an unknown id, a model or judge that cannot be used).
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  eve eval                      run every case\n  eve eval weather --tag smoke  cases of evals/weather.yaml tagged smoke\n  eve eval --junit report.xml   also write JUnit XML (for CI)\n  eve eval --url http://127.0.0.1:3000   against a running server\n\nCases are described in docs/evals.md."
)]
pub struct EvalArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Case ids to run (an id, or a file's prefix such as `weather` for all its cases).
    #[arg(value_name = "IDS")]
    pub ids: Vec<String>,
    /// Run only cases with this tag (repeatable: any of them).
    #[arg(long, value_name = "T")]
    pub tag: Vec<String>,
    /// Leave out cases with this tag (repeatable).
    #[arg(long, value_name = "T")]
    pub exclude_tag: Vec<String>,
    /// Run against a running server (`http://127.0.0.1:3000`) instead of in this process. Its
    /// own model answers: cases' `mock` and `model` are not used.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Bearer token for `--url`.
    #[arg(long, env = env_vars::EVE_TOKEN, hide_env_values = true)]
    pub token: Option<String>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Cases run at once (default: 8).
    #[arg(long, short = 'j', value_name = "N", default_value_t = 8)]
    pub max_concurrency: usize,
    /// List the selected cases and exit without running them.
    #[arg(long)]
    pub list: bool,
    /// The judge model for `expect.judge` (`provider/name`), if not the case's own `model:`.
    #[arg(long, value_name = "MODEL", env = env_vars::EVE_JUDGE_MODEL)]
    pub judge_model: Option<String>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Folder to create (default: the current folder).
    pub dir: Option<PathBuf>,
    /// Template to scaffold from.
    #[arg(long, short, default_value = "default")]
    pub template: String,
    /// List the available templates and exit.
    #[arg(long)]
    pub list: bool,
    /// Write into a folder that is not empty (existing files are kept unless they clash).
    #[arg(long)]
    pub force: bool,
    /// With `--list`: print the templates as JSON (`[{name, description}]`).
    #[arg(long, requires = "list")]
    pub json: bool,
    /// The agent's model, written to `agent/agent.yaml` (`provider/name`, e.g. `openai/gpt-4.1`).
    #[arg(long, value_name = "PROVIDER/NAME", conflicts_with = "list")]
    pub model: Option<String>,
    /// The model's reasoning effort, written to `agent/agent.yaml`.
    #[arg(long, value_name = "LEVEL", value_parser = ["low", "medium", "high"], conflicts_with = "list")]
    pub reasoning: Option<String>,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Print JSON (the manifest and diagnostics) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Print the diagnostics and build summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Activate even if the gate's evals fail (recorded as forced).
    #[arg(long)]
    pub force: bool,
    /// Also write the build into the store (`--store`), so every node of a fleet can run it.
    #[arg(long)]
    pub publish: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt. Omit it with `--session` to resume that session's unfinished turn.
    pub prompt: Option<String>,
    /// Continue this session (an id, or a unique prefix of one) instead of starting a new one.
    #[arg(long, short)]
    pub session: Option<String>,
    /// Continue the session active most recently.
    #[arg(long, short = 'c', conflicts_with = "session")]
    pub last: bool,
    /// Approve every tool call that asks for approval.
    #[arg(long, short)]
    pub yes: bool,
    /// Print events as JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print the usage line after each turn even when stderr is not a terminal.
    #[arg(long)]
    pub usage: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, short, env = env_vars::PORT, default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on. Without `auth:` in `agent/channels/eve.yaml` only loopback is allowed.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Also serve the web console at `/` (its API calls need the channel's credentials).
    #[arg(long)]
    pub console: bool,
    /// Once listening, print one JSON line on stdout: `{"event":"ready","url",…,"port",…}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, short, env = env_vars::PORT, default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on. Without `auth:` in `agent/channels/eve.yaml` only loopback is allowed.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Once listening, print one JSON line on stdout: `{"event":"ready","url",…,"port",…}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Talk to a running server (`http://127.0.0.1:3000`) instead of running the agent here.
    #[arg(long, env = env_vars::EVE_URL)]
    pub url: Option<String>,
    /// Bearer token for `--url` (sent as `Authorization: Bearer TOKEN`).
    #[arg(long, env = env_vars::EVE_TOKEN, hide_env_values = true)]
    pub token: Option<String>,
    /// Continue this session (an id, or a unique prefix of one) instead of starting a new one.
    #[arg(long, short)]
    pub session: Option<String>,
    /// Continue the session active most recently.
    #[arg(long, short = 'c', conflicts_with = "session")]
    pub last: bool,
    /// Print the usage line after each turn even when stderr is not a terminal.
    #[arg(long)]
    pub usage: bool,
}

/// `eve sessions`: without a subcommand, `list` (its flags apply).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
    #[command(flatten)]
    pub list: SessionsListArgs,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List(SessionsListArgs),
    /// Show one session: its messages, tool calls with their outputs, failed turns and pending
    /// approvals.
    Show(SessionsShowArgs),
    /// Approve a pending tool call.
    Approve(SessionsAnswerArgs),
    /// Deny a pending tool call.
    Deny(SessionsAnswerArgs),
    /// Cancel the running or parked turn of a session.
    Cancel(SessionsCancelArgs),
    /// Delete idle sessions not active for a while, with their subagent sessions, events and
    /// workspaces.
    Prune(SessionsPruneArgs),
}

#[derive(Debug, Args)]
pub struct SessionsPruneArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Delete idle sessions last active longer ago than this: `30d`, `12h`, `45m`, `90s`, `2w`.
    /// Running and waiting sessions, sessions another process drives and sessions with a message
    /// waiting are kept.
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub older_than: std::time::Duration,
    /// Print the deleted session ids as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `30d`, `12h`, `45m`, `90s`, `2w` as a duration.
fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: use a number and a unit, such as 30d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "`{text}` has no known unit: use s, m, h, d or w (such as 30d)"
            ));
        }
    };
    Ok(std::time::Duration::from_secs(n.saturating_mul(seconds)))
}

#[derive(Debug, Args)]
pub struct SessionsListArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Only sessions started by this schedule.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Only sessions in this status: idle, running, waiting or failed.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// At most this many sessions.
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SessionsShowArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Session id, or a unique prefix of one.
    pub id: Option<String>,
    /// The session active most recently.
    #[arg(long, short = 'c')]
    pub last: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SessionsAnswerArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Session id, or a unique prefix of one.
    pub session: Option<String>,
    /// Input request id (default: the session's only pending request).
    pub request: Option<String>,
    /// The session active most recently.
    #[arg(long, short = 'c')]
    pub last: bool,
    /// Reason, passed to the model.
    #[arg(long, short)]
    pub reason: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SessionsCancelArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Session id, or a unique prefix of one.
    pub id: Option<String>,
    /// The session active most recently.
    #[arg(long, short = 'c')]
    pub last: bool,
}
