//! The read-only routes the web console reads besides the session API: the sessions of the
//! store (`GET /eve/v1/sessions`), one session's rows (`GET /eve/v1/sessions/:id`) and the agent
//! of the current build as it runs (`GET /eve/v1/agent`).
//!
//! They sit behind the same guard as every other `/eve/v1` route, so a console served by
//! `eve serve --console` shows nothing to a caller without the channel's credentials, and a
//! caller sees only the sessions it reaches (its own; every one for an operator). They only
//! read: every change a console makes goes through the session API (messages, answers, cancel,
//! compact, clear) and the dev schedule route, so what a person does in the browser is exactly
//! what a client of the API could do.

use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::super::App;
use super::super::error::ApiError;
use super::super::routes::SessionId;
use super::super::tenancy::reach;
use crate::engine::{Caller, Runtime};
use crate::store::{SessionFilter, SessionRecord, now_ms, rfc3339};

/// Sessions listed when the query names no `limit`.
const DEFAULT_LIMIT: usize = 100;
/// Most sessions one list answers.
const MAX_LIMIT: usize = 1000;
/// Longest first message shown in a list row, in characters.
const FIRST_MESSAGE_CHARS: usize = 120;

/// The query of `GET /eve/v1/sessions`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ListQuery {
    /// `idle`, `running`, `waiting` or `failed`.
    pub(crate) status: Option<String>,
    /// At most this many rows.
    pub(crate) limit: usize,
    /// Only ids starting with this (case-insensitive).
    pub(crate) prefix: Option<String>,
}

/// Percent-decodes a query value (`+` is a space).
fn decode(value: &str) -> String {
    percent_encoding::percent_decode_str(&value.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// Parses the list query; an unknown status or a limit that is not a number is a 400.
pub(crate) fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let mut parsed = ListQuery {
        limit: DEFAULT_LIMIT,
        ..ListQuery::default()
    };
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value);
        match key {
            "status" if value.is_empty() => {}
            "status" => {
                if !matches!(value.as_str(), "idle" | "running" | "waiting" | "failed") {
                    return Err(ApiError::bad_request(
                        "invalid_query",
                        format!(
                            "status `{value}` is not a session status: use idle, running, \
                             waiting or failed."
                        ),
                    ));
                }
                parsed.status = Some(value);
            }
            "limit" => {
                let n: usize = value.parse().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!("limit `{value}` is not a whole number from 1 to {MAX_LIMIT}."),
                    )
                })?;
                if n == 0 || n > MAX_LIMIT {
                    return Err(ApiError::bad_request(
                        "invalid_query",
                        format!("limit {n} is out of range: use 1 to {MAX_LIMIT}."),
                    ));
                }
                parsed.limit = n;
            }
            "prefix" | "q" if !value.trim().is_empty() => {
                parsed.prefix = Some(value.trim().to_ascii_lowercase());
            }
            _ => {}
        }
    }
    Ok(parsed)
}

/// [`Runtime::shown_status`], with the failed turn as the console shows it.
async fn shown_status(runtime: &Runtime, s: &SessionRecord) -> (&'static str, Option<Value>) {
    let (status, failed) = runtime.shown_status(s).await;
    let failure = failed.map(|turn| json!({"turnId": turn.turn_id(), "reason": turn.stop_reason}));
    (status, failure)
}

/// The first user message of a session, cut to [`FIRST_MESSAGE_CHARS`].
async fn first_message(runtime: &Runtime, id: &str) -> Option<String> {
    let text = runtime.first_message(id).await?;
    let mut short: String = text.chars().take(FIRST_MESSAGE_CHARS).collect();
    if text.chars().count() > FIRST_MESSAGE_CHARS {
        short.push('…');
    }
    Some(short)
}

fn session_json(s: &SessionRecord, status: &str) -> Value {
    json!({
        "id": s.id,
        "status": status,
        "build": s.build_hash,
        "agent": s.agent_name,
        "schedule": s.schedule,
        "parent": s.parent_id,
        "parentCallId": s.parent_call_id,
        "turns": s.turn_count,
        "events": s.event_count,
        "usage": s.usage,
        "costUsd": s.cost_usd,
        "createdAt": rfc3339(s.created_at),
        "updatedAt": rfc3339(s.updated_at),
    })
}

/// `GET /eve/v1/sessions?status=&limit=&prefix=`: newest activity first; the sessions the
/// caller reaches (its own; every one for an operator).
pub(crate) async fn list(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = parse_list_query(query.as_deref())?;
    let caller = reach(&app, &caller);
    let all = app
        .runtime
        .sessions_for(&SessionFilter::default(), &caller)
        .await?;
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in &all {
        if let Some(parent) = &s.parent_id {
            children.entry(parent.as_str()).or_default().push(&s.id);
        }
    }
    let mut chosen: Vec<&SessionRecord> = all
        .iter()
        .filter(|s| {
            query
                .prefix
                .as_ref()
                .is_none_or(|p| s.id.to_ascii_lowercase().starts_with(p.as_str()))
        })
        .collect();
    chosen.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
    let mut rows = Vec::new();
    let mut total = 0usize;
    for s in chosen {
        let (status, failure) = shown_status(&app.runtime, s).await;
        if query.status.as_ref().is_some_and(|want| *want != status) {
            continue;
        }
        total += 1;
        if rows.len() >= query.limit {
            continue;
        }
        let mut row = session_json(s, status);
        row["firstMessage"] = json!(first_message(&app.runtime, &s.id).await);
        row["children"] = json!(children.get(s.id.as_str()).cloned().unwrap_or_default());
        row["failure"] = json!(failure);
        rows.push(row);
    }
    Ok(Json(json!({"ok": true, "sessions": rows, "total": total})).into_response())
}

/// `GET /eve/v1/sessions/:id`: the session's row, its children, its tool calls (with times,
/// effect and sandbox) and its input requests.
pub(crate) async fn show(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    SessionId(id): SessionId,
) -> Result<Response, ApiError> {
    let runtime = &app.runtime;
    let caller = reach(&app, &caller);
    let session = runtime.session_for(&id, &caller).await?;
    let (status, failure) = shown_status(runtime, &session).await;
    let store = runtime.store();
    let internal = |e: crate::store::StoreError| match e.is_damage() {
        true => ApiError::StoreDamaged(e.to_string()),
        false => ApiError::Internal(e.to_string()),
    };
    let build = runtime.builds().get(&session.build_hash).ok();
    let mut calls = Vec::new();
    for turn in 0..session.turn_count {
        for c in store.tool_calls(&id, turn).await.map_err(internal)? {
            let sandbox = build.as_ref().and_then(|b| {
                b.tool(&c.name)
                    .and_then(|t| b.manifest.agent.effective_sandbox(t))
                    .map(|s| json!({"provider": s.provider, "network": s.network}))
            });
            let duration = match (c.started_at, c.ended_at) {
                (Some(start), Some(end)) => Some(end.saturating_sub(start)),
                (Some(start), None) if c.status.as_str() == "running" => {
                    Some(now_ms().saturating_sub(start))
                }
                _ => None,
            };
            calls.push(json!({
                "callId": c.call_id, "turn": c.turn_seq, "step": c.step_index, "tool": c.name,
                "kind": c.kind, "input": c.input, "status": c.status.as_str(),
                "approval": c.approval.as_str(), "output": c.output, "isError": c.is_error,
                "effect": c.effect, "sandbox": sandbox, "attempts": c.attempts,
                "startedAt": c.started_at.map(rfc3339), "endedAt": c.ended_at.map(rfc3339),
                "durationMs": duration,
            }));
        }
    }
    let answered_by = runtime.responder_attributes(&id).await?;
    let requests: Vec<Value> = store
        .input_requests(&id, false)
        .await
        .map_err(internal)?
        .iter()
        .map(|r| {
            json!({
                "requestId": r.id, "turn": r.turn_seq, "callId": r.call_id, "tool": r.tool_name,
                "prompt": r.prompt, "status": r.status.as_str(), "reason": r.reason,
                "responder": r.responder, "responderAttributes": answered_by.get(&r.id),
            })
        })
        .collect();
    let children: Vec<Value> = runtime
        .sessions_for(&SessionFilter::default(), &caller)
        .await?
        .iter()
        .filter(|s| s.parent_id.as_deref() == Some(id.as_str()))
        .map(|s| json!({"id": s.id, "agent": s.agent_name, "status": s.status.as_str()}))
        .collect();
    let mut row = session_json(&session, status);
    row["failure"] = json!(failure);
    row["firstMessage"] = json!(first_message(runtime, &id).await);
    // Who started it: the principal and its attributes (claims its JWT method names).
    row["owner"] = json!(session.owner);
    row["ownerAttributes"] = Value::Object(runtime.owner_attributes(&id).await?);
    Ok(Json(json!({
        "ok": true,
        "session": row,
        "children": children,
        "toolCalls": calls,
        "inputRequests": requests,
    }))
    .into_response())
}

/// The next fire of each schedule: the stored one the scheduler keeps, else computed from now.
async fn next_fires(app: &App) -> HashMap<String, i64> {
    let mut next = HashMap::new();
    if let Ok(states) = app.runtime.store().schedule_states().await {
        for s in states {
            next.insert(s.name, s.next_fire_at);
        }
    }
    next
}

/// `GET /eve/v1/agent`: what the current build offers and how it runs: tools with their schemas
/// and effective approval and sandbox, skills, subagents, schedules with their next fire,
/// connections with their state, and the build's diagnostics; under `eve dev`, `failedBuild`
/// when the last rebuild failed (the current build is then the last good one, still served).
pub(crate) async fn agent(State(app): State<App>) -> Result<Response, ApiError> {
    let build = app.runtime.builds().current()?;
    let agent = &build.manifest.agent;
    let tools: Vec<Value> = build
        .tools
        .iter()
        .map(|t| {
            let sandbox = agent.effective_sandbox(t);
            json!({
                "name": t.name, "description": t.description, "approval": t.approval,
                "effect": t.effect, "inputSchema": t.input_schema, "source": t.source,
                "deferred": t.deferred, "timeoutMs": t.timeout_ms, "env": t.env,
                "sandbox": sandbox.as_ref().map(|s| json!({
                    "provider": s.provider, "network": s.network,
                })),
            })
        })
        .collect();
    let skills: Vec<Value> = agent
        .skills
        .iter()
        .map(|s| {
            json!({"name": s.name, "description": s.description, "deferred": s.deferred,
                   "source": s.source})
        })
        .collect();
    let subagents: Vec<Value> = agent
        .subagents
        .iter()
        .map(|s| {
            json!({"name": s.name, "description": s.description, "model": s.config.model,
                   "tools": s.tools.len()})
        })
        .collect();
    let stored = next_fires(&app).await;
    let now = app
        .scheduler
        .as_ref()
        .map_or_else(chrono::Utc::now, |s| s.clock().now());
    let schedules: Vec<Value> = agent
        .schedules
        .iter()
        .map(|s| {
            let next = stored
                .get(&s.name)
                .copied()
                .filter(|ms| *ms != i64::MAX)
                .map(rfc3339)
                .or_else(|| eve_compile::cron::next_fire(s, now).map(|t| t.to_rfc3339()));
            json!({"name": s.name, "cron": s.cron, "timezone": s.timezone, "source": s.source,
                   "overlap": s.overlap, "catchUp": s.catch_up, "prompt": s.prompt,
                   "nextFire": next})
        })
        .collect();
    let states = match app.runtime.mcp_manager(&build) {
        Some(manager) => manager.status().await,
        None => Vec::new(),
    };
    let connections: Vec<Value> = agent
        .connections
        .iter()
        .map(|c| {
            let state = states.iter().find(|s| s.name == c.name);
            json!({
                "name": c.name, "source": c.source, "approval": c.approval,
                "transport": state.map(|s| s.transport.clone()),
                "state": state.map_or(json!("not_started"), |s| json!(s.state)),
                "tools": state.and_then(|s| s.tools),
                "lastError": state.and_then(|s| s.last_error.clone()),
                "retryAt": state.and_then(|s| s.retry_at.clone()),
            })
        })
        .collect();
    let diagnostics = std::fs::read_to_string(build.dir.join("diagnostics.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .unwrap_or_else(|| json!([]));
    let failed_build = app.dev_build.failure().map(|f| {
        let errors = eve_discover::error_count(&f.diagnostics);
        json!({
            "at": rfc3339(f.at_ms),
            "errors": errors,
            "warnings": f.diagnostics.len() - errors,
            "diagnostics": f.diagnostics,
        })
    });
    Ok(Json(json!({
        "ok": true,
        "agent": {
            "name": agent.name,
            "description": agent.description,
            "model": agent.config.model,
            "instructions": agent.instructions,
            "turnPolicy": agent.config.turn_policy,
        },
        "build": {"hash": build.hash, "eveVersion": build.manifest.eve_version},
        "eveVersion": env!("CARGO_PKG_VERSION"),
        "dev": app.scheduler.is_some(),
        "tools": tools,
        "skills": skills,
        "subagents": subagents,
        "schedules": schedules,
        "connections": connections,
        "channels": agent.channels.iter()
            .map(|c| json!({"name": c.name, "kind": c.kind, "source": c.source}))
            .collect::<Vec<_>>(),
        "diagnostics": diagnostics,
        "failedBuild": failed_build,
        "stream": {"formats": ["ndjson", "sse"], "version": crate::server::STREAM_VERSION},
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_reads_status_limit_and_prefix() {
        let q = parse_list_query(Some("status=failed&limit=5&prefix=WRUN_01")).unwrap();
        assert_eq!(q.status.as_deref(), Some("failed"));
        assert_eq!(q.limit, 5);
        assert_eq!(q.prefix.as_deref(), Some("wrun_01"));
        assert_eq!(parse_list_query(None).unwrap().limit, DEFAULT_LIMIT);
    }

    #[test]
    fn list_query_refuses_bad_values() {
        for bad in ["status=sleeping", "limit=x", "limit=0", "limit=100000"] {
            let e = parse_list_query(Some(bad)).unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(decode("a%20b+c"), "a b c");
        assert_eq!(decode("%zz%"), "%zz%");
        assert_eq!(decode("%e2%80%a6"), "…");
    }
}
