//! `eve releases`, `eve activate`, `eve rollback`, and the release step of `eve build` and
//! `eve dev`.
//!
//! The runtime decides activation (`eve_runtime::engine::Runtime::release_build`, and
//! `eve_runtime::releases::release_first_build` for a project's first build); this file
//! opens it on the project's store, installs the gate runner (the eval runner of `eve eval`, run
//! on the candidate build) and prints what happened: the capability delta, the exact
//! `eve activate ID` a pending release needs, the cases a failed gate names. Everything the CLI
//! does is recorded with the principal `local:<user>`. Principals (a JWT subject, a platform
//! user), reasons (a self-change's rationale, a gate case quoting the model) and delta lines are
//! foreign text: shown through [`Untrusted`].

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use eve_compile::{Project, capability_delta};
use eve_runtime::engine::Runtime;
use eve_runtime::releases::{
    GateRunner, Release, ReleaseOpts, ReleaseOutcome, local_principal, release_first_build,
    source_revision,
};
use eve_runtime::store::{GateReport, ReleaseStatus, SourceRevision};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::cli::{ActivateArgs, ReleasesArgs, ReleasesCommand, RollbackArgs};
use crate::project::{StoreChoice, locate, store_choice};
use crate::render::{paint, plural, stderr_color, stdout_color};
use crate::sanitize::{Untrusted, err, errln, json_line, json_pretty, out, outln};

/// The gate: the project's eval cases with the gate's tags, run in this process on the
/// candidate build.
struct EvalGate {
    project: Project,
}

impl GateRunner for EvalGate {
    fn run(&self, build_hash: &str, tags: &[String]) -> BoxFuture<'static, GateReport> {
        let (project, hash, tags) = (self.project.clone(), build_hash.to_owned(), tags.to_vec());
        Box::pin(async move { super::eval::gate(&project, &hash, &tags).await })
    }
}

/// Installs the project's gate runner on a runtime (every runtime the CLI builds that may
/// activate: `build`, `dev`, `serve`, `activate`).
pub(crate) fn install_gate(runtime: &Runtime, project: &Project) {
    runtime.set_gate_runner(Arc::new(EvalGate {
        project: project.clone(),
    }));
}

/// A runtime for one release command, with the gate installed.
pub(crate) async fn open(project: &Project) -> anyhow::Result<Runtime> {
    let runtime = super::run::open_runtime(project).await?;
    install_gate(&runtime, project);
    Ok(runtime)
}

/// Hands build `hash` to the runtime as a release, by the person at this terminal.
pub(crate) async fn release_built(
    runtime: &Runtime,
    project: &Project,
    hash: &str,
    force: bool,
) -> anyhow::Result<ReleaseOutcome> {
    let opts = ReleaseOpts {
        force,
        source: source_revision(&project.agent_dir),
        ..ReleaseOpts::default()
    };
    Ok(runtime
        .release_build(hash, &local_principal(), opts)
        .await?)
}

/// The release step of `eve build`: build `hash` becomes a release, by the person at this
/// terminal, `source` its source revision. A project without a store yet records its first
/// release beside the store instead of creating it (`release_first_build`: the build does not
/// wait for a new database); otherwise a runtime on the store decides.
pub(crate) fn release_build_step(
    project: &Project,
    hash: &str,
    force: bool,
    source: Option<SourceRevision>,
) -> anyhow::Result<ReleaseOutcome> {
    let opts = ReleaseOpts {
        force,
        source,
        ..ReleaseOpts::default()
    };
    if let StoreChoice::Sqlite(db) = store_choice(project)?
        && let Some(outcome) = release_first_build(
            &db,
            &project.state_dir,
            hash,
            &local_principal(),
            opts.clone(),
        )?
    {
        return Ok(outcome);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(async {
            let runtime = open(project).await?;
            Ok(runtime
                .release_build(hash, &local_principal(), opts)
                .await?)
        })
}

/// The release step of commands that build before they run (`eve run`, `eve chat`,
/// `eve eval`): an activated build says nothing; a pending or refused one is reported, and the
/// active release stays current.
pub(crate) fn release_quietly(project: &Project, hash: &str) -> anyhow::Result<()> {
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            block_on(async {
                let runtime = open(project).await?;
                release_built(&runtime, project, hash, false).await
            })?
        })
        .join()
        .unwrap_or_else(|_| anyhow::bail!("the release step stopped"))
    })?;
    if !matches!(outcome, ReleaseOutcome::Activated(_)) {
        print_outcome(&outcome, stderr_color());
    }
    Ok(())
}

/// The first 12 characters of a build hash.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Prints what a release step did (stderr); returns whether it refused the build.
pub(crate) fn print_outcome(outcome: &ReleaseOutcome, color: bool) -> bool {
    match outcome {
        ReleaseOutcome::Activated(r) => {
            let changes = if r.delta.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}, {} widening)",
                    plural(r.delta.changes.len(), "capability change"),
                    r.delta.widening().count()
                )
            };
            errln!(
                "{} release {} (build {}){changes}{}",
                paint(color, "1;32", "Activated"),
                r.id,
                short(&r.build_hash),
                if r.checks.forced {
                    " — forced past a failed gate"
                } else {
                    ""
                }
            );
            if !r.delta.is_empty() {
                err!("{}", Untrusted(r.delta.render()));
            }
            false
        }
        ReleaseOutcome::Pending(r) => {
            errln!(
                "{} release {} (build {}) widens what the agent can do; `activation: review` \
                 waits for a principal:",
                paint(color, "1;33", "Pending"),
                r.id,
                short(&r.build_hash)
            );
            err!("{}", Untrusted(r.delta.render()));
            errln!("activate it with:\n  eve activate {}", r.id);
            false
        }
        ReleaseOutcome::Rejected(r) => {
            errln!(
                "{} release {} (build {}): {}",
                paint(color, "1;31", "Refused"),
                r.id,
                short(&r.build_hash),
                Untrusted(r.reason.clone().unwrap_or_default())
            );
            if let Some(gate) = &r.checks.gate {
                for c in gate.failed() {
                    errln!(
                        "  {} {}: {}",
                        c.result,
                        Untrusted(&c.id),
                        Untrusted(c.reason.clone().unwrap_or_default())
                    );
                }
            }
            errln!(
                "the active release is unchanged; to activate it anyway (recorded): eve activate {} --force",
                r.id
            );
            true
        }
    }
}

/// The JSON of a release outcome (`eve build --json`'s `release`).
pub(crate) fn outcome_json(outcome: &ReleaseOutcome) -> Value {
    let r = outcome.release();
    let mut v = release_json(r);
    if matches!(outcome, ReleaseOutcome::Pending(_)) {
        v["activate"] = json!(format!("eve activate {}", r.id));
    }
    v
}

fn release_json(r: &Release) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    v["widens"] = json!(r.delta.widens());
    v
}

fn block_on<F: std::future::Future>(future: F) -> anyhow::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future))
}

fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// `eve releases [list|show|diff|log]`.
pub fn releases(args: ReleasesArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    block_on(async move {
        let runtime = open(&project).await?;
        match args.command.unwrap_or(ReleasesCommand::List) {
            ReleasesCommand::List => list(&runtime, args.json).await,
            ReleasesCommand::Show { id } => show(&runtime, &id, args.json).await,
            ReleasesCommand::Diff { a, b } => diff(&runtime, &a, &b, args.json).await,
            ReleasesCommand::Log { follow } => log(&runtime, follow, args.json).await,
        }
    })?
}

async fn list(runtime: &Runtime, as_json: bool) -> anyhow::Result<ExitCode> {
    let all = runtime.releases_list().await?;
    if as_json {
        let rows: Vec<Value> = all.iter().map(release_json).collect();
        outln!("{}", json_pretty(&rows));
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        errln!("no releases yet: `eve build` records the first one");
        return Ok(ExitCode::SUCCESS);
    }
    let color = stdout_color();
    let by_width = all
        .iter()
        .map(|r| r.principal.chars().count())
        .max()
        .unwrap_or(2)
        .max(2);
    let id_width = all.iter().map(|r| r.id.len()).max().unwrap_or(2);
    outln!(
        "{}",
        paint(
            color,
            "2",
            &format!(
                "{:<id_width$}  STATUS       BUILD         RECORDED             {:<by_width$}  DELTA",
                "ID", "BY"
            )
        )
    );
    for r in &all {
        let status = match r.status {
            ReleaseStatus::Active => paint(color, "1;32", "active     "),
            ReleaseStatus::Pending => paint(color, "1;33", "pending    "),
            ReleaseStatus::Rejected => paint(color, "1;31", "rejected   "),
            ReleaseStatus::RolledBack => "rolled_back".to_owned(),
            ReleaseStatus::Superseded => "superseded ".to_owned(),
        };
        let delta = if r.delta.is_empty() {
            "no capability changes".to_owned()
        } else {
            format!(
                "{}, {} widening",
                plural(r.delta.changes.len(), "change"),
                r.delta.widening().count()
            )
        };
        outln!(
            "{:<id_width$}  {status}  {}  {}  {:<by_width$}  {delta}{}",
            r.id,
            short(&r.build_hash),
            time(r.created_at),
            Untrusted(&r.principal),
            if r.checks.forced { "  (forced)" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(runtime: &Runtime, id: &str, as_json: bool) -> anyhow::Result<ExitCode> {
    let r = runtime.release(id).await?;
    if as_json {
        outln!("{}", json_pretty(&release_json(&r)));
        return Ok(ExitCode::SUCCESS);
    }
    outln!("release   {}", r.id);
    outln!("status    {}", r.status);
    outln!("build     {}", r.build_hash);
    match &r.source {
        Some(s) => outln!(
            "source    {}{}",
            s.commit,
            if s.dirty { " (dirty)" } else { "" }
        ),
        None => outln!("source    (not in a git repository)"),
    }
    outln!(
        "recorded  {} by {}",
        time(r.created_at),
        Untrusted(&r.principal)
    );
    if let (Some(at), Some(by)) = (r.activated_at, &r.activated_by) {
        outln!("activated {} by {}", time(at), Untrusted(by));
    }
    if let Some(base) = &r.base {
        outln!("base      {base}");
    }
    if let Some(reason) = &r.reason {
        outln!("reason    {}", Untrusted(reason));
    }
    outln!(
        "checks    {}, {}{}",
        plural(r.checks.errors as usize, "error"),
        plural(r.checks.warnings as usize, "warning"),
        if r.checks.forced { ", forced" } else { "" }
    );
    if let Some(g) = &r.checks.gate {
        outln!(
            "gate      [{}]: {}",
            g.tags.join(", "),
            if g.passed() { "passed" } else { "failed" }
        );
        if let Some(e) = &g.error {
            outln!("          {}", Untrusted(e));
        }
        for c in &g.cases {
            outln!(
                "          {} {}{}",
                c.result,
                Untrusted(&c.id),
                Untrusted(
                    c.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                )
            );
        }
    }
    outln!("delta");
    out!("{}", Untrusted(r.delta.render()));
    Ok(ExitCode::SUCCESS)
}

async fn diff(runtime: &Runtime, a: &str, b: &str, as_json: bool) -> anyhow::Result<ExitCode> {
    let (ra, rb) = (runtime.release(a).await?, runtime.release(b).await?);
    let ma = runtime.builds().get(&ra.build_hash)?;
    let mb = runtime.builds().get(&rb.build_hash)?;
    let delta = capability_delta(Some(&ma.manifest), &mb.manifest);
    if as_json {
        outln!(
            "{}",
            json_pretty(&json!({
                "from": ra.id, "to": rb.id, "widens": delta.widens(), "changes": delta.changes,
            }))
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{} ({}) -> {} ({})",
        ra.id,
        short(&ra.build_hash),
        rb.id,
        short(&rb.build_hash)
    );
    out!("{}", Untrusted(delta.render()));
    Ok(ExitCode::SUCCESS)
}

fn event_line(e: &eve_runtime::store::StoredEvent) -> String {
    let d = &e.data;
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
    if e.kind.starts_with("change.") {
        return change_line(e);
    }
    let mut line = format!("{}  {:<20} {}", time(e.at), e.kind, s("releaseId"));
    for key in ["status", "principal", "reason"] {
        let v = s(key);
        if !v.is_empty() {
            line.push_str(&format!("  {key}={v}"));
        }
    }
    if let Some(from) = d.get("from").and_then(Value::as_str) {
        line.push_str(&format!("  from={from}"));
    }
    line
}

/// A `change.*` event of self-change (proposed, approved, denied): the proposal's id, then
/// the session, principal, build, release, files, whether it widens, and summary or reason.
fn change_line(e: &eve_runtime::store::StoredEvent) -> String {
    let d = &e.data;
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
    let mut line = format!("{}  {:<20} {}", time(e.at), e.kind, s("id"));
    for (key, label) in [
        ("sessionId", "session"),
        ("by", "by"),
        ("build", "build"),
        ("release", "release"),
    ] {
        let v = s(key);
        if !v.is_empty() {
            line.push_str(&format!("  {label}={v}"));
        }
    }
    if let Some(files) = d.get("files").and_then(Value::as_array) {
        let paths: Vec<&str> = files
            .iter()
            .filter_map(|f| f.as_str().or_else(|| f["path"].as_str()))
            .collect();
        line.push_str(&format!("  files={}", paths.join(",")));
    }
    if let Some(widens) = d.get("widens").and_then(Value::as_bool) {
        line.push_str(&format!("  widens={}", if widens { "yes" } else { "no" }));
    }
    if d.get("conflict").and_then(Value::as_bool) == Some(true) {
        line.push_str("  conflict=yes");
    }
    for key in ["summary", "reason"] {
        let v = s(key);
        if !v.is_empty() {
            line.push_str(&format!("  {key}={v:?}"));
        }
    }
    line
}

async fn log(runtime: &Runtime, follow: bool, as_json: bool) -> anyhow::Result<ExitCode> {
    let print = |e: &eve_runtime::store::StoredEvent| {
        if as_json {
            outln!("{}", json_line(&e.to_wire()));
        } else {
            // Reasons and principals in the audit stream are foreign text.
            outln!("{}", Untrusted(event_line(e)));
        }
    };
    if !follow {
        for e in runtime.release_events(0, 0).await? {
            print(&e);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut follower = runtime.follow_releases(0);
    loop {
        tokio::select! {
            e = follower.next() => print(&e?),
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// `eve activate BUILD|ID [--force]`.
pub fn activate(args: ActivateArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let color = stderr_color();
    block_on(async move {
        let runtime = open(&project).await?;
        let r = runtime
            .activate(&args.target, &local_principal(), args.force)
            .await?;
        if args.json {
            outln!("{}", json_pretty(&release_json(&r)));
        } else {
            errln!(
                "{} release {} (build {}){}; running servers move idle sessions to it at their \
                 next message",
                paint(color, "1;32", "Activated"),
                r.id,
                short(&r.build_hash),
                if r.checks.forced { ", forced" } else { "" }
            );
        }
        Ok(ExitCode::SUCCESS)
    })?
}

/// `eve rollback [ID]`.
pub fn rollback(args: RollbackArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let color = stderr_color();
    block_on(async move {
        let runtime = open(&project).await?;
        let r = runtime
            .rollback(args.id.as_deref(), &local_principal(), &args.reason)
            .await?;
        if args.json {
            outln!("{}", json_pretty(&release_json(&r)));
        } else {
            errln!(
                "{} to release {} (build {}); running servers move idle sessions to it at their \
                 next message",
                paint(color, "1;32", "Rolled back"),
                r.id,
                short(&r.build_hash)
            );
        }
        Ok(ExitCode::SUCCESS)
    })?
}
