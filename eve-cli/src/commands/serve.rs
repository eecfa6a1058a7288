//! `eve serve` (also `eve start`): the session API over the current build, until a signal.
//!
//! Start-up checks everything before a socket opens (a build exists, the channel's secrets are
//! set, an unauthenticated API stays on loopback), then re-drives every session left mid-turn by
//! a previous process, with no flag, and fires the build's schedules. SIGTERM or SIGINT stops
//! accepting connections, ends open streams, gives in-flight turns a bounded time to reach their next checkpoint, and exits 0;
//! whatever is still running then resumes on the next start.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use eve_compile::build;
use eve_runtime::engine::Runtime;
use eve_runtime::schedule::{Scheduler, clock_from_env};
use eve_runtime::server::{self, ServerConfig};
use eve_runtime::store::{SessionFilter, SessionStatus};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::project::locate;
use crate::sanitize::{errln, outln};

/// How long open connections get to finish after a shutdown signal.
pub(crate) const CLOSE_DEADLINE: Duration = Duration::from_secs(5);
/// How long running turns get to reach a checkpoint after a shutdown signal.
pub(crate) const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    super::store::adopt_published_build(&project)?;
    let hash = build::current_hash(&project.state_dir).with_context(|| {
        format!(
            "no build in {}: run `eve build` first",
            project.state_dir.display()
        )
    })?;
    let loaded = build::load(&project.state_dir, &hash)?;
    let agent = loaded.manifest.agent.name.clone();
    warn_if_changed(&project, &hash);
    let env = |name: &str| std::env::var(name).ok();
    let config = ServerConfig::from_manifest(&loaded.manifest, &env)?;
    config.check_host(&args.host)?;
    // Coloured unless NO_COLOR is set, as `tracing`'s own default.
    let ansi = std::env::var_os(eve_runtime::env_vars::NO_COLOR).is_none();
    crate::logs::init(crate::logs::SERVE_FILTER, ansi, None);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(project, args, config, agent, hash))
}

async fn serve(
    project: eve_compile::Project,
    args: ServeArgs,
    config: ServerConfig,
    agent: String,
    hash: String,
) -> anyhow::Result<ExitCode> {
    let clock = clock_from_env()?;
    let (runtime, listener, local) =
        start(&project, &args.host, args.port, args.model.model.as_deref()).await?;
    super::store::publish_at_start(&runtime, &hash).await;

    let resumed = runtime
        .resume_all()
        .await
        .context("cannot resume unfinished sessions")?;
    if !resumed.is_empty() {
        tracing::info!(count = resumed.len(), "resuming unfinished sessions");
    }

    let shutdown = config.shutdown.clone();
    watch_signals(shutdown.clone())?;
    runtime.watch_store(shutdown.clone());
    tokio::spawn(Scheduler::new(runtime.clone(), clock).run(shutdown.clone()));
    let console = args.console;
    let options = server::RouterOptions {
        console,
        ..Default::default()
    };
    let router = server::router_with(runtime.clone(), config, options);
    serve_metrics(&runtime, local, &shutdown).await?;
    errln!("eve serving {agent} (build {hash}) on http://{local}");
    ready_line(args.json, local, &agent, &hash, console);
    if console {
        errln!("eve console on http://{local}/");
    }
    let serving = server::serve(listener, router, shutdown.clone());
    tokio::pin!(serving);
    let closing = async {
        shutdown.cancelled().await;
        tokio::time::sleep(CLOSE_DEADLINE).await;
    };
    tokio::select! {
        result = &mut serving => result?,
        () = closing => errln!(
            "eve: closing connections still open {}s after the signal",
            CLOSE_DEADLINE.as_secs()
        ),
    }
    drain(&runtime, DRAIN_DEADLINE).await;
    Ok(ExitCode::SUCCESS)
}

/// Opens the store and runtime, binds `host:port`, and warms the current build: what `eve serve`
/// and `eve dev` share before they serve.
pub(crate) async fn start(
    project: &eve_compile::Project,
    host: &str,
    port: u16,
    model: Option<&str>,
) -> anyhow::Result<(Runtime, tokio::net::TcpListener, std::net::SocketAddr)> {
    super::run::check_models(project, model)?;
    let runtime = super::open_runtime(project, model, true).await?;
    let host = host.trim();
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let listener = match listen(&addr).await {
        Ok(listener) => listener,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "cannot listen on {addr}: the port is in use (another `eve serve` or `eve dev`?); \
             pick another with `--port {}` (or PORT=…), or `--port 0` for any free one",
            port.saturating_add(1).max(1024)
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot listen on {addr}")),
    };
    let local = listener
        .local_addr()
        .context("cannot read the bound address")?;
    runtime.executor().set_own_listeners(vec![local]);
    runtime.warm_up().await;
    report_sandbox(&runtime).await;
    Ok((runtime, listener, local))
}

/// Serves `GET /metrics` on `EVE_METRICS_ADDR` too, when it is set (without the API's auth, see
/// `eve_runtime::server::metrics_router`), until `shutdown`; returns the bound address. Tools may
/// not reach it, as they may not reach the API's.
pub(crate) async fn serve_metrics(
    runtime: &Runtime,
    api: std::net::SocketAddr,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Option<std::net::SocketAddr>> {
    let Some(addr) = std::env::var(eve_runtime::env_vars::EVE_METRICS_ADDR)
        .ok()
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
    else {
        return Ok(None);
    };
    let listener = listen(&addr).await.with_context(|| {
        format!(
            "cannot listen on {addr} for metrics ({})",
            eve_runtime::env_vars::EVE_METRICS_ADDR
        )
    })?;
    let local = listener
        .local_addr()
        .context("cannot read the metrics address")?;
    runtime.executor().set_own_listeners(vec![api, local]);
    let router = server::metrics_router(runtime.clone());
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        if let Err(e) = server::serve(listener, router, shutdown).await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    errln!("eve metrics on http://{local}/metrics");
    Ok(Some(local))
}

/// Pending connections the kernel may queue before `accept` (capped by `net.core.somaxconn`).
/// tokio's default, 1,024, drops SYNs when thousands of clients reconnect at once (a restart
/// under 10,000 open streams); each dropped SYN costs its client a 1 s, then 3 s, retransmit.
const LISTEN_BACKLOG: u32 = 8192;

/// Binds `addr` (the first of its addresses that binds) with [`LISTEN_BACKLOG`].
async fn listen(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for candidate in tokio::net::lookup_host(addr).await? {
        let socket = if candidate.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does: a restarted server rebinds a port in TIME_WAIT at once.
        socket.set_reuseaddr(true)?;
        match socket.bind(candidate) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr} names no address to listen on"),
        )
    }))
}

/// Says at start which tools run unconfined, what the sandbox enforces per call here (and how),
/// and, when the kernel refuses isolation (or the `openat2` the file tools need), what it refused
/// and which tools will fail because of it.
pub(crate) async fn report_sandbox(runtime: &Runtime) {
    let Some(report) = runtime.sandbox_report().await else {
        return;
    };
    if !report.unconfined.is_empty() {
        errln!(
            "eve: warning: these run unconfined (sandbox: host), with the server's files and \
             environment: {}",
            report.unconfined.join(", ")
        );
    }
    if let Some(error) = &report.isolation_error {
        errln!(
            "eve: error: the isolated sandbox cannot run on this machine: {error}. These will \
             fail instead of running unconfined: {}",
            report.isolated.join(", ")
        );
    } else if let Some(enforced) = &report.enforced {
        errln!("eve: sandbox limits per call: {}", enforced.line());
    }
    if let Some(error) = &report.file_tools_error {
        errln!(
            "eve: error: read_file and write_file cannot run on this machine: {error}. They will \
             fail rather than open workspace paths a tool could swap meanwhile; bash and the \
             other tools are not affected"
        );
    }
    print_left_out(&report.left_out);
}

/// Says at start which `PATH` entries an isolated tool will not see, and why (`eve run` and
/// `eve chat`; `eve serve` and `eve dev` say it in [`report_sandbox`]).
pub(crate) fn report_view(runtime: &Runtime) {
    print_left_out(&runtime.view_left_out());
}

fn print_left_out(left_out: &[eve_sandbox::isolate::LeftOut]) {
    for left in left_out {
        errln!(
            "eve: warning: the PATH entry {} is left out of the sandbox's view: {}",
            left.entry.display(),
            left.reason
        );
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT; a second one exits at once.
pub(crate) fn watch_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        errln!("eve: shutting down (signal again to stop at once)");
        shutdown.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        std::process::exit(130);
    });
    Ok(())
}

/// Waits, at most `deadline`, for this process's drivers to finish the turns they are running.
pub(crate) async fn drain(runtime: &Runtime, deadline: Duration) {
    let filter = SessionFilter {
        status: Some(SessionStatus::Running),
        ..SessionFilter::default()
    };
    let running = match runtime.sessions(&filter).await {
        Ok(sessions) => sessions,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list running sessions");
            return;
        }
    };
    let waits = running.iter().map(|s| runtime.settled(&s.id));
    if tokio::time::timeout(deadline, wait_all(waits))
        .await
        .is_err()
    {
        errln!(
            "eve: turns still running after {}s; they resume on the next start",
            deadline.as_secs()
        );
    }
    // Stop the MCP servers this process started (their whole process groups).
    runtime.shutdown().await;
}

async fn wait_all<I>(futures: I)
where
    I: IntoIterator,
    I::Item: std::future::Future<Output = ()>,
{
    for f in futures {
        f.await;
    }
}

/// `--json`: the one line on stdout a script waits for before it talks to the server (the
/// address, even with `--port 0`).
pub(crate) fn ready_line(
    json: bool,
    local: std::net::SocketAddr,
    agent: &str,
    build: &str,
    console: bool,
) {
    if json {
        outln!(
            "{}",
            crate::sanitize::json_line(&serde_json::json!({
                "event": "ready",
                "url": format!("http://{local}"),
                "host": local.ip().to_string(),
                "port": local.port(),
                "agent": agent,
                "build": build,
                "console": console.then(|| format!("http://{local}/")),
            }))
        );
    }
}

/// `eve serve` serves the active build, not the folder: when `agent/` has changed since, it says
/// so (an edit that was never built, or a build parked for review), so nobody debugs the wrong
/// code.
fn warn_if_changed(project: &eve_compile::Project, serving: &str) {
    if !project.agent_dir.is_dir() {
        return;
    }
    let color = crate::render::stderr_color();
    let folder = project.display_prefix();
    let said = match build::hash_now(project) {
        Ok(Some(now)) if now == serving => return,
        Ok(Some(now)) => format!(
            "{folder} has changed since build {serving} was activated (it would build as \
             {now}); this server serves {serving}: run `eve build` to release the change"
        ),
        Ok(None) => format!(
            "{folder} has errors now (`eve build` shows them); this server serves build {serving}"
        ),
        Err(e) => format!("cannot check {folder} against build {serving}: {e}"),
    };
    errln!("{} {said}", crate::render::paint(color, "1;33", "warning:"));
}
