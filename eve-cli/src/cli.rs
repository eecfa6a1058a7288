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
    /// Agent folder, if not `<project>/agent`.
    #[arg(long, global = true, value_name = "DIR", env = env_vars::EVE_AGENT)]
    pub agent: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scaffold a new agent project from a template.
    Init(InitArgs),
    /// Show what is in the agent folder: tools, skills, subagents, schedules, connections, channels.
    Info(InfoArgs),
    /// Discover and compile the agent into `.eve/builds/<hash>/` and point `.eve/current` at it.
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
    /// List, inspect and answer sessions in the local store.
    #[command(subcommand)]
    Sessions(SessionsCommand),
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
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
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
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, short, env = env_vars::PORT, default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on. Without `auth:` in `agent/channels/eve.yaml` only loopback is allowed.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Also serve the web console at `/` (its API calls need the channel's credentials).
    #[arg(long)]
    pub console: bool,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, short, env = env_vars::PORT, default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on. Without `auth:` in `agent/channels/eve.yaml` only loopback is allowed.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub project: ProjectArgs,
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
