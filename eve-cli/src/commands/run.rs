//! `eve run`: one prompt, streamed, then exit.
//!
//! Builds the agent (like `cargo run`), accepts the prompt into a session (new, or `--session`),
//! and drives it in this process: the reply streams to stdout, tool activity and reasoning to
//! stderr. An approval is a y/n prompt on a terminal, automatic with `--yes`, and otherwise stops
//! the run with [`EXIT_WAITING`] after saying how to answer. `--session ID` without a prompt
//! resumes that session's unfinished turn (after a crash, or after an approval was answered).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use eve_compile::Project;
use eve_compile::build;
use eve_compile::render::{Style, render_all};
use eve_runtime::engine::{DriveOutcome, Runtime, SettingsModelProvider};
use eve_runtime::env_vars::{EVE_HOOK_WAIT, EVE_MODEL};
use eve_runtime::store::InputRequestRecord;

use crate::cli::RunArgs;
use crate::project::{locate, source_reader};
use crate::render::{paint, plural, stderr_color};
use crate::sanitize::{Untrusted, errln};
use crate::term::{Printer, ask, compact};

/// Exit code of a run that stopped at an approval nobody could answer.
pub const EXIT_WAITING: u8 = 3;

/// How long `eve run` waits for its observe-hook deliveries before it exits, by default.
const DEFAULT_HOOK_WAIT: Duration = Duration::from_secs(10);

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.prompt.is_none() && args.session.is_none() && !args.last {
        anyhow::bail!("give a prompt (`eve run \"hello\"`), or `--session ID` to resume a session");
    }
    let hook_wait = hook_wait()?;
    let project = locate(&args.project)?;
    if !build_agent(&project)? {
        return Ok(ExitCode::FAILURE);
    }
    check_models(&project, args.model.model.as_deref())?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    tokio.block_on(run_async(args, project, hook_wait))
}

/// Builds the agent and hands the build to the runtime as a release (a build left pending or
/// refused leaves the active release current); prints diagnostics and returns `false` when it
/// has errors.
pub fn build_agent(project: &Project) -> anyhow::Result<bool> {
    let built = build::build_candidate(project)?;
    let color = stderr_color();
    if let Some(hash) = &built.hash {
        super::releases::release_quietly(project, hash)?;
        // Warnings do not stop a run; one line says they are there and where to read them.
        let warnings = built.output.diagnostics.len() - built.output.error_count();
        if warnings > 0 {
            errln!(
                "{} the agent built with {} (`eve build` shows them)",
                paint(color, "1;33", "warning:"),
                plural(warnings, "warning")
            );
        }
        return Ok(true);
    }
    errln!(
        "{}",
        render_all(
            &built.output.diagnostics,
            &source_reader(project),
            Style { color }
        )
    );
    errln!(
        "{} the agent has {}; fix them and run again",
        paint(color, "1;31", "error:"),
        plural(built.output.error_count(), "error")
    );
    Ok(false)
}

/// A runtime for one command in this process (no background drivers), on the process's model.
pub async fn open_runtime(project: &Project) -> anyhow::Result<Runtime> {
    super::open_runtime(project, None, false).await
}

/// How long `eve run` waits for its hook deliveries before it exits ([`EVE_HOOK_WAIT`]).
fn hook_wait() -> anyhow::Result<Duration> {
    let Some(value) = std::env::var(EVE_HOOK_WAIT)
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(DEFAULT_HOOK_WAIT);
    };
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.0..=86_400.0).contains(s))
        .map(Duration::from_secs_f64)
        .with_context(|| {
            format!(
                "{EVE_HOOK_WAIT}={value} is not a number of seconds: use for example 10, or 0 to \
                 exit without waiting for observe hooks"
            )
        })
}

async fn run_async(
    args: RunArgs,
    project: Project,
    hook_wait: Duration,
) -> anyhow::Result<ExitCode> {
    let runtime = super::open_runtime(&project, args.model.model.as_deref(), false).await?;
    super::serve::report_view(&runtime);
    let color = stderr_color();
    let code = drive_to_rest(&runtime, &args, &project, color).await;
    // The turn's events reach the hooks before the process (and the hooks it runs) ends.
    finish_hooks(&runtime, hook_wait, color).await;
    if let Some(telemetry) = runtime.telemetry().cloned() {
        // The turn's spans leave before the process does.
        let _ = tokio::task::spawn_blocking(move || telemetry.flush()).await;
    }
    code
}

/// Says what observe hooks did not get before the exit, and who delivers it.
async fn finish_hooks(runtime: &Runtime, wait: Duration, color: bool) {
    let backlog = runtime.finish_hooks(wait).await;
    if backlog.pending.is_empty() {
        return;
    }
    let reason = if backlog.cut {
        format!("the wait reached {EVE_HOOK_WAIT}={}s", wait.as_secs_f64())
    } else if !backlog.failed.is_empty() {
        "a hook did not acknowledge an event".to_owned()
    } else {
        "another eve process is delivering them".to_owned()
    };
    errln!(
        "{} {} not delivered to observe hooks before `eve run` exits ({reason}):",
        paint(color, "1;33", "warning:"),
        plural(backlog.pending.len(), "event")
    );
    const SHOWN: usize = 10;
    for p in backlog.pending.iter().take(SHOWN) {
        errln!(
            "  `{}` <- {} (session {}, event {})",
            Untrusted(&p.hook),
            p.kind,
            p.session,
            p.index
        );
    }
    if backlog.pending.len() > SHOWN {
        errln!("  … and {} more", backlog.pending.len() - SHOWN);
    }
    for (_, why) in &backlog.failed {
        errln!("  {}", Untrusted(why));
    }
    for (session, pid) in &backlog.elsewhere {
        errln!("  eve process {pid} is delivering the events of session {session}");
    }
    errln!(
        "a server on this store (`eve serve`, `eve dev`) delivers {}: at once when one is \
         running, else when one starts",
        if backlog.pending.len() == 1 {
            "it"
        } else {
            "them"
        }
    );
}

/// Drives the session of `args` until it rests (idle, failed, cancelled, or parked on an
/// approval nobody here answers); the exit code says which.
async fn drive_to_rest(
    runtime: &Runtime,
    args: &RunArgs,
    project: &Project,
    color: bool,
) -> anyhow::Result<ExitCode> {
    let wanted = super::sessions::wanted(args.session.as_deref(), args.last)?;
    let (id, from) = match wanted {
        Some(wanted) => {
            let id = super::sessions::resolve(runtime, project, wanted).await?;
            let session = runtime
                .session(&id)
                .await?
                .with_context(|| format!("no session `{id}` in {}", project.db_path().display()))?;
            if let Some(prompt) = &args.prompt {
                runtime.post_message(&id, prompt).await?;
            }
            (id, session.event_count)
        }
        None => {
            let prompt = args.prompt.clone().unwrap_or_default();
            (runtime.create_session(Some(prompt)).await?, 0)
        }
    };
    errln!("{}", paint(color, "2", &format!("session {id}")));
    let mut printer = Printer::new(args.json);
    if args.usage {
        printer.always_usage();
    }
    let mut follower = runtime.follow(&id, from);
    // Another process driving the session (an `eve serve`) is followed, and asked again after a
    // while: its events print as they are stored, and the run ends where the session rests.
    let mut elsewhere = Duration::ZERO;
    let mut warned = std::collections::HashSet::new();
    loop {
        let drive = {
            let runtime = runtime.clone();
            let id = id.clone();
            tokio::spawn(async move { runtime.drive(&id).await })
        };
        tokio::pin!(drive);
        let outcome = loop {
            tokio::select! {
                event = follower.next() => printer.event(&event?),
                done = &mut drive => break done.context("the session driver stopped")??,
            }
        };
        while let Some(event) = follower.try_next().await? {
            printer.event(&event);
        }
        printer.finish_line();
        warn_connections_down(runtime, project, &mut warned, color).await;
        match outcome {
            DriveOutcome::Idle => return Ok(ExitCode::SUCCESS),
            DriveOutcome::Cancelled => {
                errln!(
                    "{} the turn was cancelled",
                    paint(color, "1;33", "warning:")
                );
                return Ok(ExitCode::FAILURE);
            }
            DriveOutcome::Failed { code, message } => {
                // The message may quote the model or a tool.
                errln!(
                    "{} {} ({})",
                    paint(color, "1;31", "error:"),
                    Untrusted(&message),
                    Untrusted(&code)
                );
                return Ok(ExitCode::FAILURE);
            }
            DriveOutcome::Busy { pid } => {
                if elsewhere.is_zero() {
                    errln!(
                        "{}",
                        paint(
                            color,
                            "2",
                            &format!(
                                "session {id} is being driven by another eve process (pid {pid}); \
                                 following it"
                            )
                        )
                    );
                }
                elsewhere =
                    (elsewhere * 2).clamp(Duration::from_millis(100), Duration::from_secs(1));
                let wait = tokio::time::sleep(elsewhere);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        event = follower.next() => printer.event(&event?),
                        () = &mut wait => break,
                    }
                }
            }
            DriveOutcome::WaitingInput(requests) if requests.is_empty() => {
                // Parked on a timer (a `sleep`): this process wakes it when it is due. Its
                // events print meanwhile, and the session is asked again.
                let wait = tokio::time::sleep(Duration::from_millis(500));
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        event = follower.next() => printer.event(&event?),
                        () = &mut wait => break,
                    }
                }
            }
            DriveOutcome::WaitingInput(requests) => {
                if !answer_requests(runtime, &id, &requests, args.yes, color).await? {
                    return Ok(ExitCode::from(EXIT_WAITING));
                }
            }
        }
    }
}

/// Answers approvals with `--yes` or a terminal prompt; `false` when nobody can answer here.
async fn answer_requests(
    runtime: &Runtime,
    id: &str,
    requests: &[InputRequestRecord],
    yes: bool,
    color: bool,
) -> anyhow::Result<bool> {
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    // `--yes` approves tool calls, never a change to the agent itself: that is asked on a
    // terminal, or left parked for `eve sessions approve`.
    // Nor a fresh budget for a session that spent its own (`limits.max_tokens`, `max_cost_usd`).
    let change = requests.iter().any(|r| {
        r.kind == eve_runtime::engine::selfchange::REQUEST_KIND
            || r.kind == eve_runtime::engine::session_limit::REQUEST_KIND
    });
    if change && yes && !interactive {
        errln!(
            "{} `--yes` does not approve a proposed change to the agent or grant a fresh session budget",
            paint(color, "1;33", "note:")
        );
    }
    let yes = yes && !change;
    if !yes && !interactive {
        let budget = requests
            .iter()
            .all(|r| r.kind == eve_runtime::engine::session_limit::REQUEST_KIND);
        if budget {
            errln!(
                "{} the session reached its budget; it goes on when a principal answers:",
                paint(color, "1;33", "paused:")
            );
        } else {
            errln!(
                "{} {} waiting for approval:",
                paint(color, "1;33", "paused:"),
                plural(requests.len(), "tool call")
            );
        }
        for r in requests {
            if r.kind == eve_runtime::engine::session_limit::REQUEST_KIND {
                let key = if r.action["input"]["kind"] == "token-cost" {
                    "limits.max_cost_usd"
                } else {
                    "limits.max_tokens"
                };
                errln!("  {}  {} ({key})", r.id, Untrusted(&r.prompt));
                continue;
            }
            errln!(
                "  {}  {} {}",
                r.id,
                Untrusted(&r.tool_name),
                compact(&r.action["input"])
            );
        }
        errln!(
            "answer with `eve sessions approve {id}{}` (or `deny`), then continue with \
             `eve run --session {id}`",
            if requests.len() > 1 { " <REQUEST>" } else { "" }
        );
        return Ok(false);
    }
    for r in requests {
        let approve = if yes {
            errln!(
                "{} {} {}",
                paint(color, "1;32", "approved:"),
                Untrusted(&r.tool_name),
                compact(&r.action["input"])
            );
            true
        } else {
            let question = format!(
                "{} {} {} [y/N] ",
                paint(color, "1;33", "approve?"),
                Untrusted(&r.prompt),
                compact(&r.action["input"])
            );
            tokio::task::spawn_blocking(move || ask(&question)).await??
        };
        runtime.answer_input(id, Some(&r.id), approve, None).await?;
    }
    Ok(true)
}

/// The start-up check of `eve run`, `eve chat`, `eve serve` and `eve dev`: every agent of the
/// current build (the root and each subagent) must name a known provider and have what that
/// provider needs (an API key, unless a base URL points elsewhere; a base URL for
/// `openai-compatible`). A misconfigured model stops the command here, naming the variable to
/// set, instead of accepting messages that can never be answered.
pub fn check_models(project: &Project, model: Option<&str>) -> anyhow::Result<()> {
    let hash = build::current_hash(&project.state_dir).with_context(|| {
        format!(
            "no build in {}: run `eve build` first",
            project.state_dir.display()
        )
    })?;
    let loaded = build::load(&project.state_dir, &hash)?;
    let env = super::model_env(model);
    let provider = SettingsModelProvider::new(env.clone());
    check_agent_model(&provider, env(EVE_MODEL), &loaded.manifest.agent)
}

fn check_agent_model(
    provider: &SettingsModelProvider,
    chosen: Option<String>,
    agent: &eve_compile::Agent,
) -> anyhow::Result<()> {
    let source = match chosen.as_deref().map(str::trim) {
        // The flag takes the variable's value when it is not given.
        Some(v) if std::env::var(EVE_MODEL).is_ok_and(|e| e.trim() == v) => {
            format!("{EVE_MODEL}={v}")
        }
        Some(v) if !v.is_empty() => format!("--model {v}"),
        _ => match &agent.config.model {
            Some(m) => format!("`model: {m}` in {}/agent.yaml", agent_dir(agent)),
            None => "the default model".to_owned(),
        },
    };
    provider
        .settings(agent)
        .and_then(|s| s.validate())
        .map_err(|e| {
            anyhow::anyhow!(
                "the model of agent `{}` ({source}) cannot be used: {e}",
                agent.name
            )
        })?;
    for sub in &agent.subagents {
        check_agent_model(provider, chosen.clone(), sub)?;
    }
    Ok(())
}

fn agent_dir(agent: &eve_compile::Agent) -> String {
    if agent.path.is_empty() {
        "agent".to_owned()
    } else {
        format!("agent/{}", agent.path)
    }
}

/// Says on stderr, once per connection, that an MCP connection of the agent is down and why (the
/// model was told too, in the failed call's result).
pub(crate) async fn warn_connections_down(
    runtime: &Runtime,
    project: &Project,
    warned: &mut std::collections::HashSet<String>,
    color: bool,
) {
    for (name, source, why) in runtime.connections_down().await {
        if warned.insert(name.clone()) {
            errln!(
                "{} the MCP connection `{name}` ({}{source}) is down: {}",
                paint(color, "1;33", "warning:"),
                project.display_prefix(),
                // What the server said on its way down.
                Untrusted(&why)
            );
        }
    }
}
