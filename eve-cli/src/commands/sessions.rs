//! `eve sessions`: list, show, approve, deny, cancel, prune — straight from the project's store.
//!
//! Every command that takes a session id also takes a unique prefix of one (`wrun_01KB`), or
//! `--last` (`-c`) for the session active most recently; [`resolve`] is that choice, shared with
//! `eve run` and `eve chat`. A prefix that fits several sessions is an error listing them.
//!
//! Answers are durable writes; they do not drive the session: an `eve serve` or `eve dev` on the
//! same project notices the answer and continues the turn by itself; without one,
//! `eve run --session ID` continues it.

use std::process::ExitCode;

use anyhow::Context;
use eve_runtime::model::Message;
use eve_runtime::store::{SessionFilter, SessionRecord, SessionStatus, rfc3339};
use serde_json::{Value, json};

use super::block_on;
use super::run::open_runtime;
use crate::cli::{
    SessionsAnswerArgs, SessionsCancelArgs, SessionsListArgs, SessionsPruneArgs, SessionsShowArgs,
};
use crate::project::locate;
use crate::render::{duration, paint, stderr_color, stdout_color};
use crate::sanitize::{Untrusted, errln, json_line, json_pretty, out, outln};

fn session_json(s: &SessionRecord, status: &str) -> Value {
    json!({
        "id": s.id,
        "status": status,
        "build": s.build_hash,
        "agent": s.agent_name,
        "schedule": s.schedule,
        "parent": s.parent_id,
        "turns": s.turn_count,
        "events": s.event_count,
        "usage": s.usage,
        "costUsd": s.cost_usd,
        "createdAt": rfc3339(s.created_at),
        "updatedAt": rfc3339(s.updated_at),
    })
}

/// How many candidates an ambiguous prefix lists.
const MAX_CANDIDATES: usize = 8;

/// A session a command may mean: what choosing between sessions needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    /// Session id.
    pub id: String,
    /// Shown status.
    pub status: String,
    /// Last activity, RFC 3339.
    pub updated: String,
    /// Parent session (subagent sessions have one).
    pub parent: Option<String>,
}

impl Candidate {
    fn of(s: &SessionRecord) -> Self {
        Self {
            id: s.id.clone(),
            status: s.status.as_str().to_owned(),
            updated: rfc3339(s.updated_at),
            parent: s.parent_id.clone(),
        }
    }
}

/// Picks the session `wanted` names among `all` (newest activity first): the exact id, else the
/// only id starting with it (case-insensitive); `None` wanted means the newest session that is
/// not a subagent's. `whence` names the store in the messages.
pub(crate) fn pick(
    all: &[Candidate],
    wanted: Option<&str>,
    whence: &str,
) -> anyhow::Result<String> {
    let Some(wanted) = wanted.map(str::trim) else {
        return all
            .iter()
            .find(|c| c.parent.is_none())
            .map(|c| c.id.clone())
            .with_context(|| {
                format!("no sessions in {whence} yet, so `--last` has none to continue: start one with `eve run \"hello\"` or `eve chat`")
            });
    };
    if wanted.is_empty() {
        anyhow::bail!(
            "the session id is empty: give an id or a prefix of one (`eve sessions list` shows them), or `--last`"
        );
    }
    if let Some(exact) = all.iter().find(|c| c.id == wanted) {
        return Ok(exact.id.clone());
    }
    let lower = wanted.to_ascii_lowercase();
    let matches: Vec<&Candidate> = all
        .iter()
        .filter(|c| c.id.to_ascii_lowercase().starts_with(&lower))
        .collect();
    match matches.as_slice() {
        [] => anyhow::bail!(
            "no session `{wanted}` in {whence}, and no session id starts with it: `eve sessions list` shows them"
        ),
        [one] => Ok(one.id.clone()),
        many => {
            let mut text = format!(
                "`{wanted}` is the start of {} session ids; give more of the id:",
                many.len()
            );
            for c in many.iter().take(MAX_CANDIDATES) {
                text.push_str(&format!("\n  {}  {:<8} {}", c.id, c.status, c.updated));
            }
            if many.len() > MAX_CANDIDATES {
                text.push_str(&format!("\n  … and {} more", many.len() - MAX_CANDIDATES));
            }
            anyhow::bail!(text)
        }
    }
}

/// The session an id, a prefix or `--last` names in the local store.
pub(crate) async fn resolve(
    runtime: &eve_runtime::engine::Runtime,
    project: &eve_compile::Project,
    wanted: Option<&str>,
) -> anyhow::Result<String> {
    if let Some(id) = wanted
        && runtime.session(id).await?.is_some()
    {
        return Ok(id.to_owned());
    }
    let mut all = runtime.sessions(&SessionFilter::default()).await?;
    all.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
    let candidates: Vec<Candidate> = all.iter().map(Candidate::of).collect();
    pick(
        &candidates,
        wanted,
        &project.db_path().display().to_string(),
    )
}

/// `--last` or an id (or neither): what [`resolve`] takes. Both is a mistake.
pub(crate) fn wanted(id: Option<&str>, last: bool) -> anyhow::Result<Option<Option<&str>>> {
    match (id, last) {
        (Some(_), true) => anyhow::bail!("give a session id or `--last`, not both"),
        (Some(id), false) => Ok(Some(Some(id))),
        (None, true) => Ok(Some(None)),
        (None, false) => Ok(None),
    }
}

/// `text` on one line, at most `width` characters (an ellipsis says it was cut).
fn one_line(text: &str, width: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        return flat;
    }
    let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

const STATUSES: [&str; 4] = ["idle", "running", "waiting", "failed"];

pub fn list(args: SessionsListArgs) -> anyhow::Result<ExitCode> {
    if let Some(status) = &args.status
        && !STATUSES.contains(&status.as_str())
    {
        anyhow::bail!(
            "--status {status} is not a session status: use one of {}",
            STATUSES.join(", ")
        );
    }
    let project = locate(&args.project)?;
    let filter = SessionFilter {
        schedule: args.schedule.clone(),
        ..Default::default()
    };
    let rows = block_on(async {
        let runtime = open_runtime(&project).await?;
        let sessions = runtime.sessions(&filter).await?;
        let mut rows = Vec::with_capacity(sessions.len());
        for s in sessions {
            let status = runtime.shown_status(&s).await.0;
            if args.status.as_ref().is_some_and(|want| *want != status) {
                continue;
            }
            if args.limit.is_some_and(|n| rows.len() >= n) {
                break;
            }
            let first = runtime.first_message(&s.id).await;
            rows.push((s, status, first));
        }
        Ok::<_, anyhow::Error>(rows)
    })??;
    if args.json {
        let all: Vec<Value> = rows
            .iter()
            .map(|(s, status, first)| {
                let mut row = session_json(s, status);
                row["firstMessage"] = json!(first);
                row
            })
            .collect();
        outln!("{}", json_pretty(&all));
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        if args.status.is_some() || args.schedule.is_some() {
            errln!("no sessions match");
        } else {
            errln!("no sessions yet: start one with `eve run \"hello\"`");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let color = stdout_color();
    outln!(
        "{}",
        paint(
            color,
            "1",
            &format!(
                "{:<31} {:<8} {:>5}  {:<24} {:<31} {:<10} FIRST MESSAGE",
                "ID", "STATUS", "TURNS", "UPDATED", "PARENT", "SCHEDULE"
            )
        )
    );
    for (s, status, first) in &rows {
        outln!(
            "{:<31} {:<8} {:>5}  {:<24} {:<31} {:<10} {}",
            s.id,
            status,
            s.turn_count,
            rfc3339(s.updated_at),
            s.parent_id.as_deref().unwrap_or("-"),
            s.schedule.as_deref().unwrap_or("-"),
            // A platform user's message: shown neutralised.
            Untrusted(
                first
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |t| one_line(t, 48))
            ),
        )
    }
    Ok(ExitCode::SUCCESS)
}

pub fn show(args: SessionsShowArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let wanted = wanted(args.id.as_deref(), args.last)?
        .ok_or_else(|| anyhow::anyhow!("give a session id (or a prefix of one), or `--last`"))?;
    let loaded = block_on(async {
        let runtime = open_runtime(&project).await?;
        let id = resolve(&runtime, &project, wanted).await?;
        let Some(session) = runtime.session(&id).await? else {
            return Ok::<_, anyhow::Error>(None);
        };
        let store = runtime.store();
        let messages = store.messages(&id, 0, usize::MAX >> 1).await?;
        let mut calls = Vec::new();
        let mut turns = Vec::new();
        for turn in 0..session.turn_count {
            calls.extend(store.tool_calls(&id, turn).await?);
            turns.extend(store.turn(&id, turn).await?);
        }
        let requests = store.input_requests(&id, false).await?;
        let owner_attributes = runtime.owner_attributes(&id).await?;
        let answered_by = runtime.responder_attributes(&id).await?;
        let status = runtime.shown_status(&session).await.0;
        let failures: Vec<(u64, Value)> = runtime
            .events(&id, 0, 0)
            .await?
            .into_iter()
            .filter(|e| e.kind == "turn.failed")
            .map(|e| {
                let turn = e.data["sequence"].as_u64().unwrap_or_default();
                (turn, e.data)
            })
            .collect();
        Ok(Some((
            session,
            messages,
            calls,
            requests,
            status,
            failures,
            turns,
            (owner_attributes, answered_by),
        )))
    })??;
    let Some((
        session,
        messages,
        calls,
        requests,
        status,
        failures,
        turns,
        (owner_attributes, answered_by),
    )) = loaded
    else {
        anyhow::bail!(
            "the session disappeared from {} while it was read",
            project.db_path().display()
        );
    };
    if args.json {
        let mut shown = session_json(&session, status);
        shown["owner"] = json!(session.owner);
        shown["ownerAttributes"] = Value::Object(owner_attributes.clone());
        let report = json!({
            "session": shown,
            "messages": messages.iter().map(|m| json!({
                "seq": m.seq, "turn": m.turn_seq, "kind": m.kind, "body": m.body,
                "at": rfc3339(m.at),
            })).collect::<Vec<_>>(),
            "toolCalls": calls.iter().map(|c| json!({
                "callId": c.call_id, "turn": c.turn_seq, "step": c.step_index, "tool": c.name,
                "input": c.input, "status": c.status.as_str(), "approval": c.approval.as_str(),
                "output": c.output, "isError": c.is_error, "attempts": c.attempts,
                "idempotencyKey": c.idempotency_key,
                "durationMs": c.started_at.zip(c.ended_at).map(|(a, b)| b.saturating_sub(a)),
            })).collect::<Vec<_>>(),
            "turns": turns.iter().map(|t| json!({
                "turn": t.seq, "status": t.status.as_str(), "usage": t.usage,
                "costUsd": t.usage.cost_usd,
            })).collect::<Vec<_>>(),
            "failedTurns": failures.iter().map(|(turn, data)| json!({
                "turn": turn, "error": data["error"], "stopReason": data["stopReason"],
            })).collect::<Vec<_>>(),
            "inputRequests": requests.iter().map(|r| json!({
                "requestId": r.id, "turn": r.turn_seq, "callId": r.call_id, "tool": r.tool_name,
                "kind": r.kind, "prompt": r.prompt, "status": r.status.as_str(), "reason": r.reason,
                "responder": r.responder, "responderAttributes": answered_by.get(&r.id),
                "action": r.action,
            })).collect::<Vec<_>>(),
        });
        outln!("{}", json_pretty(&report));
        return Ok(ExitCode::SUCCESS);
    }
    let color = stdout_color();
    let cost = if session.cost_usd > 0.0 {
        format!("  {}", crate::term::dollars(session.cost_usd))
    } else {
        String::new()
    };
    outln!(
        "{} {}  {}  build {}  {} turns  {} tokens{cost}",
        paint(color, "1", "session"),
        session.id,
        status,
        session.build_hash,
        session.turn_count,
        session.usage.total()
    );
    // A principal with attributes (claims its JWT method names) started it: who, and under what.
    if let Some(owner) = session
        .owner
        .as_ref()
        .filter(|_| !owner_attributes.is_empty())
    {
        let attributes = Value::Object(owner_attributes.clone()).to_string();
        outln!(
            "{}",
            paint(
                color,
                "2",
                &format!("owner {} {}", Untrusted(owner), Untrusted(&attributes))
            )
        );
    }
    // Each turn's tokens and cost, where its model's price is known.
    for t in turns.iter().filter(|t| t.usage.cost_usd.is_some()) {
        let usage = serde_json::to_value(t.usage).unwrap_or_default();
        if let Some(line) = crate::term::usage_line(&usage, None) {
            let line = line.replacen("usage: ", "", 1);
            outln!("{}", paint(color, "2", &format!("turn {}: {line}", t.seq)));
        }
    }
    let print_failure = |turn: u64| {
        for (_, data) in failures.iter().filter(|(t, _)| *t == turn) {
            let error = &data["error"];
            outln!(
                "{} {} ({})",
                paint(color, "1;31", &format!("turn {turn} failed:")),
                Untrusted(error["message"].as_str().unwrap_or("unknown error")),
                Untrusted(error["code"].as_str().unwrap_or("error")),
            );
        }
    };
    let mut turn_shown: Option<u64> = None;
    for m in &messages {
        if m.turn_seq != turn_shown {
            if let Some(turn) = turn_shown {
                print_failure(turn);
            }
            turn_shown = m.turn_seq;
        }
        if m.kind != "message" {
            outln!("{}", paint(color, "2", "── context compacted here ──"));
            continue;
        }
        let Ok(message) = serde_json::from_value::<Message>(m.body.clone()) else {
            continue;
        };
        match message {
            Message::User { content, .. } => {
                outln!("{} {}", paint(color, "1;34", "user:"), Untrusted(&content));
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.is_empty() {
                    outln!(
                        "{} {}",
                        paint(color, "1;32", "assistant:"),
                        Untrusted(&content)
                    );
                }
                for c in tool_calls {
                    let row = calls
                        .iter()
                        .find(|x| x.call_id == c.id && Some(x.turn_seq) == m.turn_seq);
                    let status = row.map_or("?", |x| x.status.as_str());
                    let took = row
                        .and_then(|x| x.started_at.zip(x.ended_at))
                        .map(|(a, b)| {
                            format!(
                                " {}",
                                duration(std::time::Duration::from_millis(
                                    u64::try_from(b.saturating_sub(a)).unwrap_or_default()
                                ))
                            )
                        })
                        .unwrap_or_default();
                    outln!(
                        "  {} {} {} [{status}{took}]",
                        paint(color, "36", "→"),
                        Untrusted(&c.name),
                        json_line(&c.input)
                    );
                    if let Some(output) = row.and_then(|x| x.output.as_ref()) {
                        let text = match output {
                            Value::String(text) => text.clone(),
                            other => other.to_string(),
                        };
                        let is_error = row.is_some_and(|x| x.is_error);
                        outln!(
                            "    {} {}",
                            paint(color, if is_error { "31" } else { "2" }, "←"),
                            Untrusted(one_line(&text, 200))
                        );
                    }
                }
            }
            Message::Tool { .. } => {}
        }
    }
    if let Some(turn) = turn_shown {
        print_failure(turn);
    }
    let pending: Vec<_> = requests
        .iter()
        .filter(|r| r.status.as_str() == "pending")
        .collect();
    if !pending.is_empty() {
        outln!("{}", paint(color, "1;33", "pending approvals:"));
        for r in &pending {
            if r.kind == "change-approval" {
                // A self-change proposal is shown whole, as `eve chat` and `eve run` show it.
                outln!("  {}  proposed change to the agent:", r.id);
                out!(
                    "{}",
                    crate::term::proposal_card(&r.action["proposal"], color)
                );
            } else {
                outln!(
                    "  {}  {} {}",
                    r.id,
                    Untrusted(&r.tool_name),
                    json_line(&r.action["input"])
                );
            }
        }
        let (id, request) = (&session.id, &pending[0].id);
        outln!(
            "{}",
            paint(
                color,
                "2",
                &format!(
                    "answer with `eve sessions approve {id} {request}` (or `deny … --reason TEXT`)"
                )
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn answer(args: SessionsAnswerArgs, approve: bool) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    // `eve sessions approve --last apr_…`: with `--last`, the one argument is the request.
    let (session, request) = match (args.last, &args.session, &args.request) {
        (true, Some(only), None) => (None, Some(only.clone())),
        (_, session, request) => (session.clone(), request.clone()),
    };
    let wanted = wanted(session.as_deref(), args.last)?
        .ok_or_else(|| anyhow::anyhow!("give the session id (or a prefix of one), or `--last`"))?;
    let (id, request) = block_on(async {
        let runtime = open_runtime(&project).await?;
        let id = resolve(&runtime, &project, wanted).await?;
        let request = runtime
            .answer_input(&id, request.as_deref(), approve, args.reason.clone())
            .await?;
        Ok::<_, anyhow::Error>((id, request))
    })??;
    if args.json {
        outln!(
            "{}",
            json_line(&json!({
                "ok": true, "sessionId": id, "requestId": request.id, "tool": request.tool_name,
                "outcome": if approve { "approved" } else { "denied" }, "reason": args.reason,
            }))
        );
        return Ok(ExitCode::SUCCESS);
    }
    let color = stderr_color();
    errln!(
        "{} {} ({}); a running `eve serve` or `eve dev` continues the turn, or continue it here \
         with `eve run --session {}`",
        if approve {
            paint(color, "1;32", "approved")
        } else {
            paint(color, "1;31", "denied")
        },
        request.id,
        Untrusted(&request.tool_name),
        id
    );
    Ok(ExitCode::SUCCESS)
}

/// `eve sessions prune --older-than D`: deletes idle sessions last active before now − D (the
/// store decides what is safe to delete), then their workspaces.
pub fn prune(args: SessionsPruneArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let age = i64::try_from(args.older_than.as_millis()).unwrap_or(i64::MAX);
    let cutoff = eve_runtime::store::now_ms().saturating_sub(age);
    let (deleted, blobs) = block_on(async {
        let runtime = open_runtime(&project).await?;
        let deleted = runtime.store().prune_sessions(cutoff).await?;
        // Their folders and indexes here, then the contents no checkpoint references any more.
        for (path, e) in runtime.remove_local_workspaces(&deleted) {
            errln!("warning: cannot remove {}: {e}", path.display());
        }
        let blobs = runtime.store().collect_workspace_blobs().await?;
        anyhow::Ok((deleted, blobs))
    })??;
    if args.json {
        outln!(
            "{}",
            json_line(
                &json!({"ok": true, "deleted": deleted, "blobsDeleted": blobs.blobs,
                   "blobBytesDeleted": blobs.bytes})
            )
        );
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "{} {} session{} (and their workspaces)",
        paint(stderr_color(), "1;32", "pruned"),
        deleted.len(),
        if deleted.len() == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

/// `eve sessions cancel`: cancels the running or parked turn of a session. A process driving it
/// (`eve serve`, `eve dev`) sees the stored request and stops the turn; a session nobody drives
/// is cancelled here.
pub fn cancel(args: SessionsCancelArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let wanted = wanted(args.id.as_deref(), args.last)?
        .ok_or_else(|| anyhow::anyhow!("give the session id (or a prefix of one), or `--last`"))?;
    let color = stderr_color();
    let (id, cancelled) = block_on(async {
        let runtime = open_runtime(&project).await?;
        let id = resolve(&runtime, &project, wanted).await?;
        let status = runtime
            .session(&id)
            .await?
            .map(|s| s.status)
            .unwrap_or(SessionStatus::Idle);
        if status == SessionStatus::Idle {
            return Ok::<_, anyhow::Error>((id, false));
        }
        runtime.cancel(&id).await?;
        Ok((id, true))
    })??;
    if cancelled {
        errln!(
            "{} the turn of {id} (a process driving it stops at its next checkpoint, when a \
             running tool call ends)",
            paint(color, "1;33", "cancelling")
        );
    } else {
        errln!("session {id} has no running or parked turn: nothing to cancel");
    }
    Ok(ExitCode::SUCCESS)
}
