//! `eve connections`: the OAuth connections (MCP and OpenAPI) of the current build. `login NAME` runs the
//! authorization code flow for an app-scoped connection (the URL is printed; the browser comes
//! back to a loopback port; the token is stored), `list` shows each one's authorization (never a
//! token), `logout NAME` removes the stored token.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use eve_compile::{Connection, Credentials};
use eve_runtime::mcp::oauth::login::{LOGIN_TIMEOUT, login as run_login};
use eve_runtime::mcp::oauth::store::{APP_PRINCIPAL, TokenPlace};
use eve_runtime::store::rfc3339;
use serde_json::{Value, json};

use super::block_on;
use super::run::open_runtime;
use crate::cli::{ConnectionLogoutArgs, ConnectionNameArgs, ConnectionsListArgs};
use crate::project::locate;
use crate::sanitize::{Untrusted, errln, json_pretty, outln};

fn oauth_connections(runtime: &eve_runtime::engine::Runtime) -> anyhow::Result<Vec<Connection>> {
    let build = runtime
        .builds()
        .current()
        .context("no current build: run `eve build` first")?;
    let agent = &build.manifest.agent;
    let mut connections: Vec<Connection> = agent
        .connections
        .iter()
        .filter(|c| c.oauth.is_some())
        .cloned()
        .collect();
    // OpenAPI connections with `oauth:`: one entry per connection (each operation is a tool).
    for tool in &agent.tools {
        if let eve_compile::Runner::OpenApi(call) = &tool.runner
            && !connections.iter().any(|c| c.name == call.connection)
            && let Some(connection) = eve_runtime::mcp::oauth::api::connection_of(call)
        {
            connections.push(connection);
        }
    }
    Ok(connections)
}

fn place(runtime: &eve_runtime::engine::Runtime, name: &str) -> TokenPlace {
    TokenPlace {
        store: runtime.store().clone(),
        connection: name.to_owned(),
        principal: APP_PRINCIPAL.to_owned(),
    }
}

fn find(connections: Vec<Connection>, name: &str) -> anyhow::Result<Connection> {
    let names: Vec<String> = connections.iter().map(|c| c.name.clone()).collect();
    connections
        .into_iter()
        .find(|c| c.name == name)
        .with_context(|| {
            format!(
                "no connection `{name}` with `oauth:` in the current build (OAuth connections: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )
        })
}

pub fn list(args: ConnectionsListArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let rows = block_on(async {
        let runtime = open_runtime(&project).await?;
        let mut rows = Vec::new();
        for c in oauth_connections(&runtime)? {
            let stored = place(&runtime, &c.name).read().await.ok().flatten();
            // Only what the operator needs: never the token itself.
            let token = stored.as_ref().and_then(|s| {
                serde_json::to_value(s)
                    .ok()
                    .map(|v| v["token_response"].clone())
            });
            let authorized = token.as_ref().is_some_and(|t| !t.is_null());
            let received = stored.as_ref().and_then(|s| {
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v["token_received_at"].as_u64())
            });
            let expires = match (
                received,
                token.as_ref().and_then(|t| t["expires_in"].as_u64()),
            ) {
                (Some(at), Some(secs)) => Some(rfc3339(((at + secs) * 1000) as i64)),
                _ => None,
            };
            let scopes: Vec<String> = stored.map(|s| s.granted_scopes).unwrap_or_default();
            let mut row = json!({
                "name": c.name,
                "credentials": if c.credentials == Credentials::User { "user" } else { "app" },
                "authorized": authorized,
                "expires": expires,
                "scopes": scopes,
            });
            if c.credentials == Credentials::User {
                // How many principals hold a token: never who holds which token.
                let users = runtime
                    .store()
                    .notes(&eve_runtime::mcp::oauth::store::tokens_namespace(&c.name))
                    .await?
                    .into_iter()
                    .filter(|n| n.key != APP_PRINCIPAL)
                    .count();
                row["users"] = json!(users);
                row["authorized"] = json!(users > 0);
            }
            rows.push(row);
        }
        anyhow::Ok(rows)
    })??;
    if args.json {
        outln!("{}", json_pretty(&Value::Array(rows)));
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        errln!("no connection has `oauth:` (see docs/mcp.md, OAuth)");
        return Ok(ExitCode::SUCCESS);
    }
    for row in rows {
        let state = if row["authorized"] == json!(true) {
            "authorized"
        } else {
            "not authorized"
        };
        let scopes: Vec<&str> = row["scopes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        outln!(
            "{:<20} {:<4} {:<15} expires {:<25} scopes {}",
            Untrusted(row["name"].as_str().unwrap_or("")),
            row["credentials"].as_str().unwrap_or(""),
            state,
            row["expires"].as_str().unwrap_or("-"),
            Untrusted(&scopes.join(" "))
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn login(args: ConnectionNameArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    block_on(async {
        let runtime = open_runtime(&project).await?;
        let connection = find(oauth_connections(&runtime)?, &args.name)?;
        if connection.credentials == Credentials::User {
            anyhow::bail!(
                "connection `{}` has `credentials: user`: each user authorizes it, not the app",
                args.name
            );
        }
        let show: eve_runtime::mcp::oauth::login::Show = Box::new(|url: &str| {
            errln!(
                "Open this URL in a browser to authorize:\n\n  {}\n",
                Untrusted(url)
            );
        });
        run_login(
            &connection,
            &runtime.env(),
            Arc::clone(runtime.store()),
            show,
            LOGIN_TIMEOUT,
        )
        .await?;
        errln!("connection `{}` is authorized", args.name);
        anyhow::Ok(())
    })??;
    Ok(ExitCode::SUCCESS)
}

pub fn logout(args: ConnectionLogoutArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    block_on(async {
        let runtime = open_runtime(&project).await?;
        let connection = find(oauth_connections(&runtime)?, &args.name)?;
        let mut place = place(&runtime, &connection.name);
        if let Some(principal) = &args.principal {
            if connection.credentials != Credentials::User {
                anyhow::bail!(
                    "connection `{}` has app credentials: it has no per-user tokens",
                    args.name
                );
            }
            place.principal = principal.clone();
        }
        place.remove().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        match &args.principal {
            Some(p) => errln!(
                "removed the token of connection `{}` for {}",
                args.name,
                Untrusted(p)
            ),
            None => errln!("removed the token of connection `{}`", args.name),
        }
        anyhow::Ok(())
    })??;
    Ok(ExitCode::SUCCESS)
}
