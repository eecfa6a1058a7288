//! `eve store check`, `eve store migrate`, and the store side of builds: `eve build --publish`, the build
//! `eve serve` publishes at start, and the published build a node without one adopts.
//!
//! Builds live in the store so a fleet's nodes need nothing locally but the connection string:
//! a node whose `.eve/` has no build takes the newest one published (and fetches older ones a
//! session is pinned to as it needs them, in the runtime).

use std::process::ExitCode;

use anyhow::Context;
use eve_compile::{Project, build};
use eve_runtime::engine::Runtime;
use eve_runtime::engine::publish::{publish_build, write_build_dir};

use crate::cli::{StoreCheckArgs, StoreMigrateArgs};
use crate::project::{StoreChoice, locate, open_store, store_choice};
use crate::sanitize::{errln, json_pretty, outln};

/// How a store is named in messages: its URL (password redacted) or its file.
fn store_name(project: &Project) -> String {
    match store_choice(project) {
        Ok(StoreChoice::Postgres(url)) => eve_runtime::store::redact_url(&url),
        Ok(StoreChoice::Sqlite(path)) => path.display().to_string(),
        Err(_) => "the store".to_owned(),
    }
}

fn small_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `eve build --publish`: writes the build just made into the store.
pub fn publish_if_asked(
    publish: bool,
    project: &Project,
    hash: Option<&str>,
) -> anyhow::Result<()> {
    let (true, Some(hash)) = (publish, hash) else {
        return Ok(());
    };
    let name = store_name(project);
    let fresh = small_runtime()?.block_on(async {
        let store = open_store(project).await?;
        publish_build(store.as_ref(), &project.state_dir, hash)
            .await
            .with_context(|| format!("cannot publish build {hash} to {name}"))
    })?;
    errln!(
        "Published build {hash} to {name}{}",
        if fresh { "" } else { " (already there)" }
    );
    Ok(())
}

/// `eve serve` at start: publishes the build it serves, so the other nodes can run it. A
/// failure is reported and serving goes on (the build stays runnable here).
pub async fn publish_at_start(runtime: &Runtime, hash: &str) {
    if let Err(e) = publish_build(runtime.store().as_ref(), runtime.state_dir(), hash).await {
        errln!("eve: warning: cannot publish build {hash} to the store: {e}");
    }
}

/// A fleet node with no build of its own (`.eve/current` missing) takes the newest build
/// published in its PostgreSQL store, if there is one. (A SQLite store lives beside the
/// builds it was used with: nothing to adopt.)
pub fn adopt_published_build(project: &Project) -> anyhow::Result<()> {
    if build::current_hash(&project.state_dir).is_some()
        || !matches!(store_choice(project)?, StoreChoice::Postgres(_))
    {
        return Ok(());
    }
    let adopted = small_runtime()?.block_on(async {
        let store = open_store(project).await?;
        let Some(newest) = store.builds().await?.into_iter().next() else {
            return anyhow::Ok(None);
        };
        let Some(stored) = store.build(&newest.hash).await? else {
            return Ok(None);
        };
        write_build_dir(&project.state_dir, &stored)?;
        Ok(Some(newest.hash))
    })?;
    if let Some(hash) = adopted {
        build::point_current(project, &hash)?;
        errln!(
            "No local build: using build {hash}, the newest published to {}",
            store_name(project)
        );
    }
    Ok(())
}

/// `eve store check [--json]`: the full check of the project's store (`--store` names another);
/// exit 0 when no check failed, 1 otherwise.
pub fn check(args: StoreCheckArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let report = small_runtime()?.block_on(async {
        anyhow::Ok(match store_choice(&project)? {
            StoreChoice::Sqlite(path) => eve_runtime::store::SqliteStore::check_file(&path).await,
            StoreChoice::Postgres(url) => {
                eve_runtime::store::PgStore::connect(&url)
                    .await
                    .with_context(|| {
                        format!(
                            "cannot check the store at {}",
                            eve_runtime::store::redact_url(&url)
                        )
                    })?
                    .check()
                    .await
            }
        })
    })?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["ok"] = serde_json::json!(report.ok());
        outln!("{}", json_pretty(&value));
    } else {
        print_check(&report);
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_check(report: &eve_runtime::store::StoreCheck) {
    use eve_runtime::store::CheckStatus;
    outln!("Checking {} ({})", report.store, report.backend);
    for item in &report.checks {
        let status = match item.status {
            CheckStatus::Passed => "ok     ",
            CheckStatus::Failed => "FAILED ",
            CheckStatus::Skipped => "skipped",
        };
        outln!("  {status} {:<16} {}", item.name, item.detail);
        for problem in &item.problems {
            outln!("          - {problem}");
        }
    }
    let c = &report.counts;
    outln!(
        "Read {} sessions, {} events, {} messages, {} workspace checkpoints ({} blobs), {} releases.",
        c.sessions,
        c.events,
        c.messages,
        c.workspaces,
        c.blobs,
        c.releases
    );
    if report.ok() {
        outln!("No problems found.");
    } else {
        let failed = report
            .checks
            .iter()
            .filter(|i| i.status == CheckStatus::Failed)
            .count();
        outln!(
            "{failed} check{} failed: stop eve and restore the store from a backup \
             (docs/operations.md#backups), then run `eve store check` again.",
            if failed == 1 { "" } else { "s" }
        );
    }
}

/// `eve store migrate --from FILE --to URL`: copies, then prints the counts per table on both
/// sides and the rows spot-checked.
pub fn migrate(args: StoreMigrateArgs) -> anyhow::Result<ExitCode> {
    let to = args.to.trim();
    if !(to.starts_with("postgres://") || to.starts_with("postgresql://")) {
        anyhow::bail!(
            "--to {}: eve store migrate copies into PostgreSQL; give postgres://user:password@host/db",
            eve_runtime::store::redact_url(to)
        );
    }
    let shown = eve_runtime::store::redact_url(to);
    let report = small_runtime()?
        .block_on(eve_runtime::store::import_sqlite(&args.from, to))
        .with_context(|| format!("cannot migrate {} to {shown}", args.from.display()))?;
    if args.json {
        let tables: Vec<_> = report
            .tables
            .iter()
            .map(|t| {
                serde_json::json!({
                    "table": t.table, "source": t.source_rows, "targetBefore": t.target_before,
                    "copied": t.copied, "targetAfter": t.target_after,
                })
            })
            .collect();
        let spot: Vec<_> = report
            .spot_checks
            .iter()
            .map(|s| serde_json::json!({"table": s.table, "key": s.key}))
            .collect();
        let skipped: Vec<_> = report
            .skipped
            .iter()
            .map(|(t, why)| serde_json::json!({"table": t, "why": why}))
            .collect();
        outln!(
            "{}",
            crate::sanitize::json_pretty(&serde_json::json!({
                "ok": true, "copied": report.copied(), "tables": tables,
                "spotChecks": spot, "skipped": skipped,
            }))
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<22} {:>10} {:>10} {:>10}",
        "table",
        "sqlite",
        "copied",
        "postgres"
    );
    for t in &report.tables {
        outln!(
            "{:<22} {:>10} {:>10} {:>10}",
            t.table,
            t.source_rows,
            t.copied,
            t.target_after
        );
    }
    for (table, why) in &report.skipped {
        outln!("{table:<22} not copied: {why}");
    }
    outln!(
        "spot check: {} rows read back and equal ({})",
        report.spot_checks.len(),
        report
            .spot_checks
            .iter()
            .take(3)
            .map(|s| format!("{} {}", s.table, s.key))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if report.copied() == 0 {
        outln!(
            "Nothing to copy: {shown} already holds every row of {}.",
            args.from.display()
        );
    } else {
        outln!(
            "Migrated {} rows from {} to {shown}; counts match.",
            report.copied(),
            args.from.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
