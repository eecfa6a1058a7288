//! `eve dev`: build, serve, and rebuild on every change to the agent folder.
//!
//! The server is `eve serve`'s, in dev mode (it also answers `POST /eve/v1/dev/schedules/:id`).
//! A watcher (notify, debounced) reports changes under the agent folder; each batch rebuilds in
//! place. A good build is written and `.eve/current` is swapped to it atomically: `/info`, new
//! sessions and idle sessions' next messages use it at once, while a turn already running finishes
//! on the build it started on. The channel settings (auth, CORS, body limit) are reloaded with it.
//! A build with errors changes nothing: the last good build keeps serving and the diagnostics are
//! printed as `eve build` prints them, and kept (`DevBuild`) for the console, whose agent view
//! shows them until a rebuild succeeds. Every rebuild prints the file that caused it and one line
//! of result; every turn, tool call, approval and schedule fire of its sessions prints one line
//! too (`dev_lines`). The web console is served at `/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use eve_compile::Project;
use eve_compile::build::{self, Built};
use eve_compile::render::{Style, render_all};
use eve_runtime::releases::ReleaseOutcome;
use eve_runtime::schedule::{Scheduler, clock_from_env};
use eve_runtime::server::{self, DevBuild, ReloadableRouter, RouterOptions, ServerConfig};
use notify_debouncer_full::notify::event::{AccessKind, AccessMode};
use notify_debouncer_full::notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::serve::{CLOSE_DEADLINE, DRAIN_DEADLINE, drain, watch_signals};
use crate::cli::DevArgs;
use crate::project::{locate, source_reader};
use crate::render::{duration, paint, plural, stderr_color};
use crate::sanitize::errln;

/// How long the watcher waits for a burst of changes (an editor's save, a `git checkout`) to end.
const DEBOUNCE: Duration = Duration::from_millis(50);

pub fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    crate::logs::init(
        crate::logs::DEV_FILTER,
        stderr_color(),
        Some(project.state_dir.join(crate::logs::DEV_LOG)),
    );
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(dev(project, args))
}

/// What a rebuild led to.
enum Outcome {
    /// A good build, now current; `line` says so, printed once the server serves it.
    Good {
        hash: String,
        changed: bool,
        line: Option<String>,
    },
    /// Errors: nothing changed.
    Failed,
}

/// Builds, hands the build to the runtime as a release (as `eve build` does: under the active
/// release's policy), and prints the one-line result (after the diagnostics, if any). A build
/// left pending or refused keeps the active release serving. A build with errors is recorded in
/// `record` with its diagnostics, for the console; one without clears it.
fn rebuild(
    project: &Project,
    serving: Option<&str>,
    first: bool,
    runtime: Option<&eve_runtime::engine::Runtime>,
    record: &DevBuild,
) -> anyhow::Result<Outcome> {
    let built: Built = build::build_candidate(project)?;
    let color = stderr_color();
    let out = &built.output;
    if !out.diagnostics.is_empty() {
        errln!(
            "{}",
            render_all(&out.diagnostics, &source_reader(project), Style { color })
        );
    }
    let errors = out.error_count();
    let Some(hash) = built.hash.clone() else {
        record.failed(out.diagnostics.clone());
        let still = match serving {
            Some(hash) => format!("still serving {hash}"),
            None => "nothing to serve yet: fix them and save".to_owned(),
        };
        errln!(
            "{} {} ({still})",
            paint(color, "1;31", "build failed:"),
            plural(errors, "error")
        );
        return Ok(Outcome::Failed);
    };
    record.built();
    let warnings = out.diagnostics.len() - errors;
    let counts = build::counts(&out.manifest.agent);
    let mut parts = crate::render::counted(&counts);
    if warnings > 0 {
        parts.push(plural(warnings, "warning"));
    }
    let release = |runtime: &eve_runtime::engine::Runtime| {
        let handle = tokio::runtime::Handle::current();
        handle.block_on(super::releases::release_built(
            runtime, project, &hash, false,
        ))
    };
    let outcome = match runtime {
        Some(rt) => release(rt)?,
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                let rt = super::releases::open(project).await?;
                super::releases::release_built(&rt, project, &hash, false).await
            })?,
    };
    if !matches!(outcome, ReleaseOutcome::Activated(_)) {
        super::releases::print_outcome(&outcome, color);
        return Ok(match serving {
            Some(hash) => Outcome::Good {
                hash: hash.to_owned(),
                changed: false,
                line: None,
            },
            None => Outcome::Failed,
        });
    }
    let changed = serving != Some(hash.as_str());
    let verb = if first { "built" } else { "rebuilt" };
    let what = if changed {
        format!("serving {hash} ({})", parts.join(", "))
    } else {
        format!("unchanged ({hash})")
    };
    let line = format!(
        "{} in {}: {what}",
        paint(color, "1;32", verb),
        duration(built.elapsed)
    );
    Ok(Outcome::Good {
        hash,
        changed,
        line: Some(line),
    })
}

/// The first build, before the server's runtime exists: released on a runtime of its own,
/// off the async runtime's threads.
fn first_build(
    project: &Project,
    serving: Option<&str>,
    record: &DevBuild,
) -> anyhow::Result<Outcome> {
    let (project, serving) = (project.clone(), serving.map(str::to_owned));
    let outcome = std::thread::scope(|s| {
        s.spawn(|| rebuild(&project, serving.as_deref(), true, None, record))
            .join()
            .unwrap_or_else(|_| anyhow::bail!("the build stopped"))
    })?;
    if let Outcome::Good {
        line: Some(line), ..
    } = &outcome
    {
        errln!("{line}");
    }
    Ok(outcome)
}

/// Whether a changed path can matter to a build: not `.eve/`, not under a dot folder (`.git/`),
/// not a dotfile or an editor's backup or swap file.
fn relevant(path: &Path, agent_dir: &Path, state_dir: &Path) -> bool {
    if path.starts_with(state_dir) {
        return false;
    }
    // Only the part inside the agent folder counts: the folder itself may live under a dot
    // folder (`~/.config/…`).
    let inside = path
        .strip_prefix(agent_dir)
        .unwrap_or_else(|_| Path::new(path.file_name().unwrap_or_default()));
    if inside
        .components()
        .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
    {
        return false;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    !(name.ends_with('~') || name.ends_with(".swp") || name.ends_with(".swx"))
}

/// `agent/tools/x.sh changed` (and how many more): what a rebuild is for. `None` when the
/// watcher lost track and no path is known.
fn changed_line(project: &Project, paths: &[PathBuf]) -> Option<String> {
    let mut shown: Vec<String> = Vec::new();
    for path in paths.iter().filter(|p| !p.as_os_str().is_empty()) {
        let text = match path.strip_prefix(&project.agent_dir) {
            Ok(rel) => format!("{}{}", project.display_prefix(), rel.display()),
            Err(_) => path.display().to_string(),
        };
        if !shown.contains(&text) {
            shown.push(text);
        }
    }
    let first = shown.first()?;
    Some(match shown.len() {
        1 => format!("{first} changed"),
        n => format!("{first} and {} changed", plural(n - 1, "other file")),
    })
}

/// Whether an event kind is a change (reads and opens are not: the build itself causes them).
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The running watcher: dropping it stops the notifications.
type Watcher = notify_debouncer_full::Debouncer<
    notify_debouncer_full::notify::RecommendedWatcher,
    notify_debouncer_full::RecommendedCache,
>;

/// Watches `dir` recursively; each debounced batch of relevant changes arrives as one message.
fn watch(
    dir: &Path,
    state_dir: PathBuf,
) -> anyhow::Result<(Watcher, mpsc::UnboundedReceiver<Vec<PathBuf>>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let agent_dir = dir.to_path_buf();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        let paths: Vec<PathBuf> = match result {
            Ok(events) => events
                .into_iter()
                .filter(|e| is_change(&e.event.kind))
                .flat_map(|e| e.event.paths)
                .filter(|p| relevant(p, &agent_dir, &state_dir))
                .collect(),
            // The watcher lost track (an overflow): rebuild to be safe.
            Err(_) => vec![PathBuf::new()],
        };
        if !paths.is_empty() {
            let _ = tx.send(paths);
        }
    })
    .context("cannot watch the agent folder")?;
    debouncer
        .watch(dir, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    Ok((debouncer, rx))
}

/// The session API's settings for a build's manifest, checked against the host.
fn server_config(
    state_dir: &Path,
    hash: &str,
    host: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<ServerConfig> {
    let loaded = build::load(state_dir, hash)?;
    let env = |name: &str| std::env::var(name).ok();
    let mut config = ServerConfig::from_manifest(&loaded.manifest, &env)?;
    config.check_host(host)?;
    config.shutdown = shutdown.clone();
    Ok(config)
}

async fn dev(project: Project, args: DevArgs) -> anyhow::Result<ExitCode> {
    let clock = clock_from_env()?;
    let color = stderr_color();
    let (_watcher, mut changes) = watch(&project.agent_dir, project.state_dir.clone())?;
    let shutdown = CancellationToken::new();
    watch_signals(shutdown.clone())?;

    // A first good build (or the last one from before) to serve.
    let dev_build = DevBuild::default();
    let previous = build::current_hash(&project.state_dir);
    let mut serving = match first_build(&project, previous.as_deref(), &dev_build)? {
        Outcome::Good { hash, .. } => hash,
        Outcome::Failed => match previous {
            Some(hash) => hash,
            None => loop {
                let batch = tokio::select! {
                    () = shutdown.cancelled() => return Ok(ExitCode::SUCCESS),
                    batch = changes.recv() => batch,
                };
                if batch.is_none() {
                    anyhow::bail!("the agent folder watcher stopped");
                }
                while changes.try_recv().is_ok() {}
                if let Outcome::Good { hash, .. } = first_build(&project, None, &dev_build)? {
                    break hash;
                }
            },
        },
    };

    let config = server_config(&project.state_dir, &serving, &args.host, &shutdown)?;
    let (runtime, listener, local) =
        super::serve::start(&project, &args.host, args.port, args.model.model.as_deref()).await?;
    runtime
        .resume_all()
        .await
        .context("cannot resume unfinished sessions")?;
    runtime.watch_store(shutdown.clone());

    let scheduler = Scheduler::new(runtime.clone(), clock);
    tokio::spawn(scheduler.clone().run(shutdown.clone()));
    let options = RouterOptions {
        dev: Some(scheduler.clone()),
        console: true,
        dev_build: dev_build.clone(),
    };
    let routes = ReloadableRouter::new(server::router_with(
        runtime.clone(),
        config,
        options.clone(),
    ));
    let agent = build::load(&project.state_dir, &serving)
        .map(|l| l.manifest.agent.name)
        .unwrap_or_default();
    super::serve::serve_metrics(&runtime, local, &shutdown).await?;
    errln!("eve serving {agent} (build {serving}) on http://{local}");
    super::serve::ready_line(args.json, local, &agent, &serving, true);
    errln!(
        "{} open http://{local}/ in a browser",
        paint(color, "2", "eve console:")
    );
    errln!(
        "{} watching {} for changes",
        paint(color, "2", "eve dev:"),
        project.display_prefix().trim_end_matches('/').to_owned() + "/"
    );
    tokio::spawn(super::dev_lines::talk(
        runtime.clone(),
        color,
        shutdown.clone(),
    ));
    let serve = server::serve(listener, routes.router(), shutdown.clone());
    tokio::pin!(serve);
    loop {
        tokio::select! {
            result = &mut serve => {
                result?;
                break;
            }
            batch = changes.recv() => {
                let Some(mut paths) = batch else {
                    anyhow::bail!("the agent folder watcher stopped");
                };
                while let Ok(more) = changes.try_recv() {
                    paths.extend(more);
                }
                if let Some(line) = changed_line(&project, &paths) {
                    errln!("{} {line}", paint(color, "2", "eve dev:"));
                }
                let (for_build, current) = (project.clone(), serving.clone());
                let (for_release, record) = (runtime.clone(), dev_build.clone());
                let outcome = tokio::task::spawn_blocking(move || {
                    rebuild(&for_build, Some(&current), false, Some(&for_release), &record)
                })
                .await
                .context("the rebuild stopped")??;
                let (changed_to, line) = match outcome {
                    Outcome::Good { hash, changed: true, line } => (Some(hash), line),
                    Outcome::Good { line, .. } => (None, line),
                    Outcome::Failed => (None, None),
                };
                if let Some(hash) = changed_to {
                    match server_config(&project.state_dir, &hash, &args.host, &shutdown) {
                        Ok(config) => routes.replace(server::router_with(
                            runtime.clone(),
                            config,
                            options.clone(),
                        )),
                        Err(e) => errln!(
                            "{} {e:#} (the session API keeps its previous settings)",
                            paint(color, "1;33", "warning:")
                        ),
                    }
                    // Ready the new build's files for its first tool call, off this loop.
                    let dir = project.builds_dir().join(&hash);
                    tokio::task::spawn_blocking(move || {
                        if let Err(e) = eve_compile::pack::unpack(&dir) {
                            tracing::warn!(error = %e, "cannot unpack the build's files");
                        }
                    });
                    serving = hash;
                    scheduler.wake();
                }
                // Said once the server serves it, so what the line says is already true.
                if let Some(line) = line {
                    errln!("{line}");
                }
            }
            () = shutdown.cancelled() => {
                let closing = tokio::time::sleep(CLOSE_DEADLINE);
                tokio::select! {
                    result = &mut serve => result?,
                    () = closing => errln!(
                        "eve: closing connections still open {}s after the signal",
                        CLOSE_DEADLINE.as_secs()
                    ),
                }
                break;
            }
        }
    }
    drain(&runtime, DRAIN_DEADLINE).await;
    Ok(ExitCode::SUCCESS)
}
