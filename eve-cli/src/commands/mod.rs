//! One module per command. Each returns the process exit code.

mod acp;
mod build;
mod chat;
mod connections;
mod dev;
mod dev_lines;
mod eval;
mod info;
mod init;
mod logs;
mod memory;
mod releases;
mod run;
mod serve;
mod sessions;
mod set;
mod store;
mod traces;

use std::process::ExitCode;
use std::sync::Arc;

use eve_compile::Project;
use eve_runtime::engine::{Runtime, SettingsModelProvider};
use eve_runtime::env_vars::EVE_MODEL;
use eve_runtime::tools::{EnvLookup, process_env};

use crate::cli::{
    Cli, Command, ConnectionsCommand, MemoryCommand, SessionsCommand, SetCommand, StoreCommand,
};

/// Runs a parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        // `eve -C DIR init NAME` creates DIR/NAME, as the other commands run in DIR; the other
        // commands read the flags from their own (flattened, global) copy.
        Command::Init(args) => init::run(args, cli.project.project),
        Command::Info(args) => info::run(args),
        Command::Build(args) => build::run(args),
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Completions(args) => completions(args.shell),
        Command::Sessions(args) => match args.command {
            None => sessions::list(args.list),
            Some(SessionsCommand::List(args)) => sessions::list(args),
            Some(SessionsCommand::Show(args)) => sessions::show(args),
            Some(SessionsCommand::Approve(args)) => sessions::answer(args, true),
            Some(SessionsCommand::Deny(args)) => sessions::answer(args, false),
            Some(SessionsCommand::Cancel(args)) => sessions::cancel(args),
            Some(SessionsCommand::Prune(args)) => sessions::prune(args),
        },
        Command::Releases(args) => releases::releases(args),
        Command::Activate(args) => releases::activate(args),
        Command::Rollback(args) => releases::rollback(args),
        Command::Memory(args) => match args.command {
            None => memory::show(args.show),
            Some(MemoryCommand::Show(args)) => memory::show(args),
            Some(MemoryCommand::Edit(args)) => memory::edit(args),
            Some(MemoryCommand::Clear(args)) => memory::clear(args),
        },
        Command::Connections(ConnectionsCommand::List(args)) => connections::list(args),
        Command::Connections(ConnectionsCommand::Login(args)) => connections::login(args),
        Command::Connections(ConnectionsCommand::Logout(args)) => connections::logout(args),
        Command::Store(StoreCommand::Migrate(args)) => store::migrate(args),
        Command::Store(StoreCommand::Check(args)) => store::check(args),
        Command::Logs(args) => logs::run(args),
        Command::Traces(args) => traces::run(args),
        Command::Acp(args) => acp::run(args),
        Command::Set(SetCommand::Model(args)) => set::model(args),
    }
}

/// Runs `future` on a runtime of its own: the commands that only read or write the store
/// (`sessions`, `memory`) open it and do their work inside one call, so a pooled store
/// (PostgreSQL) lives and dies on the runtime that made its connections.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> anyhow::Result<F::Output> {
    use anyhow::Context;
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future))
}

/// `eve completions SHELL`: the script on stdout. A reader that goes away (`| head`) ends it
/// quietly with 141, as a SIGPIPE death would (`crate::quiet_broken_pipe`).
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "eve", &mut script);
    crate::sanitize::out!("{}", String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}

/// The environment models are resolved from: the process's, with `--model` as `EVE_MODEL`.
pub(crate) fn model_env(model: Option<&str>) -> EnvLookup {
    let env = process_env();
    match model.map(str::trim).filter(|m| !m.is_empty()) {
        Some(model) => {
            let model = model.to_owned();
            Arc::new(move |name: &str| {
                if name == EVE_MODEL {
                    Some(model.clone())
                } else {
                    env(name)
                }
            })
        }
        None => env,
    }
}

/// Tracing as the `OTEL_*` and `EVE_TRACES_*` variables set it up (the local trace store in
/// `.eve/traces.db` unless `EVE_TRACES=off`; OTLP export when an endpoint is set).
fn telemetry(project: &Project) -> anyhow::Result<Option<Arc<eve_runtime::telemetry::Telemetry>>> {
    let env = |name: &str| std::env::var(name).ok();
    let Some(config) = eve_runtime::telemetry::TelemetryConfig::from_env(&env, &project.state_dir)
        .map_err(anyhow::Error::msg)?
    else {
        return Ok(None);
    };
    let telemetry = eve_runtime::telemetry::Telemetry::new(config, crate::logs::secrets())
        .map_err(anyhow::Error::msg)?;
    Ok(Some(telemetry))
}

/// The project's runtime in this process on its store: models from [`model_env`], tools with
/// the process environment and the logs' secrets, `propose_change` writing this project's agent
/// folder behind the release gate. `autostart` runs drivers in the background (a server, a
/// chat); without it the command drives the sessions it works on.
pub(crate) async fn open_runtime(
    project: &Project,
    model: Option<&str>,
    autostart: bool,
) -> anyhow::Result<Runtime> {
    let models = Arc::new(SettingsModelProvider::new(model_env(model)));
    open_runtime_with(project, models, autostart).await
}

/// [`open_runtime`] with the model provider given (chat's, which switches models per session).
pub(crate) async fn open_runtime_with(
    project: &Project,
    models: Arc<dyn eve_runtime::engine::ModelProvider>,
    autostart: bool,
) -> anyhow::Result<Runtime> {
    let mut config = crate::project::runtime_config(project, models).await?;
    config.env = process_env();
    config.secrets = crate::logs::secrets();
    config.autostart = autostart;
    let runtime = Runtime::new(config);
    if let Some(telemetry) = telemetry(project)? {
        runtime.set_telemetry(telemetry);
    }
    runtime.set_agent_dir(&project.agent_dir);
    releases::install_gate(&runtime, project);
    Ok(runtime)
}
