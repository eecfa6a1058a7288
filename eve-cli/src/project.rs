//! Resolving the project from command-line flags, once per command, and opening its store.
//!
//! The store a command opens is chosen here: `--store` (or `EVE_STORE`) names a PostgreSQL
//! server (`postgres://…`, shared by a fleet of nodes) or a SQLite file; without it, the
//! project's `.eve/eve.db`. The choice is resolved with the project (in [`locate`]) and used by
//! every command that opens the store (`run`, `chat`, `sessions`, `serve`, `dev`), so they
//! cannot disagree. A server that cannot be reached fails the command at start, naming the URL
//! (password redacted) and the cause.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use eve_compile::Project;
use eve_runtime::engine::{DEFAULT_LEASE_TTL, ModelProvider, RuntimeConfig};
use eve_runtime::env_vars;
use eve_runtime::store::{PgStore, SqliteStore, Store};

use crate::cli::ProjectArgs;
use crate::sanitize::errln;

/// The `--store` of this command, as resolved by [`locate`].
static STORE: OnceLock<Option<String>> = OnceLock::new();

/// Locates the project named by `--project`/`--agent` (or the current folder), and remembers
/// its `--store`.
pub fn locate(args: &ProjectArgs) -> anyhow::Result<Project> {
    let _ = STORE.set(args.store.clone().filter(|s| !s.trim().is_empty()));
    let mut project = Project::locate(args.project.as_deref(), args.agent.as_deref())?;
    project.interpreter_path = std::env::var_os(env_vars::PATH);
    // OpenAPI documents named by URL are fetched when a person builds.
    project.fetch = Some(eve_runtime::tools::openapi_document::document_fetcher());
    Ok(project)
}

/// Reads a file by the path diagnostics show (relative to the project root).
pub fn source_reader(project: &Project) -> impl Fn(&str) -> Option<String> + '_ {
    move |file: &str| std::fs::read_to_string(project.root.join(file)).ok()
}

/// Where a command's store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL server (the URL as given).
    Postgres(String),
}

/// Reads a `--store` value: `postgres://`/`postgresql://` URLs, `sqlite:PATH`, or a path.
pub fn parse_store(text: &str) -> anyhow::Result<StoreChoice> {
    let text = text.trim();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Ok(StoreChoice::Postgres(text.to_owned()));
    }
    if let Some(path) = text
        .strip_prefix("sqlite://")
        .or(text.strip_prefix("sqlite:"))
    {
        return Ok(StoreChoice::Sqlite(path.into()));
    }
    if text.contains("://") {
        anyhow::bail!(
            "--store {}: unknown kind of store; give postgres://user:password@host/db or a SQLite file path",
            eve_runtime::store::redact_url(text)
        );
    }
    Ok(StoreChoice::Sqlite(text.into()))
}

/// The store this command was asked to use (`--store`, `EVE_STORE`), else the project's.
pub fn store_choice(project: &Project) -> anyhow::Result<StoreChoice> {
    match STORE.get().cloned().flatten() {
        Some(text) => parse_store(&text),
        None => Ok(StoreChoice::Sqlite(project.db_path())),
    }
}

/// Whether `EVE_NEW_STORE=1` asks for an empty store where one is missing beside history.
fn new_store_asked() -> bool {
    std::env::var(env_vars::EVE_NEW_STORE).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// Opens the chosen store.
pub async fn open_store(project: &Project) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match store_choice(project)? {
        StoreChoice::Sqlite(path) => Arc::new(
            if new_store_asked() {
                if std::fs::metadata(&path).map_or(true, |m| m.len() == 0) {
                    errln!(
                        "eve: {}=1: starting an empty store at {}",
                        env_vars::EVE_NEW_STORE,
                        path.display()
                    );
                }
                SqliteStore::open_new_ok(&path)
            } else {
                SqliteStore::open(&path)
            }
            .with_context(|| format!("cannot open the store at {}", path.display()))?,
        ),
        StoreChoice::Postgres(url) => Arc::new(PgStore::connect(&url).await.with_context(|| {
            format!(
                "--store / {}: eve needs a reachable PostgreSQL server (is it running, and are the \
                 host, port, user and password right?)",
                env_vars::EVE_STORE
            )
        })?),
    })
}

/// The lease TTL from `EVE_LEASE_TTL_MS`, else the default (5 s).
pub fn lease_ttl() -> anyhow::Result<Duration> {
    match std::env::var(env_vars::EVE_LEASE_TTL_MS) {
        Ok(text) if !text.trim().is_empty() => {
            let ms: u64 = text
                .trim()
                .parse()
                .ok()
                .filter(|ms| *ms >= 100)
                .with_context(|| {
                    format!(
                        "{}={text}: expected a number of milliseconds, at least 100",
                        env_vars::EVE_LEASE_TTL_MS
                    )
                })?;
            Ok(Duration::from_millis(ms))
        }
        _ => Ok(DEFAULT_LEASE_TTL),
    }
}

/// A runtime configuration on the chosen store, with the configured lease TTL.
pub async fn runtime_config(
    project: &Project,
    models: Arc<dyn ModelProvider>,
) -> anyhow::Result<RuntimeConfig> {
    let store = open_store(project).await?;
    let mut config = RuntimeConfig::with_store(&project.state_dir, store, models);
    config.lease_ttl = lease_ttl()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_values_name_their_backend() {
        assert_eq!(
            parse_store("postgres://eve@db/eve").unwrap(),
            StoreChoice::Postgres("postgres://eve@db/eve".into())
        );
        assert_eq!(
            parse_store("sqlite:/tmp/x.db").unwrap(),
            StoreChoice::Sqlite("/tmp/x.db".into())
        );
        assert_eq!(
            parse_store("./eve.db").unwrap(),
            StoreChoice::Sqlite("./eve.db".into())
        );
        let err = parse_store("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mysql://u:***@h/db") && !err.contains("secret"),
            "{err}"
        );
    }
}
