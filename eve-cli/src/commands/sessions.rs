//! `eve sessions`: list, show, approve, deny — straight from the project's store.
//!
//! Answers are durable writes; they do not drive the session: an `eve serve` or `eve dev` on the
//! same project notices the answer and continues the turn by itself; without one,
//! `eve run --session ID` continues it.

use std::process::ExitCode;

use anyhow::Context;
use eve_runtime::model::Message;
use eve_runtime::store::{SessionFilter, SessionRecord, SessionStatus, TurnStatus, rfc3339};
use serde_json::{Value, json};

use super::run::open_runtime;
use crate::cli::{SessionsAnswerArgs, SessionsListArgs, SessionsShowArgs};
use crate::project::locate;
use crate::render::{paint, stderr_color, stdout_color};

fn block_on<F: std::future::Future>(future: F) -> anyhow::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future))
}

/// What a person reads as the session's state: `failed` for a session at rest whose last turn
/// failed (a model error, a limit), else the stored status (`idle`, `running`, `waiting`). A
/// failed session still takes the next message.
async fn shown_status(runtime: &eve_runtime::engine::Runtime, s: &SessionRecord) -> String {
    if s.status == SessionStatus::Idle
        && let Ok(Some(turn)) = runtime.store().last_turn(&s.id).await
        && turn.status == TurnStatus::Failed
    {
        return "failed".to_owned();
    }
    s.status.as_str().to_owned()
}

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
        "createdAt": rfc3339(s.created_at),
        "updatedAt": rfc3339(s.updated_at),
    })
}

pub fn list(args: SessionsListArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let runtime = block_on(open_runtime(&project))??;
    let filter = SessionFilter {
        schedule: args.schedule.clone(),
        ..Default::default()
    };
    let (sessions, statuses) = block_on(async {
        let sessions = runtime.sessions(&filter).await?;
        let mut statuses = Vec::with_capacity(sessions.len());
        for s in &sessions {
            statuses.push(shown_status(&runtime, s).await);
        }
        Ok::<_, anyhow::Error>((sessions, statuses))
    })??;
    if args.json {
        let all: Vec<Value> = sessions
            .iter()
            .zip(&statuses)
            .map(|(s, status)| session_json(s, status))
            .collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        eprintln!("no sessions yet: start one with `eve run \"hello\"`");
        return Ok(ExitCode::SUCCESS);
    }
    let color = stdout_color();
    println!(
        "{}",
        paint(
            color,
            "1",
            &format!(
                "{:<31} {:<8} {:>5}  {:<24} SCHEDULE",
                "ID", "STATUS", "TURNS", "UPDATED"
            )
        )
    );
    for (s, status) in sessions.iter().zip(&statuses) {
        println!(
            "{:<31} {:<8} {:>5}  {:<24} {}",
            s.id,
            status,
            s.turn_count,
            rfc3339(s.updated_at),
            s.schedule.as_deref().unwrap_or("-")
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn show(args: SessionsShowArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let runtime = block_on(open_runtime(&project))??;
    let id = args.id.clone();
    let loaded = block_on(async {
        let Some(session) = runtime.session(&id).await? else {
            return Ok::<_, anyhow::Error>(None);
        };
        let store = runtime.store();
        let messages = store.messages(&id, 0, usize::MAX >> 1).await?;
        let mut calls = Vec::new();
        for turn in 0..session.turn_count {
            calls.extend(store.tool_calls(&id, turn).await?);
        }
        let requests = store.input_requests(&id, false).await?;
        let status = shown_status(&runtime, &session).await;
        Ok(Some((session, messages, calls, requests, status)))
    })??;
    let Some((session, messages, calls, requests, status)) = loaded else {
        anyhow::bail!(
            "no session `{}` in {}",
            args.id,
            project.db_path().display()
        );
    };
    if args.json {
        let report = json!({
            "session": session_json(&session, &status),
            "messages": messages.iter().map(|m| json!({
                "seq": m.seq, "turn": m.turn_seq, "kind": m.kind, "body": m.body,
                "at": rfc3339(m.at),
            })).collect::<Vec<_>>(),
            "toolCalls": calls.iter().map(|c| json!({
                "callId": c.call_id, "turn": c.turn_seq, "step": c.step_index, "tool": c.name,
                "input": c.input, "status": c.status.as_str(), "approval": c.approval.as_str(),
                "output": c.output, "attempts": c.attempts, "idempotencyKey": c.idempotency_key,
            })).collect::<Vec<_>>(),
            "inputRequests": requests.iter().map(|r| json!({
                "requestId": r.id, "turn": r.turn_seq, "callId": r.call_id, "tool": r.tool_name,
                "prompt": r.prompt, "status": r.status.as_str(), "reason": r.reason,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let color = stdout_color();
    println!(
        "{} {}  {}  build {}  {} turns  {} tokens",
        paint(color, "1", "session"),
        session.id,
        status,
        session.build_hash,
        session.turn_count,
        session.usage.total()
    );
    for m in &messages {
        if m.kind != "message" {
            println!("{}", paint(color, "2", "── context compacted here ──"));
            continue;
        }
        let Ok(message) = serde_json::from_value::<Message>(m.body.clone()) else {
            continue;
        };
        match message {
            Message::User { content } => println!("{} {content}", paint(color, "1;34", "user:")),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.is_empty() {
                    println!("{} {content}", paint(color, "1;32", "assistant:"));
                }
                for c in tool_calls {
                    let status = calls
                        .iter()
                        .find(|x| x.call_id == c.id && Some(x.turn_seq) == m.turn_seq)
                        .map(|x| x.status.as_str())
                        .unwrap_or("?");
                    println!(
                        "  {} {} {} [{status}]",
                        paint(color, "36", "→"),
                        c.name,
                        c.input
                    );
                }
            }
            Message::Tool { .. } => {}
        }
    }
    let pending: Vec<_> = requests
        .iter()
        .filter(|r| r.status.as_str() == "pending")
        .collect();
    if !pending.is_empty() {
        println!("{}", paint(color, "1;33", "pending approvals:"));
        for r in pending {
            println!("  {}  {} {}", r.id, r.tool_name, r.action["input"]);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn answer(args: SessionsAnswerArgs, approve: bool) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let runtime = block_on(open_runtime(&project))??;
    let request = block_on(runtime.answer_input(
        &args.session,
        args.request.as_deref(),
        approve,
        args.reason.clone(),
    ))??;
    let color = stderr_color();
    eprintln!(
        "{} {} ({}); a running `eve serve` or `eve dev` continues the turn, or continue it here \
         with `eve run --session {}`",
        if approve {
            paint(color, "1;32", "approved")
        } else {
            paint(color, "1;31", "denied")
        },
        request.id,
        request.tool_name,
        args.session
    );
    Ok(ExitCode::SUCCESS)
}
